package models

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/color"
	"io"
	"os"
	"path/filepath"
	"sync"

	"verdict/engine/gemma4"
	"verdict/engine/safefile"
	"verdict/engine/weights"
	"verdict/native"
)

// gemma4Media is a Gemma 4 checkpoint's vision and audio towers behind the
// loader's encoder, run on the model's backend (gemma4.VisionOps and
// AudioOps, as Gemma 3n's towers run on it). Each tower loads on its first
// input, as Gemma 3n's do: a text-only request never reads them (in the
// released checkpoints they are hundreds of megabytes), and a checkpoint
// without one refuses that kind of input when asked, naming what is
// missing. A backend that cannot bind a tower's weights, or lacks one of
// its operations (native.ErrUnimplemented), leaves that tower to the CPU
// backend for good. close frees the bound weights (Model.Close), then
// closer.
type gemma4Media struct {
	name    string
	cfgJSON []byte
	st      weights.Store
	// closer, when set, is the towers' own store (a GGUF model's mmproj
	// file), closed with the model.
	closer io.Closer
	mmproj string // the mmproj file's path, for ContentHash
	hidden int
	be     *native.Backend // the model's
	out    func() *outputCache
	// proc is the image processor's settings: vision_config's patch and
	// pooling sizes, max_soft_tokens from the folder's processor config
	// (DefaultImageSoftTokens when it has none).
	proc gemma4.ImageProcessorConfig
	// feat is the audio feature extractor's settings: processor_config.json's
	// feature_extractor block, else gemma4.DefaultAudioFeatureConfig.
	feat gemma4.AudioFeatureConfig

	vision lazy[*onBackend[*gemma4.VisionOps]]
	audio  lazy[*onBackend[*gemma4.AudioOps]]
}

// opsTower is a tower's encoder bound to a backend (gemma4.VisionOps,
// gemma4.AudioOps).
type opsTower interface {
	Backend() *native.Backend
	Close()
}

// onBackend is one tower's encoder on a backend, moved to the CPU backend
// for good when its device lacks an operation. An encoder it replaces may
// still be running a pass: it is freed by close, with the model.
type onBackend[T opsTower] struct {
	mu      sync.Mutex
	cur     T
	retired []T
	bind    func(*native.Backend) (T, error)
}

// bindTower binds a tower with bind on be, or on the CPU backend when be
// cannot bind it (out of device memory, say); both errors are kept.
func bindTower[T opsTower](be *native.Backend, bind func(*native.Backend) (T, error)) (*onBackend[T], error) {
	t, err := bind(be)
	if err != nil && be != native.Default() {
		var cpuErr error
		if t, cpuErr = bind(native.Default()); cpuErr != nil {
			return nil, fmt.Errorf("%w; on the CPU backend: %w", err, cpuErr)
		}
		err = nil
	}
	if err != nil {
		return nil, err
	}
	return &onBackend[T]{cur: t, bind: bind}, nil
}

// get is the encoder in use.
func (b *onBackend[T]) get() T {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.cur
}

// run calls f with the encoder in use; when f fails with
// native.ErrUnimplemented on another backend than the CPU's, the tower is
// bound on the CPU backend and f runs again there.
func (b *onBackend[T]) run(f func(T) error) error {
	t := b.get()
	err := f(t)
	if !errors.Is(err, native.ErrUnimplemented) || t.Backend() == native.Default() {
		return err
	}
	b.mu.Lock()
	if any(b.cur) == any(t) {
		cpu, berr := b.bind(native.Default())
		if berr != nil {
			b.mu.Unlock()
			return fmt.Errorf("%w; binding the tower on the CPU backend: %w", err, berr)
		}
		b.retired = append(b.retired, b.cur)
		b.cur = cpu
	}
	t = b.cur
	b.mu.Unlock()
	return f(t)
}

// close frees every encoder bound; none may run during or after it.
func (b *onBackend[T]) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, t := range b.retired {
		t.Close()
	}
	b.retired = nil
	b.cur.Close()
}

// DefaultImageSoftTokens is Gemma 4's image processor's max_soft_tokens when
// the checkpoint's processor config does not say (transformers 5.17's
// default, the released checkpoints' image_seq_length).
const DefaultImageSoftTokens = 280

// maxImagePixels bounds an image the Gemma 4 encoder converts (its RGB copy
// is three bytes a pixel); media/limits refuses larger files before this.
const maxImagePixels = 1 << 26

