package app

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func waitDataset(t *testing.T, rec *Recorder, states ...string) DatasetState {
	t.Helper()
	ev, ok := rec.Wait(EventDataset, 60*time.Second, func(b json.RawMessage) bool {
		var st DatasetState
		json.Unmarshal(b, &st)
		for _, s := range states {
			if st.State == s {
				return true
			}
		}
		return false
	})
	if !ok {
		t.Fatalf("no dataset event in state %v within 60 s", states)
	}
	var st DatasetState
	json.Unmarshal(ev.JSON, &st)
	return st
}

// TestDatasetRun: a loaded file is scored on the built-in model, its bad
// records become error rows, the answers are counted and exported.
func TestDatasetRun(t *testing.T) {
	s, rec := readyServices(t)
	d := s.Dataset
	if _, err := d.Start(ticketSchema(t)); err == nil || !strings.Contains(err.Error(), "load a dataset first") {
		t.Errorf("Start with nothing loaded: %v", err)
	}
	if _, err := d.Load("a.txt", "x"); err == nil || !strings.Contains(err.Error(), "cannot tell the format") {
		t.Errorf("Load of a .txt: %v", err)
	}
	if _, err := d.Load("d.jsonl", "{\"id\": 1, \"text\": \"a\"}\n{\"id\": 1, \"text\": \"b\"}\n"); err == nil || !strings.Contains(err.Error(), `id "1" is on line 1 and again on line 2`) {
		t.Errorf("Load with duplicate ids: %v", err)
	}
	if _, err := d.Load("d.jsonl", "\n\n"); err == nil || !strings.Contains(err.Error(), "has no records") {
		t.Errorf("Load of blank lines: %v", err)
	}
	st, err := d.Load("tickets.csv", "id,text\na,\"My parcel is late, again.\"\nb,\nc,"+ticketText+"\n")
	if err != nil || st.State != DatasetLoaded || st.Records != 3 || st.Invalid != 1 || st.Format != "csv" {
		t.Fatalf("Load: %+v, %v", st, err)
	}
	if _, err := d.Start(json.RawMessage(`{"fields": []}`)); err == nil {
		t.Error("Start with an empty schema: no error")
	}
	if _, err := d.Start(ticketSchema(t)); err != nil {
		t.Fatal(err)
	}
	st = waitDataset(t, rec, DatasetDone, DatasetFailed, DatasetStopped)
	if st.State != DatasetDone || st.Done != 3 || st.Errors != 1 || st.Summary.Records != 3 || st.Summary.Errors != 1 || len(st.Summary.Fields) == 0 {
		t.Fatalf("final state: %+v", st)
	}
	total := 0
	for _, v := range st.Summary.Fields[0].Values {
		total += v.Count
	}
	if st.Summary.Fields[0].Field != "priority" || total != 2 {
		t.Errorf("priority counts %+v: want 2 answers", st.Summary.Fields[0])
	}
	rows := d.Results(0, 10)
	if len(rows) != 3 || rows[0].ID != "a" || rows[0].Answer == nil || rows[1].Error != "the text is empty" || rows[2].Line != 4 {
		t.Errorf("rows: %+v", rows)
	}
	if r := d.Results(2, 5); len(r) != 1 || r[0].ID != "c" {
		t.Errorf("Results(2, 5): %+v", r)
	}
	csv, err := d.Export("csv")
	if err != nil || !strings.HasPrefix(csv, "id,line,error,elapsed_ms,priority,department,") || strings.Count(csv, "\n") != 4 {
		t.Errorf("CSV export: %v\n%s", err, csv)
	}
	jl, _ := d.Export("jsonl")
	// The header first, as score-file writes it: merge takes the export.
	if !strings.HasPrefix(jl, `{"verdict_result_log":1,`) || !strings.Contains(strings.SplitN(jl, "\n", 2)[0], `"model":"built-in tiny Gemma 3n (random weights)","model_hash":"sha256:`) {
		t.Errorf("JSONL export's header: %.400s", jl)
	}
	if strings.Count(jl, "\n") != 4 || !strings.Contains(jl, `"id":"b","index":1,"line":3,"error":"the text is empty"`) ||
		!strings.Contains(jl, `"result":{"model":"built-in tiny Gemma 3n (random weights)","random_weights":true,"backend":"json","answer":`) {
		t.Errorf("JSONL export:\n%s", jl)
	}
	if _, err := d.Export("xml"); err == nil {
		t.Error("Export xml: no error")
	}
	if err := d.Clear(); err != nil || d.State().State != DatasetEmpty || len(d.Results(0, 10)) != 0 {
		t.Errorf("Clear: %v, %+v", err, d.State())
	}
}

// TestDatasetCancel: a stopped run keeps the records it scored, a second
// Start or a Load is refused while it runs, and the service is a bound one.
func TestDatasetCancel(t *testing.T) {
	s, rec := readyServices(t)
	d := s.Dataset
	var b strings.Builder
	for i := 0; i < 200; i++ {
		b.WriteString(`{"text": "` + ticketText + `"}` + "\n")
	}
	if _, err := d.Load("many.jsonl", b.String()); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Start(ticketSchema(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Start(ticketSchema(t)); !errors.Is(err, ErrDatasetBusy) {
		t.Errorf("a second Start: %v", err)
	}
	if _, err := d.Load("x.jsonl", `{"text": "x"}`); !errors.Is(err, ErrDatasetBusy) {
		t.Errorf("Load while running: %v", err)
	}
	waitDataset(t, rec, DatasetRunning)
	time.Sleep(300 * time.Millisecond)
	d.Cancel()
	st := d.State()
	if st.State != DatasetStopped || st.Done >= 200 || st.Done != len(d.Results(0, 1000)) || st.Total != 200 {
		t.Errorf("after Cancel: %+v with %d rows", st, len(d.Results(0, 1000)))
	}
	found := false
	for _, sv := range s.Bound() {
		found = found || sv == any(d)
	}
	if !found {
		t.Error("Dataset is not among the bound services")
	}
}

// TestDatasetUsesRunSettings: a dataset run scores with the scorer settings
// of an interactive run (here a temperature of 2.5), and a calibration that
// cannot be read stops it before it starts.
func TestDatasetUsesRunSettings(t *testing.T) {
	s, rec := readyServices(t)
	p := s.Settings.Get()
	p.Run.Scorer.Temperature = 2.5
	if _, err := s.Settings.Set(p); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Dataset.Load("d.jsonl", `{"text": "My parcel is late."}`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Dataset.Start(ticketSchema(t)); err != nil {
		t.Fatal(err)
	}
	if st := waitDataset(t, rec, DatasetDone, DatasetFailed); st.State != DatasetDone {
		t.Fatalf("%+v", st)
	}
	jl, _ := s.Dataset.Export("jsonl")
	if !strings.Contains(jl, `"temperature":2.5`) || strings.Contains(jl, `"temperature":1,`) || !strings.Contains(strings.SplitN(jl, "\n", 2)[0], `"temperature":2.5,`) {
		t.Errorf("the run did not score at the settings' temperature:\n%.600s", jl)
	}
	p.Run.Scorer.Calibration = "/nonexistent/cal.json"
	if _, err := s.Settings.Set(p); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Dataset.Start(ticketSchema(t)); err == nil || !strings.Contains(err.Error(), "calibration:") {
		t.Errorf("Start with an unreadable calibration: %v", err)
	}
}
