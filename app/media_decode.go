// Adding media files: by path or upload, decoded and checked against the limits.

package app

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"image/color"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/sirupsen/logrus"

	"verdict/engine/safefile"
	"verdict/engine/session"
	_ "verdict/media/capture/hardware"  // V4L2 cameras, miniaudio microphones
	_ "verdict/media/capture/synthetic" // VideoTest and AudioTest, selected by VERDICT_CAPTURE=synthetic
	"verdict/media/decode"
	"verdict/media/limits"
	"verdict/media/pcm"
	"verdict/media/preview"
	"verdict/media/video"
)

// AddFiles adds image, audio and video files by path (the window's dialog
// and drops); each result says what was added or why not.
func (s *Media) AddFiles(paths []string) []MediaResult {
	out := make([]MediaResult, 0, len(paths))
	for _, p := range paths {
		out = append(out, s.addPath(p, filepath.Base(p), SourceFile))
	}
	s.changed()
	return out
}

// Upload adds one file sent as bytes (base64 in JSON): the browser mode's
// POST /api/upload streams larger files through the same path.
func (s *Media) Upload(name string, data []byte) MediaResult {
	if int64(len(data)) > MaxUploadBytes {
		return failed(name, limits.Bytes(int64(len(data)), MaxUploadBytes))
	}
	r := s.addUpload(name, bytes.NewReader(data))
	s.changed()
	return r
}

// MaxUploadBytes bounds one upload (one request of POST /api/upload).
const MaxUploadBytes = 256 << 20

// addUpload stores an uploaded file in a temporary file (ffmpeg reads
// videos from a path) and adds it.
func (s *Media) addUpload(name string, r io.Reader) MediaResult {
	name = filepath.Base(strings.ReplaceAll(name, "\\", "/"))
	if name == "." || name == "/" || name == "" {
		name = "upload"
	}
	f, err := os.CreateTemp("", "verdict-upload-*")
	if err != nil {
		return failed(name, err)
	}
	defer os.Remove(f.Name())
	_, err = io.Copy(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return failed(name, fmt.Errorf("upload %s: %w", name, err))
	}
	res := s.addPath(f.Name(), name, SourceUpload)
	if res.Error != "" { // errors name the file, not the temporary copy
		res.Error = strings.ReplaceAll(res.Error, f.Name(), name)
	}
	return res
}

// addPath decodes a file and adds it within the limits; it does not
// announce the change.
func (s *Media) addPath(path, name, source string) MediaResult {
	e, err := s.decodePath(path, name, source)
	if err != nil {
		s.log.WithError(err).WithField("file", name).Info("media not added")
		return failed(name, err)
	}
	if err := s.insert(e, nil); err != nil {
		s.log.WithError(err).WithField("file", name).Info("media not added")
		res := failed(name, err)
		var re *ReplaceableError
		if errors.As(err, &re) {
			if res.Replace, err = s.offerReplace(e, re); err != nil {
				return failed(name, err)
			}
		}
		return res
	}
	it := s.itemOf(e)
	s.log.WithFields(logrus.Fields{"file": name, "kind": it.Kind, "source": source, "tokens": it.Tokens}).Info("media added")
	return MediaResult{Name: name, Item: &it}
}

func (s *Media) itemOf(e *mediaEntry) MediaItem {
	mc, done := s.models.mediaCounts()
	defer done()
	it := e.withTokens(mc)
	if l := s.models.loadedNow(); l != nil {
		s.mu.Lock()
		e.setDigest(mc)
		it.Tower = s.towers.estimate(l, e)
		s.mu.Unlock()
	}
	return it
}

