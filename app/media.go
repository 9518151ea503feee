package app

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"image"
	"math"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"verdict/engine/scorer"
	"verdict/engine/session"
	"verdict/media"
	"verdict/media/availability"
	"verdict/media/capture"
	_ "verdict/media/capture/hardware"  // V4L2 cameras, miniaudio microphones
	_ "verdict/media/capture/synthetic" // VideoTest and AudioTest, selected by VERDICT_CAPTURE=synthetic
	"verdict/media/limits"
	"verdict/media/pcm"
	"verdict/media/preview"
	"verdict/media/video"
)

// Where an input's media came from.
const (
	SourceFile       = "file"       // a path: the window's file dialog or a drop on it
	SourceUpload     = "upload"     // uploaded by the page (browser mode)
	SourceCamera     = "camera"     // a camera snapshot
	SourceMicrophone = "microphone" // a microphone recording
)

// Soft tokens per image and per audio clip when no model is loaded (Gemma
// 3n's; a loaded model's config says its own).
const (
	DefaultImageTokens = 256
	DefaultAudioTokens = 188
)

// ModelImageSide is the side of the square image Gemma 3n's vision tower
// receives (Gemma 4's processor keeps each image's aspect ratio).
const ModelImageSide = session.ImageSize

// WaveformBuckets is the resolution of an audio item's waveform.
const WaveformBuckets = 240

// MaxMediaFileBytes bounds one media file added by path or upload.
const MaxMediaFileBytes = limits.MaxFileBytes

// MediaTimeout bounds decoding one file (a video runs ffmpeg).
const MediaTimeout = 2 * time.Minute

// FramePreview is one sampled video frame as the model receives it.
type FramePreview struct {
	Ms      int64  `json:"ms"`
	Caption string `json:"caption"` // the time the prompt gives it (m:ss)
	URL     string `json:"url"`     // a JPEG of the frame the model receives
}

// MediaItem is one image, audio clip or video of the input, with previews of
// exactly what the loaded model receives: the image (Gemma 3n's 768×768
// view, Gemma 4's resize that keeps the aspect ratio), the 16 kHz waveform,
// the sampled frames and their times.
type MediaItem struct {
	ID     string `json:"id"`
	Kind   string `json:"kind"` // image, audio or video
	Name   string `json:"name"`
	Source string `json:"source"`
	Format string `json:"format,omitempty"`
	Bytes  int64  `json:"bytes,omitempty"`
	// Width and Height are the original image's or video's size.
	Width      int     `json:"width,omitempty"`
	Height     int     `json:"height,omitempty"`
	DurationMs float64 `json:"duration_ms,omitempty"`
	// Tokens is the number of soft tokens the model receives for it.
	Tokens int `json:"tokens"`
	// Thumb is the URL of a small JPEG of the original (images, videos).
	Thumb string `json:"thumb,omitempty"`
	// ModelView is the URL of the PNG the loaded model's vision tower
	// receives (images), rendered back from its image processor's output
	// (Gemma 3n's, no model loaded: 768×768).
	ModelView string         `json:"model_view,omitempty"`
	Frames    []FramePreview `json:"frames,omitempty"`
	// Sound is set for audio and for videos with a soundtrack.
	Sound bool `json:"sound,omitempty"`
	// Waveform summarises the 16 kHz mono samples the audio tower receives.
	Waveform []preview.Peak `json:"waveform,omitempty"`
	Note     string         `json:"note,omitempty"`
	AddedMs  int64          `json:"added_ms"`
	// Tower is its expected time in the loaded model's towers on this
	// machine (nil with no model loaded).
	Tower *TowerEstimate `json:"tower,omitempty"`
}

// LimitInfo is a media limit that was exceeded (media/limits.Error).
type LimitInfo struct {
	Limit   string  `json:"limit"`
	Value   float64 `json:"value"`
	Max     float64 `json:"max"`
	Unit    string  `json:"unit,omitempty"`
	AtLeast bool    `json:"at_least,omitempty"`
}

func limitInfo(err error) *LimitInfo {
	var le *limits.Error
	if !errors.As(err, &le) {
		return nil
	}
	return &LimitInfo{Limit: le.Limit, Value: le.Value, Max: le.Max, Unit: le.Unit, AtLeast: le.AtLeast}
}