func newGemma4Media(name, dir string, st weights.Store, cfgJSON []byte, hidden int, be *native.Backend, out func() *outputCache) (*gemma4Media, error) {
	if be == nil {
		be = native.Default()
	}
	g := &gemma4Media{name: name, cfgJSON: cfgJSON, st: st, hidden: hidden, be: be, out: out}
	images, audio := g.towers()
	if !images && !audio {
		return g, nil
	}
	proc, err := readProcessor(dir)
	if err != nil {
		return nil, err
	}
	g.feat = proc.feat
	if !images {
		return g, nil
	}
	if err := gemma4.CheckSoftTokens(proc.softTokens); err != nil {
		return nil, fmt.Errorf("%s: %w", proc.softFrom, err)
	}
	vc, err := gemma4.ParseVisionConfig(cfgJSON)
	if err != nil {
		return nil, err
	}
	g.proc = gemma4.ImageProcessorConfig{PatchSize: vc.PatchSize, MaxSoftTokens: proc.softTokens, PoolingKernel: vc.PoolingKernel}
	return g, nil
}

// processorSettings are a checkpoint folder's processor settings.
type processorSettings struct {
	softTokens int    // the image processor's max_soft_tokens
	softFrom   string // the file that gave it ("the default" when none did)
	feat       gemma4.AudioFeatureConfig
}

