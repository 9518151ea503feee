package app

import (
	"context"
	"errors"
	"fmt"
	"image"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"verdict/engine/hub"
	"verdict/engine/models"
	"verdict/engine/session"
	"verdict/media"
	"verdict/media/limits"
	"verdict/media/pcm"
)

// Model states.
const (
	ModelNone    = "none"
	ModelLoading = "loading"
	ModelReady   = "ready"
	ModelError   = "error"
)

// ProgressInterval is the time between two model:state events while loading.
const ProgressInterval = 250 * time.Millisecond

// Modality is one kind of input and whether the loaded model takes it.
type Modality struct {
	Name      string `json:"name"`
	Supported bool   `json:"supported"`
	Note      string `json:"note,omitempty"`
}

// ModelInfo describes the model: what is loaded or loading, or why not.
type ModelInfo struct {
	State string `json:"state"`
	Spec  string `json:"spec,omitempty"`
	Name  string `json:"name,omitempty"`
	Path  string `json:"path,omitempty"`
	// Family is the ready model's decoder family (models.FamilyGemma3n,
	// models.FamilyGemma4), as models.Local says it.
	Family string `json:"family,omitempty"`
	// RandomWeights marks the built-in model: its output is noise.
	RandomWeights bool       `json:"random_weights"`
	Builtin       bool       `json:"builtin"`
	Params        int64      `json:"params,omitempty"`
	SizeBytes     int64      `json:"size_bytes,omitempty"` // weights on disk (0 for the built-in model)
	Layers        int        `json:"layers,omitempty"`
	HiddenSize    int        `json:"hidden_size,omitempty"`
	VocabSize     int        `json:"vocab_size,omitempty"`
	Inputs        []Modality `json:"inputs,omitempty"`
	LoadMs        float64    `json:"load_ms,omitempty"`
	// ElapsedMs is the time spent loading so far (state loading).
	ElapsedMs float64 `json:"elapsed_ms,omitempty"`
	Stage     string  `json:"stage,omitempty"`
	// Done of Total units of the stage (weights packed, bytes checked);
	// both 0 when the stage does not count.
	Done  int64  `json:"done,omitempty"`
	Total int64  `json:"total,omitempty"`
	Error string `json:"error,omitempty"`
	Note  string `json:"note,omitempty"`
	// Device is the backend the model loads or runs on, and why (nil until
	// a load has opened one).
	Device *DeviceInfo `json:"device,omitempty"`
	// Resident is what the ready model keeps in the backend's memory.
	Resident *ResidentInfo `json:"resident,omitempty"`
	// Replicas are the model's replicas when it runs on several devices
	// (serve --devices): one a device, requests spread over them; Device
	// is then the first one's.
	Replicas []ReplicaInfo `json:"replicas,omitempty"`
}

// loaded is an opened model session with what runs need; refs counts the
// runs using it, so that a replaced model is closed only after its last run.
type loaded struct {
	s    *session.Session
	info ModelInfo
	refs sync.WaitGroup
	devs []DeviceInfo // its replicas' devices (several devices)

	countsOnce sync.Once
	counts     mediaCounts // countsOf(s), read once
}

// OpenFunc opens a model session on the backend be: it stops when ctx is
// done (returning its error) and tells progress, when set, its slow stages.
type OpenFunc func(ctx context.Context, spec string, be *session.Backend, progress func(stage string, done, total int64)) (*session.Session, error)

// OpenWith is the OpenFunc of session.Open with opt (its Backend replaced
// by the one the device setting gives).
func OpenWith(opt models.Options) OpenFunc {
	return func(ctx context.Context, spec string, be *session.Backend, progress func(string, int64, int64)) (*session.Session, error) {
		o := opt
		o.Progress, o.Backend = progress, be
		return session.Open(ctx, spec, o)
	}
}

// Models is the model service: opens a Hugging Face Gemma 3n folder or the
// built-in model in the background and reports its state. One load runs at
// a time: Open and Unload cancel the load in progress.
type Models struct {
	open OpenFunc
	// backend opens a device setting's backend (openBackend unless a test
	// replaces it).
	backend func(device string) (*session.Backend, DeviceInfo)
	emit    Emitter
	log     *logrus.Logger

	// devices, when set (serve --devices), are the devices a load opens a
	// replica on each, in place of the device setting.
	devices []string

	mu     sync.Mutex
	device string // the device setting (auto, cpu, cuda, cuda:N)
	cur    *loaded
	info   ModelInfo
	gen    int // incremented by every Open and Unload: stale loads are discarded
	onSwap []func()
	cancel context.CancelFunc // the load in progress
	ended  chan struct{}      // closed when the last load started has ended
}

