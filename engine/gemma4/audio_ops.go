package gemma4

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"verdict/native"
)

// The audio encoder as operations on a native backend: Audio.Encode's
// steps on a native.Stream over weights bound once, so that it runs on the
// CPU backend and on CUDA. Each subsampling convolution is Im2Col and a
// Linear, its LayerNorm a centring Linear (x − mean as x·(I − 1/c)ᵀ) then
// an RMSNorm, its ReLU a Clamp to [0, +Inf). The chunked attention is
// LocalAttention: within a chunk's context, transformers' mask leaves a
// query i the keys j with 0 ≤ i − j < left − 1 or 0 < j − i < right, and
// its Transformer-XL shift gives such a key the relative-key row
// (left − 1) − (i − j); so LocalAttention with past = left − 2, future =
// max(0, right − 1) and pos row f = relK row f + 1 (zero past the table)
// computes the same logits. A query that sees no real key (a padding
// frame far past the clip's end) gets zeros where transformers averages
// the context's values: such rows are never a valid frame's input when the
// padding trails the clip, the only layout Encode takes.

// maxAudioFrames is AudioOps' default budget of feature frames: 5 minutes
// at the feature extractor's 10 ms hop.
const maxAudioFrames = 30000

type audioOpsFF struct {
	pre, post native.Tensor
	l1, l2    opsLinear
}

type audioOpsLayer struct {
	ff1, ff2                   audioOpsFF
	preAttn, postAttn, normOut native.Tensor
	perDim                     native.Tensor // q_scale · softplus(per_dim_scale) [head_dim]
	q, k, v, post              opsLinear
	pos                        native.Tensor // [past+future+1, hidden]
	convPre, convNorm          native.Tensor
	convStart, convEnd         opsLinear
	depthwise                  native.Tensor // [hidden, kernel]
}

type audioOpsConv struct {
	w, center, norm native.Tensor // [cout, 9·cin] (im2col order), [cout, cout], [1, cout]
	cin, cout       int
}

// AudioOps is a loaded Audio whose encoder runs on a backend: Encode gives
// Audio.Encode's soft tokens on the valid frames within the fixtures'
// tolerances (audio_ops_test.go). It reads the Audio's weights where they
// are bound from, so the Audio must stay unchanged; it is safe for
// concurrent Encode calls, not with Close.
type AudioOps struct {
	a  *Audio
	be *native.Backend
	w  *native.Bound
	// MaxFrames is the most feature frames Encode takes (default 30000,
	// 5 minutes).
	MaxFrames int

	conv                   [2]audioOpsConv
	inputProj              native.Tensor
	outProj, outBias       native.Tensor
	embedProj              native.Tensor
	layers                 []audioOpsLayer
	past, future           int
	host                   [][]float32 // tensors made here, bound
	gradClip, convEps, eps float32
}

