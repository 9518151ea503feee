package head

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"verdict/engine/scorer"
)

// Example is one labelled input's decisions (those with Label >= 0 train).
type Example []Decision

// TrainOptions tune Train; zero values take the defaults.
type TrainOptions struct {
	Rank     int     // rank of the bilinear form (16)
	Epochs   int     // most passes over the training split (300)
	Patience int     // epochs without a better held-out NLL before stopping (30)
	Batch    int     // decisions per Adam step (16)
	LR       float64 // Adam's step size (0.001)
	L2       float64 // weight decay on A and B (0: 1e-3)
	HeldOut  float64 // fraction of the examples held out (0.25)
	Seed     uint64  // the split's and the initialisation's seed (1)
	// Progress, when set, hears every epoch: done of most epochs and the
	// NLLs so far.
	Progress func(epoch, epochs int, trainNLL, heldNLL float64)
}

func (o *TrainOptions) defaults() error {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.Rank, 16)
	def(&o.Epochs, 300)
	def(&o.Patience, 30)
	def(&o.Batch, 16)
	if o.LR == 0 {
		o.LR = 0.001
	}
	if o.L2 == 0 {
		o.L2 = 1e-3
	}
	if o.HeldOut == 0 {
		o.HeldOut = 0.25
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	switch {
	case o.Rank < 1 || o.Rank > 1024:
		return fmt.Errorf("head: rank %d outside 1..1024", o.Rank)
	case o.Epochs < 1 || o.Patience < 1 || o.Batch < 1:
		return fmt.Errorf("head: epochs, patience and batch must be positive")
	case !(o.LR > 0) || !(o.L2 > 0) || math.IsInf(o.LR, 0) || math.IsInf(o.L2, 0):
		return fmt.Errorf("head: learning rate and weight decay must be positive")
	case !(o.HeldOut > 0 && o.HeldOut < 1):
		return fmt.Errorf("head: held-out fraction %v outside (0, 1)", o.HeldOut)
	}
	return nil
}

// Metrics are a scorer's figures on labelled decisions.
type Metrics struct {
	Decisions int     `json:"decisions"`
	Accuracy  float64 `json:"accuracy"`
	NLL       float64 `json:"nll"`
	// ECE is the expected calibration error of the top candidate's
	// probability over 10 equal-width bins.
	ECE float64 `json:"ece"`
}

// Report is what training did and how the head compares with the json
// backend on the held-out split.
type Report struct {
	TrainExamples, HeldExamples int
	Epochs, BestEpoch           int // epochs run; the kept one (0: the initial head)
	Train, Held, JSON           Metrics
	// Fields break the held-out figures down by field, in schema order.
	Fields  []FieldMetrics
	Elapsed time.Duration
}

// FieldMetrics are one field's held-out figures, the head's and the json
// backend's.
type FieldMetrics struct {
	Field      string
	Head, JSON Metrics
}

