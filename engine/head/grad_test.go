package head

import (
	"math"
	"math/rand/v2"
	"testing"

	"verdict/engine/scorer"
)

// TestGradient: the analytic gradient of a decision's NLL matches central
// differences for every parameter, with 2, 3 and 5 candidates.
func TestGradient(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const Dq, Dc, r = 5, 4, 3
	vec := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return v
	}
	var train []Decision
	for _, n := range []int{2, 3, 5} {
		d := Decision{Name: "d", Q: vec(Dq), Label: n - 2}
		for range n {
			d.C = append(d.C, vec(Dc))
			d.LL = append(d.LL, -3*rng.Float64())
		}
		train = append(train, d)
	}
	h := newHead(Meta{Dq: Dq, Dc: Dc, Rank: r}, nil, train, rng)
	w := h.params()
	for i := range w.all {
		w.all[i] = rng.NormFloat64()
	}
	h.Alpha = w.all[w.alph[0]]
	loss := func(d Decision) float64 {
		return -math.Log(scorer.Softmax(h.Scores(d), 1)[d.Label])
	}
	for _, d := range train {
		g := make([]float64, len(w.all))
		h.gradient(d, g, w)
		for i := range w.all {
			old := w.all[i]
			const eps = 1e-6
			w.all[i] = old + eps
			h.Alpha = w.all[w.alph[0]]
			up := loss(d)
			w.all[i] = old - eps
			h.Alpha = w.all[w.alph[0]]
			down := loss(d)
			w.all[i] = old
			h.Alpha = w.all[w.alph[0]]
			if num := (up - down) / (2 * eps); math.Abs(num-g[i]) > 1e-5*(1+math.Abs(num)) {
				t.Errorf("%d candidates, parameter %d: gradient %.8g, numerically %.8g", len(d.C), i, g[i], num)
			}
		}
	}
}