// NewAudioOps binds a's weights to backend be (nil: native.Default()).
// attention_context_left must be at least 2 (a query sees itself).
func NewAudioOps(a *Audio, be *native.Backend) (*AudioOps, error) {
	if a == nil || a.Cfg == nil {
		return nil, errors.New("gemma4: audio ops: no audio tower")
	}
	c := a.Cfg
	if c.ContextLeft < 2 {
		return nil, fmt.Errorf("gemma4: audio ops: attention_context_left %d: the ops path needs at least 2", c.ContextLeft)
	}
	if be == nil {
		be = native.Default()
	}
	o := &AudioOps{a: a, be: be, w: be.NewBound(), MaxFrames: maxAudioFrames,
		past: c.ContextLeft - 2, future: max(0, c.ContextRight-1),
		gradClip: float32(min(c.GradientClipping, math.MaxFloat32)), convEps: float32(c.Eps), eps: defaultEps}
	b := &towerBinder{w: o.w}
	keep := func(x []float32) []float32 { o.host = append(o.host, x); return x }
	H, hd := c.Hidden, c.HeadDim()
	for i, w := range [2][]float32{a.Conv0, a.Conv1} {
		cin, cout := 1, c.ConvChannels[0]
		norm := a.Norm0
		if i == 1 {
			cin, cout, norm = c.ConvChannels[0], c.ConvChannels[1], a.Norm1
		}
		// [cout, cin, 3, 3] → [cout, 3, 3, cin]: im2col's column order.
		r := keep(make([]float32, len(w)))
		for co := range cout {
			for ci := range cin {
				for kt := range 3 {
					for kf := range 3 {
						r[((co*3+kt)*3+kf)*cin+ci] = w[((co*cin+ci)*3+kt)*3+kf]
					}
				}
			}
		}
		// The centring matrix I − 1/cout.
		ctr := keep(make([]float32, cout*cout))
		for p := range cout {
			for q := range cout {
				ctr[p*cout+q] = -1 / float32(cout)
			}
			ctr[p*cout+p] += 1
		}
		o.conv[i] = audioOpsConv{w: b.mat(r, cout, 9*cin), center: b.mat(ctr, cout, cout), norm: b.vec(norm), cin: cin, cout: cout}
	}
	o.inputProj = b.mat(a.InputProj, H, c.ConvChannels[0]/4*c.ConvChannels[1])
	o.outProj, o.outBias = b.mat(a.OutProj, c.OutputDims, H), b.vec(a.OutBias)
	o.embedProj = b.mat(a.EmbedProj, c.TextHidden, c.OutputDims)
	ff := func(f *audioFF) audioOpsFF {
		return audioOpsFF{pre: b.vec(f.PreNorm), post: b.vec(f.PostNorm), l1: b.linear(&f.L1), l2: b.linear(&f.L2)}
	}
	npos := c.contextSize()/2 + 1
	F := o.past + o.future + 1
	o.layers = make([]audioOpsLayer, len(a.Layers))
	for i := range a.Layers {
		ly, ol := &a.Layers[i], &o.layers[i]
		ol.ff1, ol.ff2 = ff(&ly.FF1), ff(&ly.FF2)
		ol.preAttn, ol.postAttn, ol.normOut = b.vec(ly.NormPreAttn), b.vec(ly.NormPostAttn), b.vec(ly.NormOut)
		ol.perDim = b.vec(ly.qScale)
		ol.q, ol.k, ol.v, ol.post = b.linear(&ly.Q), b.linear(&ly.K), b.linear(&ly.V), b.linear(&ly.Post)
		pos := keep(make([]float32, F*H))
		for f := range F {
			if f+1 < npos {
				copy(pos[f*H:(f+1)*H], ly.relK[(f+1)*H:(f+2)*H])
			}
		}
		ol.pos = b.mat(pos, F, H)
		ol.convPre, ol.convNorm = b.vec(ly.ConvPreNorm), b.vec(ly.ConvNorm)
		ol.convStart, ol.convEnd = b.linear(&ly.ConvStart), b.linear(&ly.ConvEnd)
		ol.depthwise = b.mat(ly.Depthwise, H, c.ConvKernel)
	}
	if len(a.Layers) > 0 && len(a.Layers[0].qScale) != hd {
		b.err = fmt.Errorf("per_dim_scale has %d values, head_dim is %d", len(a.Layers[0].qScale), hd)
	}
	if b.err != nil {
		o.w.Free()
		return nil, fmt.Errorf("gemma4: audio ops: binding the weights to %s: %w", be.Name(), b.err)
	}
	return o, nil
}

// Backend is the backend the encoder runs on.
func (o *AudioOps) Backend() *native.Backend { return o.be }

// Close unbinds the weights; Encode must not run during or after it.
func (o *AudioOps) Close() {
	if o.w != nil {
		o.w.Free()
		o.w = nil
	}
}

