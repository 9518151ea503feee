package vision

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"

	"verdict/engine/weights"
	"verdict/engine/weights/load"
	"verdict/native"
)

// Checkpoint name prefixes of a Gemma3nForConditionalGeneration checkpoint.
const (
	TowerPrefix    = "model.vision_tower.timm_model."
	EmbedderPrefix = "model.embed_vision."
)

// normEps is RmsNorm2d's epsilon everywhere in the encoder.
const normEps = 1e-6

// Tower is the loaded vision path: encoder and embedder, weights packed for
// the native kernels and bound to a backend, on whose stream the encoder
// runs. Its methods are safe for concurrent use (forward passes run one at
// a time).
type Tower struct {
	cfg    Config
	stem   convLayer
	stages [][]*block
	msfa   struct {
		exp, proj convLayer
		norm      []float32
		normT     native.Tensor
	}
	embed struct {
		table      []float32 // [VocabSize, HiddenSize]
		hardNorm   []float32
		softNorm   []float32
		projection native.Packed // [TextHidden, HiddenSize]
	}

	be    *native.Backend
	bound *native.Bound

	mu     sync.Mutex
	st     *native.Stream // created on first use, dropped by Release and after a failure
	ws     workspace
	closed bool
}

// convLayer is a convolution (full k×k, 1×1, or depthwise) with its
// following RmsNorm2d weight.
type convLayer struct {
	in, out, k int
	packed     native.Packed // full and 1×1 convolutions
	dw         []float32     // depthwise: [k·k, channels]
	bias       []float32
	norm       []float32

	// Bound to the backend: w the packed (full, 1×1) or depthwise [k·k,
	// channels] weight, b the bias, n the norm weight.
	w, b, n native.Tensor
}

type block struct {
	spec     blockSpec
	in, out  int
	mid      int
	skip     bool
	name     string
	convExp  convLayer // er
	convPwl  convLayer // er
	dwStart  convLayer // uir (k = 0: none)
	pwExp    convLayer // uir
	dwMid    convLayer // uir (k = 0: none)
	pwProj   convLayer // uir
	gamma    []float32 // uir, mqa layer scale
	norm     []float32 // mqa
	query    convLayer // mqa
	keyDown  convLayer // mqa, kv stride 2
	key      convLayer // mqa
	valDown  convLayer // mqa, kv stride 2
	value    convLayer // mqa
	output   convLayer // mqa
	headsDim int       // mqa heads·dim

	gammaT, normT native.Tensor // gamma and norm, bound
}

// ErrMissing is wrapped by LoadTower's error when a checkpoint lacks a
// tensor of the vision path (besides weights.ErrNotFound).
var ErrMissing = errors.New("vision: missing tensor")

// conv loads a convolution weight [out, in/groups, k, k] and, when normName
// is not empty, the RmsNorm2d weight [out] after it, packed for the native
// kernels (nothing is read by a dry loader).
func conv(l *load.Loader, name, normName string, in, out, k int, depthwise bool) convLayer {
	c := convLayer{in: in, out: out, k: k}
	switch {
	case depthwise:
		if w := l.Float32(name, out, 1, k, k); w != nil {
			c.dw = native.DepthwiseWeights(w, out, k)
		}
	case k == 1:
		if w := l.Float32(name, out, in, k, k); w != nil {
			c.packed = native.PackMatrix(w, out, in)
		}
	default:
		if w := l.Float32(name, out, in, k, k); w != nil {
			c.packed = native.PackConv(w, out, in, k)
		}
	}
	if normName != "" {
		c.norm = l.Vector(normName, out)
	}
	return c
}

// LoadTower binds the vision encoder (model.vision_tower.timm_model.*) and
// the vision embedder (model.embed_vision.*) of a Gemma 3n checkpoint. The
// block layout is mobilenetv5_300m_enc's; every tensor's name and shape is
// checked before any is read (a missing one gives an error wrapping
// ErrMissing and weights.ErrNotFound). Weights are converted to float32 and packed for the native
// kernels (about 1.2 GB).
func LoadTower(store weights.Store, cfgJSON []byte) (*Tower, error) {
	return LoadTowerContext(context.Background(), store, cfgJSON, nil)
}