// readProcessor reads a checkpoint folder's processor settings: the image
// processor's max_soft_tokens (processorSoftTokens) and the audio feature
// extractor's settings, processor_config.json's feature_extractor block
// (gemma4.ParseAudioFeatureConfig; gemma4.DefaultAudioFeatureConfig when
// the folder has none).
func readProcessor(dir string) (p processorSettings, err error) {
	p.feat = gemma4.DefaultAudioFeatureConfig()
	if p.softTokens, p.softFrom, err = processorSoftTokens(dir); err != nil || dir == "" {
		return p, err
	}
	path := filepath.Join(dir, "processor_config.json")
	data, err := safefile.ReadFile(path, MaxConfigBytes)
	if errors.Is(err, os.ErrNotExist) {
		return p, nil
	}
	if err != nil {
		return p, err
	}
	var top struct {
		FeatureExtractor json.RawMessage `json:"feature_extractor"`
	}
	if err := json.Unmarshal(data, &top); err != nil {
		return p, fmt.Errorf("%s: %w", path, err)
	}
	if len(top.FeatureExtractor) == 0 {
		return p, nil
	}
	if p.feat, err = gemma4.ParseAudioFeatureConfig(data); err != nil {
		return p, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// processorSoftTokens reads the image processor's max_soft_tokens from a
// checkpoint folder, and the file that gave it: processor_config.json's
// image_processor (transformers 5) or preprocessor_config.json;
// DefaultImageSoftTokens when neither file is there or names it. A model
// with a vision tower refuses a value the processor does not allow when it
// opens (gemma4.CheckSoftTokens, naming the file).
func processorSoftTokens(dir string) (int, string, error) {
	const byDefault = "the default"
	if dir == "" {
		return DefaultImageSoftTokens, byDefault, nil
	}
	type proc struct {
		MaxSoftTokens  *int `json:"max_soft_tokens"`
		ImageSeqLength *int `json:"image_seq_length"`
	}
	for _, f := range []struct {
		name   string
		nested bool
	}{{"processor_config.json", true}, {"preprocessor_config.json", false}} {
		path := filepath.Join(dir, f.name)
		data, err := safefile.ReadFile(path, MaxConfigBytes)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, path, err
		}
		var p proc
		if f.nested {
			var outer struct {
				ImageProcessor *proc `json:"image_processor"`
				proc
			}
			if err := json.Unmarshal(data, &outer); err != nil {
				return 0, path, fmt.Errorf("%s: %w", path, err)
			}
			p = outer.proc
			if outer.ImageProcessor != nil {
				p = *outer.ImageProcessor
			}
		} else if err := json.Unmarshal(data, &p); err != nil {
			return 0, path, fmt.Errorf("%s: %w", path, err)
		}
		switch {
		case p.MaxSoftTokens != nil:
			return *p.MaxSoftTokens, path, nil
		case p.ImageSeqLength != nil:
			return *p.ImageSeqLength, path, nil
		}
	}
	return DefaultImageSoftTokens, byDefault, nil
}

// inputs reports what the model accepts: images when it has a vision
// tower (under use_bidirectional_attention "vision" too: the decoder masks
// the image blocks), audio when it has an audio tower.
func (g *gemma4Media) inputs() (images, audio bool) {
	return g.towers()
}

// towers reports which towers the checkpoint holds: a config section and
// its first tensor.
func (g *gemma4Media) towers() (images, audio bool) {
	var c struct {
		Vision json.RawMessage `json:"vision_config"`
		Audio  json.RawMessage `json:"audio_config"`
	}
	if json.Unmarshal(g.cfgJSON, &c) != nil {
		return false, false
	}
	present := func(raw json.RawMessage, tensor string) bool {
		if len(raw) == 0 || string(raw) == "null" {
			return false
		}
		_, _, ok := g.st.Info(tensor)
		return ok
	}
	return present(c.Vision, gemma4.VisionPrefix+"patch_embedder.input_proj.weight"),
		present(c.Audio, gemma4.AudioPrefix+"subsample_conv_projection.layer0.conv.weight")
}

// close frees the towers' weights bound on the backends (Model.Close).
func (g *gemma4Media) close() {
	g.vision.close(func(t *onBackend[*gemma4.VisionOps]) { t.close() }, errTowersClosed)
	g.audio.close(func(t *onBackend[*gemma4.AudioOps]) { t.close() }, errTowersClosed)
	if g.closer != nil {
		g.closer.Close()
		g.closer = nil
	}
}

var errTowersClosed = errors.New("gemma4: the model is closed")

// visionTower loads the vision tower (plain-Go weights, gemma4.LoadVision)
// and binds it to the backend on first use.
func (g *gemma4Media) visionTower(progress TowerProgress) (*onBackend[*gemma4.VisionOps], error) {
	images, _ := g.towers()
	return g.vision.get(func() (*onBackend[*gemma4.VisionOps], error) {
		return loadTower(g, progress, images, "vision", "images", gemma4.VisionPrefix, gemma4.ParseVisionConfig, gemma4.LoadVision,
			func(v *gemma4.Vision) int { return v.Cfg.TextHidden }, gemma4.NewVisionOps)
	})
}

// audioTower loads the audio tower (plain-Go weights, gemma4.LoadAudio)
// and binds it to the backend on first use.
func (g *gemma4Media) audioTower(progress TowerProgress) (*onBackend[*gemma4.AudioOps], error) {
	_, audio := g.towers()
	return g.audio.get(func() (*onBackend[*gemma4.AudioOps], error) {
		return loadTower(g, progress, audio, "audio", "audio", gemma4.AudioPrefix, gemma4.ParseAudioConfig, gemma4.LoadAudio,
			func(a *gemma4.Audio) int { return a.Cfg.TextHidden }, gemma4.NewAudioOps)
	})
}

// loadTower is a tower's first use: its config parsed from the model's,
// its plain-Go weights loaded from the store (has: the checkpoint holds
// them), its soft tokens' width checked against the decoder's, and the
// weights bound on the model's backend (bindTower). kind names the tower
// ("vision"), takes what it takes ("images"), prefix its tensors.
func loadTower[C any, W any, T opsTower](g *gemma4Media, progress TowerProgress, has bool, kind, takes, prefix string,
	parse func([]byte) (C, error), load func(C, weights.Store) (W, error), width func(W) int,
	bind func(W, *native.Backend) (T, error)) (*onBackend[T], error) {
	if !has {
		return nil, fmt.Errorf("%s has no %s tower (no %s_config or no %s tensors): it takes no %s", g.name, kind, kind, prefix, takes)
	}
	if progress != nil {
		progress(true, 0, 0)
	}
	cfg, err := parse(g.cfgJSON)
	var w W
	if err == nil {
		w, err = load(cfg, g.st)
	}
	if err == nil && width(w) != g.hidden {
		err = fmt.Errorf("gemma4: the %s tower's soft tokens are %d wide, the decoder's hidden size is %d", kind, width(w), g.hidden)
	}
	var t *onBackend[T]
	if err == nil {
		t, err = bindTower(g.be, func(be *native.Backend) (T, error) { return bind(w, be) })
	}
	if err != nil {
		return nil, fmt.Errorf("%s has no usable %s tower: %w", g.name, kind, err)
	}
	return t, nil
}

// lazy is a value made on first use, its error kept (a tower).
type lazy[T any] struct {
	mu  sync.Mutex
	v   T
	err error
	set bool
}

// get is the value, made by mk on the first call.
func (l *lazy[T]) get(mk func() (T, error)) (T, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.set {
		l.v, l.err = mk()
		l.set = true
	}
	return l.v, l.err
}

// close frees a value made (free), and makes every later get fail with err.
func (l *lazy[T]) close(free func(T), err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.set && l.err == nil {
		free(l.v)
	}
	var zero T
	l.v, l.err, l.set = zero, err, true
}

// rgb is img as the processor reads it: RGB bytes, row-major, alpha
// dropped (PIL's convert("RGB")).
func rgb(img image.Image) (px []uint8, h, w int, err error) {
	b := img.Bounds()
	h, w = b.Dy(), b.Dx()
	if h < 1 || w < 1 || int64(h)*int64(w) > maxImagePixels {
		return nil, 0, 0, fmt.Errorf("gemma4: an image of %dx%d pixels (want 1 to %d pixels)", w, h, maxImagePixels)
	}
	px = make([]uint8, 0, h*w*3)
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			c := color.NRGBAModel.Convert(img.At(x, y)).(color.NRGBA)
			px = append(px, c.R, c.G, c.B)
		}
	}
	return px, h, w, nil
}