// NewModels returns the service with no model loaded. open is
// session.Open with the default options unless a test replaces it.
func NewModels(open OpenFunc, e Emitter, log *logrus.Logger) *Models {
	if open == nil {
		open = OpenWith(models.Options{})
	}
	ended := make(chan struct{})
	close(ended)
	return &Models{open: open, backend: openBackend, emit: e, log: log, device: DeviceAuto, info: ModelInfo{State: ModelNone, Inputs: modalities()}, cancel: func() {}, ended: ended}
}

// setDevice makes device the one loads use; a model loaded or loading is
// loaded again on it (model:state events report that load like any).
func (s *Models) setDevice(device string) error {
	if err := CheckDevice(device); err != nil {
		return &SettingsError{"device", err.Error()}
	}
	s.mu.Lock()
	changed := s.device != device
	s.device = device
	st, spec := s.info.State, s.info.Spec
	s.mu.Unlock()
	if !changed || spec == "" || (st != ModelReady && st != ModelLoading && st != ModelError) || len(s.devices) > 0 {
		return nil // with devices, the setting waits for a run without them
	}
	s.log.WithFields(logrus.Fields{"model": spec, "device": device}).Info("device changed: loading the model again")
	_, err := s.Open(spec)
	return err
}

// Tower states: whether the model's checkpoint can take an input.
const (
	towerUnknown = iota
	towerPresent
	towerAbsent
)

// modalities lists the inputs while no model is loaded: text, and images,
// audio and video depending on the checkpoint.
func modalities() []Modality {
	return modalitiesOf(towerUnknown, towerUnknown, countsOf(nil))
}

// modalitiesOf lists the inputs a model takes: images and video (its frames)
// with a vision tower, audio with an audio tower, with their soft tokens
// under mc.
func modalitiesOf(vision, audio int, mc mediaCounts) []Modality {
	m := func(name string, tower int, what, supported string) Modality {
		switch tower {
		case towerPresent:
			return Modality{Name: name, Supported: true, Note: supported}
		case towerAbsent:
			return Modality{Name: name, Note: "this checkpoint has no " + what + " tower"}
		}
		return Modality{Name: name, Note: "load a model to know"}
	}
	img := mc.imageTokens(image.NewRGBA(image.Rect(0, 0, ModelImageSide, ModelImageSide)))
	clip := fmt.Sprintf("%d soft tokens", mc.clipTokens(0))
	if mc.audio == 0 {
		clip = fmt.Sprintf("soft tokens by its length, %d at %v", mc.clipTokens(int(limits.MaxAudio.Seconds()*pcm.ModelRate)), limits.MaxAudio)
	}
	return []Modality{
		{Name: "text", Supported: true},
		m("image", vision, "vision", fmt.Sprintf("up to %d images, each stretched to %d×%d (%d soft tokens)", limits.MaxImages, ModelImageSide, ModelImageSide, img)),
		m("audio", audio, "audio", fmt.Sprintf("one clip of up to %v, as 16 kHz mono (%s)", limits.MaxAudio, clip)),
		m("video", vision, "vision", fmt.Sprintf("one video through ffmpeg: a frame a second, at most %d, and its soundtrack", limits.MaxVideoFrames)),
	}
}

func towerState(present bool) int {
	if present {
		return towerPresent
	}
	return towerAbsent
}

// Info returns the current state.
func (s *Models) Info() ModelInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur != nil && s.info.State == ModelReady {
		s.info.Resident = residentOf(s.cur.s)
		s.info.Replicas = replicasOf(s.cur)
	}
	return s.info
}

// towersChanged announces a model:state when l's towers loaded since the
// last report (a run's media loads them).
func (s *Models) towersChanged(l *loaded) {
	s.mu.Lock()
	if s.cur != l || s.info.Resident == nil {
		s.mu.Unlock()
		return
	}
	r := residentOf(l.s)
	if slices.Equal(r.Towers, s.info.Resident.Towers) {
		s.mu.Unlock()
		return
	}
	s.info.Resident = r
	info := s.info
	s.mu.Unlock()
	s.emit.Emit(EventModel, info)
}

// ErrNoModel is returned by runs while no model is ready.
var ErrNoModel = errors.New("no model is loaded: load the built-in model or a Gemma 3n or Gemma 4 folder first")