// MediaResult is the outcome of adding one file: the item, or why not.
type MediaResult struct {
	Name  string     `json:"name"`
	Item  *MediaItem `json:"item,omitempty"`
	Error string     `json:"error,omitempty"`
	// Limit is set when a media limit refused it.
	Limit *LimitInfo `json:"limit,omitempty"`
	// Replace is set when the file was refused only because items hold its
	// place (the one audio source, the one video): Media.Replace adds it in
	// their stead.
	Replace *MediaReplace `json:"replace,omitempty"`
	// Duplicate is the id of the item already in the input with the same
	// content (what the model receives): the file was not added twice.
	Duplicate string `json:"duplicate,omitempty"`
}

// MediaReplace offers to add a refused file in place of the items that hold
// its place.
type MediaReplace struct {
	// Pending names the decoded file, kept for Media.Replace (the latest
	// offer only).
	Pending string `json:"pending"`
	// IDs and Names are the items it would replace.
	IDs   []string `json:"ids"`
	Names []string `json:"names"`
	// Why says what holds its place, in words.
	Why string `json:"why"`
}

// DuplicateError refuses a file whose content (what the model receives) is
// already in the input.
type DuplicateError struct {
	Name string // the file refused
	Of   string // the item already in the input
	ID   string
}

func (e *DuplicateError) Error() string {
	if e.Name == e.Of {
		return fmt.Sprintf("%s is already in the input: it is not added twice", e.Name)
	}
	return fmt.Sprintf("%s has the same content as %s, already in the input: it is not added twice", e.Name, e.Of)
}

// ReplaceableError is a limit that refused a file only because of items
// that a replace would take out (the one audio source, the one video).
type ReplaceableError struct {
	Err     error
	Holders []MediaItem
}

func (e *ReplaceableError) Error() string { return e.Err.Error() }
func (e *ReplaceableError) Unwrap() error { return e.Err }

func failed(name string, err error) MediaResult {
	r := MediaResult{Name: name, Error: err.Error(), Limit: limitInfo(err)}
	var dup *DuplicateError
	if errors.As(err, &dup) {
		r.Duplicate = dup.ID
	}
	return r
}

// MediaLimits are the media limits and costs the page shows.
type MediaLimits struct {
	MaxImages        int     `json:"max_images"`
	MaxAudioMs       float64 `json:"max_audio_ms"`
	MaxSilentVideoMs float64 `json:"max_silent_video_ms"`
	MaxSoundVideoMs  float64 `json:"max_video_with_sound_ms"`
	MaxVideoFrames   int     `json:"max_video_frames"`
	VideoFPS         float64 `json:"video_fps"`
	MaxAudioSources  int     `json:"max_audio_sources"`
	MaxUploadBytes   int64   `json:"max_upload_bytes"`
	ImageTokens      int     `json:"image_tokens"`
	AudioTokens      int     `json:"audio_tokens"`
	MaxInputTokens   int     `json:"max_input_tokens"`
	// ModelImageSide is the side a square image is resized to: Gemma
	// 3n's 768, or Gemma 4's target size (0 when not known).
	ModelImageSide int   `json:"model_image_side"`
	RecordSeconds  []int `json:"record_seconds"`
}

// MediaAvailability says which media features work here and why not.
type MediaAvailability struct {
	availability.Report
	// Drivers are the capture drivers in use: "hardware" or "synthetic".
	Drivers string `json:"drivers"`
}

// Speaker plays the model's audio input (*playback.Speaker).
type Speaker interface {
	Play(ctx context.Context, clip pcm.Clip) error
}

// mediaEntry is one item with what each model family needs of it.
type mediaEntry struct {
	item  MediaItem
	image image.Image // image: as decoded, bounded (boundImage, MaxKeptPixels)
	// view3n is the image's 768×768 view, what Gemma 3n receives.
	view3n *image.RGBA
	clip   *pcm.Clip    // audio: 16 kHz mono
	video  *video.Video // video: frames as decoded, bounded (MaxKeptFramePixels); soundtrack
	// views3n are the video's frames as Gemma 3n's 768×768 views.
	views3n []*image.RGBA
	thumb   []byte // JPEG of the original
	// digest hashes what the loaded model receives (digestFor; set under
	// Media.mu for the model of digestKey): equal digests are the same
	// input, whatever the files were.
	digest    [sha256.Size]byte
	digestKey string

	mu      sync.Mutex
	kept    *keptImage        // runImage's for Gemma 4, for the view keptKey
	keptKey string            //
	cache   map[string][]byte // encoded previews by view key and file name
}

