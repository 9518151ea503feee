package app

import (
	"strings"
	"testing"

	"verdict/engine/scorer"
)

// TestPresetsUnderEveryBackend: each preset is scored by the scorer alone,
// then repeated with each other backend (and once with a correction); a
// repeat keeps the input, schema and settings but the backend, and its
// source says which backend ran.
func TestPresetsUnderEveryBackend(t *testing.T) {
	s, rec := readyServices(t)
	for _, p := range s.Scorer.Presets() {
		set := DefaultPreferences().Run
		set.Scorer.Normalize = scorer.NormalizeContextual
		started, err := s.Scorer.Start(RunRequest{Input: p.Sample, Schema: p.Schema, SchemaName: p.ID, Settings: &set})
		if err != nil {
			t.Fatal(err)
		}
		base := waitDone(t, s, rec, started.ID)
		if base.Scorer.Status != StatusDone || !strings.Contains(base.Scorer.ProbabilitySource, "contextual calibration") {
			t.Fatalf("%s: %+v", p.ID, base.Scorer)
		}
		for _, b := range []string{scorer.BackendCached, scorer.BackendCatalog, scorer.BackendJSON} {
			again, err := s.Scorer.Repeat(base.ID, b)
			if err != nil {
				t.Fatalf("%s: repeat with %s: %v", p.ID, b, err)
			}
			r := waitDone(t, s, rec, again.ID)
			if r.Scorer == nil || r.Scorer.Status != StatusDone || r.Generator != nil || r.Settings.Scorer.Backend != b ||
				r.Input.Text != base.Input.Text || string(r.Schema) != string(base.Schema) || r.Settings.Scorer.Normalize != scorer.NormalizeContextual {
				t.Fatalf("%s: repeat with %s: %+v", p.ID, b, r)
			}
			if b == scorer.BackendCached && p.ID != "tools" && !strings.HasPrefix(r.Scorer.ProbabilitySource, "cached") {
				t.Errorf("%s: cached source %q", p.ID, r.Scorer.ProbabilitySource)
			}
			if len(r.Scorer.Fields) != len(base.Scorer.Fields) {
				t.Errorf("%s under %s: %d fields, want %d", p.ID, b, len(r.Scorer.Fields), len(base.Scorer.Fields))
			}
		}
	}
	if _, err := s.Scorer.Repeat("run-1", "bogus"); err == nil || !strings.Contains(err.Error(), `"bogus" is not one of json, cached, catalog`) {
		t.Errorf("repeat with an unknown backend: %v", err)
	}
	if _, err := s.Scorer.Repeat("run-999", "json"); err == nil {
		t.Errorf("repeat of an unknown run passed")
	}
}

// TestScorerSettingsBackends: the settings take every backend and
// correction, and name a wrong one.
func TestScorerSettingsBackends(t *testing.T) {
	for _, tc := range []struct{ backend, normalize, err string }{
		{"cached", "pmi", ""}, {"catalog", "contextual", ""}, {"", "none", ""}, {"json", "", ""},
		{"fast", "", `setting scorer.backend: "fast" is not one of json, cached, catalog, head`},
		{"json", "zscore", `setting scorer.normalize: "zscore" is not one of none, contextual, pmi`},
	} {
		set := DefaultPreferences().Run
		set.Scorer.Backend, set.Scorer.Normalize = tc.backend, tc.normalize
		err := set.Validate()
		if (err == nil) != (tc.err == "") || (err != nil && err.Error() != tc.err) {
			t.Errorf("%+v: %v", tc, err)
		}
	}
}

// TestCalibrationReportService: a loaded examples file is scored and
// reported on; bad examples are an error naming the line.
func TestCalibrationReportService(t *testing.T) {
	s, _ := readyServices(t)
	var ticket Preset
	for _, p := range s.Scorer.Presets() {
		if p.ID == "ticket" {
			ticket = p
		}
	}
	sc, err := scorer.ParseSchema(ticket.Schema)
	if err != nil {
		t.Fatal(err)
	}
	var f scorer.Field
	for _, x := range sc.Fields {
		if x.Kind == scorer.Choice {
			f = x
			break
		}
	}
	ex := `{"text": "late parcel, furious", "labels": {"` + f.Name + `": "` + f.Options[0].Name + `"}}` + "\n" +
		`{"text": "all good <b>thanks</b>", "labels": {"` + f.Name + `": "` + f.Options[1].Name + `"}}` + "\n"
	for _, backend := range []string{"", scorer.BackendCached} {
		rep, err := s.Scorer.CalibrationReport(CalibrationReportRequest{Schema: ticket.Schema, Examples: ex, Backend: backend})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Calibration.Examples != 2 || len(rep.Fields) != 1 || rep.Fields[0].Field != f.Name || rep.Fields[0].Decisions != 2 ||
			len(rep.Fields[0].Before.Bins) != scorer.ReliabilityBins || rep.Overall.After.LogLoss > rep.Overall.Before.LogLoss+1e-9 {
			t.Errorf("backend %q: report %+v", backend, rep)
		}
	}
	if _, err := s.Scorer.CalibrationReport(CalibrationReportRequest{Schema: ticket.Schema, Examples: "{\"text\": 1}\n"}); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("bad examples: %v", err)
	}
	if _, err := s.Scorer.CalibrationReport(CalibrationReportRequest{Schema: ticket.Schema, Examples: "\n"}); err == nil || !strings.Contains(err.Error(), "no examples") {
		t.Errorf("no examples: %v", err)
	}
	if _, err := s.Scorer.CalibrationReport(CalibrationReportRequest{Schema: ticket.Schema, Examples: ex, Backend: "catalog"}); err == nil {
		t.Errorf("a catalog report passed")
	}
}
