package app

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"verdict/engine/models"
	"verdict/engine/scorer"
)

// quietLogger discards output; entries still reach the hooks.
func quietLogger() *logrus.Logger {
	l := logrus.New()
	l.SetOutput(io.Discard)
	return l
}

func newServices(t *testing.T, rec *Recorder) *Services {
	t.Helper()
	s := New(Options{Emitter: rec, Logger: quietLogger()})
	t.Cleanup(s.Shutdown)
	return s
}

// needTokenizer skips a test that runs the model when no tokenizer.json is
// found, unless VERDICT_REQUIRE_TOKENIZER=1 makes that a failure.
func needTokenizer(t *testing.T) {
	t.Helper()
	if _, err := models.LoadTokenizer(""); err != nil {
		if os.Getenv("VERDICT_REQUIRE_TOKENIZER") == "1" {
			t.Fatal(err)
		}
		t.Skipf("%v", err)
	}
}

// readyServices returns services with the built-in model loaded.
func readyServices(t *testing.T) (*Services, *Recorder) {
	t.Helper()
	needTokenizer(t)
	rec := NewRecorder()
	s := newServices(t, rec)
	if _, err := s.Models.Open("builtin"); err != nil {
		t.Fatal(err)
	}
	if m := settledModel(t, rec); m.State != ModelReady {
		t.Fatalf("model state %s: %s", m.State, m.Error)
	}
	return s, rec
}

// settledModel waits up to 60 s for a model event saying ready or error and
// returns it.
func settledModel(t *testing.T, rec *Recorder) ModelInfo {
	t.Helper()
	ev, ok := rec.Wait(EventModel, 60*time.Second, func(b json.RawMessage) bool {
		var m ModelInfo
		json.Unmarshal(b, &m)
		return m.State == ModelReady || m.State == ModelError
	})
	if !ok {
		t.Fatal("no model became ready or failed within 60 s")
	}
	var m ModelInfo
	json.Unmarshal(ev.JSON, &m)
	return m
}