// Open starts loading spec ("builtin", a folder holding config.json, or a
// GGUF file or a folder holding one, or a Hugging Face id downloaded into
// the Hub cache) and returns at once; model:state events report the
// progress and the outcome.
// A load in progress is cancelled, and the new one starts once it has
// stopped; runs on the previous model are cancelled (onSwap) before it is
// closed.
func (s *Models) Open(spec string) (ModelInfo, error) {
	spec = strings.TrimSpace(spec)
	info := ModelInfo{State: ModelLoading, Spec: spec, Inputs: modalities(), Stage: "loading weights and tokenizer"}
	if spec == "" || spec == models.Builtin {
		info.Spec, info.Name, info.Builtin, info.RandomWeights = models.Builtin, "built-in tiny Gemma 3n (random weights)", true, true
		info.Stage = "generating random weights"
	} else {
		repo := ""
		if hub.LooksLikeRepo(spec) { // a Hugging Face id: its snapshot in the Hub cache
			snap, err := hub.Resolve("", spec)
			if err != nil {
				return s.Info(), err
			}
			repo, spec = spec, snap
		}
		abs, err := filepath.Abs(spec)
		if err == nil {
			spec = abs
		}
		st, err := os.Stat(spec)
		if err != nil {
			return s.Info(), fmt.Errorf("model folder %s: %w", spec, err)
		}
		// A GGUF file, or a folder holding one, opens too (models.GGUFPath).
		gguf, gerr := models.GGUFPath(spec)
		if gerr != nil && st.IsDir() {
			return s.Info(), fmt.Errorf("model folder %s: %w", spec, gerr)
		}
		if gguf == "" {
			if !st.IsDir() {
				return s.Info(), fmt.Errorf("model folder %s: not a folder (choose the folder that holds config.json, or a .gguf file)", spec)
			}
			if _, err := os.Stat(filepath.Join(spec, "config.json")); err != nil {
				return s.Info(), fmt.Errorf("model folder %s has no config.json: choose a Hugging Face Gemma 3n or Gemma 4 checkpoint folder or a .gguf file", spec)
			}
		}
		info.Spec, info.Path, info.Name = spec, spec, filepath.Base(spec)
		if repo != "" {
			info.Spec, info.Name = repo, repo
		}
		info.SizeBytes = weightBytes(spec)
		if gguf != "" {
			if fi, err := os.Stat(gguf); err == nil {
				info.SizeBytes = fi.Size()
			}
		}
	}
	s.mu.Lock()
	s.gen++
	gen := s.gen
	device := s.device
	if s.info.Device != nil && s.info.Device.Requested == device {
		info.Device = s.info.Device // until the load opens the backend again
	}
	s.info = info
	s.cancel()
	ctx, cancel := context.WithCancel(context.Background())
	prev, ended := s.ended, make(chan struct{})
	s.cancel, s.ended = cancel, ended
	s.mu.Unlock()
	s.emit.Emit(EventModel, info)
	s.log.WithField("model", info.Spec).Info("loading model")
	go func() {
		defer close(ended)
		defer cancel()
		<-prev // the cancelled load frees its memory first
		s.load(ctx, gen, info, device)
	}()
	return info, nil
}

// reportDevice records the backend of load gen for the next model:state
// event, and returns it.
func (s *Models) reportDevice(gen int, d DeviceInfo) *DeviceInfo {
	p := &d
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gen == gen {
		s.info.Device = p
	}
	return p
}

// progress records a load's stage for the next model:state event.
func (s *Models) progress(gen int, stage string, done, total int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gen == gen {
		s.info.Stage, s.info.Done, s.info.Total = stage, done, total
	}
}