// image encodes one image: the processor's patches (Preprocess: resized
// to the target size, patchified), the vision tower, its soft tokens [n,
// hidden]. The same patches encoded before come from the model's tower
// cache (cached true).
func (g *gemma4Media) image(ctx context.Context, img image.Image, progress TowerProgress) (soft []float32, cached bool, err error) {
	v, err := g.visionTower(progress)
	if err != nil {
		return nil, false, err
	}
	px, h, w, err := rgb(img)
	if err != nil {
		return nil, false, err
	}
	pixels, pos, n, err := g.proc.Preprocess(px, h, w)
	if err != nil {
		return nil, false, err
	}
	return g.encodePatches(ctx, v, pixels, pos, n, progress)
}

// imageCount is the soft tokens of an image of width×height pixels: the
// cells of pooling_kernel_size² patches of the processor's target size.
func (g *gemma4Media) imageCount(width, height int) (int, error) {
	images, _ := g.towers()
	switch {
	case !images:
		return 0, fmt.Errorf("%s has no vision tower (no vision_config or no %s tensors): it takes no images", g.name, gemma4.VisionPrefix)
	case width < 1 || height < 1 || int64(width)*int64(height) > maxImagePixels:
		return 0, fmt.Errorf("gemma4: an image of %dx%d pixels (want 1 to %d pixels)", width, height, maxImagePixels)
	}
	th, tw, err := g.proc.TargetSize(height, width)
	if err != nil {
		return 0, err
	}
	cell := g.proc.PatchSize * g.proc.PoolingKernel
	return (th / cell) * (tw / cell), nil
}

// audioCount is the soft tokens of a clip of n samples at audioRate: the
// extractor's valid frames (frame t is valid when its last sample, t·hop +
// frame_length − frame_length/2, is a real one; at most the padded clip's
// frames), then every other frame of every other frame (the tower's two
// stride-2 convolutions), as gemma4.KeptAudio keeps them. The extractor's
// refusals of a length are given as it gives them.
func (g *gemma4Media) audioCount(n int) (int, error) {
	if _, audio := g.towers(); !audio {
		return 0, fmt.Errorf("%s has no audio tower (no audio_config or no %s tensors): it takes no audio", g.name, gemma4.AudioPrefix)
	}
	c := g.feat
	if c.SamplingRate != audioRate {
		return 0, fmt.Errorf("gemma4: audio features: the extractor takes %d Hz, the model's clips are %d Hz", c.SamplingRate, audioRate)
	}
	if c.HopLength < 1 || c.PadToMultiple < 1 || c.FrameLength < 1 {
		return 0, fmt.Errorf("gemma4: audio features: hop %d, frame %d, pad_to_multiple_of %d", c.HopLength, c.FrameLength, c.PadToMultiple)
	}
	limit := (c.MaxSamples + c.PadToMultiple - 1) / c.PadToMultiple * c.PadToMultiple
	switch {
	case n < c.MinSamples():
		return 0, fmt.Errorf("gemma4: audio features: clip of %d samples is too short: a valid frame needs at least %d samples at %d Hz", n, c.MinSamples(), c.SamplingRate)
	case n > limit:
		return 0, fmt.Errorf("gemma4: audio features: clip of %d samples (%.1f s) is longer than the extractor's %d (%.1f s)", n, float64(n)/float64(c.SamplingRate), limit, float64(limit)/float64(c.SamplingRate))
	}
	padded := (n + c.PadToMultiple - 1) / c.PadToMultiple * c.PadToMultiple
	frames := 0
	if span := padded + c.FrameLength/2 - (c.FrameLength + 1); span >= 0 {
		frames = span/c.HopLength + 1
	}
	last := n - c.FrameLength + c.FrameLength/2 // a frame t is valid when t·hop < last
	valid := min(frames, (last+c.HopLength-1)/c.HopLength)
	return (valid + 3) / 4, nil
}

