package audio

import (
	"fmt"

	"verdict/native"
)

// bound is the tower's weights bound to a backend, on which Encode runs.
type bound struct {
	be        *native.Backend
	w         *native.Bound
	conv      [2]struct{ w, norm native.Tensor }
	inputProj native.Tensor
	layers    []boundLayer
}

type boundFFW struct{ pre, post, up, down native.Tensor }

type boundLayer struct {
	ffwStart, ffwEnd                          boundFFW
	preAttnNorm, postNorm, lconvPre, convNorm native.Tensor
	perDim, pos, depthwise, norm              native.Tensor
	q, k, v, post, linStart, linEnd           native.Tensor
}

// bind binds every encoder weight to be.
func (t *Tower) bind(be *native.Backend) (*bound, error) {
	cfg := t.Cfg
	D := cfg.HiddenSize
	w := be.NewBound()
	b := &bound{be: be, w: w, layers: make([]boundLayer, len(t.layers))}
	var err error
	vec := func(x []float32, rows, cols int) native.Tensor {
		if err != nil {
			return native.Tensor{}
		}
		v, e := w.Vector(x)
		if e != nil {
			err = e
			return native.Tensor{}
		}
		return v.View(rows, cols)
	}
	mat := func(m native.Matrix) native.Tensor {
		if err != nil {
			return native.Tensor{}
		}
		v, e := w.Matrix(m)
		if e != nil {
			err = e
		}
		return v
	}
	for i := range t.conv {
		c := &t.conv[i]
		b.conv[i].w, b.conv[i].norm = mat(c.w), vec(c.norm, 1, c.out)
	}
	b.inputProj = mat(t.inputProj)
	F := max(0, cfg.ContextLeft-1) + cfg.ContextRight + 1
	for i := range t.layers {
		ly, bl := &t.layers[i], &b.layers[i]
		ffw := func(f *feedForward) boundFFW {
			return boundFFW{pre: vec(f.pre, 1, D), post: vec(f.post, 1, D), up: mat(f.up), down: mat(f.down)}
		}
		bl.ffwStart, bl.ffwEnd = ffw(&ly.ffwStart), ffw(&ly.ffwEnd)
		bl.preAttnNorm, bl.postNorm = vec(ly.preAttnNorm, 1, D), vec(ly.postNorm, 1, D)
		bl.lconvPre, bl.convNorm = vec(ly.lconvPre, 1, D), vec(ly.convNorm, 1, D)
		bl.perDim, bl.pos = vec(ly.perDim, 1, len(ly.perDim)), vec(ly.pos, F, D)
		bl.depthwise, bl.norm = vec(ly.depthwise, D, cfg.ConvKernel), vec(ly.norm, 1, D)
		bl.q, bl.k, bl.v, bl.post = mat(ly.q), mat(ly.k), mat(ly.v), mat(ly.post)
		bl.linStart, bl.linEnd = mat(ly.linStart), mat(ly.linEnd)
	}
	if err != nil {
		w.Free()
		return nil, fmt.Errorf("audio: binding the weights to %s: %w", be.Name(), err)
	}
	return b, nil
}
