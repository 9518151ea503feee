package app

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"verdict/engine/scorer"
	"verdict/engine/session"
)

func TestModelOpenErrors(t *testing.T) {
	s := newServices(t, NewRecorder())
	dir := t.TempDir()
	file := filepath.Join(dir, "weights.safetensors")
	os.WriteFile(file, []byte("x"), 0o644)
	two := t.TempDir()
	os.WriteFile(filepath.Join(two, "a.gguf"), []byte("GGUF"), 0o644)
	os.WriteFile(filepath.Join(two, "b.gguf"), []byte("GGUF"), 0o644)
	for _, tc := range []struct{ spec, msg string }{
		{filepath.Join(dir, "missing"), "no such file"},
		{file, "not a folder"},
		{dir, "no config.json"},
		{two, "holds 2 GGUF files"},
	} {
		if _, err := s.Models.Open(tc.spec); err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("Open(%s) = %v, want an error saying %q", tc.spec, err, tc.msg)
		}
	}
	if st := s.Models.Info().State; st != ModelNone {
		t.Errorf("state %s after failed opens", st)
	}
	if _, err := s.Runs.Start(RunRequest{Input: "x", Schema: json.RawMessage(`{}`)}); err == nil {
		t.Error("a run started without a model")
	}
}

func TestModelLoadFailureIsReported(t *testing.T) {
	rec := NewRecorder()
	s := New(Options{Emitter: rec, Logger: quietLogger(), Open: func(context.Context, string, *session.Backend, func(string, int64, int64)) (*session.Session, error) {
		time.Sleep(2 * ProgressInterval)
		return nil, errors.New("tensor model.embed has shape [1] not [262400 2048]")
	}})
	defer s.Shutdown()
	info, err := s.Models.Open("builtin")
	if err != nil || info.State != ModelLoading {
		t.Fatalf("Open = %+v, %v", info, err)
	}
	ev, ok := rec.Wait(EventModel, 5*time.Second, func(b json.RawMessage) bool { return strings.Contains(string(b), `"error"`) })
	if !ok {
		t.Fatal("no error state")
	}
	var m ModelInfo
	json.Unmarshal(ev.JSON, &m)
	if m.State != ModelError || !strings.Contains(m.Error, "shape") {
		t.Errorf("state %+v", m)
	}
	// Progress was reported while loading.
	progress := 0
	for _, e := range rec.Events(EventModel) {
		var m ModelInfo
		json.Unmarshal(e.JSON, &m)
		if m.State == ModelLoading && m.ElapsedMs > 0 {
			progress++
		}
	}
	if progress == 0 {
		t.Error("no loading progress events")
	}
	time.Sleep(2 * ProgressInterval)
	evs := rec.Events(EventModel)
	if last := evs[len(evs)-1]; !strings.Contains(string(last.JSON), `"state":"error"`) {
		t.Errorf("the last model event is %s", last.JSON)
	}
}

