package gemma3n

import (
	"fmt"

	"verdict/native"
)

// tensors are the model's weights bound to its backend.
type tensors struct {
	embed, pleProj, pleNorm, norm native.Tensor
	altupProj, altupUnemb         [3]native.Tensor
	layers                        []layerTensors
}

type layerTensors struct {
	invFreq                                     native.Tensor
	q, k, v, o                                  native.Tensor
	qNorm, kNorm                                native.Tensor
	inNorm, postAttnNorm, preFFNorm, postFFNorm native.Tensor
	gate, up, down, downT                       native.Tensor
	routerNorm, correctScale                    native.Tensor
	router, predCoefs, corrCoefs                native.Tensor
	laurelL, laurelR, laurelNorm                native.Tensor
	pleGate, pleProj, postPLENorm               native.Tensor
}

// bind binds every weight to the backend once (the built-in backend uses
// the mapped checkpoint or the packed arena in place) and reserves the
// key/value pool.
func (m *Model) bind(be *native.Backend) error {
	m.be = be
	w := be.NewBound()
	m.bound = w
	var err error
	mat := func(dst *native.Tensor, x native.Matrix) {
		if err == nil && (x.Rows > 0 || x.Cols > 0) {
			*dst, err = w.Matrix(x)
		}
	}
	vec := func(dst *native.Tensor, x []float32) {
		if err == nil {
			*dst, err = w.Vector(x)
		}
	}
	t := &m.t
	mat(&t.embed, m.embed)
	mat(&t.pleProj, m.pleProj)
	vec(&t.pleNorm, m.pleNorm)
	vec(&t.norm, m.norm)
	for i := range 3 {
		mat(&t.altupProj[i], m.altupProj[i])
		mat(&t.altupUnemb[i], m.altupUnemb[i])
	}
	t.layers = make([]layerTensors, len(m.layers))
	for i := range m.layers {
		y, l := &m.layers[i], &t.layers[i]
		vec(&l.invFreq, y.invFreq)
		mat(&l.q, y.q)
		mat(&l.k, y.k)
		mat(&l.v, y.v)
		mat(&l.o, y.o)
		vec(&l.qNorm, y.qNorm)
		vec(&l.kNorm, y.kNorm)
		vec(&l.inNorm, y.inNorm)
		vec(&l.postAttnNorm, y.postAttnNorm)
		vec(&l.preFFNorm, y.preFFNorm)
		vec(&l.postFFNorm, y.postFFNorm)
		mat(&l.gate, y.gate)
		mat(&l.up, y.up)
		mat(&l.down, y.down)
		mat(&l.downT, y.downT)
		vec(&l.routerNorm, y.routerNorm)
		vec(&l.correctScale, y.correctScale)
		mat(&l.router, y.router)
		mat(&l.predCoefs, y.predCoefs)
		mat(&l.corrCoefs, y.corrCoefs)
		mat(&l.laurelL, y.laurelL)
		mat(&l.laurelR, y.laurelR)
		vec(&l.laurelNorm, y.laurelNorm)
		mat(&l.pleGate, y.pleGate)
		mat(&l.pleProj, y.pleProj)
		vec(&l.postPLENorm, y.postPLENorm)
	}
	if err != nil {
		w.Free()
		return fmt.Errorf("gemma3n: binding weights: %w", err)
	}
	return nil
}
