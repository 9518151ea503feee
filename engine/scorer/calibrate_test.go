package scorer

import (
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFitTemperature: labels drawn from softmax(s/T) let the fit recover T.
func TestFitTemperature(t *testing.T) {
	r := rand.New(rand.NewSource(3))
	for _, T := range []float64{0.5, 1, 2.5} {
		var obs []observation
		for i := 0; i < 4000; i++ {
			s := []float64{r.NormFloat64() * 3, r.NormFloat64() * 3, r.NormFloat64() * 3}
			p := Softmax(s, T)
			u, y := r.Float64(), 0
			for y < 2 && u > p[y] {
				u -= p[y]
				y++
			}
			obs = append(obs, observation{field: "f", s: s, y: y})
		}
		if got := fitTemperature(obs); math.Abs(got-T)/T > 0.1 {
			t.Errorf("fitted %.3f, want %.3f", got, T)
		}
	}
}

func TestCalibrationFile(t *testing.T) {
	dir := t.TempDir()
	c := &Calibration{Global: 1.7, Fields: map[string]float64{"a": 0.8}, Examples: 3}
	p := filepath.Join(dir, "c.json")
	if err := c.Save(p); err != nil {
		t.Fatal(err)
	}
	got, err := LoadCalibration(p)
	if err != nil || got.Global != 1.7 || got.Fields["a"] != 0.8 {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	if T := got.temperature("a", 1); T != 0.8 {
		t.Errorf("field temperature %g", T)
	}
	if T := got.temperature("b", 1); T != 1.7 {
		t.Errorf("global temperature %g", T)
	}
	if st := got.status(0); !st.Applied || !strings.Contains(st.Detail, "1.7") || st.OverriddenTemperature != 0 {
		t.Errorf("status %+v", st)
	}
	// A requested temperature that the fitted ones replace is reported.
	if st := got.status(2.5); st.OverriddenTemperature != 2.5 || !strings.Contains(st.Detail, "replace the requested temperature 2.5") {
		t.Errorf("status with a requested temperature: %+v", st)
	}
	if st := (*Calibration)(nil).status(2); st.Applied || st.OverriddenTemperature != 0 {
		t.Errorf("nil calibration applied: %+v", st)
	}
	for _, bad := range []struct{ json, want string }{
		{`{`, "unexpected EOF"},
		{`{"global_temperature": 0}`, "global_temperature must be positive"},
		{`{"global_temperature": 1, "field_temperatures": {"x": -1}}`, `field "x" must be positive`},
		{`{"global_temperature": 1, "temperature": 2}`, `unknown field "temperature"`},
		{`{"global_temperature": 1, "field_temperatures": {"x": 1}, "fields": {}}`, `unknown field "fields"`},
		{`{"global_temperature": 1} {"global_temperature": 2}`, "data after the JSON object"},
		{`{"global_temperature": 1, "examples": -3}`, "must not be negative"},
	} {
		os.WriteFile(p, []byte(bad.json), 0o644)
		if _, err := LoadCalibration(p); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("LoadCalibration(%s) = %v, want an error containing %q", bad.json, err, bad.want)
		}
	}
	// Field temperatures must name the schema's fields.
	s, err := ParseSchema([]byte(`{"fields": [{"name": "a", "question": "A?", "type": "bool"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := got.CheckSchema(s); err != nil {
		t.Errorf("CheckSchema of a matching schema: %v", err)
	}
	other := &Calibration{Global: 1, Fields: map[string]float64{"a": 1, "priority": 2}}
	if err := other.CheckSchema(s); err == nil || !strings.Contains(err.Error(), `field "priority" is not in the schema (its fields: a)`) {
		t.Errorf("CheckSchema of a foreign field: %v", err)
	}
	if _, err := ReadExamples(strings.NewReader("{\"text\": \"x\"}\n")); err == nil || !strings.Contains(err.Error(), "no labels") {
		t.Errorf("an example without labels: %v", err)
	}
}
