package audio

import (
	"context"
	"fmt"

	"verdict/native"
)

// EncodeHost is the encoder as it ran before the backend (the slice
// kernels on host memory), kept as the reference the backend's Encode must
// match bit for bit.
func (t *Tower) EncodeHost(feats []float32, mask []bool) (out []float32, outMask []bool, err error) {
	ctx, progress := context.Background(), func(int, int) {}
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

	// Subsampling: two strided convolutions (as im2col + Linear), each
	// followed by the cumulative group norm and a ReLU, channels last.
	x, tIn, fIn, cIn := feats, T0, cfg.InputFeatSize, 1
	for i := range t.conv {
		c := &t.conv[i]
		tOut, fOut := cfg.sscpOut(i, tIn, fIn)
		patches := make([]float32, tOut*fOut*c.kt*c.kf*cIn)
		native.AudioIm2Col(patches, x, tIn, fIn, cIn, tOut, fOut, c.kt, c.kf, c.st, c.sf, 0, 1)
		y := make([]float32, tOut*fOut*c.out)
		native.Linear(y, patches, c.w, tOut*fOut)
		native.AudioCumGroupNormReLU(y, tOut, fOut*c.out, c.out, c.norm, float32(cfg.SSCPNormEps))
		x, tIn, fIn, cIn = y, tOut, fOut, c.out
	}
	T := tIn
	h := make([]float32, T*D)
	native.Linear(h, x, t.inputProj, T)

	// The mask follows the time stride: frame i reads mask[i·stride].
	stride := cfg.SSCPStrides[0][0] * cfg.SSCPStrides[1][0]
	valid := make([]bool, T)
	for i := range valid {
		valid[i] = mask[min(i*stride, T0-1)]
	}

	if err := next(); err != nil {
		return nil, nil, err
	}
	s := newHostScratch(T, D)
	for i := range t.layers {
		t.layers[i].forwardHost(s, h, valid, cfg)
		if err := next(); err != nil {
			return nil, nil, err
		}
	}

	N := (T + cfg.Reduction - 1) / cfg.Reduction
	out = make([]float32, N*D)
	outMask = make([]bool, N)
	for n := range outMask {
		outMask[n] = valid[n*cfg.Reduction]
		if outMask[n] {
			copy(out[n*D:(n+1)*D], h[n*cfg.Reduction*D:])
		}
	}
	return out, outMask, nil
}

// hostScratch holds one Encode call's activations.
type hostScratch struct {
	h, q, k, v, att []float32 // [T, D]
	wide            []float32 // [T, 4D]
	T, D            int
}

func newHostScratch(T, D int) *hostScratch {
	buf := make([]float32, 5*T*D+4*T*D)
	s := &hostScratch{T: T, D: D}
	for _, p := range []*[]float32{&s.h, &s.q, &s.k, &s.v, &s.att} {
		*p, buf = buf[:T*D:T*D], buf[T*D:]
	}
	s.wide = buf
	return s
}

func (f *feedForward) forwardHost(s *hostScratch, x []float32, cfg Config) {
	T, D := s.T, s.D
	clip := float32(cfg.GradClip)
	copy(s.h, x)
	native.AudioClip(s.h, clip)
	native.RMSNorm(s.h, s.h, f.pre, D, normEps)
	native.Linear(s.wide, s.h, f.up, T)
	native.AudioSiLU(s.wide)
	native.Linear(s.h, s.wide, f.down, T)
	native.AudioClip(s.h, clip)
	native.RMSNorm(s.h, s.h, f.post, D, normEps)
	native.Scale(s.h, float32(cfg.ResidualWeight))
	native.Add(x, x, s.h)
}

func (ly *conformerLayer) forwardHost(s *hostScratch, x []float32, valid []bool, cfg Config) {
	T, D := s.T, s.D
	clip := float32(cfg.GradClip)
	lconvEps := float32(cfg.RMSNormEps)

	ly.ffwStart.forwardHost(s, x, cfg)

	// Local self-attention with relative positions.
	copy(s.h, x)
	native.AudioClip(s.h, clip)
	native.RMSNorm(s.h, s.h, ly.preAttnNorm, D, normEps)
	native.Linear(s.q, s.h, ly.q, T)
	native.Linear(s.k, s.h, ly.k, T)
	native.Linear(s.v, s.h, ly.v, T)
	native.Scale(s.q, ly.qScale)
	native.MulRows(s.q, ly.perDim)
	native.AudioLocalAttention(s.att, s.q, s.k, s.v, ly.pos, valid, T, cfg.NumHeads, cfg.HeadDim(),
		max(0, cfg.ContextLeft-1), cfg.ContextRight, float32(cfg.LogitCap))
	native.Linear(s.h, s.att, ly.post, T)
	native.AudioClip(s.h, clip)
	native.RMSNorm(s.h, s.h, ly.postNorm, D, normEps)
	native.Add(x, x, s.h)
	for i, ok := range valid {
		if !ok {
			clear(x[i*D : (i+1)*D])
		}
	}

	// Light convolution: GLU, causal depthwise convolution, SiLU.
	glu := s.wide[:2*T*D]
	native.RMSNorm(s.h, x, ly.lconvPre, D, lconvEps)
	native.Linear(glu, s.h, ly.linStart, T)
	native.AudioGLU(s.q, glu, T, D)
	native.AudioDepthwiseConvCausal(s.h, s.q, ly.depthwise, T, D, cfg.ConvKernel)
	native.AudioClip(s.h, clip)
	native.RMSNorm(s.h, s.h, ly.convNorm, D, lconvEps)
	native.AudioSiLU(s.h)
	native.Linear(s.q, s.h, ly.linEnd, T)
	native.Add(x, x, s.q)

	ly.ffwEnd.forwardHost(s, x, cfg)
	native.AudioClip(x, clip)
	native.RMSNorm(x, x, ly.norm, D, normEps)
}
