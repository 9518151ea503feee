package report

import (
	"bytes"
	"strings"
	"testing"

	"verdict/engine/scorer"
)

func metrics(acc, conf float64, n int) scorer.Metrics {
	m := scorer.Metrics{Temperature: 1, Accuracy: acc, LogLoss: 0.6931, Brier: 0.25, ECE: 0.1234}
	for b := 0; b < scorer.ReliabilityBins; b++ {
		m.Bins = append(m.Bins, scorer.Bin{Lo: float64(b) / 10, Hi: float64(b+1) / 10})
	}
	m.Bins[int(conf*10)] = scorer.Bin{Count: n, Confidence: conf, Accuracy: acc}
	return m
}

// TestWriteHTML: a self-contained page (no external assets) with a diagram
// per field and the overall one, every string from the examples escaped.
func TestWriteHTML(t *testing.T) {
	evil := `<script>alert("x")</script>`
	fq := func(name string) scorer.FieldQuality {
		return scorer.FieldQuality{Field: name, Decisions: 4, Before: metrics(0.5, 0.85, 4), After: metrics(0.5, 0.55, 4)}
	}
	rep := &scorer.CalibrationReport{
		Calibration: &scorer.Calibration{Global: 1.8, Examples: 4, Decisions: 8},
		Backend:     "json", Overall: fq("all fields"), Fields: []scorer.FieldQuality{fq(evil), fq("priority")},
		Mistakes: []scorer.Mistake{{Example: 2, Text: `</td><img src=x onerror=alert(1)>`, Decision: evil, Predicted: "a&b", Label: `"c"`, Confidence: 0.9}},
	}
	rep.Overall.After.Temperature = 0
	var b bytes.Buffer
	if err := WriteHTML(&b, Page{Title: "Calibration of " + evil, Schema: "s.json", Examples: "<e>.jsonl", Model: "builtin"}, rep); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, bad := range []string{"<script", "<img", "<e>", "href=", "<link", "@import", "url("} {
		if strings.Contains(out, bad) {
			t.Errorf("the page contains %q", bad)
		}
	}
	for _, want := range []string{"&lt;script&gt;", "a&amp;b", "&lt;/td&gt;&lt;img", "0.123", "1.8", "per field", "expected calibration error", "Brier score"} {
		if !strings.Contains(out, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if n := strings.Count(out, "<svg"); n != 3 {
		t.Errorf("%d diagrams, want 3", n)
	}
	if n := strings.Count(out, "<circle"); n != 6 {
		t.Errorf("%d bin points, want 6", n)
	}
}
