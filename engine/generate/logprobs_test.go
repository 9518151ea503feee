package generate_test

import (
	"context"
	"math"
	"slices"
	"testing"

	"verdict/engine/fixture/testmodel"
	"verdict/engine/generate"
)

// TestLogprobs: asking for logprobs changes no token (greedy, through the
// device-loop path too, and seeded); each token's log-probability is the
// one its position has in PromptLogprobs over the prompt and the tokens
// before it; the alternatives are sorted, the greedy token is the first of
// them, and their probabilities sum to at most 1.
func TestLogprobs(t *testing.T) {
	m := testmodel.Tiny(t)
	x, err := m.Acquire()
	if err != nil {
		t.Fatal(err)
	}
	defer x.Release()
	defer generate.SetLoopsAlways(true)()
	for _, opt := range []generate.Options{
		{MaxTokens: generate.LoopSteps + 3},
		{MaxTokens: 10, Temperature: 0.9, TopK: 40, TopP: 0.9, Seed: 5},
	} {
		want := run(t, m, opt)
		with := opt
		with.Logprobs, with.TopLogprobs = true, 5
		var lps []generate.Logprobs
		res, err := generate.Run(context.Background(), m, prompt, with, func(tk generate.Token) error {
			if tk.Logprobs == nil {
				t.Fatalf("token %d has no logprobs", tk.Index)
			}
			lps = append(lps, *tk.Logprobs)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(res.IDs, want) {
			t.Fatalf("%+v: with logprobs %v, without %v", opt, res.IDs, want)
		}
		all := append(slices.Clone(prompt), res.IDs...)
		ref, err := generate.PromptLogprobs(context.Background(), x, m, all, 5, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(ref) != len(all)-1 {
			t.Fatalf("PromptLogprobs gave %d positions for %d tokens", len(ref), len(all))
		}
		for i, l := range lps {
			r := ref[len(prompt)-1+i]
			if math.Abs(l.Logprob-r.Logprob) > 1e-4 || l.Logprob > 0 {
				t.Errorf("token %d: logprob %v, in the prompt's pass %v", i, l.Logprob, r.Logprob)
			}
			if len(l.Top) != 5 {
				t.Fatalf("token %d: %d alternatives", i, len(l.Top))
			}
			sum := 0.0
			for j, a := range l.Top {
				sum += math.Exp(a.Logprob)
				if j > 0 && a.Logprob > l.Top[j-1].Logprob {
					t.Errorf("token %d: alternatives out of order: %v", i, l.Top)
				}
				if a.ID == res.IDs[i] && a.Logprob != l.Logprob {
					t.Errorf("token %d: its alternative's logprob %v, its own %v", i, a.Logprob, l.Logprob)
				}
			}
			if sum > 1+1e-9 {
				t.Errorf("token %d: alternatives sum to %v", i, sum)
			}
			if opt.Temperature == 0 && l.Top[0].ID != res.IDs[i] {
				t.Errorf("greedy token %d is %d, the most probable %d", i, res.IDs[i], l.Top[0].ID)
			}
		}
	}
	if _, err := generate.PromptLogprobs(context.Background(), x, m, prompt, 21, nil); err == nil {
		t.Error("21 alternatives were accepted")
	}
}
