package bench_test

import (
	"context"
	"testing"

	"verdict/engine/bench"
	"verdict/engine/fixture/testmodel"
)

// TestScorerPrefillsItsPrefix: every timed scorer request prefills its
// whole prefix, though an earlier request of the same input kept it (the
// scorer's prefix cache would give all but its last token otherwise).
func TestScorerPrefillsItsPrefix(t *testing.T) {
	m, tok := testmodel.Tiny(t), testmodel.Tokenizer(t)
	ctx := context.Background()
	r, err := bench.Scorer(ctx, "tiny", m, tok, 128, 2, 1, []int{4})
	if err != nil {
		t.Fatal(err)
	}
	if r.PrefixReused != 0 || r.PrefillSeconds <= 0 || r.PromptTokens < 100 {
		t.Errorf("bench.Scorer: %d prompt tokens, %d reused, prefill %gs", r.PromptTokens, r.PrefixReused, r.PrefillSeconds)
	}
	mr, err := bench.MeasureModel(ctx, bench.Opened{Name: "tiny", M: m, Tok: tok},
		bench.SuiteOptions{PromptTokens: 128, DecodeTokens: 4, Fields: 2, Scorer: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := mr.Scorer
	if s.PrefixReused != 0 || s.Runs != bench.ScorerRuns || s.ColdSeconds <= 0 || s.Seconds <= 0 || s.PrefillSeconds <= 0 ||
		s.PrefillSeconds > s.Seconds {
		t.Errorf("the suite's scorer: %+v", s)
	}
}
