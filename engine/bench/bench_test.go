package bench_test

import (
	"context"
	"math"
	"os"
	"testing"

	"verdict/engine/bench"
	"verdict/engine/fixture/testmodel"
	"verdict/engine/model"
	"verdict/engine/scorer"
)

// models returns the tiny model and, when VERDICT_E2B_FIXTURE names it, the
// E2B-shaped one.
func models(b *testing.B) map[string]model.Model {
	ms := map[string]model.Model{"tiny": testmodel.Tiny(b)}
	if p := os.Getenv("VERDICT_E2B_FIXTURE"); p != "" {
		ms["e2b"] = testmodel.Load(b, p)
	}
	return ms
}

// BenchmarkPrefill reports prompt tokens per second for a 512-token prompt.
func BenchmarkPrefill(b *testing.B) {
	for name, m := range models(b) {
		b.Run(name, func(b *testing.B) {
			ids := bench.Prompt(512)
			for i := 0; i < b.N; i++ {
				if _, err := m.Forward(m.NewCache(), ids, nil); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(ids)*b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

// BenchmarkDecode reports single-token decode steps per second (logits
// included) after a 64-token prompt.
func BenchmarkDecode(b *testing.B) {
	for name, m := range models(b) {
		b.Run(name, func(b *testing.B) {
			c := m.NewCache()
			if _, err := m.Forward(c, bench.Prompt(64), nil); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				h, err := m.Forward(c, []int32{1000 + int32(i%1000)}, nil)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := m.Logits(h, 1); err != nil {
					b.Fatal(err)
				}
				if c.Len() > 1024 {
					c.Free()
					c = m.NewCache()
					if _, err := m.Forward(c, bench.Prompt(64), nil); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

func TestRunReport(t *testing.T) {
	m := testmodel.Tiny(t)
	r, err := bench.Run(context.Background(), "tiny", m, 32, 4)
	if err != nil {
		t.Fatal(err)
	}
	if r.PrefillTPS <= 0 || r.DecodeTPS <= 0 || r.DecodeTokens != 4 || r.Machine.Cores <= 0 {
		t.Errorf("incomplete report: %+v", r)
	}
	if _, err := bench.Run(context.Background(), "tiny", m, 0, 4); err == nil {
		t.Error("Run with an empty prompt succeeded")
	}
}

// TestCompareBackends: cached against json on the tiny fixture, on the
// ticket schema and on the benchmark's schema; the figures are printed.
func TestCompareBackends(t *testing.T) {
	m, tok := testmodel.Tiny(t), testmodel.Tokenizer(t)
	b, err := os.ReadFile("../scorer/testdata/ticket.json")
	if err != nil {
		t.Fatal(err)
	}
	ticket, err := scorer.ParseSchema(b)
	if err != nil {
		t.Fatal(err)
	}
	sc := scorer.New(m, tok)
	inputs := []string{
		"My order arrived two weeks late and the screen is cracked. I want my money back.",
		"Thanks, the replacement works fine. No further action needed.",
		"I was charged twice for shipping and cannot log in to see my invoice!",
		"Where is my parcel? It has been a month.",
	}
	for _, tc := range []struct {
		name string
		s    *scorer.Schema
	}{{"ticket schema", ticket}, {"8 choice fields", bench.ScorerSchema(8)}} {
		c, err := bench.CompareBackends(context.Background(), sc, tc.name, tc.s, inputs, scorer.BackendJSON, scorer.BackendCached)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("tiny: %s", c)
		if c.Decisions == 0 || c.BaseSeconds <= 0 || c.OtherSeconds <= 0 || c.OtherPromptTokens <= c.BasePromptTokens || c.BasePrefillSeconds <= 0 || math.IsNaN(c.MeanKL) || c.MeanKL < 0 || c.MaxKL < c.MeanKL ||
			c.WinnerAgreement < 0 || c.WinnerAgreement > 1 {
			t.Errorf("comparison %+v", c)
		}
	}
}
