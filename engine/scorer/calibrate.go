package scorer

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"

	"verdict/engine/safefile"
)

// Calibration holds fitted temperatures: one global and one per field.
type Calibration struct {
	Global float64            `json:"global_temperature"`
	Fields map[string]float64 `json:"field_temperatures"`
	// Examples and Decisions say what the fit saw.
	Examples  int    `json:"examples"`
	Decisions int    `json:"decisions"`
	Source    string `json:"source,omitempty"`
}

// CalibrationStatus is reported with every result.
type CalibrationStatus struct {
	Applied bool   `json:"applied"`
	Detail  string `json:"detail"`
	// OverriddenTemperature is the requested temperature that the fitted
	// ones replaced (0: none was requested).
	OverriddenTemperature float64 `json:"overridden_temperature,omitempty"`
}

// status describes the calibration of a result whose options asked for
// temperature requested (0: none).
func (c *Calibration) status(requested float64) CalibrationStatus {
	if c == nil {
		return CalibrationStatus{Detail: "uncalibrated: temperatures as requested (default 1)"}
	}
	st := CalibrationStatus{Applied: true, Detail: fmt.Sprintf(
		"fitted temperatures applied (global %.3g, %d per-field; fitted on %d examples)", c.Global, len(c.Fields), c.Examples)}
	if requested != 0 {
		st.OverriddenTemperature = requested
		st.Detail += fmt.Sprintf("; they replace the requested temperature %g", requested)
	}
	return st
}

// CheckSchema refuses a calibration with a field temperature for a field the
// schema does not have (fitted on another schema).
func (c *Calibration) CheckSchema(s *Schema) error {
	if c == nil {
		return nil
	}
	for _, name := range c.FieldNames() {
		if s.field(name) < 0 {
			var have []string
			for _, f := range s.Fields {
				have = append(have, f.Name)
			}
			return fmt.Errorf("calibration: field %q is not in the schema (its fields: %s)", name, strings.Join(have, ", "))
		}
	}
	return nil
}

// temperature is the temperature for a field: its fitted one, else the
// fitted global one, else def (0 means 1).
func (c *Calibration) temperature(field string, def float64) float64 {
	if c != nil {
		if t, ok := c.Fields[field]; ok {
			return t
		}
		if c.Global > 0 {
			return c.Global
		}
	}
	if def == 0 {
		return 1
	}
	return def
}

// MaxCalibrationBytes bounds a calibration file.
const MaxCalibrationBytes = 1 << 20

// LoadCalibration reads a calibration file written by Save.
func LoadCalibration(path string) (*Calibration, error) {
	b, err := safefile.ReadFile(path, MaxCalibrationBytes)
	if err != nil {
		return nil, fmt.Errorf("calibration: %w", err)
	}
	c, err := ParseCalibration(b)
	if err != nil {
		return nil, fmt.Errorf("calibration %s: %w", path, err)
	}
	return c, nil
}

// ParseCalibration reads the JSON of a calibration file: only Save's keys,
// one object, positive finite temperatures.
func ParseCalibration(b []byte) (*Calibration, error) {
	var c Calibration
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, fmt.Errorf("data after the JSON object")
	}
	if !(c.Global > 0) || math.IsInf(c.Global, 0) {
		return nil, fmt.Errorf("global_temperature must be positive, got %g", c.Global)
	}
	for f, t := range c.Fields {
		if !(t > 0) || math.IsInf(t, 0) {
			return nil, fmt.Errorf("temperature of field %q must be positive, got %g", f, t)
		}
	}
	if c.Examples < 0 || c.Decisions < 0 {
		return nil, fmt.Errorf("examples %d and decisions %d must not be negative", c.Examples, c.Decisions)
	}
	return &c, nil
}

