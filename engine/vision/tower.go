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
// the native kernels. Its methods are safe for concurrent use (forward passes
// run one at a time).
type Tower struct {
	cfg    Config
	stem   convLayer
	stages [][]*block
	msfa   struct {
		exp, proj convLayer
		norm      []float32
	}
	embed struct {
		table      []float32 // [VocabSize, HiddenSize]
		hardNorm   []float32
		softNorm   []float32
		projection native.Packed // [TextHidden, HiddenSize]
	}

	mu sync.Mutex
	ws workspace
}

// convLayer is a convolution (full k×k, 1×1, or depthwise) with its
// following RmsNorm2d weight.
type convLayer struct {
	in, out, k int
	packed     native.Packed // full and 1×1 convolutions
	dw         []float32     // depthwise: [k·k, channels]
	bias       []float32
	norm       []float32
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
	cfg, err := ParseConfig(cfgJSON)
	if err != nil {
		return nil, err
	}
	if _, err := build(ctx, store, cfg, true, nil); err != nil {
		return nil, err
	}
	return build(ctx, store, cfg, false, progress)
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

// workspace holds the forward pass's buffers between calls.
type workspace struct {
	bufs [6][]float32
}

func (w *workspace) get(i, n int) []float32 {
	if cap(w.bufs[i]) < n {
		w.bufs[i] = make([]float32, n)
	}
	return w.bufs[i][:n]
}

// Release drops the buffers kept from the last forward pass (a few hundred
// MB); the next pass allocates them again.
func (t *Tower) Release() {
	t.mu.Lock()
	t.ws = workspace{}
	t.mu.Unlock()
}

// act is a channels-last activation [h·w, c] in one of the workspace buffers.
type act struct {
	buf     int
	h, w, c int
}

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
	return t.forward(ctx, pixels, nil, progress)
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

// normAct applies RmsNorm2d (weight w, over channels) and optionally GELU
// in place.
func normAct(x []float32, w []float32, c int, gelu bool) {
	native.RMSNormAct(x, x, w, nil, nil, c, normEps, gelu)
}

// forward runs the encoder; probe, when not nil, sees each block's output
// (name, [h·w, c]) for tests. ctx is checked after the stem and every
// block; progress hears each step.
func (t *Tower) forward(ctx context.Context, pixels []float32, probe func(name string, x []float32, h, w, c int), progress func(done, total int)) ([]float32, error) {
	step, total := 0, Blocks()
	next := func() error {
		step++
		if progress != nil {
			progress(step, total)
		}
		return ctx.Err()
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ws := &t.ws
	// Buffer roles rotate; 0..2 are general, 3 holds the stage-2 output,
	// 4 and 5 are attention scratch.
	img := ws.get(0, len(pixels))
	native.CHWToHWC(img, pixels, 3, ImageSize*ImageSize)
	g := native.SameGeom(ImageSize, ImageSize, 3, 2)
	x := act{buf: 1, h: g.OH, w: g.OW, c: stemChannels}
	xs := ws.get(1, g.OH*g.OW*stemChannels)
	native.Conv2D(xs, img, t.stem.packed, t.stem.bias, 3, g)
	normAct(xs, t.stem.norm, stemChannels, true)
	if probe != nil {
		probe("stem", xs, x.h, x.w, x.c)
	}
	if err := next(); err != nil {
		return nil, err
	}
	var stage2 act
	for s, stage := range t.stages {
		for _, b := range stage {
			x = t.runBlock(b, x)
			if probe != nil {
				probe(b.name, ws.bufs[x.buf][:x.h*x.w*x.c], x.h, x.w, x.c)
			}
			if err := next(); err != nil {
				return nil, err
			}
		}
		if s == 2 {
			// Keep the stage-2 output for the MSFA in buffer 3.
			n := x.h * x.w * x.c
			copy(ws.get(3, n), ws.bufs[x.buf][:n])
			stage2 = act{buf: 3, h: x.h, w: x.w, c: x.c}
		}
	}
	// MSFA: nearest-upsample stage 3 to stage 2's size, concatenate
	// (stage 2 first), FFN, average-pool to 16×16, norm.
	hi := stage2
	cat := (x.buf + 1) % 3
	catC := hi.c + x.c
	cb := ws.get(cat, hi.h*hi.w*catC)
	native.UpsampleConcat(cb, ws.bufs[hi.buf][:hi.h*hi.w*hi.c], hi.c, ws.bufs[x.buf][:x.h*x.w*x.c], x.c, hi.h, hi.w, x.h, x.w)
	midBuf := (cat + 1) % 3
	p := hi.h * hi.w
	mid := ws.get(midBuf, p*t.msfa.exp.out)
	native.GemmPacked(mid, cb, t.msfa.exp.packed, p)
	normAct(mid, t.msfa.exp.norm, t.msfa.exp.out, true)
	proj := ws.get(cat, p*t.msfa.proj.out)
	native.GemmPacked(proj, mid, t.msfa.proj.packed, p)
	normAct(proj, t.msfa.proj.norm, t.msfa.proj.out, false)
	const outRes = 16
	k := hi.h / outRes
	out := make([]float32, outRes*outRes*t.cfg.HiddenSize)
	native.AvgPool2D(out, proj, hi.h, hi.w, t.cfg.HiddenSize, k)
	normAct(out, t.msfa.norm, t.cfg.HiddenSize, false)
	if probe != nil {
		probe("msfa", out, outRes, outRes, t.cfg.HiddenSize)
	}
	next()
	return out, nil
}

// runBlock applies one block to x (in buffer x.buf of 0..2) and returns the
// output activation (in one of buffers 0..2).
func (t *Tower) runBlock(b *block, x act) act {
	ws := &t.ws
	xb := ws.bufs[x.buf][:x.h*x.w*x.c]
	free := [2]int{(x.buf + 1) % 3, (x.buf + 2) % 3}
	switch b.spec.kind {
	case kindER:
		g := native.SameGeom(x.h, x.w, b.spec.k, b.spec.stride)
		p := g.OH * g.OW
		mid := ws.get(free[0], p*b.mid)
		native.Conv2D(mid, xb, b.convExp.packed, nil, b.in, g)
		normAct(mid, b.convExp.norm, b.mid, true)
		out := ws.get(free[1], p*b.out)
		native.GemmPacked(out, mid, b.convPwl.packed, p)
		native.RMSNormAct(out, out, b.convPwl.norm, nil, t.shortcut(b, xb), b.out, normEps, false)
		return act{buf: free[1], h: g.OH, w: g.OW, c: b.out}
	case kindUIR:
		cur, h, w := xb, x.h, x.w
		next := 0
		if b.spec.start > 0 {
			g := native.SameGeom(h, w, b.spec.start, 1)
			y := ws.get(free[next], h*w*b.in)
			native.DepthwiseConv2D(y, cur, b.dwStart.dw, b.in, g)
			normAct(y, b.dwStart.norm, b.in, false)
			cur, next = y, 1-next
		}
		mid := ws.get(free[next], h*w*b.mid)
		native.GemmPacked(mid, cur, b.pwExp.packed, h*w)
		normAct(mid, b.pwExp.norm, b.mid, true)
		cur, next = mid, 1-next
		if b.spec.k > 0 {
			g := native.SameGeom(h, w, b.spec.k, b.spec.stride)
			y := ws.get(free[next], g.OH*g.OW*b.mid)
			native.DepthwiseConv2D(y, cur, b.dwMid.dw, b.mid, g)
			normAct(y, b.dwMid.norm, b.mid, true)
			cur, next, h, w = y, 1-next, g.OH, g.OW
		}
		out := ws.get(free[next], h*w*b.out)
		native.GemmPacked(out, cur, b.pwProj.packed, h*w)
		native.RMSNormAct(out, out, b.pwProj.norm, b.gamma, t.shortcut(b, xb), b.out, normEps, false)
		return act{buf: free[next], h: h, w: w, c: b.out}
	default: // kindMQA
		p, c := x.h*x.w, x.c
		n := ws.get(free[0], p*c)
		native.RMSNormAct(n, xb, b.norm, nil, nil, c, normEps, false)
		q := ws.get(free[1], p*b.headsDim)
		native.GemmPacked(q, n, b.query.packed, p)
		kvSrcK, kvSrcV, kp := n, n, p
		if b.spec.kvStride > 1 {
			g := native.SameGeom(x.h, x.w, b.spec.k, b.spec.kvStride)
			kp = g.OH * g.OW
			kd := ws.get(4, 2*kp*c)
			kvSrcK, kvSrcV = kd[:kp*c], kd[kp*c:]
			native.DepthwiseConv2D(kvSrcK, n, b.keyDown.dw, c, g)
			normAct(kvSrcK, b.keyDown.norm, c, false)
			native.DepthwiseConv2D(kvSrcV, n, b.valDown.dw, c, g)
			normAct(kvSrcV, b.valDown.norm, c, false)
		}
		kv := ws.get(5, 2*kp*b.spec.dim)
		k, v := kv[:kp*b.spec.dim], kv[kp*b.spec.dim:]
		native.GemmPacked(k, kvSrcK, b.key.packed, kp)
		native.GemmPacked(v, kvSrcV, b.value.packed, kp)
		o := ws.get(free[0], p*b.headsDim) // n is no longer needed
		native.MQAttention(o, q, k, v, p, b.spec.heads, kp, b.spec.dim, float32(1/math.Sqrt(float64(b.spec.dim))))
		out := ws.get(free[1], p*c)
		native.GemmPacked(out, o, b.output.packed, p)
		native.MulRows(out, b.gamma)
		native.Add(out, out, xb)
		return act{buf: free[1], h: x.h, w: x.w, c: c}
	}
}

// shortcut is the residual a block adds to its output: its input when it
// has a skip, else nil.
func (t *Tower) shortcut(b *block, x []float32) []float32 {
	if !b.skip {
		return nil
	}
	return x
}