// Media is the media service: the input's images, audio clip and video (the
// same for every page: added by path in the window, by upload in the
// browser, from the camera and the microphone), their previews, the limits,
// and what capture and playback can do here.
type Media struct {
	emit    Emitter
	log     *logrus.Logger
	models  *Models
	devices *capture.Devices
	drivers capture.Drivers
	check   func(ctx context.Context, d *capture.Devices) availability.Report
	speaker func(timeout time.Duration) (Speaker, error)

	mu      sync.Mutex
	entries []*mediaEntry
	offer   *mediaOffer // the latest refused file that a replace would add

	availMu sync.Mutex
	avail   *MediaAvailability

	live liveState // camera, microphone, playback

	towers *towerStore // their speed here, what the loaded model encoded
}

// newMedia returns the media service.
func newMedia(o Options, models *Models, log *logrus.Logger) *Media {
	drv := capture.Hardware
	c := o.Capture
	if c == "" {
		c = os.Getenv("VERDICT_CAPTURE")
	}
	if strings.EqualFold(strings.TrimSpace(c), "synthetic") {
		drv = capture.Synthetic
	}
	m := &Media{emit: o.Emitter, log: log, models: models, devices: capture.Open(drv), drivers: drv,
		check: o.CheckMedia, speaker: o.OpenSpeaker, towers: &towerStore{speeds: newTowerSpeeds(towerSpeedsPathFor(o.SettingsPath), log)}}
	if m.check == nil {
		m.check = func(ctx context.Context, d *capture.Devices) availability.Report {
			return availability.Check(ctx, d, 2*time.Second)
		}
	}
	if m.speaker == nil {
		m.speaker = openSpeaker
	}
	return m
}

// Drivers names the capture drivers in use ("hardware" or "synthetic").
func (s *Media) Drivers() string { return s.drivers.String() }

// Availability reports which media features work here (checked once, then
// remembered; Refresh checks again).
func (s *Media) Availability() MediaAvailability {
	s.availMu.Lock()
	defer s.availMu.Unlock()
	if s.avail == nil {
		s.checkLocked()
	}
	return *s.avail
}

// Refresh checks the devices and ffmpeg again and reports the result (also
// as a media:availability event).
func (s *Media) Refresh() MediaAvailability {
	s.availMu.Lock()
	defer s.availMu.Unlock()
	s.checkLocked()
	return *s.avail
}

func (s *Media) checkLocked() {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	a := &MediaAvailability{Report: s.check(ctx, s.devices), Drivers: s.drivers.String()}
	s.avail = a
	f := logrus.Fields{"drivers": a.Drivers}
	for name, ft := range map[string]availability.Feature{"camera": a.Camera, "microphone": a.Microphone, "speaker": a.Speaker, "video": a.Video} {
		if ft.Available {
			f[name] = "available"
		} else {
			f[name] = ft.Reason
		}
	}
	s.log.WithFields(f).Info("media availability")
	s.emit.Emit(EventMediaAvailability, *a)
}

// Limits returns the media limits and the token costs of the loaded model:
// ImageTokens is an image's as the model receives it (stretched to
// ModelImageSide²), AudioTokens a clip's, the longest clip's where the
// count follows the length (Gemma 4).
func (s *Media) Limits() MediaLimits {
	mc, done := s.models.mediaCounts()
	img := mc.imageTokens(image.NewRGBA(image.Rect(0, 0, ModelImageSide, ModelImageSide)))
	aud := mc.clipTokens(int(limits.MaxAudio.Seconds() * pcm.ModelRate))
	side := ModelImageSide
	if mc.gemma4() {
		side = 0
		if v, err := mc.s.ImageView(ModelImageSide, ModelImageSide); err == nil && v.Width == v.Height {
			side = v.Width
		}
	}
	done()
	return MediaLimits{
		MaxImages: limits.MaxImages, MaxAudioMs: ms(limits.MaxAudio), MaxSilentVideoMs: ms(limits.MaxSilentVideo),
		MaxSoundVideoMs: ms(limits.MaxVideoWithSound), MaxVideoFrames: limits.MaxVideoFrames, VideoFPS: limits.VideoFPS,
		MaxAudioSources: limits.MaxAudioSources, MaxUploadBytes: MaxUploadBytes, ImageTokens: img, AudioTokens: aud,
		MaxInputTokens: scorer.MaxInputTokens, ModelImageSide: side, RecordSeconds: RecordChoices,
	}
}

