package audio

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"

	"verdict/engine/weights"
	"verdict/engine/weights/load"
	"verdict/native"
)

// Tensor name prefixes in a Gemma 3n checkpoint.
const (
	towerPrefix = "model.audio_tower."
	embedPrefix = "model.embed_audio."
)

// normEps is the epsilon of the conformer's RMSNorms that transformers builds
// with the default (every one but the light convolution's two).
const normEps = 1e-6

// Tower is Gemma 3n's audio encoder (model.audio_tower) with the audio
// embedder (model.embed_audio) that maps its output into the text decoder's
// embedding space. Its encoder runs on a backend (LoadTowerOn). It is safe
// for concurrent use.
type Tower struct {
	Cfg        Config
	textHidden int

	mu      sync.Mutex
	b       *bound   // the weights on the backend Encode runs on
	retired []*bound // bindings given up for the CPU's, freed by Close
	closed  bool
	busy    sync.WaitGroup // passes in flight, which Close waits for

	conv      [2]sscpConv
	inputProj native.Matrix
	layers    []conformerLayer

	embedding          []float32 // [VocabSize, D]
	hardNorm, softNorm []float32
	projection         native.Matrix // [textHidden, D]
	pad                []float32     // HardEmbed(TextVocabSize-1)
}

type sscpConv struct {
	w      native.Matrix // [out, kt·kf·in], columns in im2col order
	norm   []float32     // [out]
	out    int
	kt, kf int
	st, sf int
}

type feedForward struct {
	pre, post []float32
	up, down  native.Matrix
}

type conformerLayer struct {
	ffwStart, ffwEnd      feedForward
	preAttnNorm, postNorm []float32
	q, k, v, post         native.Matrix
	qScale                float32   // q_scale buffer: head_dim^-0.5 / softplus(0)
	perDim                []float32 // softplus(per_dim_scale) [head_dim]
	pos                   []float32 // pos_proj(timing signal) [past+future+1, D]
	lconvPre, convNorm    []float32
	linStart, linEnd      native.Matrix
	depthwise             []float32 // [D, kernel]
	norm                  []float32
}

// LoadTower reads the audio tower and the audio embedder from store by
// their Hugging Face names (model.audio_tower.*, model.embed_audio.*), with
// the configuration from config.json's audio_config (see ParseConfig). Every
// tensor's shape is checked against the configuration. Linear weights stored
// as bf16 stay bf16 and may alias the store's mapped memory: close the store
// only once the tower is no longer used. The rest is converted to float32.
func LoadTower(store weights.Store, configJSON []byte) (*Tower, error) {
	return LoadTowerOn(store, configJSON, nil)
}

// LoadTowerOn is LoadTower with the encoder on backend be (nil:
// native.Default()), to which the weights are bound once.
func LoadTowerOn(store weights.Store, configJSON []byte, be *native.Backend) (*Tower, error) {
	cfg, err := ParseConfig(configJSON)
	if err != nil {
		return nil, err
	}
	t, err := loadTower(store, cfg)
	if err != nil {
		return nil, err
	}
	if be == nil {
		be = native.Default()
	}
	if t.b, err = t.bind(be); err != nil && be != native.Default() {
		// No room on the device: the encoder runs on the CPU.
		t.b, err = t.bind(native.Default())
	}
	if err != nil {
		return nil, err
	}
	return t, nil
}

// Backend reports the backend the encoder runs on (nil after Close).
func (t *Tower) Backend() *native.Backend {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.b == nil {
		return nil
	}
	return t.b.be
}

// ErrClosed is the error of an encoder pass after Close.
var ErrClosed = errors.New("audio: the tower is closed")

// Close frees the encoder's weights bound to its backend (and those of a
// backend it left for the CPU), after waiting for the passes in flight.
// Encoding after Close returns ErrClosed; the embedder's paths on encoder
// output (PadSoftTokens, HardEmbed) still work. Closing again does nothing.
func (t *Tower) Close() {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	t.closed = true
	t.mu.Unlock()
	t.busy.Wait()
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, b := range append(t.retired, t.b) {
		if b != nil {
			b.w.Free()
		}
	}
	t.b, t.retired = nil, nil
}

