// Package head is Verdict's decision head: a small model, trained on
// labelled examples, that scores each (input, question, candidate) triple
// from the frozen Gemma hidden states — the final hidden state at the
// decision's answer position (after its JSON key in the shared prefix) and
// the mean token embedding of each candidate — with a residual on the json
// backend's log-likelihood. Its scores are normalised by softmax like the
// other backends'.
package head

import (
	"context"
	"fmt"
	"math"

	"verdict/engine/model"
	"verdict/engine/scorer"
)

// Decision is one decision's features on one input.
type Decision struct {
	Name  string // the decision ("field" or "field.label")
	Field string // its field
	// Q is the final hidden state at the answer position, the last token
	// of the decision's JSON key (`{"priority":`) [Dq].
	Q []float32
	// C holds each candidate's mean token embedding [Dc].
	C [][]float32
	// LL holds the json backend's log-likelihood of each candidate.
	LL []float64
	// Label is the index of the right candidate (-1: unlabelled).
	Label int
}

// featureBatch bounds the decisions whose forks of the prefix run together.
const featureBatch = 8

// Features computes the features of every likelihood-scored decision of s
// on input. res is the json backend's result for the same input (its
// log-likelihoods are the residual); every decision gets Label -1.
func Features(ctx context.Context, sc *scorer.Scorer, s *scorer.Schema, input string, res *scorer.Result) ([]Decision, error) {
	m := sc.Model()
	prefix, decs, err := sc.Tokens(s, input)
	if err != nil {
		return nil, err
	}
	ll := map[string][]float64{}
	for _, f := range res.Fields {
		for _, d := range f.Decisions {
			v := make([]float64, len(d.Candidates))
			for j, c := range d.Candidates {
				v[j] = c.LogLikelihood
			}
			ll[d.Name] = v
		}
	}
	x, err := m.Acquire()
	if err != nil {
		return nil, err
	}
	defer x.Release()
	cache := m.NewCache()
	defer cache.Free()
	var b model.Batch
	b.Add(cache, prefix, 0)
	if _, err := x.Prefill(&b); err != nil {
		return nil, fmt.Errorf("head: prefix: %w", err)
	}
	out := make([]Decision, len(decs))
	for lo := 0; lo < len(decs); lo += featureBatch {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		part := decs[lo:min(lo+featureBatch, len(decs))]
		// Each decision's key runs in a fork of the prefix; one output
		// (the key's last position) each.
		b.Reset()
		forks := make([]model.Cache, len(part))
		for i, d := range part {
			forks[i] = cache.Clone()
			b.Add(forks[i], d.Shared[:d.Key], 1)
		}
		flat, err := x.Prefill(&b)
		for _, f := range forks {
			f.Free()
		}
		if err != nil {
			return nil, fmt.Errorf("head: answer positions: %w", err)
		}
		D := m.Config().Hidden
		hs := make([][]float32, len(part))
		for i := range part {
			hs[i] = flat[i*D : (i+1)*D : (i+1)*D]
		}
		for i, d := range part {
			v, ok := ll[d.Name]
			if !ok || len(v) != len(d.Cands) {
				return nil, fmt.Errorf("head: the json result has no scores for decision %q", d.Name)
			}
			dec := Decision{Name: d.Name, Field: s.Fields[d.Field].Name, Q: hs[i], LL: v, Label: -1}
			for _, c := range d.Cands {
				e, err := candidateFeature(m, c)
				if err != nil {
					return nil, err
				}
				dec.C = append(dec.C, e)
			}
			out[lo+i] = dec
		}
	}
	return out, nil
}

// candidateFeature is the mean of a candidate's token embeddings, scaled to
// unit RMS (the embedding scale is the same for every token).
func candidateFeature(m model.Model, ids []int32) ([]float32, error) {
	if len(ids) == 0 {
		return nil, fmt.Errorf("head: a candidate without tokens")
	}
	e, err := m.Embed(ids)
	if err != nil {
		return nil, err
	}
	D := m.Config().Hidden
	mean := make([]float32, D)
	for t := range ids {
		for k := 0; k < D; k++ {
			mean[k] += e[t*D+k] / float32(len(ids))
		}
	}
	var ss float64
	for _, v := range mean {
		ss += float64(v) * float64(v)
	}
	if rms := math.Sqrt(ss / float64(D)); rms > 0 {
		for k := range mean {
			mean[k] = float32(float64(mean[k]) / rms)
		}
	}
	return mean, nil
}