// Save writes the calibration as JSON.
func (c *Calibration) Save(path string) error {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// Example is one labelled input: labels map field names to the right answer
// (a choice or level name, true/false, or for an Independent field an object
// of label → true/false or a list of the labels that apply).
type Example struct {
	Text   string                     `json:"text"`
	Labels map[string]json.RawMessage `json:"labels"`
}

// ReadExamples reads labelled examples, one JSON object per line.
func ReadExamples(r io.Reader) ([]Example, error) {
	var out []Example
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	for line := 1; sc.Scan(); line++ {
		t := strings.TrimSpace(sc.Text())
		if t == "" {
			continue
		}
		var e Example
		if err := json.Unmarshal([]byte(t), &e); err != nil {
			return nil, fmt.Errorf("examples line %d: %w", line, err)
		}
		if len(e.Labels) == 0 {
			return nil, fmt.Errorf("examples line %d: no labels", line)
		}
		out = append(out, e)
	}
	return out, sc.Err()
}

// observation is one labelled decision: its log-likelihoods and the index of
// the right candidate.
type observation struct {
	field   string
	s       []float64
	y       int
	example int    // index of the example
	name    string // the decision ("field" or "field.label")
	values  []string
}

// Calibrate scores every example at temperature 1 and fits the temperatures
// that minimise the negative log-likelihood of the labels: one over all
// decisions and one per field.
func (sc *Scorer) Calibrate(ctx context.Context, s *Schema, examples []Example, opt Options) (*Calibration, error) {
	if len(examples) == 0 {
		return nil, fmt.Errorf("calibrate: no examples")
	}
	obs, err := sc.observations(ctx, s, examples, opt)
	if err != nil {
		return nil, err
	}
	return fit(obs, len(examples)), nil
}

// observations scores every example at temperature 1 and pairs its
// decisions with its labels.
func (sc *Scorer) observations(ctx context.Context, s *Schema, examples []Example, opt Options) ([]observation, error) {
	opt.Calibration, opt.Temperature, opt.OnField = nil, 1, nil
	var obs []observation
	for i, e := range examples {
		res, err := sc.Score(ctx, s, e.Text, opt)
		if err != nil {
			return nil, fmt.Errorf("calibrate: example %d: %w", i+1, err)
		}
		o, err := observe(s, res, e)
		if err != nil {
			return nil, fmt.Errorf("calibrate: example %d: %w", i+1, err)
		}
		for k := range o {
			o[k].example = i
		}
		obs = append(obs, o...)
	}
	if len(obs) == 0 {
		return nil, fmt.Errorf("calibrate: the examples label none of the schema's fields")
	}
	return obs, nil
}

// fit fits the global and per-field temperatures to obs.
func fit(obs []observation, examples int) *Calibration {
	c := &Calibration{Global: fitTemperature(obs), Fields: map[string]float64{}, Examples: examples, Decisions: len(obs)}
	byField := map[string][]observation{}
	for _, o := range obs {
		byField[o.field] = append(byField[o.field], o)
	}
	for f, os := range byField {
		c.Fields[f] = fitTemperature(os)
	}
	return c
}

// observe pairs a result's decisions with an example's labels.
func observe(s *Schema, res *Result, e Example) ([]observation, error) {
	var obs []observation
	for name := range e.Labels {
		if s.field(name) < 0 {
			return nil, fmt.Errorf("label for unknown field %q", name)
		}
	}
	for fi, f := range s.Fields {
		raw, ok := e.Labels[f.Name]
		if !ok {
			continue
		}
		fr := res.Fields[fi]
		add := func(d Decision, y int) {
			s := make([]float64, len(d.Candidates))
			for j, c := range d.Candidates {
				s[j] = c.LogLikelihood
			}
			values := make([]string, len(d.Candidates))
			for j, c := range d.Candidates {
				values[j] = c.Value
			}
			obs = append(obs, observation{field: f.Name, s: s, y: y, name: d.Name, values: values})
		}
		switch f.Kind {
		case Choice, Score:
			var v any
			if err := json.Unmarshal(raw, &v); err != nil {
				return nil, fmt.Errorf("field %q: %w", f.Name, err)
			}
			want := fmt.Sprint(v)
			if n, ok := v.(float64); ok {
				want = strconv.FormatFloat(n, 'f', -1, 64)
			}
			y := -1
			for j, o := range f.Options {
				if o.Name == want || (f.Kind == Score && isNumber(want) && o.Value == mustFloat(want)) {
					y = j
				}
			}
			if y < 0 {
				return nil, fmt.Errorf("field %q: label %s is not one of its values", f.Name, raw)
			}
			add(fr.Decisions[0], y)
		case Bool:
			var v bool
			if err := json.Unmarshal(raw, &v); err != nil {
				return nil, fmt.Errorf("field %q: label must be true or false", f.Name)
			}
			add(fr.Decisions[0], boolIndex(v))
		case Independent:
			truth := map[string]bool{}
			var list []string
			if json.Unmarshal(raw, &list) == nil {
				for _, o := range f.Options { // a list labels every label
					truth[o.Name] = false
				}
				for _, l := range list {
					truth[l] = true
				}
			} else if err := json.Unmarshal(raw, &truth); err != nil {
				return nil, fmt.Errorf("field %q: label must be a list of labels or an object of label → true/false", f.Name)
			}
			for l := range truth {
				if f.option(l) < 0 {
					return nil, fmt.Errorf("field %q: unknown label %q", f.Name, l)
				}
			}
			for j, o := range f.Options {
				if v, ok := truth[o.Name]; ok {
					add(fr.Decisions[j], boolIndex(v))
				}
			}
		}
	}
	return obs, nil
}

func boolIndex(v bool) int {
	if v {
		return 0
	}
	return 1
}

func mustFloat(s string) float64 {
	v, _ := strconv.ParseFloat(s, 64)
	return v
}

func (s *Schema) field(name string) int {
	for i, f := range s.Fields {
		if f.Name == name {
			return i
		}
	}
	return -1
}

func (f *Field) option(name string) int {
	for i, o := range f.Options {
		if o.Name == name {
			return i
		}
	}
	return -1
}

// nll is the mean negative log-likelihood of the labels at temperature T.
func nll(obs []observation, T float64) float64 {
	var sum float64
	for _, o := range obs {
		p := Softmax(o.s, T)
		sum -= math.Log(math.Max(p[o.y], 1e-300))
	}
	return sum / float64(len(obs))
}

// fitTemperature minimises nll over T in [0.05, 20] by golden-section search
// on log T (the NLL is convex in 1/T).
func fitTemperature(obs []observation) float64 {
	lo, hi := math.Log(0.05), math.Log(20)
	g := (math.Sqrt(5) - 1) / 2
	a, b := hi-g*(hi-lo), lo+g*(hi-lo)
	fa, fb := nll(obs, math.Exp(a)), nll(obs, math.Exp(b))
	for i := 0; i < 80; i++ {
		if fa < fb {
			hi, b, fb = b, a, fa
			a = hi - g*(hi-lo)
			fa = nll(obs, math.Exp(a))
		} else {
			lo, a, fa = a, b, fb
			b = lo + g*(hi-lo)
			fb = nll(obs, math.Exp(b))
		}
	}
	return math.Exp((lo + hi) / 2)
}

// FieldNames lists the fields a calibration has temperatures for.
func (c *Calibration) FieldNames() []string {
	var ns []string
	for n := range c.Fields {
		ns = append(ns, n)
	}
	sort.Strings(ns)
	return ns
}