func loadTower(store weights.Store, cfg Config) (*Tower, error) {
	if err := checkCheckpoint(store, cfg); err != nil {
		return nil, err
	}
	l := load.New(store, load.Options{Who: "audio"})
	tw, em := l.Under(towerPrefix), l.Under(embedPrefix)
	t := &Tower{Cfg: cfg}
	D := cfg.HiddenSize

	// Subsampling convolutions.
	in, f := 1, cfg.InputFeatSize
	for i := range t.conv {
		c := &t.conv[i]
		c.out = cfg.SSCPChannels[i]
		c.kt, c.kf = cfg.SSCPKernels[i][0], cfg.SSCPKernels[i][1]
		c.st, c.sf = cfg.SSCPStrides[i][0], cfg.SSCPStrides[i][1]
		p := fmt.Sprintf("subsample_conv_projection.conv_%d.", i)
		w := tw.Float32(p+"conv.weight", c.out, in, c.kt, c.kf)
		if w != nil {
			// [out, in, kt, kf] -> [out, kt, kf, in] (im2col's column order).
			r := make([]float32, len(w))
			for o := 0; o < c.out; o++ {
				for ch := 0; ch < in; ch++ {
					for a := 0; a < c.kt; a++ {
						for b := 0; b < c.kf; b++ {
							r[((o*c.kt+a)*c.kf+b)*in+ch] = w[((o*in+ch)*c.kt+a)*c.kf+b]
						}
					}
				}
			}
			c.w = native.NewF32(c.out, c.kt*c.kf*in, r)
		}
		c.norm = tw.Float32(p+"norm.weight", c.out)
		_, f = cfg.sscpOut(i, 1, f)
		in = c.out
	}
	tw.Matrix(&t.inputProj, "subsample_conv_projection.input_proj_linear.weight", D, f*in)

	// Conformer layers.
	dh := cfg.HeadDim()
	past, future := max(0, cfg.ContextLeft-1), cfg.ContextRight
	signal := timingSignal(D, past, future)
	qScale := float32(float32(math.Pow(float64(dh), -0.5)) * (1 / float32(math.Log(2))))
	t.layers = make([]conformerLayer, cfg.NumLayers)
	for i := range t.layers {
		ly := &t.layers[i]
		c := tw.Under(fmt.Sprintf("conformer.%d.", i))
		ffw := func(f *feedForward, name string) {
			f.pre = c.Float32(name+".pre_layer_norm.weight", D)
			c.Matrix(&f.up, name+".ffw_layer_1.weight", 4*D, D)
			c.Matrix(&f.down, name+".ffw_layer_2.weight", D, 4*D)
			f.post = c.Float32(name+".post_layer_norm.weight", D)
		}
		ffw(&ly.ffwStart, "ffw_layer_start")
		ffw(&ly.ffwEnd, "ffw_layer_end")
		ly.preAttnNorm = c.Float32("attention.pre_attn_norm.weight", D)
		c.Matrix(&ly.q, "attention.attn.q_proj.weight", D, D)
		c.Matrix(&ly.k, "attention.attn.k_proj.weight", D, D)
		c.Matrix(&ly.v, "attention.attn.v_proj.weight", D, D)
		ly.qScale = qScale
		if s := c.Float32("attention.attn.per_dim_scale", dh); s != nil {
			ly.perDim = make([]float32, dh)
			for j, v := range s {
				ly.perDim[j] = softplus(v)
			}
		}
		var pp native.Matrix
		if c.Matrix(&pp, "attention.attn.relative_position_embedding.pos_proj.weight", D, D); l.Err() == nil {
			ly.pos = make([]float32, (past+future+1)*D)
			native.Linear(ly.pos, signal, pp, past+future+1)
		}
		c.Matrix(&ly.post, "attention.post.weight", D, D)
		ly.postNorm = c.Float32("attention.post_norm.weight", D)
		ly.lconvPre = c.Float32("lconv1d.pre_layer_norm.weight", D)
		c.Matrix(&ly.linStart, "lconv1d.linear_start.weight", 2*D, D)
		ly.depthwise = c.Float32("lconv1d.depthwise_conv1d.weight", D, 1, cfg.ConvKernel)
		ly.convNorm = c.Float32("lconv1d.conv_norm.weight", D)
		c.Matrix(&ly.linEnd, "lconv1d.linear_end.weight", D, D)
		ly.norm = c.Float32("norm.weight", D)
	}

	// Embedder.
	if shape, ok := em.Lookup("embedding_projection.weight"); ok && len(shape) == 2 {
		t.textHidden = shape[0]
	}
	t.embedding = em.Float32("embedding.weight", cfg.VocabSize, D)
	t.hardNorm = em.Float32("hard_embedding_norm.weight", D)
	t.softNorm = em.Float32("soft_embedding_norm.weight", D)
	em.Matrix(&t.projection, "embedding_projection.weight", max(t.textHidden, 1), D)
	if err := l.Err(); err != nil {
		return nil, err
	}
	var err error
	if t.pad, err = t.HardEmbed(int32(cfg.TextVocabSize - 1)); err != nil {
		return nil, err
	}
	return t, nil
}