// LoadTowerContext is LoadTower that stops between blocks when ctx is done
// (returning its error) and tells progress, when set, the blocks loaded.
func LoadTowerContext(ctx context.Context, store weights.Store, cfgJSON []byte, progress func(done, total int)) (*Tower, error) {
	return LoadTowerOn(ctx, store, cfgJSON, nil, progress)
}

// LoadTowerOn is LoadTowerContext with the encoder on backend be (nil:
// native.Default()), to which the weights are bound once.
func LoadTowerOn(ctx context.Context, store weights.Store, cfgJSON []byte, be *native.Backend, progress func(done, total int)) (*Tower, error) {
	cfg, err := ParseConfig(cfgJSON)
	if err != nil {
		return nil, err
	}
	if _, err := build(ctx, store, cfg, true, nil); err != nil {
		return nil, err
	}
	t, err := build(ctx, store, cfg, false, progress)
	if err != nil {
		return nil, err
	}
	if be == nil {
		be = native.Default()
	}
	if err := t.bind(be); err != nil {
		if be == native.Default() {
			return nil, fmt.Errorf("vision: binding the weights to %s: %w", be.Name(), err)
		}
		// No room on the device: the encoder runs on the CPU.
		if err := t.bind(native.Default()); err != nil {
			return nil, fmt.Errorf("vision: binding the weights to the CPU: %w", err)
		}
	}
	return t, nil
}

// bind binds every encoder weight to be.
func (t *Tower) bind(be *native.Backend) error {
	w := be.NewBound()
	var err error
	vec := func(x []float32) native.Tensor {
		if err != nil || x == nil {
			return native.Tensor{}
		}
		var v native.Tensor
		v, err = w.Vector(x)
		return v
	}
	conv := func(c *convLayer) {
		switch {
		case c.packed.Valid() && err == nil:
			c.w, err = w.Packed(c.packed)
		case c.dw != nil:
			if c.w = vec(c.dw); err == nil {
				c.w = c.w.View(c.k*c.k, c.out)
			}
		}
		c.b, c.n = vec(c.bias), vec(c.norm)
	}
	conv(&t.stem)
	for _, st := range t.stages {
		for _, b := range st {
			for _, c := range []*convLayer{&b.convExp, &b.convPwl, &b.dwStart, &b.pwExp, &b.dwMid, &b.pwProj,
				&b.query, &b.keyDown, &b.key, &b.valDown, &b.value, &b.output} {
				conv(c)
			}
			b.gammaT, b.normT = vec(b.gamma), vec(b.norm)
		}
	}
	conv(&t.msfa.exp)
	conv(&t.msfa.proj)
	t.msfa.normT = vec(t.msfa.norm)
	if err != nil {
		w.Free()
		return err
	}
	t.be, t.bound = be, w
	return nil
}

// Backend reports the backend the encoder runs on.
func (t *Tower) Backend() *native.Backend {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.be
}

// Blocks is the number of steps a forward pass (and a load) reports: the
// stem, every block, the MSFA.
func Blocks() int {
	n := 2
	for _, st := range stages() {
		n += len(st)
	}
	return n
}