// Train fits a head on labelled examples: a seeded split holds out a
// fraction of the examples (whole inputs), Adam minimises the training
// NLL in minibatches, and the head with the best held-out NLL is kept
// (early stopping). meta gives the model and schema identity.
func Train(ctx context.Context, examples []Example, meta Meta, fp []float32, opt TrainOptions) (*Head, *Report, error) {
	start := time.Now()
	if err := opt.defaults(); err != nil {
		return nil, nil, err
	}
	if len(examples) < 2 {
		return nil, nil, fmt.Errorf("head: %d labelled examples; training needs at least 2 (some are held out)", len(examples))
	}
	rng := rand.New(rand.NewPCG(opt.Seed, 0x6865616421))
	order := rng.Perm(len(examples))
	nHeld := min(max(1, int(math.Round(opt.HeldOut*float64(len(examples))))), len(examples)-1)
	var train, held []Decision
	for i, e := range order {
		for _, d := range examples[e] {
			if d.Label < 0 {
				continue
			}
			if d.Label >= len(d.C) || len(d.C) != len(d.LL) {
				return nil, nil, fmt.Errorf("head: decision %q: label %d of %d candidates", d.Name, d.Label, len(d.C))
			}
			if i < nHeld {
				held = append(held, d)
			} else {
				train = append(train, d)
			}
		}
	}
	if len(train) == 0 || len(held) == 0 {
		return nil, nil, fmt.Errorf("head: the split left %d training and %d held-out labelled decisions: label more examples", len(train), len(held))
	}
	meta.Dq, meta.Dc, meta.Rank = len(train[0].Q), len(train[0].C[0]), opt.Rank
	for _, d := range append(train[:len(train):len(train)], held...) {
		if len(d.Q) != meta.Dq || len(d.C[0]) != meta.Dc {
			return nil, nil, fmt.Errorf("head: decision %q has features of %d and %d values, others %d and %d", d.Name, len(d.Q), len(d.C[0]), meta.Dq, meta.Dc)
		}
	}
	meta.HeldExamples, meta.TrainExamples = nHeld, len(examples)-nHeld
	h := newHead(meta, fp, train, rng)
	rep := &Report{TrainExamples: meta.TrainExamples, HeldExamples: nHeld}

	w := h.params()
	adam := newAdam(len(w.all))
	grad := make([]float64, len(w.all))
	best := append([]float64(nil), w.all...)
	bestNLL := Evaluate(h, held).NLL
	idx := make([]int, len(train))
	for i := range idx {
		idx[i] = i
	}
	for epoch := 1; epoch <= opt.Epochs; epoch++ {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		rng.Shuffle(len(idx), func(i, j int) { idx[i], idx[j] = idx[j], idx[i] })
		for lo := 0; lo < len(idx); lo += opt.Batch {
			part := idx[lo:min(lo+opt.Batch, len(idx))]
			clear(grad)
			for _, i := range part {
				h.gradient(train[i], grad, w)
			}
			for k := range grad {
				grad[k] /= float64(len(part))
			}
			for _, r := range [][2]int{w.a, w.b} {
				for k := r[0]; k < r[1]; k++ {
					grad[k] += opt.L2 * w.all[k]
				}
			}
			adam.step(w.all, grad, opt.LR)
			h.Alpha = w.all[w.alph[0]]
		}
		rep.Epochs = epoch
		nll := Evaluate(h, held).NLL
		if opt.Progress != nil {
			opt.Progress(epoch, opt.Epochs, Evaluate(h, train).NLL, nll)
		}
		if nll < bestNLL {
			bestNLL, rep.BestEpoch = nll, epoch
			copy(best, w.all)
		} else if epoch-rep.BestEpoch >= opt.Patience {
			break
		}
	}
	copy(w.all, best)
	h.Alpha = w.all[w.alph[0]]
	rep.Train, rep.Held, rep.JSON = Evaluate(h, train), Evaluate(h, held), EvaluateJSON(held)
	for _, f := range meta.Fields {
		var ds []Decision
		for _, d := range held {
			if d.Field == f {
				ds = append(ds, d)
			}
		}
		if len(ds) > 0 {
			rep.Fields = append(rep.Fields, FieldMetrics{Field: f, Head: Evaluate(h, ds), JSON: EvaluateJSON(ds)})
		}
	}
	h.Meta.HeldAccuracy, h.Meta.JSONAccuracy = rep.Held.Accuracy, rep.JSON.Accuracy
	rep.Elapsed = time.Since(start)
	return h, rep, nil
}

// newHead initialises a head: the query statistics of the training split,
// small random A and B, and the json log-likelihood as the whole score.
func newHead(meta Meta, fp []float32, train []Decision, rng *rand.Rand) *Head {
	Dq, Dc, r := meta.Dq, meta.Dc, meta.Rank
	h := &Head{Meta: meta, Fingerprint: fp, MuQ: make([]float64, Dq), SdQ: make([]float64, Dq), Alpha: 1}
	for _, d := range train {
		for k, v := range d.Q {
			h.MuQ[k] += float64(v) / float64(len(train))
		}
	}
	var meanSd float64
	for _, d := range train {
		for k, v := range d.Q {
			x := float64(v) - h.MuQ[k]
			h.SdQ[k] += x * x / float64(len(train))
		}
	}
	for k := range h.SdQ {
		h.SdQ[k] = math.Sqrt(h.SdQ[k])
		meanSd += h.SdQ[k] / float64(Dq)
	}
	for k := range h.SdQ { // a constant dimension must not blow up
		h.SdQ[k] = math.Max(h.SdQ[k], 1e-3*meanSd+1e-12)
	}
	h.A, h.B, h.U = make([]float64, r*Dq), make([]float64, r*Dc), make([]float64, r)
	for i := range h.A {
		h.A[i] = 0.3 * rng.NormFloat64() / math.Sqrt(float64(Dq))
	}
	for i := range h.B {
		h.B[i] = 0.3 * rng.NormFloat64() / math.Sqrt(float64(Dc))
	}
	return h
}

// paramView lays A, B, U and Alpha out in one vector for the optimiser:
// the head's A, B and U alias it, Alpha is copied back after every step.
type paramView struct {
	all           []float64
	a, b, u, alph [2]int
}