// Items returns the input's media in the order they were added.
func (s *Media) Items() []MediaItem {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.itemsLocked()
}

func (s *Media) itemsLocked() []MediaItem {
	mc, done := s.models.mediaCounts()
	defer done()
	l := s.models.loadedNow()
	out := make([]MediaItem, 0, len(s.entries))
	for _, e := range s.entries {
		e.setDigest(mc)
		it := e.withTokens(mc)
		if l != nil {
			it.Tower = s.towers.estimate(l, e)
		}
		out = append(out, it)
	}
	return out
}

// withTokens is the item with its soft-token count and note for the loaded
// model (each image the model receives and each clip counted on its own).
func (e *mediaEntry) withTokens(mc mediaCounts) MediaItem {
	it := e.item
	switch {
	case e.image != nil:
		it.Tokens = mc.imageTokens(e.image) // Gemma 3n's count is fixed
		it.Note = e.imageNote(mc)
		if mc.gemma4() {
			if _, err := mc.view(e.image); err != nil {
				it.ModelView = "" // the model takes no images: no view to show (the note says why)
			}
		}
	case e.clip != nil:
		it.Tokens = mc.clipTokens(len(e.clip.Samples))
	case e.video != nil:
		it.Tokens = 0
		for i := range e.video.Frames {
			it.Tokens += mc.imageTokens(e.frame(mc, i))
		}
		if e.video.HasSound() {
			it.Tokens += mc.clipTokens(len(e.video.Soundtrack.Samples))
		}
		it.Note = e.videoNote(mc)
	}
	return it
}

// runImage is the image a run gives the loaded model: Gemma 3n's 768×768
// view, or for Gemma 4 the kept image (its processor resizes it, as the
// CLI's and the API's images are), carrying the digest of Gemma 4's view.
func (e *mediaEntry) runImage(mc mediaCounts) image.Image {
	if !mc.gemma4() {
		return e.view3n
	}
	k := mc.viewKey()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.kept == nil || e.keptKey != k {
		e.kept, e.keptKey = &keptImage{Image: e.image, digest: keptDigest(k, e.image)}, k
	}
	return e.kept
}

// frame is video frame i as a run gives it to the loaded model.
func (e *mediaEntry) frame(mc mediaCounts, i int) *image.RGBA {
	if !mc.gemma4() {
		return e.views3n[i]
	}
	return e.video.Frames[i].Image
}

// runVideo is the video as a run gives it to the loaded model.
func (e *mediaEntry) runVideo(mc mediaCounts) *video.Video {
	v := *e.video
	v.Frames = slices.Clone(e.video.Frames)
	for i := range v.Frames {
		v.Frames[i].Image = e.frame(mc, i)
	}
	return &v
}

// keptImage is an image as kept, given to Gemma 4, with the digest of what
// Gemma 4 receives of it (imageDigest reads it).
type keptImage struct {
	image.Image
	digest [sha256.Size]byte
}

// imageNote says how the loaded model receives an image.
func (e *mediaEntry) imageNote(mc mediaCounts) string {
	w, h := e.item.Width, e.item.Height
	b := e.image.Bounds()
	kept := ""
	if b.Dx() != w || b.Dy() != h {
		kept = fmt.Sprintf(" (kept as %d×%d, within %d pixels)", b.Dx(), b.Dy(), MaxKeptPixels)
	}
	if !mc.gemma4() {
		if w == h {
			return fmt.Sprintf("%d×%d resized to %d×%d, as in the Gemma 3n processor", w, h, ModelImageSide, ModelImageSide)
		}
		return fmt.Sprintf("%d×%d stretched to %d×%d (the aspect ratio is not kept, as in the Gemma 3n processor)", w, h, ModelImageSide, ModelImageSide)
	}
	v, err := mc.view(e.image)
	if err != nil {
		return fmt.Sprintf("%d×%d%s: %v", w, h, kept, err)
	}
	return fmt.Sprintf("%d×%d%s resized to %d×%d, keeping the aspect ratio, as in the Gemma 4 processor", w, h, kept, v.Width, v.Height)
}