func build(ctx context.Context, store weights.Store, cfg Config, dry bool, progress func(done, total int)) (*Tower, error) {
	step, total := 0, Blocks()
	l := load.New(store, load.Options{Who: "vision", Missing: ErrMissing, Dry: dry})
	// next ends a step: it returns the loader's first error or ctx's.
	next := func() error {
		if err := l.Err(); err != nil {
			return err
		}
		step++
		if progress != nil {
			progress(step, total)
		}
		return ctx.Err()
	}
	t := &Tower{cfg: cfg}
	tl := l.Under(TowerPrefix)

	t.stem = conv(tl, "conv_stem.conv.weight", "conv_stem.bn.weight", 3, stemChannels, 3, false)
	t.stem.bias = tl.Vector("conv_stem.conv.bias", stemChannels)
	if err := next(); err != nil {
		return nil, err
	}

	in := stemChannels
	for s, specs := range stages() {
		var stage []*block
		for j, spec := range specs {
			blk := loadBlock(tl, fmt.Sprintf("blocks.%d.%d.", s, j), spec, in)
			if err := next(); err != nil {
				return nil, err
			}
			stage = append(stage, blk)
			in = spec.out
		}
		t.stages = append(t.stages, stage)
	}
	// There must be no extra blocks (a different architecture).
	for s, st := range t.stages {
		if tl.Has(fmt.Sprintf("blocks.%d.%d.layer_scale.gamma", s, len(st))) {
			return nil, fmt.Errorf("vision: checkpoint has more blocks in stage %d than %s", s, Architecture)
		}
	}

	// MSFA: stage 2 and stage 3 outputs, concatenated.
	msfaIn := t.stages[2][len(t.stages[2])-1].out + t.stages[3][len(t.stages[3])-1].out
	t.msfa.exp = conv(tl, "msfa.ffn.pw_exp.conv.weight", "msfa.ffn.pw_exp.bn.weight", msfaIn, 2*msfaIn, 1, false)
	t.msfa.proj = conv(tl, "msfa.ffn.pw_proj.conv.weight", "msfa.ffn.pw_proj.bn.weight", 2*msfaIn, cfg.HiddenSize, 1, false)
	t.msfa.norm = tl.Vector("msfa.norm.weight", cfg.HiddenSize)

	t.loadEmbedder(l.Under(EmbedderPrefix))
	if err := next(); err != nil {
		return nil, err
	}
	return t, nil
}

// loadBlock loads the block under p; errors go to l.
func loadBlock(l *load.Loader, p string, spec blockSpec, in int) *block {
	b := &block{spec: spec, in: in, out: spec.out, name: p}
	switch spec.kind {
	case kindER:
		b.mid = in * spec.exp
		b.skip = in == spec.out && spec.stride == 1
		b.convExp = conv(l, p+"conv_exp.weight", p+"bn1.weight", in, b.mid, spec.k, false)
		b.convPwl = conv(l, p+"conv_pwl.weight", p+"bn2.weight", b.mid, spec.out, 1, false)
	case kindUIR:
		b.mid = in * spec.exp
		b.skip = in == spec.out && spec.stride == 1
		if spec.start > 0 {
			b.dwStart = conv(l, p+"dw_start.conv.weight", p+"dw_start.bn.weight", in, in, spec.start, true)
		}
		b.pwExp = conv(l, p+"pw_exp.conv.weight", p+"pw_exp.bn.weight", in, b.mid, 1, false)
		if spec.k > 0 {
			b.dwMid = conv(l, p+"dw_mid.conv.weight", p+"dw_mid.bn.weight", b.mid, b.mid, spec.k, true)
		}
		b.pwProj = conv(l, p+"pw_proj.conv.weight", p+"pw_proj.bn.weight", b.mid, spec.out, 1, false)
		b.gamma = l.Vector(p+"layer_scale.gamma", spec.out)
	case kindMQA:
		if in != spec.out || spec.stride != 1 {
			l.Fail(fmt.Errorf("vision: %s: attention block %d -> %d stride %d not supported", p, in, spec.out, spec.stride))
			return b
		}
		b.skip = true
		b.headsDim = spec.heads * spec.dim
		b.norm = l.Vector(p+"norm.weight", in)
		b.query = conv(l, p+"attn.query.proj.weight", "", in, b.headsDim, 1, false)
		if spec.kvStride > 1 {
			b.keyDown = conv(l, p+"attn.key.down_conv.weight", p+"attn.key.norm.weight", in, in, spec.k, true)
			b.valDown = conv(l, p+"attn.value.down_conv.weight", p+"attn.value.norm.weight", in, in, spec.k, true)
		}
		b.key = conv(l, p+"attn.key.proj.weight", "", in, spec.dim, 1, false)
		b.value = conv(l, p+"attn.value.proj.weight", "", in, spec.dim, 1, false)
		b.output = conv(l, p+"attn.output.proj.weight", "", b.headsDim, spec.out, 1, false)
		b.gamma = l.Vector(p+"layer_scale.gamma", spec.out)
	}
	return b
}