// audioOpsUses are the operations AudioOps runs.
var audioOpsUses = []native.Op{native.OpLinear, native.OpRMSNorm, native.OpEW, native.OpMulRows, native.OpIm2Col,
	native.OpScatter, native.OpLocalAttention, native.OpDWConvCausal, native.OpGLU, native.OpSiLU, native.OpClip, native.OpClamp}

// Unsupported lists the encoder's operations that its backend leaves to
// the CPU backend (native/fallback.go runs them there): none on the CPU
// backend and on CUDA.
func (o *AudioOps) Unsupported() []native.Op { return unsupportedOf(o.be, audioOpsUses) }

// Encode is Audio.Encode on the backend: the soft tokens [T', TextHidden]
// of every output frame and the output mask, trace (may be nil) filled the
// same way. The valid frames' rows match Audio.Encode's; a padding frame
// that sees no real key differs (see above). Inputs Audio.Encode refuses
// are refused with its errors; so are more frames than MaxFrames, a clip
// with no real frame, and a real frame after padding.
func (o *AudioOps) Encode(feats []float32, mask []bool, trace *AudioTrace) (soft []float32, outMask []bool, err error) {
	if o.w == nil {
		return nil, nil, errors.New("gemma4: audio ops: closed")
	}
	c := o.a.Cfg
	T := len(mask)
	switch {
	case T == 0:
		return nil, nil, errors.New("gemma4: audio: no frames")
	case T > o.MaxFrames:
		return nil, nil, fmt.Errorf("gemma4: audio: %d frames, over the budget of %d", T, o.MaxFrames)
	case len(feats)%T != 0:
		return nil, nil, fmt.Errorf("gemma4: audio: %d feature values for %d frames", len(feats), T)
	}
	F := len(feats) / T
	if f2 := ((F+1)/2 + 1) / 2; f2 != c.ConvChannels[0]/4 {
		return nil, nil, fmt.Errorf("gemma4: audio: %d mel bins subsample to %d, the input projection expects %d (subsampling_conv_channels[0]/4)",
			F, f2, c.ConvChannels[0]/4)
	}
	realFrames := 0
	for t, m := range mask {
		if m {
			if realFrames < t {
				return nil, nil, fmt.Errorf("gemma4: audio ops: frame %d is real after padding (the ops path takes trailing padding only)", t)
			}
			realFrames++
		}
	}
	if realFrames == 0 {
		return nil, nil, errors.New("gemma4: audio: every frame is padding (an empty clip)")
	}
	H, C0, C1 := c.Hidden, c.ConvChannels[0], c.ConvChannels[1]
	t1, f1 := (T-1)/2+1, (F-1)/2+1
	t2, f2 := (t1-1)/2+1, (f1-1)/2+1
	m1 := everyOther(mask)
	outMask = everyOther(m1)
	var pad1 []int32 // rows of the first conv's output in padding frames
	for t, m := range m1 {
		if !m {
			for f := range f1 {
				pad1 = append(pad1, int32(t*f1+f))
			}
		}
	}
	valid := make([]int32, t2)
	for t, m := range outMask {
		if m {
			valid[t] = 1
		}
	}
	O := c.OutputDims
	sizes := []int{T * F, t1 * f1 * 9, t1 * f1 * C0, t1 * f1 * C0, len(pad1) * C0, len(pad1),
		t2 * f2 * 9 * C0, t2 * f2 * C1, t2 * f2 * C1, t2 * H, t2,
		t2 * H, t2 * H, t2 * H, t2 * H, t2 * H, t2 * H, t2 * H, t2 * 4 * H, t2 * 4 * H,
		t2 * O, t2 * O, t2 * c.TextHidden}
	st, err := o.be.NewStream()
	if err != nil {
		return nil, nil, fmt.Errorf("gemma4: audio ops: %w", err)
	}
	defer st.Close()
	ar, err := o.be.NewArena(native.ArenaBytes(sizes...))
	if err != nil {
		return nil, nil, fmt.Errorf("gemma4: audio ops: %w", err)
	}
	defer ar.Free()
	down := func(t native.Tensor) []float32 {
		x := make([]float32, t.Len())
		st.Download(x, t)
		return x
	}

	// Subsampling: padding frames zeroed, then each 3×3 stride-2 convolution
	// (pad 1), LayerNorm over the channels and ReLU, channels last.
	fm := slices.Clone(feats)
	for t, m := range mask {
		if !m {
			clear(fm[t*F : (t+1)*F])
		}
	}
	x := ar.Take(native.F32, T*F, 1)
	st.Upload(x, fm)
	y0 := o.convNormReLU(st, ar, &o.conv[0], x, T, F, t1, f1)
	if len(pad1) > 0 {
		zeros := ar.Take(native.F32, len(pad1), C0)
		st.Upload(zeros, make([]float32, len(pad1)*C0))
		idx := ar.Take(native.I32, 1, len(pad1))
		st.UploadI32(idx, pad1)
		st.Scatter(y0, zeros, idx)
	}
	y1 := o.convNormReLU(st, ar, &o.conv[1], y0, t1, f1, t2, f2)
	h := ar.Take(native.F32, t2, H)
	st.TowerLinear(h, y1.View(t2, f2*C1), o.inputProj)
	s := &audioScratch{st: st, valid: ar.Take(native.I32, 1, t2)}
	st.UploadI32(s.valid, valid)
	for _, p := range []*native.Tensor{&s.x, &s.q, &s.k, &s.v, &s.att, &s.o, &s.g} {
		*p = ar.Take(native.F32, t2, H)
	}
	s.wide, s.clip = ar.Take(native.F32, t2, 4*H), ar.Take(native.F32, t2, 4*H)
	var tr audioOpsTrace
	if trace != nil {
		tr.hidden = append(tr.hidden, down(h))
	}
	for l := range o.layers {
		o.block(s, &o.layers[l], h, &tr, trace != nil, down)
		if trace != nil {
			tr.hidden = append(tr.hidden, down(h))
		}
	}
	out := ar.Take(native.F32, t2, O)
	st.TowerLinear(out, h, o.outProj)
	st.AddRep(out, out, o.outBias)
	var towerOut []float32
	if trace != nil {
		towerOut = down(out)
	}
	nrm := ar.Take(native.F32, t2, O)
	st.RMSNorm(nrm, out, native.Tensor{}, O, float32(c.Eps))
	sv := ar.Take(native.F32, t2, c.TextHidden)
	st.TowerLinear(sv, nrm, o.embedProj)
	soft = down(sv)
	if err := st.Sync(); err != nil {
		return nil, nil, fmt.Errorf("gemma4: audio ops on %s: %w", o.be.Name(), err)
	}
	if trace != nil {
		*trace = AudioTrace{Hidden: tr.hidden, FF1: tr.ff1, Attn: tr.attn, LConv: tr.lconv, FF2: tr.ff2, TowerOut: towerOut}
	}
	return soft, outMask, nil
}