// encodePatches runs the vision tower over processed patches (the cache's
// key is the pixels and their positions).
func (g *gemma4Media) encodePatches(ctx context.Context, v *onBackend[*gemma4.VisionOps], pixels []float32, pos []gemma4.Patch, n int, progress TowerProgress) ([]float32, bool, error) {
	keyed := make([]float32, 0, len(pixels)+2*len(pos))
	keyed = append(keyed, pixels...)
	for _, p := range pos {
		keyed = append(keyed, float32(p.X), float32(p.Y))
	}
	key := outputKey('V', keyed)
	if s, ok := g.out().get(key); ok {
		return s, true, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	if progress != nil {
		progress(false, 0, 1)
	}
	var soft []float32
	var got int
	err := v.run(func(o *gemma4.VisionOps) (err error) {
		soft, got, err = o.Encode(pixels, pos, nil)
		return err
	})
	if err != nil {
		return nil, false, err
	}
	if got != n || len(soft) != n*g.hidden {
		return nil, false, fmt.Errorf("gemma4: the vision tower gave %d soft tokens (%d values), the processor counted %d", got, len(soft), n)
	}
	if progress != nil {
		progress(false, 1, 1)
	}
	g.out().put(key, soft)
	return soft, false, nil
}

// audioClip encodes one 16 kHz mono clip: Gemma 4's log-mel features
// (gemma4.ExtractAudioFeatures, which refuses clips too short for a frame
// or longer than the extractor's limit), then encodeFeatures.
func (g *gemma4Media) audioClip(ctx context.Context, pcm []float32, progress TowerProgress) ([]float32, bool, error) {
	if _, err := g.audioTower(progress); err != nil {
		return nil, false, err
	}
	feats, frames, mask, err := gemma4.ExtractAudioFeatures(g.feat, pcm, audioRate)
	if err != nil {
		return nil, false, err
	}
	if frames != len(mask) || len(feats) != frames*g.feat.FeatureSize {
		return nil, false, fmt.Errorf("gemma4: audio features: %d values and %d mask entries for %d frames of %d", len(feats), len(mask), frames, g.feat.FeatureSize)
	}
	return g.encodeFeatures(ctx, feats, mask, progress)
}

// audioRate is the sample rate of the clips the loader's Model takes
// (app/inputs resamples to it).
const audioRate = 16000

// encodeFeatures runs the audio tower over one clip's log-mel features
// [frames, bins] with their mask and keeps the rows of the output mask
// (gemma4.KeptAudio): the clip's soft tokens [kept, hidden].
func (g *gemma4Media) encodeFeatures(ctx context.Context, feats []float32, mask []bool, progress TowerProgress) ([]float32, bool, error) {
	a, err := g.audioTower(progress)
	if err != nil {
		return nil, false, err
	}
	keyed := make([]float32, 0, len(feats)+len(mask))
	keyed = append(keyed, feats...)
	for _, ok := range mask {
		keyed = append(keyed, float32(b2i(ok)))
	}
	key := outputKey('A', keyed)
	if s, ok := g.out().get(key); ok {
		return s, true, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	if progress != nil {
		progress(false, 0, 1)
	}
	var soft []float32
	var om []bool
	err = a.run(func(o *gemma4.AudioOps) (err error) {
		soft, om, err = o.Encode(feats, mask, nil)
		return err
	})
	if err != nil {
		return nil, false, err
	}
	kept, err := gemma4.KeptAudio(soft, om, g.hidden)
	if err != nil {
		return nil, false, err
	}
	if len(kept) == 0 {
		return nil, false, errors.New("gemma4: audio: the clip has no frame left after subsampling (too short)")
	}
	if progress != nil {
		progress(false, 1, 1)
	}
	g.out().put(key, kept)
	return kept, false, nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