func ticketSchema(t *testing.T) json.RawMessage {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("presets", "ticket.json"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

const ticketText = "Customer #4821 writes: my order arrived two weeks late and the screen is cracked. " +
	"I was charged twice for shipping. I want my money back today."

func TestThrottleCoalesces(t *testing.T) {
	var flushes atomic.Int32
	th := newThrottle(40*time.Millisecond, func() { flushes.Add(1) })
	start := time.Now()
	for time.Since(start) < 300*time.Millisecond {
		th.poke()
		time.Sleep(time.Millisecond)
	}
	time.Sleep(60 * time.Millisecond)
	n := int(flushes.Load())
	// One flush at once, then at most one per interval.
	if max := int(time.Since(start)/(40*time.Millisecond)) + 2; n < 3 || n > max {
		t.Errorf("%d flushes in %v, want 3..%d", n, time.Since(start), max)
	}
	before := flushes.Load()
	th.poke()
	th.now()
	if flushes.Load() != before+1 {
		t.Error("now() did not flush before returning")
	}
	time.Sleep(60 * time.Millisecond)
	if flushes.Load() != before+1 {
		t.Error("the poke before now() flushed again")
	}
}

func TestSwitchEmitter(t *testing.T) {
	var sw SwitchEmitter
	sw.Emit("early", 1) // dropped, no panic
	rec := NewRecorder()
	sw.Set(rec)
	sw.Emit("late", 2)
	if evs := rec.Events(""); len(evs) != 1 || evs[0].Name != "late" {
		t.Errorf("got %+v", evs)
	}
}

func TestLogs(t *testing.T) {
	rec := NewRecorder()
	log := quietLogger()
	l := NewLogs(log, rec)
	for _, tc := range []struct {
		level string
		ok    bool
	}{{"debug", true}, {"warning", true}, {"warn", true}, {"info", true}, {"loud", false}, {"", false}} {
		err := l.SetLevel(tc.level)
		if (err == nil) != tc.ok {
			t.Errorf("SetLevel(%q) error %v, want ok=%v", tc.level, err, tc.ok)
		}
	}
	if l.Level() != "info" {
		t.Fatalf("level %s", l.Level())
	}
	before := len(l.Entries(0, 0))
	log.Debug("hidden at info")
	log.WithField("n", 7).Info("shown")
	log.WithError(errors.New("boom")).Warn("failed")
	got := l.Entries(0, 0)[before:]
	if len(got) != 2 || got[0].Message != "shown" || got[0].Fields["n"] != "7" || got[1].Fields["error"] != "boom" || got[1].Level != "warning" {
		t.Fatalf("entries %+v", got)
	}
	if e := l.Entries(got[0].Seq, 0); len(e) != 1 || e[0].Message != "failed" {
		t.Errorf("Entries(after) = %+v", e)
	}
	if _, ok := rec.Wait(EventLogEntries, time.Second, nil); !ok {
		t.Error("no log:entries event")
	}
	for i := 0; i < LogCapacity+10; i++ {
		log.Info("x")
	}
	if n := len(l.Entries(0, 0)); n != LogCapacity {
		t.Errorf("kept %d entries, want %d", n, LogCapacity)
	}
	if n := len(l.Entries(0, 5)); n != 5 {
		t.Errorf("limit 5 gave %d", n)
	}
}

func TestSettings(t *testing.T) {
	def := DefaultPreferences()
	mod := func(f func(p *Preferences)) Preferences { p := def; f(&p); return p }
	for _, tc := range []struct {
		name    string
		p       Preferences
		setting string // "" when valid
	}{
		{"defaults", def, ""},
		{"greedy", mod(func(p *Preferences) { p.Run.Generation.Temperature = 0 }), ""},
		{"chat prompt", mod(func(p *Preferences) { p.Run.Generation.Prompt = PromptChat }), ""},
		{"max tokens 0", mod(func(p *Preferences) { p.Run.Generation.MaxTokens = 0 }), "generation.max_tokens"},
		{"negative temperature", mod(func(p *Preferences) { p.Run.Generation.Temperature = -1 }), "generation.temperature"},
		{"top-p above 1", mod(func(p *Preferences) { p.Run.Generation.TopP = 1.5 }), "generation.top_p"},
		{"unknown prompt", mod(func(p *Preferences) { p.Run.Generation.Prompt = "poem" }), "generation.prompt"},
		{"batch 65", mod(func(p *Preferences) { p.Run.Scorer.BranchBatch = 65 }), "scorer.branch_batch"},
		{"scorer temperature 0", mod(func(p *Preferences) { p.Run.Scorer.Temperature = 0 }), "scorer.temperature"},
		{"log level", mod(func(p *Preferences) { p.LogLevel = "chatty" }), "log_level"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "sub", "settings.json")
			log := quietLogger()
			s := NewSettings(path, NewLogs(log, NewRecorder()), log, NewRecorder())
			got, err := s.Set(tc.p)
			var se *SettingsError
			switch {
			case tc.setting == "" && err != nil:
				t.Fatalf("Set: %v", err)
			case tc.setting != "" && (!errors.As(err, &se) || se.Setting != tc.setting):
				t.Fatalf("Set error %v, want one about %s", err, tc.setting)
			case tc.setting != "" && got != def:
				t.Fatalf("a rejected Set changed the settings to %+v", got)
			}
			// A new service reads what was saved.
			again := NewSettings(path, NewLogs(log, NewRecorder()), log, NewRecorder())
			if want := map[bool]Preferences{true: tc.p, false: def}[tc.setting == ""]; again.Get() != want {
				t.Errorf("reloaded %+v, want %+v", again.Get(), want)
			}
		})
	}
	// A corrupt file gives the defaults.
	path := filepath.Join(t.TempDir(), "settings.json")
	os.WriteFile(path, []byte("{not json"), 0o644)
	log := quietLogger()
	if s := NewSettings(path, NewLogs(log, NewRecorder()), log, NewRecorder()); s.Get() != def {
		t.Errorf("corrupt file: %+v", s.Get())
	}
}

func TestClassifyAndReadFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	png := []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
	for _, tc := range []struct {
		path      string
		kind      string
		supported bool
		reason    string
	}{
		{write("note.txt", []byte("The server is down.")), KindText, true, ""},
		{write("ticket", []byte("plain text without an extension")), KindText, true, ""},
		{write("data.JSON", []byte(`{"a": 1}`)), KindText, true, ""},
		// Media are only classified here; System.ReadFiles decodes them.
		{write("photo.png", png), KindImage, true, ""},
		{write("noext-image", png), KindImage, true, ""},
		{write("clip.wav", []byte("RIFF....WAVE")), KindAudio, true, ""},
		{write("movie.mp4", []byte{0, 0, 0, 0x18}), KindVideo, true, ""},
		{write("blob.bin", []byte{0, 1, 2, 3, 0xff, 0xfe}), KindOther, false, "not a text"},
		{write("latin1.txt", []byte{'c', 'a', 'f', 0xe9}), KindText, false, "not UTF-8"},
		{write("big.txt", []byte(strings.Repeat("a", MaxTextFileBytes+1))), KindText, false, "exceeds the limit"},
		{dir, KindOther, false, "a folder"},
		{filepath.Join(dir, "missing.txt"), KindOther, false, "no such file"},
	} {
		f := ReadInputFile(tc.path)
		if f.Kind != tc.kind || f.Supported != tc.supported || !strings.Contains(f.Reason, tc.reason) {
			t.Errorf("%s: kind %s supported %v reason %q; want %s %v %q", filepath.Base(tc.path), f.Kind, f.Supported, f.Reason, tc.kind, tc.supported, tc.reason)
		}
		if f.Supported && f.Kind == KindText && f.Text == "" {
			t.Errorf("%s: no text", tc.path)
		}
	}
}

func TestFrontendReady(t *testing.T) {
	ready := make(chan struct{}, 1)
	s := New(Options{Emitter: NewRecorder(), Logger: quietLogger(), OnFrontendReady: func() { ready <- struct{}{} }})
	defer s.Shutdown()
	s.System.FrontendReady("test agent")
	select {
	case <-ready:
	case <-time.After(time.Second):
		t.Fatal("OnFrontendReady not called")
	}
	if e := s.Logs.Entries(0, 0); len(e) == 0 || e[len(e)-1].Message != "frontend ready" || e[len(e)-1].Fields["agent"] != "test agent" {
		t.Errorf("log %+v", e)
	}
	for _, level := range []string{"error", "warning"} {
		s.System.FrontendLog(level, strings.Repeat("x", 3000))
		if e := s.Logs.Entries(0, 0); e[len(e)-1].Level != level || len(e[len(e)-1].Message) > 2100 {
			t.Errorf("frontend %s logged as %+v", level, e[len(e)-1])
		}
	}
}

func TestSystemWithoutDialogs(t *testing.T) {
	s := newServices(t, NewRecorder())
	if info := s.System.Info(); info.Mode != "browser" || info.Dialogs {
		t.Errorf("info %+v", info)
	}
	if _, err := s.System.ChooseModelFolder(); !errors.Is(err, ErrNoDialogs) {
		t.Errorf("ChooseModelFolder: %v", err)
	}
	if _, err := s.System.SaveText("a.json", "{}"); !errors.Is(err, ErrNoDialogs) {
		t.Errorf("SaveText: %v", err)
	}
}

type fakeDialogs struct{ save string }

func (f fakeDialogs) ChooseDirectory(string) (string, error) { return "/models/gemma", nil }
func (f fakeDialogs) ChooseFiles(string) ([]string, error)   { return nil, nil }
func (f fakeDialogs) SaveFile(string, string) (string, error) {
	return f.save, nil
}