// convNormReLU is one subsampling layer: x [tIn·fIn, cin] channels last →
// [tOut·fOut, cout].
func (o *AudioOps) convNormReLU(st *native.Stream, ar *native.Arena, cv *audioOpsConv, x native.Tensor, tIn, fIn, tOut, fOut int) native.Tensor {
	p := ar.Take(native.F32, tOut*fOut, 9*cv.cin)
	st.Im2Col(p, x, tIn, fIn, tOut, fOut, 3, 3, 2, 2, 1, 1)
	y := ar.Take(native.F32, tOut*fOut, cv.cout)
	st.TowerLinear(y, p, cv.w)
	z := ar.Take(native.F32, tOut*fOut, cv.cout)
	st.TowerLinear(z, y, cv.center)
	st.RMSNorm(z, z, cv.norm, cv.cout, o.convEps)
	st.Clamp(z, z, 0, float32(math.Inf(1)))
	return z
}

// audioScratch is one Encode's activations and stream.
type audioScratch struct {
	st                    *native.Stream
	x, q, k, v, att, o, g native.Tensor // [T', hidden]
	wide, clip            native.Tensor // [T', 4·hidden]
	valid                 native.Tensor // I32 [1, T']
}

// audioOpsTrace collects AudioTrace's parts as they are downloaded.
type audioOpsTrace struct {
	hidden, ff1, attn, lconv, ff2 [][]float32
}