func (s *Models) load(ctx context.Context, gen int, info ModelInfo, device string) {
	var be *session.Backend
	var dev DeviceInfo
	var backends []*session.Backend
	var devs []DeviceInfo
	if len(s.devices) > 0 {
		backends, devs = s.devicesBackends()
		dev = devs[0]
	} else {
		be, dev = s.backend(device)
		if dev.Fallback {
			s.log.WithField("device", device).Warn(dev.Note)
		}
	}
	info.Device = s.reportDevice(gen, dev)
	if ctx.Err() != nil { // replaced while the previous load stopped
		return
	}
	start := time.Now()
	done := make(chan struct{})
	tickerDone := make(chan struct{})
	go func() {
		defer close(tickerDone)
		t := time.NewTicker(ProgressInterval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				s.mu.Lock()
				if s.gen != gen {
					s.mu.Unlock()
					return
				}
				s.info.ElapsedMs = ms(time.Since(start))
				cur := s.info
				s.mu.Unlock()
				s.emit.Emit(EventModel, cur)
			}
		}
	}()
	progress := func(stage string, done, total int64) { s.progress(gen, stage, done, total) }
	var m *session.Session
	var err error
	if backends != nil {
		m, devs, err = s.openReplicas(ctx, info.Spec, backends, devs, progress)
		if err == nil {
			info.Device = s.reportDevice(gen, devs[0])
		}
	} else {
		m, err = s.open(ctx, info.Spec, be, progress)
	}
	if err != nil && backends == nil {
		if cpu, retry := afterFailedLoad(dev, err, ctx.Err() != nil); retry {
			s.log.WithError(err).WithField("device", dev.Backend).Warn("model failed to load on the GPU: loading it on the CPU")
			dev = cpu
			info.Device = s.reportDevice(gen, dev)
			m, err = s.open(ctx, info.Spec, session.DefaultBackend(), progress)
		}
	}
	close(done)
	<-tickerDone // no progress event may follow the outcome
	s.mu.Lock()
	if s.gen != gen { // abandoned
		s.mu.Unlock()
		if err == nil {
			m.Close()
		}
		return
	}
	info.ElapsedMs, info.Stage, info.Done, info.Total = 0, "", 0, 0
	if err != nil {
		info.State, info.Error = ModelError, err.Error()
		s.info = info
		s.mu.Unlock()
		s.log.WithError(err).WithField("model", info.Spec).Error("model failed to load")
		s.emit.Emit(EventModel, info)
		return
	}
	mi := m.Info()
	info.State = ModelReady
	info.Name, info.Builtin, info.RandomWeights = mi.Name, mi.Builtin, mi.Builtin
	info.Family = mi.Family
	info.Params = mi.Params
	info.Layers, info.HiddenSize, info.VocabSize = mi.Layers, mi.Hidden, mi.Vocab
	info.LoadMs = ms(mi.LoadTime)
	mc := countsOf(nil) // Gemma 3n's notes keep the default counts
	if mi.Family == models.FamilyGemma4 {
		mc = countsOf(m)
	}
	info.Inputs = modalitiesOf(towerState(mi.Vision), towerState(mi.Audio), mc)
	info.Resident = residentOf(m)
	if mi.Builtin {
		info.Note = "random weights: its output is noise, not language; it exercises the whole pipeline"
	}
	l := &loaded{s: m, info: info}
	if backends != nil && m.Replicas() != nil {
		l.devs = devs
		info.Replicas = replicasOf(l)
		l.info = info
	}
	old := s.cur
	s.cur, s.info = l, info
	swap := s.onSwap
	s.mu.Unlock()
	if old != nil {
		s.retire(old, swap)
	}
	s.log.WithFields(logrus.Fields{"model": info.Name, "params": info.Params, "load_ms": int(info.LoadMs), "backend": info.Device.Backend, "replicas": max(len(info.Replicas), 1)}).Info("model ready")
	s.emit.Emit(EventModel, info)
}

// retire cancels the runs on l and closes it after the last one ends.
func (s *Models) retire(l *loaded, swap []func()) {
	for _, f := range swap {
		f()
	}
	go func() {
		l.refs.Wait()
		l.s.Close()
	}()
}

// Unload cancels a load in progress or closes the loaded model.
func (s *Models) Unload() ModelInfo {
	s.mu.Lock()
	s.gen++
	s.cancel()
	old := s.cur
	s.cur = nil
	s.info = ModelInfo{State: ModelNone, Inputs: modalities()}
	info, swap := s.info, s.onSwap
	s.mu.Unlock()
	if old != nil {
		s.retire(old, swap)
	}
	s.log.Info("model unloaded")
	s.emit.Emit(EventModel, info)
	return info
}

// mediaCounts gives the loaded model's soft tokens of each media item: a
// model with fixed counts (Gemma 3n) gives them for every image and clip,
// one whose counts vary (Gemma 4) an image's from its size and a clip's
// from its length (session.ImageTokenCount, AudioTokenCount: 0 for an item
// it refuses). With no model loaded, Gemma 3n's 256 and 188. The model is
// held until done is called.
func (s *Models) mediaCounts() (c mediaCounts, done func()) {
	l, release, err := s.acquire()
	if err != nil {
		return countsOf(nil), func() {}
	}
	l.countsOnce.Do(func() { l.counts = countsOf(l.s) })
	c = l.counts
	if c.s == nil {
		release()
		return c, func() {}
	}
	return c, release
}