// videoNote says how the loaded model receives a video.
func (e *mediaEntry) videoNote(mc mediaCounts) string {
	v := e.video
	sound := "silent"
	if v.HasSound() {
		sound = "its soundtrack is the audio input"
	}
	how := fmt.Sprintf("each stretched to %d×%d", ModelImageSide, ModelImageSide)
	if mc.gemma4() {
		how = "each resized by the Gemma 4 processor, keeping the aspect ratio"
		if len(v.Frames) > 0 {
			if fv, err := mc.view(v.Frames[0].Image); err == nil {
				how = fmt.Sprintf("each resized to %d×%d, keeping the aspect ratio, as in the Gemma 4 processor", fv.Width, fv.Height)
			}
		}
	}
	return fmt.Sprintf("%d frames, one every %s, %s; %s", len(v.Frames), v.Interval, how, sound)
}

// changed announces the media after a change.
func (s *Media) changed() {
	s.mu.Lock()
	items := s.itemsLocked()
	s.mu.Unlock()
	s.emit.Emit(EventMedia, items)
}

// Remove takes an item out of the input.
func (s *Media) Remove(id string) error {
	s.mu.Lock()
	found := false
	for i, e := range s.entries {
		if e.item.ID == id {
			s.entries = append(s.entries[:i:i], s.entries[i+1:]...)
			found = true
			break
		}
	}
	s.mu.Unlock()
	if !found {
		return fmt.Errorf("no media %q in the input", id)
	}
	s.live.stopPlaybackOf(id)
	s.changed()
	return nil
}

// Clear removes every item.
func (s *Media) Clear() {
	s.mu.Lock()
	s.entries = nil
	s.mu.Unlock()
	s.live.stopPlaybackOf("")
	s.changed()
}

// insert adds an entry if the input stays within the limits and holds no
// item of the same content; the entries whose ids replace names are taken
// out first (a new recording replaces the audio source).
func (s *Media) insert(e *mediaEntry, replace []string) error {
	id, err := newMediaID()
	if err != nil {
		return err
	}
	e.item.ID, e.item.AddedMs = id, time.Now().UnixMilli()
	base := "/media/" + id + "/"
	if e.thumb != nil {
		e.item.Thumb = base + "thumb.jpg"
	}
	if e.image != nil {
		e.item.ModelView = base + "model.png"
	}
	if e.video != nil {
		e.item.Frames = nil
		for i, f := range e.video.Frames {
			e.item.Frames = append(e.item.Frames, FramePreview{Ms: f.Time.Milliseconds(), Caption: clock(f.Time), URL: base + "frame/" + strconv.Itoa(i) + ".jpg"})
		}
	}
	mc, done := s.models.mediaCounts()
	defer done()
	s.mu.Lock()
	defer s.mu.Unlock()
	var entries []*mediaEntry
	for _, x := range s.entries {
		if !slices.Contains(replace, x.item.ID) {
			entries = append(entries, x)
		}
	}
	e.setDigest(mc)
	for _, x := range entries {
		if x.setDigest(mc) == e.digest {
			return &DuplicateError{Name: e.item.Name, Of: x.item.Name, ID: x.item.ID}
		}
	}
	if err := add(inputOf(entries), e); err != nil {
		var le *limits.Error
		if errors.As(err, &le) && (le.Limit == limits.AudioSources || le.Limit == limits.Videos) {
			if hs := holders(entries, e); len(hs) > 0 {
				re := &ReplaceableError{Err: err}
				for _, h := range hs {
					re.Holders = append(re.Holders, h.withTokens(mc))
				}
				return re
			}
		}
		return err
	}
	s.entries = append(entries, e)
	return nil
}

// add puts e into in, within the limits.
func add(in *media.Input, e *mediaEntry) error {
	switch {
	case e.image != nil:
		return in.AddImage(e.item.Name, e.view3n)
	case e.clip != nil:
		return in.SetAudio(e.item.Name, *e.clip)
	case e.video != nil:
		return in.SetVideo(e.video)
	}
	return errors.New("media: an empty item")
}

// holders are the entries that hold e's place: the audio source (a clip
// or a video with sound) when e has sound, the video when e is one.
func holders(entries []*mediaEntry, e *mediaEntry) []*mediaEntry {
	var out []*mediaEntry
	for _, x := range entries {
		if (e.hasSound() && x.hasSound()) || (e.video != nil && x.video != nil) {
			out = append(out, x)
		}
	}
	return out
}

// hasSound reports whether the entry is an audio source.
func (e *mediaEntry) hasSound() bool {
	return e.clip != nil || (e.video != nil && e.video.HasSound())
}

