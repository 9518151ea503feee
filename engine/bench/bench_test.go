package bench_test

import (
	"context"
	"os"
	"testing"

	"verdict/engine/bench"
	"verdict/engine/fixture/testmodel"
	"verdict/engine/gemma3n"
)

// models returns the tiny model and, when VERDICT_E2B_FIXTURE names it, the
// E2B-shaped one.
func models(b *testing.B) map[string]*gemma3n.Model {
	ms := map[string]*gemma3n.Model{"tiny": testmodel.Tiny(b)}
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