// decodePath reads one media file: the format is recognised from its first
// bytes.
func (s *Media) decodePath(path, name, source string) (*mediaEntry, error) {
	fh, st, err := safefile.Open(path) // a regular file: no device, FIFO or socket
	if err != nil {
		return nil, err
	}
	if st.Size() > MaxMediaFileBytes {
		fh.Close()
		e := limits.Bytes(st.Size(), MaxMediaFileBytes)
		e.Source = name
		return nil, e
	}
	head := make([]byte, decode.SniffLen)
	n, _ := io.ReadFull(fh, head)
	head = head[:n]
	f := decode.Sniff(head)
	kind := f.Kind
	if kind == decode.Unknown { // the name may tell (an audio file ffmpeg reads, a text file)
		switch ClassifyFile(name, head) {
		case KindVideo:
			kind = decode.Video
		case KindText:
			fh.Close()
			return nil, fmt.Errorf("%s is a text file: drop it on the input text", name)
		}
	}
	if err := s.precheck(kind, name); err != nil {
		fh.Close()
		return nil, err
	}
	if kind == decode.Video {
		fh.Close()
		return s.decodeVideo(path, name, source, st.Size())
	}
	data, err := safefile.ReadAll(io.MultiReader(bytes.NewReader(head), fh), name, MaxMediaFileBytes)
	fh.Close()
	var big *safefile.TooLargeError
	if errors.As(err, &big) { // it grew after the size check
		e := limits.Bytes(big.Size, MaxMediaFileBytes)
		e.Source, e.AtLeast = name, true
		return nil, e
	}
	if err != nil {
		return nil, err
	}
	switch kind {
	case decode.Image:
		img, format, err := decode.DecodeImage(name, data)
		if err != nil {
			return nil, err
		}
		e, err := newImageEntry(img, name, source)
		if err != nil {
			return nil, err
		}
		e.item.Format, e.item.Bytes = format, int64(len(data))
		return e, nil
	case decode.Audio:
		snd, err := decode.DecodeAudio(name, data, limits.MaxAudio)
		if err != nil {
			return nil, err
		}
		e := newAudioEntry(snd.Clip, name, source)
		e.item.Format, e.item.Bytes = snd.Format, int64(len(data))
		e.item.Note = fmt.Sprintf("%s, %d Hz, %d channel(s): the model hears it as 16 kHz mono", snd.Format, snd.Rate, snd.Channels)
		return e, nil
	}
	if f.Name != "" {
		return nil, fmt.Errorf("%s: %s files are not supported (images: PNG, JPEG, GIF, WebP, BMP; audio: WAV, MP3, FLAC, OGG; video through ffmpeg)", name, f.Name)
	}
	return nil, fmt.Errorf("%s: not an image (PNG, JPEG, GIF, WebP, BMP), audio (WAV, MP3, FLAC, OGG) or video file", name)
}

// precheck refuses an image that cannot fit before decoding it (a second
// video is decoded: it may replace the first).
func (s *Media) precheck(kind decode.Kind, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	images := 0
	for _, e := range s.entries {
		if e.image != nil {
			images++
		}
	}
	if kind == decode.Image && images+1 > limits.MaxImages {
		le := limits.Count(limits.Images, images+1, limits.MaxImages)
		le.Source = name
		return le
	}
	return nil
}

func (s *Media) decodeVideo(path, name, source string, size int64) (*mediaEntry, error) {
	r, err := video.NewReader()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), MediaTimeout)
	defer cancel()
	v, err := r.Load(ctx, path, video.Options{})
	if err != nil {
		return nil, err
	}
	v.Source = name
	e := &mediaEntry{item: MediaItem{Kind: KindVideo, Name: name, Source: source, Bytes: size, Format: v.Info.VideoCodec,
		Width: v.Info.Width, Height: v.Info.Height, DurationMs: ms(v.Info.Duration), Sound: v.HasSound()}}
	if len(v.Frames) > 0 {
		if e.thumb, err = preview.JPEG(v.Frames[0].Image, 320, 80); err != nil {
			return nil, err
		}
	}
	// Keep each frame as decoded, bounded (what Gemma 4's processor
	// resizes), and its 768×768 view (what Gemma 3n receives).
	e.views3n = make([]*image.RGBA, len(v.Frames))
	for i := range v.Frames {
		e.views3n[i] = ModelView(v.Frames[i].Image)
		if v.Frames[i].Image, err = boundRGBA(v.Frames[i].Image, MaxKeptFramePixels); err != nil {
			return nil, fmt.Errorf("%s: frame %d: %w", name, i, err)
		}
	}
	e.video = v
	if v.HasSound() {
		e.item.Waveform = preview.Waveform(v.Soundtrack.Samples, WaveformBuckets)
	}
	return e, nil
}