// soundIDs are the ids of the items with sound (what a recording replaces).
func (s *Media) soundIDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	for _, x := range s.entries {
		if x.hasSound() {
			ids = append(ids, x.item.ID)
		}
	}
	return ids
}

// setDigest sets e.digest to digestFor(mc), computed once per model view
// (the caller holds Media.mu), and returns it.
func (e *mediaEntry) setDigest(mc mediaCounts) [sha256.Size]byte {
	if k := mc.viewKey(); e.digestKey != k {
		e.digest, e.digestKey = e.digestFor(mc), k
	}
	return e.digest
}

// digestFor hashes what the loaded model receives of the entry, as a run's
// input gives it (imageDigest, videoDigest of runImage, runVideo): Gemma
// 3n's 768×768 pixels; for Gemma 4 the kept image with the processor's
// settings, which decide its resize; the 16 kHz samples; a video's frames
// with their times and its soundtrack.
func (e *mediaEntry) digestFor(mc mediaCounts) [sha256.Size]byte {
	switch {
	case e.image != nil:
		d, _ := imageDigest(e.runImage(mc))
		return d
	case e.clip != nil:
		return clipDigest(e.clip)
	case e.video != nil:
		return videoDigest(e.runVideo(mc))
	}
	return [sha256.Size]byte{}
}

// imageDigest hashes an image as a run gives it to the model: a model view
// or a kept image for Gemma 4 (false for any other image).
func imageDigest(img image.Image) ([sha256.Size]byte, bool) {
	if k, ok := img.(*keptImage); ok {
		return k.digest, true
	}
	rgba, ok := img.(*image.RGBA)
	if !ok {
		return [sha256.Size]byte{}, false
	}
	h := sha256.New()
	h.Write([]byte("image\x00"))
	h.Write(rgba.Pix)
	return sum(h), true
}

// keptDigest hashes a kept image for the Gemma 4 view named key: what the
// processor of key receives is a function of the two.
func keptDigest(key string, img image.Image) [sha256.Size]byte {
	h := sha256.New()
	h.Write([]byte("image for "))
	h.Write([]byte(key))
	b := img.Bounds()
	var n [16]byte
	binary.LittleEndian.PutUint64(n[:], uint64(b.Dx()))
	binary.LittleEndian.PutUint64(n[8:], uint64(b.Dy()))
	h.Write(n[:])
	h.Write(rgbOf(img))
	return sum(h)
}

func clipDigest(c *pcm.Clip) [sha256.Size]byte {
	h := sha256.New()
	h.Write([]byte("audio\x00"))
	writeSamples(h, c)
	return sum(h)
}

func videoDigest(v *video.Video) [sha256.Size]byte {
	h := sha256.New()
	h.Write([]byte("video\x00"))
	var b [8]byte
	for _, f := range v.Frames {
		binary.LittleEndian.PutUint64(b[:], uint64(f.Time))
		h.Write(b[:])
		h.Write(f.Image.Pix)
	}
	if v.Soundtrack != nil {
		writeSamples(h, v.Soundtrack)
	}
	return sum(h)
}

func writeSamples(h hash.Hash, c *pcm.Clip) {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(c.Rate))
	h.Write(b[:])
	buf := make([]byte, 0, 4096)
	for _, v := range c.Samples {
		buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(v))
		if len(buf) == cap(buf) {
			h.Write(buf)
			buf = buf[:0]
		}
	}
	h.Write(buf)
}

func sum(h hash.Hash) [sha256.Size]byte {
	var d [sha256.Size]byte
	h.Sum(d[:0])
	return d
}

// mediaOffer is a decoded file refused only because items hold its place.
type mediaOffer struct {
	id      string
	e       *mediaEntry
	replace []string // the ids it was offered to replace
}

// offerReplace keeps e for a later Replace and returns the offer; an
// earlier offer is dropped.
func (s *Media) offerReplace(e *mediaEntry, re *ReplaceableError) (*MediaReplace, error) {
	id, err := newMediaID()
	if err != nil {
		return nil, err
	}
	o := &mediaOffer{id: id, e: e}
	r := &MediaReplace{Pending: id}
	for _, h := range re.Holders {
		o.replace = append(o.replace, h.ID)
		r.IDs, r.Names = append(r.IDs, h.ID), append(r.Names, h.Name)
	}
	var le *limits.Error
	errors.As(re, &le)
	switch {
	case le != nil && le.Limit == limits.Videos:
		r.Why = "the input takes one video"
	case e.video != nil:
		r.Why = "the input takes one audio source, and its soundtrack is one"
	default:
		r.Why = "the input takes one audio source: a clip or a video's soundtrack"
	}
	s.mu.Lock()
	s.offer = o
	s.mu.Unlock()
	return r, nil
}