func TestModelReadyAndReplaced(t *testing.T) {
	s, rec := readyServices(t)
	info := s.Models.Info()
	if !info.RandomWeights || !info.Builtin || info.Params <= 0 || info.LoadMs <= 0 || info.Layers == 0 ||
		!strings.Contains(info.Name, "random weights") || !strings.Contains(info.Note, "noise") {
		t.Errorf("built-in model info %+v", info)
	}
	// The built-in model has both towers: it takes every input.
	if len(info.Inputs) != 4 || info.Inputs[0].Name != "text" {
		t.Errorf("inputs %+v", info.Inputs)
	}
	for _, in := range info.Inputs {
		if !in.Supported {
			t.Errorf("built-in model: %s not supported (%s)", in.Name, in.Note)
		}
	}
	// Replacing the model cancels the run on the old one.
	started, err := s.Generator.Start(RunRequest{Input: ticketText, Schema: ticketSchema(t),
		Settings: &RunSettings{Generation: GenerationSettings{MaxTokens: 4000, Prompt: PromptSchema, TopP: 1}, Scorer: DefaultPreferences().Run.Scorer}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Models.Open("builtin"); err != nil {
		t.Fatal(err)
	}
	rec2 := waitDone(t, s, rec, started.ID)
	if rec2.Generator.Status != StatusCancelled {
		t.Errorf("generator %s after the model was replaced", rec2.Generator.Status)
	}
	s.Models.Unload()
	if s.Models.Info().State != ModelNone {
		t.Error("not unloaded")
	}
}

// waitDone waits for run id's run:done event and returns its record from
// the history (scorer.Duration has no JSON decoder).
func waitDone(t *testing.T, s *Services, rec *Recorder, id string) RunRecord {
	t.Helper()
	ev, ok := rec.Wait(EventRunDone, 120*time.Second, func(b json.RawMessage) bool {
		return strings.Contains(string(b), `"id":"`+id+`"`)
	})
	if !ok {
		t.Fatalf("run %s did not finish", id)
	}
	var head struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(ev.JSON, &head); err != nil || head.ID != id {
		t.Fatalf("run:done %s: %v", ev.JSON, err)
	}
	r, err := s.Runs.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// update is a run:update event as the frontend reads it.
type update struct {
	ID     string `json:"id"`
	Scorer *struct {
		Status  string            `json:"status"`
		Fields  []json.RawMessage `json:"fields"`
		Catalog []CatalogLive     `json:"catalog"`
	} `json:"scorer"`
	Generator *GeneratorUpdate `json:"generator"`
}

// updates decodes the run:update events of run id.
func updates(t *testing.T, rec *Recorder, id string) []update {
	var out []update
	for _, e := range rec.Events(EventRunUpdate) {
		var u update
		if err := json.Unmarshal(e.JSON, &u); err != nil {
			t.Fatal(err)
		}
		if u.ID == id {
			out = append(out, u)
		}
	}
	return out
}

func TestSideBySideRun(t *testing.T) {
	s, rec := readyServices(t)
	set := DefaultPreferences().Run
	set.Generation.MaxTokens = 48
	started, err := s.Runs.Start(RunRequest{Input: ticketText, Schema: ticketSchema(t), SchemaName: "ticket", Settings: &set,
		Files: []InputFile{{Name: "ticket.txt", Kind: KindText, Size: 120, Supported: true}}})
	if err != nil {
		t.Fatal(err)
	}
	if !started.Scorer || !started.Generator || !started.Concurrent || !started.RandomWeights {
		t.Errorf("started %+v", started)
	}
	if _, err := s.Runs.Start(RunRequest{Input: ticketText, Schema: ticketSchema(t)}); !errors.Is(err, ErrBusy) {
		t.Errorf("second Start: %v, want ErrBusy", err)
	}
	ann, ok := rec.Wait(EventRunStarted, time.Second, nil)
	var a RunAnnounce
	if !ok || json.Unmarshal(ann.JSON, &a) != nil || a.Run.ID != started.ID || len(a.Fields) != 5 || a.Fields[3].Type != scorer.Independent {
		t.Errorf("run:started %s", ann.JSON)
	}
	if cur := s.Runs.Current(); cur == nil || cur.ID != started.ID {
		t.Errorf("Current = %+v", cur)
	}
	r := waitDone(t, s, rec, started.ID)

	sc, g := r.Scorer, r.Generator
	if sc == nil || g == nil || sc.Status != StatusDone || g.Status != StatusDone {
		t.Fatalf("sides %+v %+v", sc, g)
	}
	if !r.Concurrent || !strings.Contains(r.Note, "contention") || r.SchemaName != "ticket" || len(r.Input.Files) != 1 {
		t.Errorf("record %+v", r)
	}
	// Scorer: every field, in schema order, with its distribution and timings.
	names := []string{"priority", "department", "refund_requested", "issues", "anger"}
	if len(sc.Fields) != len(names) || sc.FieldsTotal != len(names) {
		t.Fatalf("%d fields", len(sc.Fields))
	}
	for i, f := range sc.Fields {
		if f.Name != names[i] || len(f.Decisions) == 0 {
			t.Errorf("field %d: %+v", i, f)
		}
		for _, d := range f.Decisions {
			var sum float64
			for _, c := range d.Candidates {
				sum += c.Probability
			}
			if sum < 0.999 || sum > 1.001 {
				t.Errorf("%s: probabilities sum to %v", d.Name, sum)
			}
		}
	}
	if sc.Fields[4].ExpectedLevel == nil || sc.Fields[2].PTrue == nil || len(sc.Fields[3].Labels) != 4 {
		t.Error("score, bool or independent details missing")
	}
	if !json.Valid(sc.Answer) || sc.Calibration.Detail == "" || !strings.Contains(sc.Note, "accuracy estimate") {
		t.Errorf("answer %s calibration %+v note %q", sc.Answer, sc.Calibration, sc.Note)
	}
	st := sc.Timing
	if st.PrefillMs <= 0 || st.PrefillTPS <= 0 || st.PromptTokens <= 0 || st.FirstDecisionMs <= 0 ||
		st.FirstDecisionMs > st.TotalMs || len(st.BatchesMs) == 0 || st.InputPrepMs <= 0 {
		t.Errorf("scorer timing %+v", st)
	}
	// Generator: text, and the timing breakdown.
	gt := g.Timing
	if gt.OutputTokens == 0 || gt.OutputTokens > 48 || gt.PrefillMs <= 0 || gt.PrefillTPS <= 0 || gt.FirstTokenMs <= gt.InputPrepMs ||
		gt.FirstTokenMs > gt.TotalMs || gt.PromptTokens != st.PromptTokens || g.Prompt != PromptSchema {
		t.Errorf("generator timing %+v (scorer prompt %d tokens)", gt, st.PromptTokens)
	}
	if gt.OutputTokens > 1 && gt.DecodeTPS <= 0 {
		t.Errorf("decode rate %v", gt.DecodeTPS)
	}
	if g.Text == "" || (g.Parsed == nil) == (g.ParseError == "") {
		t.Errorf("text %q parsed %s parse error %q", g.Text, g.Parsed, g.ParseError)
	}
	if gt.StartMs > 50 || st.StartMs > 50 {
		t.Errorf("sides started %v ms and %v ms after the run", st.StartMs, gt.StartMs)
	}

	// The stream: coalesced updates whose deltas rebuild the text and whose
	// fields arrive before the end.
	ups := updates(t, rec, started.ID)
	var text strings.Builder
	fields := 0
	for _, u := range ups {
		if u.Generator != nil {
			text.WriteString(u.Generator.Delta)
		}
		if u.Scorer != nil {
			fields += len(u.Scorer.Fields)
		}
	}
	if text.String() != g.Text {
		t.Errorf("deltas give %q, record %q", text.String(), g.Text)
	}
	if fields != len(names) {
		t.Errorf("%d fields streamed", fields)
	}
	if max := int(r.TotalMs/float64(UpdateInterval/time.Millisecond)) + 2; len(ups) > max {
		t.Errorf("%d updates in %.0f ms: more than one per %v", len(ups), r.TotalMs, UpdateInterval)
	}
	// The rate bound above is what the throttle promises; single gaps jitter
	// under load (the recorder stamps an event when it arrives, after the
	// flush built it), so only gaps far below the interval count, and the
	// run's last update may follow its predecessor at once.
	evs := rec.Events(EventRunUpdate)
	short := 0
	for i := 1; i < len(evs); i++ {
		if gap := evs[i].At.Sub(evs[i-1].At); gap < UpdateInterval/4 {
			short++
		}
	}
	if short > 1 {
		t.Errorf("%d of %d updates came less than %v after the one before", short, len(evs)-1, UpdateInterval/4)
	}
	// History.
	h := s.Runs.History()
	if len(h) != 1 || h[0].ID != started.ID {
		t.Fatalf("history %+v", h)
	}
	if got, err := s.Runs.Get(started.ID); err != nil || got.ID != started.ID {
		t.Errorf("Get: %v", err)
	}
	if s.Runs.Active() != nil {
		t.Error("still active")
	}
}

func TestCancelOneSide(t *testing.T) {
	s, rec := readyServices(t)
	set := DefaultPreferences().Run
	set.Generation.MaxTokens = 4000
	set.Generation.Temperature = 1
	started, err := s.Runs.Start(RunRequest{Input: ticketText, Schema: ticketSchema(t), Settings: &set})
	if err != nil {
		t.Fatal(err)
	}
	// Wait for generated tokens, then stop the generator only.
	if _, ok := rec.Wait(EventRunUpdate, 60*time.Second, func(b json.RawMessage) bool {
		var u update
		json.Unmarshal(b, &u)
		return u.Generator != nil && u.Generator.Tokens > 2
	}); !ok {
		t.Fatal("no tokens")
	}
	for _, tc := range []struct{ id, side string }{{"run-999", ""}, {started.ID, "sideways"}} {
		if err := s.Runs.Cancel(tc.id, tc.side); err == nil {
			t.Errorf("Cancel(%q, %q) succeeded", tc.id, tc.side)
		}
	}
	if err := s.Generator.Cancel(started.ID); err != nil {
		t.Fatal(err)
	}
	r := waitDone(t, s, rec, started.ID)
	if r.Generator.Status != StatusCancelled || r.Generator.Timing.OutputTokens >= 4000 || r.Generator.Text == "" {
		t.Errorf("generator %+v", r.Generator)
	}
	if r.Scorer.Status != StatusDone || len(r.Scorer.Fields) != 5 {
		t.Errorf("scorer %s with %d fields", r.Scorer.Status, len(r.Scorer.Fields))
	}
	// A scorer-only run stopped at once keeps what it had.
	started, err = s.Scorer.Start(RunRequest{Input: strings.Repeat(ticketText+" ", 20), Schema: ticketSchema(t)})
	if err != nil {
		t.Fatal(err)
	}
	if started.Generator || started.Concurrent {
		t.Errorf("scorer-only run %+v", started)
	}
	s.Scorer.Cancel(started.ID)
	r = waitDone(t, s, rec, started.ID)
	if r.Generator != nil || (r.Scorer.Status != StatusCancelled && r.Scorer.Status != StatusDone) || r.Concurrent || r.Note != "" {
		t.Errorf("scorer-only record %+v", r)
	}
}

func TestGeneratorChatMode(t *testing.T) {
	s, rec := readyServices(t)
	set := DefaultPreferences().Run
	set.Generation.Prompt, set.Generation.MaxTokens = PromptChat, 8
	started, err := s.Generator.Start(RunRequest{Input: "Hello there", Settings: &set})
	if err != nil {
		t.Fatal(err)
	}
	r := waitDone(t, s, rec, started.ID)
	if r.Scorer != nil || r.Generator.Status != StatusDone || r.Generator.Prompt != PromptChat || r.Generator.Timing.PromptTokens >= 30 {
		t.Errorf("chat run %+v", r.Generator)
	}
}

func TestStartErrors(t *testing.T) {
	s, _ := readyServices(t)
	bad := DefaultPreferences().Run
	bad.Scorer.BranchBatch = 0
	long := strings.Repeat("word ", scorer.MaxInputTokens+100)
	for _, tc := range []struct {
		name string
		req  RunRequest
		msg  string
	}{
		{"empty input", RunRequest{Input: "  ", Schema: ticketSchema(t)}, "input is empty"},
		{"no schema", RunRequest{Input: "x"}, "no schema"},
		{"bad schema", RunRequest{Input: "x", Schema: json.RawMessage(`{"fields":[{"name":"a","question":"?","type":"choice","options":["x"]}]}`)}, "at least 2 options"},
		{"bad settings", RunRequest{Input: "x", Schema: ticketSchema(t), Settings: &bad}, "branch_batch"},
		{"huge input", RunRequest{Input: strings.Repeat("a", MaxInputBytes+1), Schema: ticketSchema(t)}, "exceeds the limit"},
		{"bad utf-8", RunRequest{Input: "caf\xe9", Schema: ticketSchema(t)}, "UTF-8"},
	} {
		if _, err := s.Runs.Start(tc.req); err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.msg)
		}
	}
	// Over the token limit: both sides fail with the limit named.
	started, err := s.Runs.Start(RunRequest{Input: long, Schema: ticketSchema(t)})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for s.Runs.Active() != nil && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	r, err := s.Runs.Get(started.ID)
	if err != nil {
		t.Fatal(err)
	}
	for side, st := range map[string][2]string{"scorer": {r.Scorer.Status, r.Scorer.Error}, "generator": {r.Generator.Status, r.Generator.Error}} {
		if st[0] != StatusError || !strings.Contains(st[1], "8192") {
			t.Errorf("%s: %s %q", side, st[0], st[1])
		}
	}
}

func TestPromptPreview(t *testing.T) {
	s, _ := readyServices(t)
	p, err := s.Scorer.Prompt(ticketSchema(t), "The app crashes.")
	if err != nil || !strings.Contains(p.Text, "The app crashes.") || !strings.Contains(p.Text, "<start_of_turn>model") || p.Tokens == 0 {
		t.Errorf("%+v, %v", p, err)
	}
}

// TestCatalogRun: the tools preset decodes its catalog field through the
// trie: the names arrive live, step by step, with each step's most probable
// legal tokens, and the result holds the names, every step's distribution
// and the sparse head's time per token beside the dense one's.
func TestCatalogRun(t *testing.T) {
	s, rec := readyServices(t)
	var tools Preset
	for _, p := range s.Scorer.Presets() {
		if p.ID == "tools" {
			tools = p
		}
	}
	if tools.ID == "" {
		t.Fatal("no tools preset")
	}
	set := DefaultPreferences().Run
	set.Generation.MaxTokens = 4
	started, err := s.Runs.Start(RunRequest{Input: tools.Sample, Schema: tools.Schema, SchemaName: "tools", Settings: &set})
	if err != nil {
		t.Fatal(err)
	}
	r := waitDone(t, s, rec, started.ID)
	if r.Scorer == nil || r.Scorer.Status != StatusDone || len(r.Scorer.Fields) != 1 {
		t.Fatalf("scorer %+v", r.Scorer)
	}
	f := r.Scorer.Fields[0]
	if f.Type != scorer.Catalog || len(f.Names) != 2 || len(f.Steps) == 0 || f.CatalogTiming == nil ||
		f.CatalogTiming.HeadMsPerToken <= 0 || f.CatalogTiming.DenseHeadMsPerToken <= 0 || f.Steps[0].Legal < 2 {
		t.Fatalf("tools field %+v", f)
	}
	var live []CatalogLive
	for _, u := range updates(t, rec, started.ID) {
		if u.Scorer != nil {
			live = append(live, u.Scorer.Catalog...)
		}
	}
	if len(live) != len(f.Steps) || live[0].Field != "tools" || len(live[0].Names) != 0 ||
		!slices.Equal(live[len(live)-1].Names, f.Names) || len(live[0].Step.Tokens) > catalogLiveTokens {
		t.Fatalf("%d live steps for %d steps: first %+v", len(live), len(f.Steps), live[0])
	}
	if want := `{"tools": ["` + f.Names[0] + `", "` + f.Names[1] + `"]}`; string(r.Scorer.Answer) != want {
		t.Fatalf("answer %s, want %s", r.Scorer.Answer, want)
	}
}

func TestReusedPrefixTiming(t *testing.T) {
	s, rec := readyServices(t)
	set := DefaultPreferences().Run
	set.Scorer.Backend = "json"
	var first SideTiming
	for i := range 2 {
		started, err := s.Scorer.Start(RunRequest{Input: ticketText, Schema: ticketSchema(t), Settings: &set})
		if err != nil {
			t.Fatal(err)
		}
		st := waitDone(t, s, rec, started.ID).Scorer.Timing
		if i == 0 {
			first = st
			continue
		}
		// The same prompt again: all but its last token come from the first.
		if first.PrefixReused != 0 || st.PrefixReused < 16 || st.PrefixReused >= st.PromptTokens {
			t.Fatalf("reused %d then %d of %d prompt tokens", first.PrefixReused, st.PrefixReused, st.PromptTokens)
		}
		want := float64(st.PromptTokens-st.PrefixReused) / (st.PrefillMs / 1000)
		if st.PrefillTPS <= 0 || st.PrefillTPS > 1.01*want || st.PrefillTPS < 0.99*want {
			t.Errorf("prefill %.3f ms, %d of %d tokens computed: %.0f tok/s, want %.0f (the computed tokens' rate)",
				st.PrefillMs, st.PromptTokens-st.PrefixReused, st.PromptTokens, st.PrefillTPS, want)
		}
	}
}
