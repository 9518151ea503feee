package scorer

import (
	"context"
	"fmt"
	"math"
	"sort"
)

// ReliabilityBins is the number of confidence bins of a reliability diagram
// and of the expected calibration error.
const ReliabilityBins = 10

// Bin is one confidence bin of a reliability diagram: the decisions whose
// top probability fell in [Lo, Hi), their mean top probability and the
// share of them whose top value was right.
type Bin struct {
	Lo         float64 `json:"lo"`
	Hi         float64 `json:"hi"`
	Count      int     `json:"count"`
	Confidence float64 `json:"confidence"`
	Accuracy   float64 `json:"accuracy"`
}

// Metrics are the quality figures of a set of labelled decisions at one
// temperature.
type Metrics struct {
	// Temperature is the one applied (0: each field at its own).
	Temperature float64 `json:"temperature"`
	Accuracy    float64 `json:"accuracy"`
	// LogLoss is the mean −log p(right value).
	LogLoss float64 `json:"log_loss"`
	// Brier is the mean Σ_c (p(c) − [c right])².
	Brier float64 `json:"brier"`
	// ECE is the expected calibration error: the count-weighted mean gap
	// between confidence and accuracy over the bins.
	ECE  float64 `json:"ece"`
	Bins []Bin   `json:"bins"`
}

// FieldQuality is one field's figures before and after its fitted
// temperature (or the whole schema's, under the global one).
type FieldQuality struct {
	Field     string  `json:"field"`
	Decisions int     `json:"decisions"`
	Before    Metrics `json:"before"`
	After     Metrics `json:"after"`
}

// Mistake is a labelled decision whose most probable value was wrong, after
// calibration.
type Mistake struct {
	Example    int     `json:"example"` // 1-based line of the examples
	Text       string  `json:"text"`
	Decision   string  `json:"decision"`
	Predicted  string  `json:"predicted"`
	Label      string  `json:"label"`
	Confidence float64 `json:"confidence"`
}

// CalibrationReport says how good a schema's probabilities are on labelled
// examples. The after figures are in-sample: the temperatures were fitted on
// the same examples.
type CalibrationReport struct {
	Calibration *Calibration   `json:"calibration"`
	Backend     string         `json:"backend"`
	Overall     FieldQuality   `json:"overall"`
	Fields      []FieldQuality `json:"fields"`
	// Mistakes are the most confident wrong answers, most confident first
	// (at most MaxMistakes).
	Mistakes []Mistake `json:"mistakes"`
}

// MaxMistakes bounds a report's list of confident mistakes.
const MaxMistakes = 20

// CalibrateReport is Calibrate with a report of the decisions' quality
// before and after the fitted temperatures (scoring every example once).
func (sc *Scorer) CalibrateReport(ctx context.Context, s *Schema, examples []Example, opt Options) (*Calibration, *CalibrationReport, error) {
	if len(examples) == 0 {
		return nil, nil, fmt.Errorf("calibrate: no examples")
	}
	obs, err := sc.observations(ctx, s, examples, opt)
	if err != nil {
		return nil, nil, err
	}
	c := fit(obs, len(examples))
	rep := qualityReport(obs, c, examples)
	rep.Backend = opt.Backend
	if rep.Backend == "" {
		rep.Backend = BackendJSON
	}
	return c, rep, nil
}

// qualityReport computes the figures of obs under c.
func qualityReport(obs []observation, c *Calibration, examples []Example) *CalibrationReport {
	rep := &CalibrationReport{Calibration: c}
	rep.Overall = FieldQuality{Field: "all fields", Decisions: len(obs), Before: metrics(obs, func(string) float64 { return 1 }),
		After: metrics(obs, func(f string) float64 { return c.temperature(f, 1) })}
	rep.Overall.After.Temperature = 0 // each field at its own
	byField := map[string][]observation{}
	var order []string
	for _, o := range obs {
		if byField[o.field] == nil {
			order = append(order, o.field)
		}
		byField[o.field] = append(byField[o.field], o)
	}
	for _, f := range order {
		T := c.temperature(f, 1)
		rep.Fields = append(rep.Fields, FieldQuality{Field: f, Decisions: len(byField[f]),
			Before: metrics(byField[f], func(string) float64 { return 1 }), After: metrics(byField[f], func(string) float64 { return T })})
	}
	for _, o := range obs {
		p := Softmax(o.s, c.temperature(o.field, 1))
		top := argmax(p)
		if top == o.y {
			continue
		}
		m := Mistake{Example: o.example + 1, Decision: o.name, Confidence: p[top]}
		if o.example < len(examples) {
			m.Text = examples[o.example].Text
		}
		if top < len(o.values) && o.y < len(o.values) {
			m.Predicted, m.Label = o.values[top], o.values[o.y]
		}
		rep.Mistakes = append(rep.Mistakes, m)
	}
	sort.SliceStable(rep.Mistakes, func(a, b int) bool { return rep.Mistakes[a].Confidence > rep.Mistakes[b].Confidence })
	if len(rep.Mistakes) > MaxMistakes {
		rep.Mistakes = rep.Mistakes[:MaxMistakes]
	}
	return rep
}

func argmax(p []float64) int {
	best := 0
	for j, v := range p {
		if v > p[best] {
			best = j
		}
	}
	return best
}

// metrics computes the figures of obs, each at temperature T(its field).
func metrics(obs []observation, T func(field string) float64) Metrics {
	var m Metrics
	if len(obs) > 0 {
		m.Temperature = T(obs[0].field)
	}
	bins := make([]Bin, ReliabilityBins)
	for b := range bins {
		bins[b].Lo, bins[b].Hi = float64(b)/ReliabilityBins, float64(b+1)/ReliabilityBins
	}
	for _, o := range obs {
		p := Softmax(o.s, T(o.field))
		top := argmax(p)
		right := 0.0
		if top == o.y {
			right = 1
		}
		m.Accuracy += right
		m.LogLoss -= math.Log(math.Max(p[o.y], 1e-300))
		for j, v := range p {
			y := 0.0
			if j == o.y {
				y = 1
			}
			m.Brier += (v - y) * (v - y)
		}
		b := min(int(p[top]*ReliabilityBins), ReliabilityBins-1)
		bins[b].Count++
		bins[b].Confidence += p[top]
		bins[b].Accuracy += right
	}
	n := float64(len(obs))
	if n == 0 {
		return m
	}
	m.Accuracy /= n
	m.LogLoss /= n
	m.Brier /= n
	for b := range bins {
		if k := float64(bins[b].Count); k > 0 {
			bins[b].Confidence /= k
			bins[b].Accuracy /= k
			m.ECE += k / n * math.Abs(bins[b].Accuracy-bins[b].Confidence)
		}
	}
	m.Bins = bins
	return m
}
