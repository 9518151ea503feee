package bench

import (
	"context"
	"fmt"
	"math"
	"time"

	"verdict/engine/scorer"
)

// BackendComparison sets two scoring backends side by side on one schema
// and the same inputs: the mean request time of each (the schema compiled
// and warm) and how far the other's distributions are from the base's.
type BackendComparison struct {
	Schema       string  `json:"schema"`
	Inputs       int     `json:"inputs"`
	Decisions    int     `json:"decisions"`
	Base         string  `json:"base"`
	Other        string  `json:"other"`
	BaseSeconds  float64 `json:"base_seconds"`
	OtherSeconds float64 `json:"other_seconds"`
	// The mean prompt length and prefix prefill time of each (the cached
	// backend's prompt also lists the answer codes).
	BasePromptTokens   int     `json:"base_prompt_tokens"`
	OtherPromptTokens  int     `json:"other_prompt_tokens"`
	BasePrefillSeconds float64 `json:"base_prefill_seconds"`
	OtherPrefillSecs   float64 `json:"other_prefill_seconds"`
	// MeanKL and MaxKL are KL(base ‖ other) over the compared decisions,
	// in nats; WinnerAgreement the share of them with the same winner.
	MeanKL          float64 `json:"mean_kl"`
	MaxKL           float64 `json:"max_kl"`
	WinnerAgreement float64 `json:"winner_agreement"`
}

func (c BackendComparison) String() string {
	return fmt.Sprintf("%s, %d inputs, %d decisions: %s %.1f ms (%d-token prompt, prefill %.1f ms), %s %.1f ms (%d tokens, prefill %.1f ms), %.2fx; KL(%s‖%s) mean %.4f max %.4f nats, winners agree %.0f%%",
		c.Schema, c.Inputs, c.Decisions, c.Base, 1000*c.BaseSeconds, c.BasePromptTokens, 1000*c.BasePrefillSeconds,
		c.Other, 1000*c.OtherSeconds, c.OtherPromptTokens, 1000*c.OtherPrefillSecs, c.BaseSeconds/c.OtherSeconds,
		c.Base, c.Other, c.MeanKL, c.MaxKL, 100*c.WinnerAgreement)
}

// CompareBackends scores every input under base and other (after a warm-up
// request each) and compares their distributions decision by decision.
// Each timed request prefills its whole prompt (what the scorer kept from
// the requests before is dropped first).
func CompareBackends(ctx context.Context, sc *scorer.Scorer, name string, s *scorer.Schema, inputs []string, base, other string) (BackendComparison, error) {
	c := BackendComparison{Schema: name, Inputs: len(inputs), Base: base, Other: other}
	if len(inputs) == 0 {
		return c, fmt.Errorf("bench: no inputs to compare %s and %s on", base, other)
	}
	for _, b := range []string{base, other} {
		if _, err := sc.Score(ctx, s, inputs[0], scorer.Options{Backend: b}); err != nil {
			return c, fmt.Errorf("bench: %s backend: %w", b, err)
		}
	}
	var agree float64
	for _, in := range inputs {
		var rs [2]*scorer.Result
		for i, b := range []string{base, other} {
			sc.DropKept()
			t := time.Now()
			r, err := sc.Score(ctx, s, in, scorer.Options{Backend: b})
			if err != nil {
				return c, fmt.Errorf("bench: %s backend: %w", b, err)
			}
			d := time.Since(t).Seconds() / float64(len(inputs))
			pf := time.Duration(r.Timings.Prefill).Seconds() / float64(len(inputs))
			if i == 0 {
				c.BaseSeconds += d
				c.BasePrefillSeconds += pf
				c.BasePromptTokens += r.PromptTokens
			} else {
				c.OtherSeconds += d
				c.OtherPrefillSecs += pf
				c.OtherPromptTokens += r.PromptTokens
			}
			rs[i] = r
		}
		cmp := scorer.Compare(rs[0], rs[1])
		n := float64(len(cmp.Decisions))
		c.Decisions += len(cmp.Decisions)
		c.MeanKL += cmp.MeanKL * n
		agree += cmp.WinnerAgreement * n
		c.MaxKL = math.Max(c.MaxKL, cmp.MaxKL)
	}
	c.BasePromptTokens /= len(inputs)
	c.OtherPromptTokens /= len(inputs)
	if c.Decisions > 0 {
		c.MeanKL /= float64(c.Decisions)
		c.WinnerAgreement = agree / float64(c.Decisions)
	}
	return c, nil
}
