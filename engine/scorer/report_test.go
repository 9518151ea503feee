package scorer

import (
	"math"
	"math/rand"
	"testing"
)

// TestMetrics: the figures of two decisions worked out by hand.
func TestMetrics(t *testing.T) {
	obs := []observation{
		{field: "f", s: []float64{math.Log(0.8), math.Log(0.2)}, y: 0},
		{field: "f", s: []float64{math.Log(0.6), math.Log(0.4)}, y: 1},
	}
	m := metrics(obs, func(string) float64 { return 1 })
	want := Metrics{Temperature: 1, Accuracy: 0.5, LogLoss: -(math.Log(0.8) + math.Log(0.4)) / 2, Brier: 0.4, ECE: 0.4}
	for _, c := range []struct {
		name      string
		got, want float64
	}{{"accuracy", m.Accuracy, want.Accuracy}, {"log-loss", m.LogLoss, want.LogLoss}, {"brier", m.Brier, want.Brier}, {"ece", m.ECE, want.ECE}} {
		if math.Abs(c.got-c.want) > 1e-12 {
			t.Errorf("%s %v, want %v", c.name, c.got, c.want)
		}
	}
	if b := m.Bins[8]; b.Count != 1 || math.Abs(b.Confidence-0.8) > 1e-12 || b.Accuracy != 1 || m.Bins[6].Accuracy != 0 || len(m.Bins) != ReliabilityBins {
		t.Errorf("bins %+v", m.Bins)
	}
}

// TestReportImprovesOverconfidence: labels drawn at temperature 2.5 but
// scored at 1 are overconfident; the fitted temperature lowers log-loss and
// ECE, keeps accuracy, and the confident mistakes come first.
func TestReportImprovesOverconfidence(t *testing.T) {
	r := rand.New(rand.NewSource(3))
	var obs []observation
	var ex []Example
	for i := 0; i < 3000; i++ {
		s := []float64{r.NormFloat64() * 3, r.NormFloat64() * 3, r.NormFloat64() * 3}
		p := Softmax(s, 2.5)
		u, y := r.Float64(), 0
		for y < 2 && u > p[y] {
			u -= p[y]
			y++
		}
		obs = append(obs, observation{field: "f", s: s, y: y, example: i, name: "f", values: []string{"a", "b", "c"}})
		ex = append(ex, Example{Text: "<b>example</b>"})
	}
	c := fit(obs, len(ex))
	rep := qualityReport(obs, c, ex)
	b, a := rep.Fields[0].Before, rep.Fields[0].After
	t.Logf("before T=1: accuracy %.3f log-loss %.3f brier %.3f ECE %.3f; after T=%.2f: log-loss %.3f brier %.3f ECE %.3f",
		b.Accuracy, b.LogLoss, b.Brier, b.ECE, a.Temperature, a.LogLoss, a.Brier, a.ECE)
	if !(a.LogLoss < b.LogLoss && a.ECE < b.ECE/2 && a.Brier < b.Brier) || math.Abs(a.Accuracy-b.Accuracy) > 1e-12 || math.Abs(a.Temperature-2.5) > 0.3 {
		t.Errorf("before %+v\nafter %+v", b, a)
	}
	if len(rep.Mistakes) != MaxMistakes || rep.Mistakes[0].Confidence < rep.Mistakes[MaxMistakes-1].Confidence || rep.Mistakes[0].Text != "<b>example</b>" {
		t.Errorf("mistakes %+v", rep.Mistakes[:2])
	}
}

// TestPriorCacheLRU: the least recently used reference results go first.
func TestPriorCacheLRU(t *testing.T) {
	c := newPriorCache(3)
	for _, k := range []string{"a", "b", "c"} {
		c.put(k, []*Result{{Note: k}})
	}
	c.get("a") // a is the most recent: b goes next
	c.put("d", nil)
	if _, ok := c.get("b"); ok || c.len() != 3 {
		t.Errorf("b kept (%d entries)", c.len())
	}
	for _, k := range []string{"a", "c", "d"} {
		if _, ok := c.get(k); !ok {
			t.Errorf("%s evicted", k)
		}
	}
}