// TextHidden is the width of the soft tokens (the text decoder's hidden size).
func (t *Tower) TextHidden() int { return t.textHidden }

// softplus is log(1 + e^x) rounded to float32.
func softplus(x float32) float32 {
	return float32(math.Log1p(math.Exp(float64(x))))
}

// timingSignal is the sinusoidal embedding of the relative distances
// past, past−1, …, −future: row f is [sin(d·inv), cos(d·inv)] with
// d = past − f and inv[i] = exp(−i·ln(10⁴)/(D/2 − 1)), float32 like torch.
func timingSignal(D, past, future int) []float32 {
	n := D / 2
	inv := invTimescales(n)
	F := past + future + 1
	sig := make([]float32, F*D)
	for f := 0; f < F; f++ {
		d := float32(past - f)
		for i, v := range inv {
			x := float64(d * v)
			sig[f*D+i] = float32(math.Sin(x))
			sig[f*D+n+i] = float32(math.Cos(x))
		}
	}
	return sig
}

// invTimescales is the relative position embedding's inv_timescales buffer:
// exp(i·(−ln(10⁴)/(n−1))) for i < n, in float32.
func invTimescales(n int) []float32 {
	inc := float32(-math.Log(1e4) / float64(max(n-1, 1)))
	inv := make([]float32, n)
	for i := range inv {
		inv[i] = float32(math.Exp(float64(float32(i) * inc)))
	}
	return inv
}

// ErrNoAudio is returned for clips too short to give one feature frame.
var ErrNoAudio = errors.New("audio: clip too short for one feature frame (513 samples)")

// Encode runs the audio tower on log-mel features (Features' output: feats
// [T, 128], mask[t] true for a real frame). It returns the encoder output
// [N, HiddenSize] with N = Cfg.NumTokens(T), and outMask[n] true for rows
// computed from real frames; the other rows are zero. This is transformers'
// Gemma3nAudioEncoder (whose mask has the opposite sense: true = padding).
func (t *Tower) Encode(feats []float32, mask []bool) (out []float32, outMask []bool, err error) {
	return t.EncodeContext(context.Background(), feats, mask, nil)
}

// Steps is the number of steps EncodeContext reports: the subsampling, then
// every conformer layer.
func (t *Tower) Steps() int { return 1 + len(t.layers) }