func TestSystemSaveText(t *testing.T) {
	p := filepath.Join(t.TempDir(), "runs.csv")
	s := New(Options{Emitter: NewRecorder(), Logger: quietLogger(), Dialogs: fakeDialogs{save: p}, Mode: "desktop"})
	defer s.Shutdown()
	got, err := s.System.SaveText("runs.csv", "a,b\n")
	if err != nil || got != p {
		t.Fatalf("SaveText = %q, %v", got, err)
	}
	if b, _ := os.ReadFile(p); string(b) != "a,b\n" {
		t.Errorf("file holds %q", b)
	}
	if info := s.System.Info(); info.Mode != "desktop" || !info.Dialogs {
		t.Errorf("info %+v", info)
	}
}

func TestPresetsAreValid(t *testing.T) {
	s := newServices(t, NewRecorder())
	ps := s.Scorer.Presets()
	if len(ps) < 3 || ps[0].ID != "ticket" {
		t.Fatalf("presets %+v", ps)
	}
	for _, p := range ps {
		if c := s.Scorer.Check(p.Schema); !c.OK || p.Name == "" || p.Sample == "" {
			t.Errorf("preset %s: %+v (name %q)", p.ID, c, p.Name)
		}
	}
	// The ticket preset is the scorer's test schema.
	want, _ := os.ReadFile(filepath.Join("..", "engine", "scorer", "testdata", "ticket.json"))
	if strings.TrimSpace(string(want)) != string(ps[0].Schema) {
		t.Error("presets/ticket.json differs from engine/scorer/testdata/ticket.json")
	}
}

func TestSchemaCheck(t *testing.T) {
	s := newServices(t, NewRecorder())
	for _, tc := range []struct {
		schema    string
		ok        bool
		field     string
		decisions int
		msg       string
	}{
		{`{"fields":[{"name":"p","question":"?","type":"choice","options":["a","b"]}]}`, true, "", 1, ""},
		{`{"fields":[{"name":"i","question":"?","type":"independent","labels":["a","b","c"]}]}`, true, "", 3, ""},
		{`{"fields":[{"name":"p","question":"?","type":"choice","options":["a"]}]}`, false, "p", 0, "at least 2"},
		{`{"fields":[{"name":"s","question":"?","type":"score","levels":["3","1"]}]}`, false, "s", 0, "increasing"},
		{`{"fields":[]}`, false, "", 0, "no fields"},
		{`{"fields":[{"name":"b","question":"?","type":"maybe"}]}`, false, "b", 0, "unknown type"},
		{`not json`, false, "", 0, "invalid JSON"},
	} {
		c := s.Scorer.Check(json.RawMessage(tc.schema))
		if c.OK != tc.ok || c.Field != tc.field || c.Decisions != tc.decisions || !strings.Contains(c.Error, tc.msg) {
			t.Errorf("%s: %+v", tc.schema, c)
		}
	}
	lim := s.Scorer.Limits()
	if lim.MaxFields != scorer.MaxFields || lim.MaxInputTokens != scorer.MaxInputTokens {
		t.Errorf("limits %+v", lim)
	}
}

func TestExtractJSON(t *testing.T) {
	for _, tc := range []struct {
		text, want string
		ok         bool
	}{
		{`{"a": 1}`, `{"a":1}`, true},
		{"```json\n{\"priority\": \"high\", \"refund\": true}\n```", `{"priority":"high","refund":true}`, true},
		{`Here you go: {"x": [1, 2]} and more`, `{"x":[1,2]}`, true},
		{`{"a": 1`, "", false},
		{`no json here`, "", false},
		{``, "", false},
	} {
		got, err := ExtractJSON(tc.text)
		if (err == nil) != tc.ok || string(got) != tc.want {
			t.Errorf("ExtractJSON(%q) = %s, %v", tc.text, got, err)
		}
	}
}
