package scorer

import "math"

// DecisionDiff is one decision's distributions in two results compared.
type DecisionDiff struct {
	Field string `json:"field"`
	Name  string `json:"name"`
	// KL is KL(a ‖ b) in nats, over the candidates both share.
	KL      float64 `json:"kl"`
	WinnerA string  `json:"winner_a"`
	WinnerB string  `json:"winner_b"`
}

// Comparison sets two results of one schema side by side, decision by
// decision (matched by name, candidates by value).
type Comparison struct {
	Decisions []DecisionDiff `json:"decisions"`
	MeanKL    float64        `json:"mean_kl"`
	MaxKL     float64        `json:"max_kl"`
	// WinnerAgreement is the share of compared decisions whose most
	// probable value is the same in both.
	WinnerAgreement float64 `json:"winner_agreement"`
	// Skipped counts decisions without a counterpart of the same
	// candidates (trie-decoded fields, another schema).
	Skipped int `json:"skipped"`
}

// KL is the Kullback-Leibler divergence KL(p ‖ q) in nats; q is floored at
// 1e-12 so that a zero where p has mass gives a large finite value.
func KL(p, q []float64) float64 {
	var d float64
	for i := range p {
		if p[i] > 0 {
			d += p[i] * math.Log(p[i]/math.Max(q[i], 1e-12))
		}
	}
	return math.Max(d, 0)
}

// Compare compares the decisions of a and b.
func Compare(a, b *Result) Comparison {
	type key struct{ field, name string }
	other := map[key]Decision{}
	for _, f := range b.Fields {
		for _, d := range f.Decisions {
			other[key{f.Name, d.Name}] = d
		}
	}
	var c Comparison
	agree := 0
	for _, f := range a.Fields {
		for _, d := range f.Decisions {
			o, ok := other[key{f.Name, d.Name}]
			p, q, same := aligned(d, o)
			if !ok || !same {
				c.Skipped++
				continue
			}
			dd := DecisionDiff{Field: f.Name, Name: d.Name, KL: KL(p, q), WinnerA: winner(d), WinnerB: winner(o)}
			if dd.WinnerA == dd.WinnerB {
				agree++
			}
			c.Decisions = append(c.Decisions, dd)
			c.MeanKL += dd.KL
			c.MaxKL = math.Max(c.MaxKL, dd.KL)
		}
	}
	if n := len(c.Decisions); n > 0 {
		c.MeanKL /= float64(n)
		c.WinnerAgreement = float64(agree) / float64(n)
	}
	return c
}

// aligned gives a's and b's probabilities in a's candidate order, or false
// when their candidates differ.
func aligned(a, b Decision) ([]float64, []float64, bool) {
	if len(a.Candidates) != len(b.Candidates) {
		return nil, nil, false
	}
	idx := map[string]int{}
	for j, c := range b.Candidates {
		idx[c.Value] = j
	}
	p, q := make([]float64, len(a.Candidates)), make([]float64, len(a.Candidates))
	for i, c := range a.Candidates {
		j, ok := idx[c.Value]
		if !ok {
			return nil, nil, false
		}
		p[i], q[i] = c.Probability, b.Candidates[j].Probability
	}
	return p, q, true
}

func winner(d Decision) string {
	best := 0
	for j, c := range d.Candidates {
		if c.Probability > d.Candidates[best].Probability {
			best = j
		}
	}
	return d.Candidates[best].Value
}