// newImageEntry keeps an image as decoded, bounded to MaxKeptPixels (what
// Gemma 4's processor resizes), and its 768×768 view (what Gemma 3n
// receives, from the image as decoded).
func newImageEntry(img image.Image, name, source string) (*mediaEntry, error) {
	b := img.Bounds()
	thumb, err := preview.JPEG(img, 320, 85)
	if err != nil {
		return nil, err
	}
	kept, err := boundImage(img, MaxKeptPixels)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return &mediaEntry{item: MediaItem{Kind: KindImage, Name: name, Source: source, Width: b.Dx(), Height: b.Dy()},
		image: kept, view3n: ModelView(img), thumb: thumb}, nil
}

// newAudioEntry keeps a 16 kHz mono clip.
func newAudioEntry(clip pcm.Clip, name, source string) *mediaEntry {
	return &mediaEntry{item: MediaItem{Kind: KindAudio, Name: name, Source: source, DurationMs: ms(clip.Duration()), Sound: true,
		Waveform: preview.Waveform(clip.Samples, WaveformBuckets)}, clip: &clip}
}

// ModelView is the image Gemma 3n's vision tower receives (the built-in
// model's): RGB stretched to 768×768 (session.Gemma3nView).
func ModelView(img image.Image) *image.RGBA { return session.Gemma3nView(img) }

// What an image is kept as. Gemma 3n receives the 768×768 view, made from
// the image as decoded; Gemma 4's processor resizes the image, keeping its
// aspect ratio, to at most max_soft_tokens·pooling²·patch² pixels: 1120 ·
// 3² · 16² = 2,580,480 at its largest allowed budget. An image is kept
// whole up to MaxKeptPixels (4,194,304, 1.6 times that: every side of
// the largest target size is at most the kept image's, so the processor
// only ever shrinks it) and shrunk to it, keeping the aspect ratio, when
// larger (a decoded 64-megapixel image is kept as 16 MiB, not 256).
// Video frames (up to 32) are kept up to MaxKeptFramePixels, which covers
// the released 280-token budget (645,120 pixels at its target size).
const (
	MaxKeptPixels      = 1 << 22
	MaxKeptFramePixels = 1 << 20
)

// boundImage is img when it is within limit pixels, else img shrunk to them,
// keeping its aspect ratio, as Gemma 4's processor resizes
// (session.ShrinkImage).
func boundImage(img image.Image, limit int) (image.Image, error) {
	return session.ShrinkImage(img, limit)
}

// boundRGBA is boundImage for a video frame: ShrinkImage gives back a
// frame within the limit as it is and a shrunk one as an *image.RGBA.
func boundRGBA(img *image.RGBA, limit int) (*image.RGBA, error) {
	out, err := boundImage(img, limit)
	if err != nil {
		return nil, err
	}
	r, ok := out.(*image.RGBA)
	if !ok {
		return nil, fmt.Errorf("shrinking a video frame gave a %T, not an RGBA image", out)
	}
	return r, nil
}

// rgbOf is img's pixels as Gemma 4's loader reads them ([h·w·3], row-major,
// the un-premultiplied colour, alpha dropped).
func rgbOf(img image.Image) []uint8 {
	b := img.Bounds()
	px := make([]uint8, 0, b.Dx()*b.Dy()*3)
	if r, ok := img.(*image.RGBA); ok && r.Opaque() {
		for y := range b.Dy() {
			row := r.Pix[y*r.Stride : y*r.Stride+4*b.Dx()]
			for x := 0; x < len(row); x += 4 {
				px = append(px, row[x], row[x+1], row[x+2])
			}
		}
		return px
	}
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			c := color.NRGBAModel.Convert(img.At(x, y)).(color.NRGBA)
			px = append(px, c.R, c.G, c.B)
		}
	}
	return px
}