// ErrNoOffer is a Replace or Discard of an offer that is not kept (any
// more): a later refusal replaced it, or it was used.
var ErrNoOffer = errors.New("that file is no longer waiting to replace anything: add it again")

// Replace adds the file of offer pending (MediaResult.Replace) in place of
// the items it named.
func (s *Media) Replace(pending string) (MediaResult, error) {
	s.mu.Lock()
	o := s.offer
	if o == nil || o.id != pending {
		s.mu.Unlock()
		return MediaResult{}, ErrNoOffer
	}
	s.offer = nil
	s.mu.Unlock()
	name := o.e.item.Name
	if err := s.insert(o.e, o.replace); err != nil {
		s.log.WithError(err).WithField("file", name).Info("media not replaced")
		return failed(name, err), nil
	}
	for _, id := range o.replace {
		s.live.stopPlaybackOf(id)
	}
	it := s.itemOf(o.e)
	s.log.WithFields(logrus.Fields{"file": name, "kind": it.Kind, "replaced": len(o.replace)}).Info("media replaced")
	s.changed()
	return MediaResult{Name: name, Item: &it}, nil
}

// Discard drops the file of offer pending: the items it would replace stay.
func (s *Media) Discard(pending string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.offer == nil || s.offer.id != pending {
		return ErrNoOffer
	}
	s.offer = nil
	return nil
}

// inputOf collects entries into a media.Input (no checks).
func inputOf(entries []*mediaEntry) *media.Input {
	in := &media.Input{}
	for _, e := range entries {
		switch {
		case e.image != nil:
			in.Images = append(in.Images, media.Image{Source: e.item.Name, Image: e.view3n})
		case e.clip != nil:
			in.Audio = &media.Audio{Source: e.item.Name, Clip: *e.clip}
		case e.video != nil:
			in.Video = e.video
		}
	}
	return in
}

// MediaRef describes a run's media item in its record.
type MediaRef struct {
	ID         string  `json:"id"`
	Kind       string  `json:"kind"`
	Name       string  `json:"name"`
	Source     string  `json:"source"`
	Tokens     int     `json:"tokens"`
	Width      int     `json:"width,omitempty"`
	Height     int     `json:"height,omitempty"`
	DurationMs float64 `json:"duration_ms,omitempty"`
	Frames     int     `json:"frames,omitempty"`
	Sound      bool    `json:"sound,omitempty"`
}

// input resolves item ids into the media of a run, as the loaded model
// receives them (runImage, runVideo), checking the limits.
func (s *Media) input(ids []string) (*media.Input, []MediaRef, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	mc, done := s.models.mediaCounts()
	defer done()
	var picked []*mediaEntry
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] {
			continue
		}
		seen[id] = true
		var e *mediaEntry
		for _, x := range s.entries {
			if x.item.ID == id {
				e = x
			}
		}
		if e == nil {
			return nil, nil, fmt.Errorf("media %q is no longer in the input: add it again", id)
		}
		picked = append(picked, e)
	}
	in := &media.Input{}
	refs := make([]MediaRef, 0, len(picked))
	for _, e := range picked {
		var err error
		switch {
		case e.image != nil:
			err = in.AddImage(e.item.Name, e.runImage(mc))
		case e.clip != nil:
			err = in.SetAudio(e.item.Name, *e.clip)
		case e.video != nil:
			err = in.SetVideo(e.runVideo(mc))
		}
		if err != nil {
			return nil, nil, err
		}
		it := e.withTokens(mc)
		refs = append(refs, MediaRef{ID: it.ID, Kind: it.Kind, Name: it.Name, Source: it.Source, Tokens: it.Tokens,
			Width: it.Width, Height: it.Height, DurationMs: it.DurationMs, Frames: len(it.Frames), Sound: it.Sound})
	}
	return in, refs, in.Validate()
}

func (s *Media) entry(id string) *mediaEntry {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.entries {
		if e.item.ID == id {
			return e
		}
	}
	return nil
}

func newMediaID() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}