func (h *Head) params() paramView {
	na, nb, nu := len(h.A), len(h.B), len(h.U)
	all := make([]float64, na+nb+nu+1)
	copy(all, h.A)
	copy(all[na:], h.B)
	copy(all[na+nb:], h.U)
	all[na+nb+nu] = h.Alpha
	v := paramView{all: all, a: [2]int{0, na}, b: [2]int{na, na + nb}, u: [2]int{na + nb, na + nb + nu}, alph: [2]int{na + nb + nu, na + nb + nu + 1}}
	h.A, h.B, h.U = all[v.a[0]:v.a[1]], all[v.b[0]:v.b[1]], all[v.u[0]:v.u[1]]
	return v
}

// gradient adds the gradient of d's NLL to g.
func (h *Head) gradient(d Decision, g []float64, w paramView) {
	r, Dq, Dc := h.Meta.Rank, h.Meta.Dq, h.Meta.Dc
	a, z := h.query(d.Q)
	bs := make([][]float64, len(d.C))
	s := make([]float64, len(d.C))
	for c := range d.C {
		bs[c] = h.candidate(d.C[c])
		for k := 0; k < r; k++ {
			s[c] += (a[k] + h.U[k]) * bs[c][k]
		}
		s[c] += h.Alpha * d.LL[c]
	}
	p := scorer.Softmax(s, 1)
	da := make([]float64, r)
	for c := range d.C {
		gc := p[c]
		if c == d.Label {
			gc--
		}
		for k := 0; k < r; k++ {
			da[k] += gc * bs[c][k]
			// dL/dB[k] += gc·(a+U)[k]·e(c)
			f := gc * (a[k] + h.U[k])
			row := g[w.b[0]+k*Dc : w.b[0]+(k+1)*Dc]
			for j, v := range d.C[c] {
				row[j] += f * float64(v)
			}
		}
		g[w.alph[0]] += gc * d.LL[c]
	}
	for k := 0; k < r; k++ {
		g[w.u[0]+k] += da[k]
		row := g[w.a[0]+k*Dq : w.a[0]+(k+1)*Dq]
		for j, v := range z {
			row[j] += da[k] * v
		}
	}
}

// adam is the Adam optimiser's state.
type adam struct {
	m, v []float64
	t    int
}

func newAdam(n int) *adam { return &adam{m: make([]float64, n), v: make([]float64, n)} }

func (o *adam) step(w, g []float64, lr float64) {
	const b1, b2, eps = 0.9, 0.999, 1e-8
	o.t++
	c1, c2 := 1-math.Pow(b1, float64(o.t)), 1-math.Pow(b2, float64(o.t))
	for i := range w {
		o.m[i] = b1*o.m[i] + (1-b1)*g[i]
		o.v[i] = b2*o.v[i] + (1-b2)*g[i]*g[i]
		w[i] -= lr * (o.m[i] / c1) / (math.Sqrt(o.v[i]/c2) + eps)
	}
}

// Evaluate scores labelled decisions with the head.
func Evaluate(h *Head, ds []Decision) Metrics {
	return metrics(ds, func(d Decision) []float64 { return scorer.Softmax(h.Scores(d), 1) })
}

// EvaluateJSON scores labelled decisions as the json backend does (its
// log-likelihoods at temperature 1).
func EvaluateJSON(ds []Decision) Metrics {
	return metrics(ds, func(d Decision) []float64 { return scorer.Softmax(d.LL, 1) })
}

func metrics(ds []Decision, probs func(Decision) []float64) Metrics {
	const bins = 10
	var conf, acc [bins]float64
	var count [bins]int
	m := Metrics{Decisions: len(ds)}
	for _, d := range ds {
		if d.Label < 0 {
			continue
		}
		p := probs(d)
		best := 0
		for j := range p {
			if p[j] > p[best] {
				best = j
			}
		}
		right := 0.0
		if best == d.Label {
			right = 1
		}
		m.Accuracy += right
		m.NLL -= math.Log(math.Max(p[d.Label], 1e-300))
		b := min(int(p[best]*bins), bins-1)
		conf[b] += p[best]
		acc[b] += right
		count[b]++
	}
	n := 0
	for _, c := range count {
		n += c
	}
	if n == 0 {
		return m
	}
	m.Decisions = n
	m.Accuracy /= float64(n)
	m.NLL /= float64(n)
	for b := range count {
		if count[b] > 0 {
			m.ECE += math.Abs(acc[b]-conf[b]) / float64(n)
		}
	}
	return m
}