// EncodeContext is Encode that stops between conformer layers when ctx is
// done (returning its error) and tells progress, when set, the steps done
// of Steps(). A backend without the encoder's operations
// (native.ErrUnimplemented) hands the encoder to the CPU for good.
func (t *Tower) EncodeContext(ctx context.Context, feats []float32, mask []bool, progress func(done, total int)) (out []float32, outMask []bool, err error) {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil, nil, ErrClosed
	}
	b := t.b
	t.busy.Add(1)
	t.mu.Unlock()
	defer t.busy.Done()
	out, outMask, err = t.encode(ctx, b, feats, mask, progress)
	if errors.Is(err, native.ErrUnimplemented) && b.be != native.Default() {
		t.mu.Lock()
		if t.b == b {
			cpu, berr := t.bind(native.Default())
			if berr != nil {
				t.mu.Unlock()
				return nil, nil, berr
			}
			// Other passes may still read b: Close frees it.
			t.retired = append(t.retired, b)
			t.b = cpu
		}
		b = t.b
		t.mu.Unlock()
		return t.encode(ctx, b, feats, mask, progress)
	}
	return out, outMask, err
}

// encode runs the encoder on a stream of b's backend, its activations in
// an arena of that backend.
func (t *Tower) encode(ctx context.Context, b *bound, feats []float32, mask []bool, progress func(done, total int)) (out []float32, outMask []bool, err error) {
	step, total := 0, t.Steps()
	next := func() error {
		step++
		if progress != nil {
			progress(step, total)
		}
		return ctx.Err()
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	cfg := t.Cfg
	T0 := len(mask)
	if T0 == 0 {
		return nil, nil, ErrNoAudio
	}
	if len(feats) != T0*cfg.InputFeatSize {
		return nil, nil, fmt.Errorf("audio: Encode: %d feature values for %d frames of %d", len(feats), T0, cfg.InputFeatSize)
	}
	D := cfg.HiddenSize

	// The shapes, then one arena for every activation.
	type sub struct{ tIn, fIn, cIn, tOut, fOut int }
	var subs [2]sub
	tIn, fIn, cIn := T0, cfg.InputFeatSize, 1
	for i := range t.conv {
		tOut, fOut := cfg.sscpOut(i, tIn, fIn)
		subs[i] = sub{tIn, fIn, cIn, tOut, fOut}
		tIn, fIn, cIn = tOut, fOut, t.conv[i].out
	}
	T := tIn
	// The mask follows the time stride: frame i reads mask[i·stride].
	stride := cfg.SSCPStrides[0][0] * cfg.SSCPStrides[1][0]
	valid := make([]bool, T)
	validI := make([]int32, T)
	var invalid []int32
	for i := range valid {
		valid[i] = mask[min(i*stride, T0-1)]
		if valid[i] {
			validI[i] = 1
		} else {
			invalid = append(invalid, int32(i))
		}
	}
	sizes := []int{T0 * cfg.InputFeatSize, T * D, 5 * T * D, 4 * T * D, T, max(len(invalid), 1) * D, max(len(invalid), 1)}
	for i, u := range subs {
		c := &t.conv[i]
		sizes = append(sizes, u.tOut*u.fOut*c.kt*c.kf*u.cIn, u.tOut*u.fOut*c.out)
	}
	be := b.be
	st, err := be.NewStream()
	if err != nil {
		return nil, nil, fmt.Errorf("audio: %w", err)
	}
	defer st.Close()
	ar, err := be.NewArena(native.ArenaBytes(sizes...))
	if err != nil {
		return nil, nil, fmt.Errorf("audio: %w", err)
	}
	defer ar.Free()

	// Subsampling: two strided convolutions (as im2col + Linear), each
	// followed by the cumulative group norm and a ReLU, channels last.
	x := ar.Take(native.F32, T0*cfg.InputFeatSize, 1)
	st.Upload(x, feats)
	for i, u := range subs {
		c := &t.conv[i]
		patches := ar.Take(native.F32, u.tOut*u.fOut, c.kt*c.kf*u.cIn)
		st.Im2Col(patches, x, u.tIn, u.fIn, u.tOut, u.fOut, c.kt, c.kf, c.st, c.sf, 0, 1)
		y := ar.Take(native.F32, u.tOut*u.fOut, c.out)
		st.TowerLinear(y, patches, b.conv[i].w)
		st.CumGroupNormReLU(y.View(u.tOut, u.fOut*c.out), b.conv[i].norm, float32(cfg.SSCPNormEps))
		x = y
	}
	h := ar.Take(native.F32, T, D)
	st.TowerLinear(h, x.View(T, x.Len()/T), b.inputProj)
	if err := next(); err != nil {
		return nil, nil, err
	}

	s := &scratch{T: T, D: D, st: st}
	for _, p := range []*native.Tensor{&s.h, &s.q, &s.k, &s.v, &s.att} {
		*p = ar.Take(native.F32, T, D)
	}
	s.wide = ar.Take(native.F32, T, 4*D)
	s.valid = ar.Take(native.I32, 1, T)
	st.UploadI32(s.valid, validI)
	if len(invalid) > 0 {
		s.zeros = ar.Take(native.F32, len(invalid), D)
		st.Upload(s.zeros, make([]float32, len(invalid)*D))
		s.invalid = ar.Take(native.I32, 1, len(invalid))
		st.UploadI32(s.invalid, invalid)
	}
	for i := range t.layers {
		t.layers[i].forward(s, &b.layers[i], h, cfg)
		if err := next(); err != nil {
			return nil, nil, err
		}
	}
	hh := make([]float32, T*D)
	st.Download(hh, h)
	if err := st.Sync(); err != nil {
		return nil, nil, fmt.Errorf("audio: the encoder on %s: %w", be.Name(), err)
	}

	N := (T + cfg.Reduction - 1) / cfg.Reduction
	out = make([]float32, N*D)
	outMask = make([]bool, N)
	for n := range outMask {
		outMask[n] = valid[n*cfg.Reduction]
		if outMask[n] {
			copy(out[n*D:(n+1)*D], hh[n*cfg.Reduction*D:])
		}
	}
	return out, outMask, nil
}

// scratch holds one Encode call's activations and its stream.
type scratch struct {
	st              *native.Stream
	h, q, k, v, att native.Tensor // [T, D]
	wide            native.Tensor // [T, 4D]
	valid           native.Tensor // I32 [1, T]: 1 for a real frame
	zeros, invalid  native.Tensor // [padding frames, D] of zeros, and those frames (I32)
	T, D            int
}

func (f *boundFFW) forward(s *scratch, x native.Tensor, cfg Config) {
	st, D := s.st, s.D
	clip := float32(cfg.GradClip)
	st.Clip(s.h, x, clip)
	st.RMSNorm(s.h, s.h, f.pre, D, normEps)
	st.TowerLinear(s.wide, s.h, f.up)
	st.SiLU(s.wide, s.wide)
	st.TowerLinear(s.h, s.wide, f.down)
	st.Clip(s.h, s.h, clip)
	st.RMSNorm(s.h, s.h, f.post, D, normEps)
	st.Scale(s.h, s.h, float32(cfg.ResidualWeight))
	st.Add(x, x, s.h)
}

func (ly *conformerLayer) forward(s *scratch, b *boundLayer, x native.Tensor, cfg Config) {
	st, T, D := s.st, s.T, s.D
	clip := float32(cfg.GradClip)
	lconvEps := float32(cfg.RMSNormEps)

	b.ffwStart.forward(s, x, cfg)

	// Local self-attention with relative positions.
	st.Clip(s.h, x, clip)
	st.RMSNorm(s.h, s.h, b.preAttnNorm, D, normEps)
	st.TowerLinear(s.q, s.h, b.q)
	st.TowerLinear(s.k, s.h, b.k)
	st.TowerLinear(s.v, s.h, b.v)
	st.Scale(s.q, s.q, ly.qScale)
	st.MulRows(s.q, b.perDim)
	st.LocalAttention(s.att, s.q, s.k, s.v, b.pos, s.valid, cfg.NumHeads,
		max(0, cfg.ContextLeft-1), cfg.ContextRight, float32(cfg.LogitCap))
	st.TowerLinear(s.h, s.att, b.post)
	st.Clip(s.h, s.h, clip)
	st.RMSNorm(s.h, s.h, b.postNorm, D, normEps)
	st.Add(x, x, s.h)
	if !s.invalid.Nil() {
		st.Scatter(x, s.zeros, s.invalid)
	}

	// Light convolution: GLU, causal depthwise convolution, SiLU.
	glu := s.wide.View(T, 2*D)
	st.RMSNorm(s.h, x, b.lconvPre, D, lconvEps)
	st.TowerLinear(glu, s.h, b.linStart)
	st.GLU(s.q, glu)
	st.DepthwiseConvCausal(s.h, s.q, b.depthwise)
	st.Clip(s.h, s.h, clip)
	st.RMSNorm(s.h, s.h, b.convNorm, D, lconvEps)
	st.SiLU(s.h, s.h)
	st.TowerLinear(s.q, s.h, b.linEnd)
	st.Add(x, x, s.q)

	b.ffwEnd.forward(s, x, cfg)
	st.Clip(x, x, clip)
	st.RMSNorm(x, x, b.norm, D, normEps)
}

// FLOPs is a clip's arithmetic through the encoder and the embedder's soft
// path, by part: multiply-adds ×2 counted from the shapes (every frame
// real); norms, activations, the softmax and the clipping are left out.
type FLOPs struct {
	Subsample   float64 `json:"subsample"`             // the two subsampling convolutions and the input projection
	FeedForward float64 `json:"feed_forward"`          // both feed-forward modules of every layer
	Projections float64 `json:"attention_projections"` // q, k, v and the attention's output projection
	Attention   float64 `json:"attention"`             // local attention: q·k, the relative-position logits q·pos, the sums over v
	LightConv   float64 `json:"light_conv"`            // the light convolution's two projections and its depthwise convolution
	Embed       float64 `json:"embed"`                 // the embedder's projection of the encoder rows
}

// Total is the sum over the parts.
func (f FLOPs) Total() float64 {
	return f.Subsample + f.FeedForward + f.Projections + f.Attention + f.LightConv + f.Embed
}

// FLOPs counts frames feature frames (Features' rows) through Encode and
// Embed.
func (t *Tower) FLOPs(frames int) FLOPs {
	var f FLOPs
	cfg := t.Cfg
	if frames <= 0 {
		return f
	}
	tIn, fIn, cIn := frames, cfg.InputFeatSize, 1
	for i := range t.conv {
		c := &t.conv[i]
		tOut, fOut := cfg.sscpOut(i, tIn, fIn)
		f.Subsample += 2 * float64(tOut*fOut) * float64(c.out*c.kt*c.kf*cIn)
		tIn, fIn, cIn = tOut, fOut, c.out
	}
	T, D := float64(tIn), float64(cfg.HiddenSize)
	f.Subsample += 2 * T * D * float64(fIn*cIn)
	// Keys a query sees: past before it, future after, within the clip.
	past, future := max(0, cfg.ContextLeft-1), cfg.ContextRight
	keys := 0.0
	for i := range tIn {
		keys += float64(min(tIn-1, i+future) - max(0, i-past) + 1)
	}
	L := float64(len(t.layers))
	f.FeedForward = L * 2 * (2 * T * D * 4 * D * 2)
	f.Projections = L * 4 * 2 * T * D * D
	f.Attention = L * 3 * 2 * keys * D // per key and head: two dot products and an axpy of head_dim
	f.LightConv = L * (2*T*D*2*D + 2*T*D*D + 2*T*D*float64(cfg.ConvKernel))
	f.Embed = 2 * float64(cfg.NumTokens(frames)) * D * float64(t.textHidden)
	return f
}