// countsOf is the counts of model m (nil: none loaded, Gemma 3n's).
func countsOf(m *session.Session) mediaCounts {
	c := mediaCounts{image: DefaultImageTokens, audio: DefaultAudioTokens}
	if m == nil {
		return c
	}
	info := m.Info()
	if info.Family == models.FamilyGemma4 {
		return mediaCounts{s: m}
	}
	if info.ImageTokens > 0 {
		c.image = info.ImageTokens
	}
	if info.AudioTokens > 0 {
		c.audio = info.AudioTokens
	}
	return c
}

// mediaCounts are soft-token counts: image and audio fixed (0: per item,
// from s). They also say what the model receives of an image: Gemma 3n's
// 768×768 view (s nil), or Gemma 4's processor's resize (s set:
// Session.ImageView, RenderImageView).
type mediaCounts struct {
	image, audio int
	s            *session.Session
}

// gemma4 reports whether the model keeps each image's aspect ratio
// (Gemma 4's processor) rather than taking Gemma 3n's 768×768 view.
func (c mediaCounts) gemma4() bool { return c.s != nil }

// viewKey names what the model receives of an image: equal keys, equal
// views of the same kept image.
func (c mediaCounts) viewKey() string {
	if !c.gemma4() {
		return "gemma3n"
	}
	if v, err := c.s.ImageView(ModelImageSide, ModelImageSide); err == nil {
		return v.Key
	}
	return "gemma4 " + c.s.Info().Path
}

// view is what the model receives of an image of img's size (Gemma 4).
func (c mediaCounts) view(img image.Image) (session.ImageView, error) {
	b := img.Bounds()
	return c.s.ImageView(b.Dx(), b.Dy())
}

// imageTokens is an image's soft tokens (that of the image the model
// receives).
func (c mediaCounts) imageTokens(img image.Image) int {
	if c.image > 0 || c.s == nil || img == nil {
		return c.image
	}
	b := img.Bounds()
	n, err := c.s.ImageTokenCount(b.Dx(), b.Dy())
	if err != nil {
		return 0
	}
	return n
}

// clipTokens is a 16 kHz mono clip's soft tokens.
func (c mediaCounts) clipTokens(samples int) int {
	if c.audio > 0 || c.s == nil {
		return c.audio
	}
	n, err := c.s.AudioTokenCount(samples)
	if err != nil {
		return 0
	}
	return n
}

// inputCounts is the soft tokens of a run's media: one count an image and
// video frame (in the prompt's order, inputs.Captions'), and the sound's
// (the clip or the video's soundtrack; 0 without).
func (c mediaCounts) inputCounts(in *media.Input) (images []int, audio int) {
	for _, im := range in.Images {
		images = append(images, c.imageTokens(im.Image))
	}
	if in.Video != nil {
		for _, f := range in.Video.Frames {
			images = append(images, c.imageTokens(f.Image))
		}
	}
	if _, clip, ok := in.Sound(); ok {
		audio = c.clipTokens(len(clip.Samples))
	}
	return images, audio
}

// inputTokens is the soft tokens of a run's media, all together.
func (c mediaCounts) inputTokens(in *media.Input) int {
	images, n := c.inputCounts(in)
	for _, k := range images {
		n += k
	}
	return n
}

// acquire returns the ready model, held until release is called.
func (s *Models) acquire() (l *loaded, release func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == nil {
		if s.info.State == ModelLoading {
			return nil, nil, ErrLoading
		}
		return nil, nil, ErrNoModel
	}
	l = s.cur
	l.refs.Add(1)
	var once sync.Once
	return l, func() { once.Do(l.refs.Done) }, nil
}

// whenSwapped registers f to run when the loaded model is replaced.
func (s *Models) whenSwapped(f func()) {
	s.mu.Lock()
	s.onSwap = append(s.onSwap, f)
	s.mu.Unlock()
}

// close stops a load in progress and closes the loaded model (at shutdown).
func (s *Models) close() {
	s.mu.Lock()
	s.gen++
	s.cancel()
	old, ended := s.cur, s.ended
	s.cur = nil
	s.mu.Unlock()
	<-ended
	if old != nil {
		old.refs.Wait()
		old.s.Close()
	}
}

// weightBytes is the size of a folder's safetensors files.
func weightBytes(dir string) int64 {
	var n int64
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".safetensors") {
			if fi, err := e.Info(); err == nil {
				n += fi.Size()
			}
		}
	}
	return n
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