// loadEmbedder loads the embedder from l (under EmbedderPrefix), filling in
// the config's TextHidden from the projection; errors go to l.
func (t *Tower) loadEmbedder(l *load.Loader) {
	h := t.cfg.HiddenSize
	const projName = "embedding_projection.weight"
	shape := l.Shape(projName)
	if l.Err() != nil {
		return
	}
	if len(shape) != 2 || shape[1] != h || shape[0] <= 0 {
		l.Fail(fmt.Errorf("vision: tensor %s has shape %v, want [text hidden, %d]", l.Name(projName), shape, h))
		return
	}
	if t.cfg.TextHidden == 0 {
		t.cfg.TextHidden = shape[0]
	}
	if t.cfg.TextHidden != shape[0] {
		l.Fail(fmt.Errorf("vision: config text_config.hidden_size is %d but the checkpoint's %s has %d rows", t.cfg.TextHidden, l.Name(projName), shape[0]))
		return
	}
	if table, ok := l.Lookup("embedding.weight"); ok && len(table) == 2 && table[0] != t.cfg.VocabSize {
		l.Fail(fmt.Errorf("vision: config vision_config.vocab_size is %d but the checkpoint's %s has %d rows", t.cfg.VocabSize, l.Name("embedding.weight"), table[0]))
		return
	}
	th := t.cfg.TextHidden
	if proj := l.Float32(projName, th, h); proj != nil {
		t.embed.projection = native.PackMatrix(proj, th, h)
	}
	t.embed.table = l.Vector("embedding.weight", t.cfg.VocabSize, h)
	t.embed.hardNorm = l.Vector("hard_embedding_norm.weight", h)
	t.embed.softNorm = l.Vector("soft_embedding_norm.weight", h)
}

// Config returns the tower's configuration (TextHidden filled in).
func (t *Tower) Config() Config { return t.cfg }

// TextHidden is the width of the embeddings SoftTokens and HardEmbed return.
func (t *Tower) TextHidden() int { return t.cfg.TextHidden }

// workspace holds the forward pass's buffers (backend memory) between
// calls: each grows to the largest tensor asked of it.
type workspace struct {
	st   *native.Stream
	bufs [7]*native.Buffer
}

// get returns buffer i as a rows×cols tensor. A buffer too small is
// replaced, after the stream has run what uses it; a failure of that sync
// or of the allocation panics with a passError, which the forward pass
// returns.
func (w *workspace) get(i, rows, cols int) native.Tensor {
	n := 4 * rows * cols
	if b := w.bufs[i]; b == nil || b.Size() < n {
		if b != nil {
			if err := w.st.Sync(); err != nil {
				panic(passError{err})
			}
			b.Free()
			w.bufs[i] = nil
		}
		nb, err := w.st.Backend().Alloc(n)
		if err != nil {
			panic(passError{err})
		}
		w.bufs[i] = nb
	}
	return w.bufs[i].Tensor(0, native.F32, rows, cols)
}

// passError carries a backend failure out of a forward pass.
type passError struct{ err error }

func (w *workspace) free() {
	for i, b := range w.bufs {
		b.Free()
		w.bufs[i] = nil
	}
}

// Release drops the buffers kept from the last forward pass (a few hundred
// MB) and the stream; the next pass allocates them again.
func (t *Tower) Release() {
	t.mu.Lock()
	t.drop()
	t.mu.Unlock()
}

// ErrClosed is the error of an encoder pass after Close.
var ErrClosed = errors.New("vision: the tower is closed")

// Close frees what the encoder holds on its backend: the bound weights,
// the workspace and the stream, after the pass in flight. Passes after
// Close return ErrClosed; the embedder (EmbedSoft, HardEmbed) still works.
// Closing again does nothing.
func (t *Tower) Close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.drop()
	if t.bound != nil {
		t.bound.Free()
		t.bound = nil
	}
	t.closed = true
}

// drop frees the workspace and the stream (t.mu held).
func (t *Tower) drop() {
	t.ws.free()
	if t.st != nil {
		t.st.Close()
		t.st = nil
	}
	t.ws = workspace{}
}

// act is a channels-last activation [h·w, c] in one of the workspace buffers.
type act struct {
	buf     int
	h, w, c int
}

// t returns the tensor [h·w, c] of x.
func (w *workspace) t(x act) native.Tensor { return w.get(x.buf, x.h*x.w, x.c) }