// clock writes a video time as m:ss, as the prompt's captions do.
func clock(d time.Duration) string {
	s := int(d.Round(time.Second) / time.Second)
	return fmt.Sprintf("%d:%02d", s/60, s%60)
}

// Files serves the media previews:
//
//	GET /media/{id}/thumb.jpg      a thumbnail of the original image or video
//	GET /media/{id}/model.png      the image the loaded model's vision tower receives
//	                               (Gemma 3n's 768×768 view, Gemma 4's resize)
//	GET /media/{id}/frame/{n}.jpg  a sampled video frame as the loaded model receives it
//	GET /media/camera/live.jpg     the camera's latest live frame
//
// The browser mode serves it beside the API; the window serves it through
// Wails' asset server.
func (s *Media) Files() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /media/camera/live.jpg", func(w http.ResponseWriter, r *http.Request) {
		b := s.live.latestFrame()
		if b == nil {
			http.Error(w, "the camera is not live", http.StatusNotFound)
			return
		}
		w.Header().Set("Cache-Control", "no-store")
		serveBytes(w, "image/jpeg", b)
	})
	mux.HandleFunc("GET /media/{id}/{file}", func(w http.ResponseWriter, r *http.Request) {
		s.servePreview(w, r.PathValue("id"), r.PathValue("file"))
	})
	mux.HandleFunc("GET /media/{id}/frame/{file}", func(w http.ResponseWriter, r *http.Request) {
		s.servePreview(w, r.PathValue("id"), "frame/"+r.PathValue("file"))
	})
	return mux
}

func (s *Media) servePreview(w http.ResponseWriter, id, file string) {
	e := s.entry(id)
	if e == nil {
		http.Error(w, "no such media", http.StatusNotFound)
		return
	}
	mc, done := s.models.mediaCounts()
	b, ctype, err := e.preview(mc, file)
	done()
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	if file == "thumb.jpg" {
		w.Header().Set("Cache-Control", "private, max-age=86400, immutable") // ids are never reused
	} else {
		w.Header().Set("Cache-Control", "private, no-cache") // it follows the loaded model
	}
	serveBytes(w, ctype, b)
	s.log.WithFields(logrus.Fields{"media": id, "file": file, "bytes": len(b)}).Debug("media preview served")
}

func serveBytes(w http.ResponseWriter, ctype string, b []byte) {
	w.Header().Set("Content-Type", ctype)
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.Write(b)
}

// preview encodes (once for each model view) one preview file of the
// entry, as the model of mc receives it.
func (e *mediaEntry) preview(mc mediaCounts, file string) ([]byte, string, error) {
	ctype := "image/jpeg"
	if strings.HasSuffix(file, ".png") {
		ctype = "image/png"
	}
	if file == "thumb.jpg" && e.thumb != nil {
		return e.thumb, ctype, nil
	}
	key := mc.viewKey() + "\x00" + file
	e.mu.Lock()
	b, ok := e.cache[key]
	e.mu.Unlock()
	if ok {
		return b, ctype, nil
	}
	var err error
	switch {
	case file == "model.png" && e.image != nil:
		var v *image.RGBA
		if v, err = modelView(mc, e.view3n, e.image); err == nil {
			b, err = preview.PNG(v, 0)
		}
	case strings.HasPrefix(file, "frame/") && strings.HasSuffix(file, ".jpg") && e.video != nil:
		n, perr := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(file, "frame/"), ".jpg"))
		if perr != nil || n < 0 || n >= len(e.video.Frames) {
			return nil, "", fmt.Errorf("no frame %s", file)
		}
		var v *image.RGBA
		if v, err = modelView(mc, e.views3n[n], e.video.Frames[n].Image); err == nil {
			b, err = preview.JPEG(v, 384, 85)
		}
	default:
		return nil, "", fmt.Errorf("no preview %s", file)
	}
	if err != nil {
		return nil, "", err
	}
	e.mu.Lock()
	if e.cache == nil {
		e.cache = map[string][]byte{}
	}
	e.cache[key] = b
	e.mu.Unlock()
	return b, ctype, nil
}

// modelView is the image the vision tower of mc's model receives: Gemma
// 3n's view v3n, or Gemma 4's processor's resize of the kept image.
func modelView(mc mediaCounts, v3n *image.RGBA, kept image.Image) (*image.RGBA, error) {
	if !mc.gemma4() {
		return v3n, nil
	}
	return mc.s.RenderImageView(kept)
}