// feedForward is Audio.feedForward: h += rw · post(clip(L2(silu(L1(pre(clip(h))))))).
func (o *AudioOps) feedForward(s *audioScratch, f *audioOpsFF, h native.Tensor) {
	c := o.a.Cfg
	st, H := s.st, c.Hidden
	st.Clip(s.x, h, o.gradClip)
	st.RMSNorm(s.x, s.x, f.pre, H, o.eps)
	f.l1.apply(st, s.wide, s.x, s.clip)
	st.SiLU(s.wide, s.wide)
	f.l2.apply(st, s.o, s.wide, s.clip)
	st.Clip(s.o, s.o, o.gradClip)
	st.RMSNorm(s.o, s.o, f.post, H, o.eps)
	st.Scale(s.o, s.o, float32(c.ResidualWeight))
	st.Add(h, h, s.o)
}

// block is Audio.block on the backend: h [T', hidden] in place.
func (o *AudioOps) block(s *audioScratch, ly *audioOpsLayer, h native.Tensor, tr *audioOpsTrace, tracing bool, down func(native.Tensor) []float32) {
	c := o.a.Cfg
	st, H, T := s.st, c.Hidden, h.Rows()
	o.feedForward(s, &ly.ff1, h)
	if tracing {
		tr.ff1 = append(tr.ff1, down(h))
	}
	// Attention: per-dimension query scale, keys scaled, local attention
	// with relative positions and the logit cap, then post.
	st.Clip(s.x, h, o.gradClip)
	st.RMSNorm(s.x, s.x, ly.preAttn, H, o.eps)
	ly.q.apply(st, s.q, s.x, s.clip)
	ly.k.apply(st, s.k, s.x, s.clip)
	ly.v.apply(st, s.v, s.x, s.clip)
	st.Scale(s.q, s.q, o.a.qScale)
	st.MulRows(s.q, ly.perDim)
	st.Scale(s.k, s.k, o.a.kScale)
	st.LocalAttention(s.att, s.q, s.k, s.v, ly.pos, s.valid, c.Heads, o.past, o.future, float32(c.LogitCap))
	ly.post.apply(st, s.o, s.att, s.clip)
	if tracing {
		tr.attn = append(tr.attn, down(s.o))
	}
	st.Clip(s.o, s.o, o.gradClip)
	st.RMSNorm(s.o, s.o, ly.postAttn, H, o.eps)
	st.Add(h, h, s.o)
	// The light convolution.
	two := s.wide.View(T, 2*H)
	st.RMSNorm(s.x, h, ly.convPre, H, o.convEps)
	ly.convStart.apply(st, two, s.x, s.clip)
	st.GLU(s.g, two)
	st.DepthwiseConvCausal(s.x, s.g, ly.depthwise)
	st.Clip(s.x, s.x, o.gradClip)
	st.RMSNorm(s.x, s.x, ly.convNorm, H, o.convEps)
	st.SiLU(s.x, s.x)
	ly.convEnd.apply(st, s.o, s.x, s.clip)
	st.Add(h, h, s.o)
	if tracing {
		tr.lconv = append(tr.lconv, down(h))
	}
	o.feedForward(s, &ly.ff2, h)
	if tracing {
		tr.ff2 = append(tr.ff2, down(h))
	}
	st.Clip(h, h, o.gradClip)
	st.RMSNorm(h, h, ly.normOut, H, o.eps)
}