// Features runs the encoder on pixels [3, 768, 768] (Preprocess's output)
// and returns the MSFA output as 256 tokens × HiddenSize channels
// (token = row·16 + col), i.e. the transpose of timm's [2048, 16, 16].
func (t *Tower) Features(pixels []float32) ([]float32, error) {
	if len(pixels) != 3*ImageSize*ImageSize {
		return nil, fmt.Errorf("vision: pixels has %d values, want 3×%d×%d", len(pixels), ImageSize, ImageSize)
	}
	return t.FeaturesContext(context.Background(), pixels, nil)
}

// FeaturesContext is Features that stops between blocks when ctx is done
// (returning its error, within one block's time) and tells progress, when
// set, the steps done of Blocks().
func (t *Tower) FeaturesContext(ctx context.Context, pixels []float32, progress func(done, total int)) ([]float32, error) {
	if len(pixels) != 3*ImageSize*ImageSize {
		return nil, fmt.Errorf("vision: pixels has %d values, want 3×%d×%d", len(pixels), ImageSize, ImageSize)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	out, err := t.forward(ctx, pixels, nil, progress)
	if errors.Is(err, native.ErrUnimplemented) && t.be != native.Default() {
		// The backend lacks an encoder operation (a GPU backend without
		// the towers' kernels): the encoder runs on the CPU from now on.
		old := t.bound
		if err := t.bind(native.Default()); err != nil {
			return nil, fmt.Errorf("vision: binding the weights to the CPU: %w", err)
		}
		old.Free()
		return t.forward(ctx, pixels, nil, progress)
	}
	return out, err
}

// SoftTokens runs the encoder and the embedder's soft path on pixels
// [3, 768, 768]: the 256 image-token embeddings [256, TextHidden], in the
// order of the <image_soft_token> placeholders.
func (t *Tower) SoftTokens(pixels []float32) ([]float32, error) {
	return t.SoftTokensContext(context.Background(), pixels, nil)
}

// SoftTokensContext is SoftTokens with FeaturesContext's cancellation and
// progress.
func (t *Tower) SoftTokensContext(ctx context.Context, pixels []float32, progress func(done, total int)) ([]float32, error) {
	feat, err := t.FeaturesContext(ctx, pixels, progress)
	if err != nil {
		return nil, err
	}
	return t.EmbedSoft(feat, len(feat)/t.cfg.HiddenSize), nil
}

// EmbedSoft is the embedder's soft path on n encoder tokens x [n,
// HiddenSize]: x·√HiddenSize, soft_embedding_norm, embedding_projection,
// then a scale-free RMSNorm. It returns [n, TextHidden]; x is not changed.
// It panics when x holds fewer than n tokens.
func (t *Tower) EmbedSoft(x []float32, n int) []float32 {
	h, th := t.cfg.HiddenSize, t.cfg.TextHidden
	if n < 0 || n*h > len(x) {
		panic(fmt.Sprintf("vision: EmbedSoft: %d tokens of %d in %d values", n, h, len(x)))
	}
	if n == 0 {
		return nil
	}
	e := slices.Clone(x[:n*h])
	native.Scale(e, float32(math.Sqrt(float64(h))))
	eps := float32(t.cfg.RMSNormEps)
	native.RMSNorm(e, e, t.embed.softNorm, h, eps)
	out := make([]float32, n*th)
	native.GemmPacked(out, e, t.embed.projection, n)
	native.RMSNorm(out, out, nil, th, eps)
	return out
}

// HardEmbed is the embedder's hard path for a token id in [VocabOffset,
// VocabOffset+VocabSize) (e.g. <end_of_image> 262144, <image_soft_token>
// 262145): [TextHidden]. It returns nil for ids outside that range.
func (t *Tower) HardEmbed(id int32) []float32 {
	r := int(id) - t.cfg.VocabOffset
	if r < 0 || r >= t.cfg.VocabSize {
		return nil
	}
	h, th := t.cfg.HiddenSize, t.cfg.TextHidden
	e := slices.Clone(t.embed.table[r*h : (r+1)*h])
	eps := float32(t.cfg.RMSNormEps)
	native.RMSNorm(e, e, t.embed.hardNorm, h, eps)
	out := make([]float32, th)
	native.GemmPacked(out, e, t.embed.projection, 1)
	native.RMSNorm(out, out, nil, th, eps)
	return out
}

// normAct applies RmsNorm2d (weight w, over x's channels) and optionally
// GELU in place.
func (t *Tower) normAct(x, w native.Tensor, gelu bool) {
	t.st.NormAct(x, x, w, native.Tensor{}, native.Tensor{}, x.Cols(), normEps, gelu)
}

// forward runs the encoder on the tower's stream (t.mu held); probe, when
// not nil, sees each block's output (name, [h·w, c]) for tests. ctx is
// checked after the stem and every block; progress hears each step. A
// backend failure drops the stream and the workspace and is returned.
func (t *Tower) forward(ctx context.Context, pixels []float32, probe func(name string, x []float32, h, w, c int), progress func(done, total int)) (out []float32, err error) {
	step, total := 0, Blocks()
	next := func() error {
		step++
		if progress != nil {
			progress(step, total)
		}
		return ctx.Err()
	}
	if t.closed {
		return nil, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if t.st == nil {
		st, err := t.be.NewStream()
		if err != nil {
			return nil, fmt.Errorf("vision: %w", err)
		}
		t.st, t.ws = st, workspace{st: st}
	}
	defer func() {
		if r := recover(); r != nil {
			pe, ok := r.(passError)
			if !ok {
				panic(r)
			}
			out, err = nil, fmt.Errorf("vision: the encoder on %s: %w", t.be.Name(), pe.err)
		}
		if err != nil && ctx.Err() == nil {
			t.drop()
		}
	}()
	st, ws := t.st, &t.ws
	show := func(name string, x native.Tensor, h, w, c int) {
		if probe == nil {
			return
		}
		v := make([]float32, x.Len())
		st.Download(v, x)
		if err := st.Sync(); err != nil {
			panic(passError{err})
		}
		probe(name, v, h, w, c)
	}
	// Buffer roles rotate; 0..2 are general, 3 holds the stage-2 output,
	// 4 and 5 are attention scratch, 6 the output.
	px := ws.get(1, 3, ImageSize*ImageSize)
	st.Upload(px, pixels)
	img := ws.get(0, ImageSize*ImageSize, 3)
	st.Transpose(img, px)
	g := native.SameGeom(ImageSize, ImageSize, 3, 2)
	x := act{buf: 1, h: g.OH, w: g.OW, c: stemChannels}
	xs := ws.t(x)
	st.Conv2D(xs, img, t.stem.w, t.stem.b, g)
	t.normAct(xs, t.stem.n, true)
	show("stem", xs, x.h, x.w, x.c)
	if err := next(); err != nil {
		return nil, err
	}
	var stage2 act
	for s, stage := range t.stages {
		for _, b := range stage {
			x = t.runBlock(b, x)
			show(b.name, ws.t(x), x.h, x.w, x.c)
			if err := next(); err != nil {
				return nil, err
			}
		}
		if s == 2 {
			// Keep the stage-2 output for the MSFA in buffer 3.
			stage2 = act{buf: 3, h: x.h, w: x.w, c: x.c}
			st.Copy(ws.t(stage2), ws.t(x))
		}
	}
	// MSFA: nearest-upsample stage 3 to stage 2's size, concatenate
	// (stage 2 first), FFN, average-pool to 16×16, norm.
	hi := stage2
	cat := (x.buf + 1) % 3
	p := hi.h * hi.w
	cb := ws.get(cat, p, hi.c+x.c)
	st.UpsampleConcat(cb, ws.t(hi), ws.t(x), hi.h, hi.w, x.h, x.w)
	mid := ws.get((cat+1)%3, p, t.msfa.exp.out)
	st.Pointwise(mid, cb, t.msfa.exp.w)
	t.normAct(mid, t.msfa.exp.n, true)
	proj := ws.get(cat, p, t.msfa.proj.out)
	st.Pointwise(proj, mid, t.msfa.proj.w)
	t.normAct(proj, t.msfa.proj.n, false)
	const outRes = 16
	pooled := ws.get(6, outRes*outRes, t.cfg.HiddenSize)
	st.AvgPool2D(pooled, proj, hi.h, hi.w, hi.h/outRes)
	t.normAct(pooled, t.msfa.normT, false)
	out = make([]float32, pooled.Len())
	st.Download(out, pooled)
	if err := st.Sync(); err != nil {
		panic(passError{err})
	}
	if probe != nil {
		probe("msfa", out, outRes, outRes, t.cfg.HiddenSize)
	}
	next()
	return out, nil
}

// runBlock enqueues one block on x (in buffer x.buf of 0..2) and returns
// the output activation (in one of buffers 0..2).
func (t *Tower) runBlock(b *block, x act) act {
	st, ws := t.st, &t.ws
	xb := ws.t(x)
	free := [2]int{(x.buf + 1) % 3, (x.buf + 2) % 3}
	var none native.Tensor
	switch b.spec.kind {
	case kindER:
		g := native.SameGeom(x.h, x.w, b.spec.k, b.spec.stride)
		p := g.OH * g.OW
		mid := ws.get(free[0], p, b.mid)
		st.Conv2D(mid, xb, b.convExp.w, none, g)
		t.normAct(mid, b.convExp.n, true)
		out := ws.get(free[1], p, b.out)
		st.Pointwise(out, mid, b.convPwl.w)
		st.NormAct(out, out, b.convPwl.n, none, t.shortcut(b, xb), b.out, normEps, false)
		return act{buf: free[1], h: g.OH, w: g.OW, c: b.out}
	case kindUIR:
		cur, h, w := xb, x.h, x.w
		next := 0
		if b.spec.start > 0 {
			g := native.SameGeom(h, w, b.spec.start, 1)
			y := ws.get(free[next], h*w, b.in)
			st.DepthwiseConv2D(y, cur, b.dwStart.w, g)
			t.normAct(y, b.dwStart.n, false)
			cur, next = y, 1-next
		}
		mid := ws.get(free[next], h*w, b.mid)
		st.Pointwise(mid, cur, b.pwExp.w)
		t.normAct(mid, b.pwExp.n, true)
		cur, next = mid, 1-next
		if b.spec.k > 0 {
			g := native.SameGeom(h, w, b.spec.k, b.spec.stride)
			y := ws.get(free[next], g.OH*g.OW, b.mid)
			st.DepthwiseConv2D(y, cur, b.dwMid.w, g)
			t.normAct(y, b.dwMid.n, true)
			cur, next, h, w = y, 1-next, g.OH, g.OW
		}
		out := ws.get(free[next], h*w, b.out)
		st.Pointwise(out, cur, b.pwProj.w)
		st.NormAct(out, out, b.pwProj.n, b.gammaT, t.shortcut(b, xb), b.out, normEps, false)
		return act{buf: free[next], h: h, w: w, c: b.out}
	default: // kindMQA
		p, c := x.h*x.w, x.c
		n := ws.get(free[0], p, c)
		st.NormAct(n, xb, b.normT, none, none, c, normEps, false)
		q := ws.get(free[1], p, b.headsDim)
		st.Pointwise(q, n, b.query.w)
		kvSrcK, kvSrcV, kp := n, n, p
		if b.spec.kvStride > 1 {
			g := native.SameGeom(x.h, x.w, b.spec.k, b.spec.kvStride)
			kp = g.OH * g.OW
			kd := ws.get(4, 2*kp, c)
			kvSrcK, kvSrcV = kd.Slice(0, kp), kd.Slice(kp, 2*kp)
			st.DepthwiseConv2D(kvSrcK, n, b.keyDown.w, g)
			t.normAct(kvSrcK, b.keyDown.n, false)
			st.DepthwiseConv2D(kvSrcV, n, b.valDown.w, g)
			t.normAct(kvSrcV, b.valDown.n, false)
		}
		kv := ws.get(5, 2*kp, b.spec.dim)
		k, v := kv.Slice(0, kp), kv.Slice(kp, 2*kp)
		st.Pointwise(k, kvSrcK, b.key.w)
		st.Pointwise(v, kvSrcV, b.value.w)
		o := ws.get(free[0], p, b.headsDim) // n is no longer needed
		st.MQAttention(o, q, k, v, b.spec.heads, float32(1/math.Sqrt(float64(b.spec.dim))))
		out := ws.get(free[1], p, c)
		st.Pointwise(out, o, b.output.w)
		st.MulRows(out, b.gammaT)
		st.Add(out, out, xb)
		return act{buf: free[1], h: x.h, w: x.w, c: c}
	}
}

// shortcut is the residual a block adds to its output: its input when it
// has a skip, else the zero tensor.
func (t *Tower) shortcut(b *block, x native.Tensor) native.Tensor {
	if !b.skip {
		return native.Tensor{}
	}
	return x
}

// FLOPs is an image's arithmetic through the encoder and the embedder's
// soft path (SoftTokens), by kind of operation: multiply-adds ×2, counted
// from the shapes; norms, activations, the softmax and the pooling are left
// out.
type FLOPs struct {
	Conv      float64 `json:"conv"`      // full k×k convolutions: the stem and the edge-residual expansions
	Depthwise float64 `json:"depthwise"` // depthwise convolutions, the attention's key/value down-sampling included
	Pointwise float64 `json:"pointwise"` // 1×1 convolutions and projections: the blocks', the attention's, the MSFA's, the embedder's
	Attention float64 `json:"attention"` // the multi-query blocks' scores q·kᵀ and their sums over v
}

// Total is the sum over the kinds.
func (f FLOPs) Total() float64 { return f.Conv + f.Depthwise + f.Pointwise + f.Attention }

// FLOPs counts one image through SoftTokens on the tower's layers.
func (t *Tower) FLOPs() FLOPs {
	var f FLOPs
	g := native.SameGeom(ImageSize, ImageSize, t.stem.k, 2)
	f.Conv = 2 * float64(g.OH*g.OW) * float64(t.stem.out*t.stem.in*t.stem.k*t.stem.k)
	h, w := g.OH, g.OW
	var p2 float64 // pixels of the stage-2 output, the MSFA's resolution
	for s, stage := range t.stages {
		for _, b := range stage {
			h, w = b.flops(&f, h, w)
		}
		if s == 2 {
			p2 = float64(h * w)
		}
	}
	for _, c := range []convLayer{t.msfa.exp, t.msfa.proj} {
		f.Pointwise += 2 * p2 * float64(c.in*c.out)
	}
	f.Pointwise += 2 * float64(t.cfg.SoftTokens) * float64(t.cfg.HiddenSize*t.cfg.TextHidden)
	return f
}

// flops adds the block's arithmetic on an h×w input to f and returns its
// output's size.
func (b *block) flops(f *FLOPs, h, w int) (int, int) {
	px := func(h, w int) float64 { return float64(h * w) }
	sp := b.spec
	switch sp.kind {
	case kindER:
		g := native.SameGeom(h, w, sp.k, sp.stride)
		p := px(g.OH, g.OW)
		f.Conv += 2 * p * float64(b.in*b.mid*sp.k*sp.k)
		f.Pointwise += 2 * p * float64(b.mid*b.out)
		return g.OH, g.OW
	case kindUIR:
		if sp.start > 0 {
			f.Depthwise += 2 * px(h, w) * float64(b.in*sp.start*sp.start)
		}
		f.Pointwise += 2 * px(h, w) * float64(b.in*b.mid)
		if sp.k > 0 {
			g := native.SameGeom(h, w, sp.k, sp.stride)
			h, w = g.OH, g.OW
			f.Depthwise += 2 * px(h, w) * float64(b.mid*sp.k*sp.k)
		}
		f.Pointwise += 2 * px(h, w) * float64(b.mid*b.out)
		return h, w
	default: // kindMQA
		p, kp := px(h, w), px(h, w)
		if sp.kvStride > 1 {
			g := native.SameGeom(h, w, sp.k, sp.kvStride)
			kp = px(g.OH, g.OW)
			f.Depthwise += 2 * 2 * kp * float64(b.in*sp.k*sp.k) // keys and values
		}
		f.Pointwise += 2*p*float64(b.in*b.headsDim+b.headsDim*b.out) + 2*2*kp*float64(b.in*sp.dim)
		f.Attention += 2 * 2 * p * float64(sp.heads) * kp * float64(sp.dim)
		return h, w
	}
}
