package dataset

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestReadLog(t *testing.T) {
	head := `{"verdict_result_log":1,"version":"test","model":"fake","model_hash":"sha256:00","weights":"f32","group":0,"backend":"json","schema_hash":"sha256:11","temperature":1,"calibration":"","normalize":"none"}` + "\n"
	good := `{"id":"a","index":0,"line":1,"result":{"answer":{}},"elapsed_ms":1}` + "\n"
	cases := []struct {
		name, in string
		torn     bool
		header   bool
		recs     int
		good     int64
		err      string
	}{
		{"empty", "", false, false, 0, 0, ""},
		{"complete", head + good + good, false, true, 2, int64(len(head) + 2*len(good)), ""},
		{"a header alone", head, false, true, 0, int64(len(head)), ""},
		{"no header (an older verdict's)", good, false, false, 1, int64(len(good)), ""},
		{"torn last line cut", head + good + `{"id":"b","ind`, true, true, 1, int64(len(head) + len(good)), ""},
		{"torn last line refused", head + good + `{"id":"b","ind`, false, false, 0, 0, "line 3 is torn"},
		{"a torn header cut", head[:20], true, false, 0, 0, ""},
		{"zeros at the end (a machine crash)", head + good + "\x00\x00\x00\n", true, true, 1, int64(len(head) + len(good)), ""},
		{"a bad line in the middle", head + good + "{}\n" + good, true, false, 0, 0, `line 3 is not a result record: no "id"`},
		{"an unknown key", head + `{"id":"a","index":0,"line":1,"error":"x","extra":1}` + "\n" + good, true, false, 0, 0, "line 2 is not a result record"},
		{"neither result nor error", head + `{"id":"a","index":0,"line":1}` + "\n" + good, true, false, 0, 0, "neither"},
		{"a header after line 1", good + head + good, true, false, 0, 0, "line 2 is not a result record"},
		{"an unknown header key", strings.Replace(head, `"normalize"`, `"colour":1,"normalize"`, 1) + good, false, false, 0, 0, `line 1 is not a header: json: unknown field "colour"`},
		{"a newer format", strings.Replace(head, `:1,`, `:2,`, 1) + good, false, false, 0, 0, "result log format 2; this verdict reads format 1"},
	}
	for _, c := range cases {
		log, n, err := ReadLog(strings.NewReader(c.in), "out.jsonl", c.torn)
		if len(log.Records) != c.recs || (log.Header != nil) != c.header || n != c.good || (err == nil) != (c.err == "") || err != nil && !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s: %d records, header %v, good %d, %v; want %d, %v, %d, %q", c.name, len(log.Records), log.Header, n, err, c.recs, c.header, c.good, c.err)
		}
		if c.header && log.Header != nil && *log.Header != testHeader {
			t.Errorf("%s: header %+v, want %+v", c.name, *log.Header, testHeader)
		}
	}
}

func TestWriterSyncs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.jsonl")
	w, _, err := Create(path, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(Record{ID: "x", Error: "e"}); !errors.Is(err, ErrNoHeader) {
		t.Errorf("a Write before SetHeader: %v", err)
	}
	if fi, _ := os.Stat(path); fi.Size() != 0 {
		t.Errorf("the log holds %d bytes before its first record", fi.Size())
	}
	if err := w.SetHeader(testHeader); err != nil {
		t.Fatal(err)
	}
	clock := time.Unix(100, 0)
	w.now, w.synced = func() time.Time { return clock }, clock
	for i := 0; i < 4; i++ {
		if err := w.Write(Record{ID: "x", Error: "<&>"}); err != nil {
			t.Fatal(err)
		}
		clock = clock.Add(400 * time.Millisecond)
	}
	if !w.synced.Equal(time.Unix(101, 200e6)) {
		t.Errorf("last sync at %v, want at 101.2 s (the first write a second after the open)", w.synced)
	}
	// Written at once, before any Close: a crash now loses nothing.
	b, _ := os.ReadFile(path)
	if strings.Count(string(b), "\n") != 5 || !strings.HasPrefix(string(b), `{"verdict_result_log":1,"version":"test",`) || strings.Count(string(b), "verdict_result_log") != 1 || !strings.Contains(string(b), `"<&>"`) {
		t.Errorf("the log before Close: %q", b)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Errorf("a second Close: %v", err)
	}
	if _, _, err := Create(path, false); !errors.Is(err, ErrExists) {
		t.Errorf("Create over a log with records: %v", err)
	}
	if _, _, err := Create(t.TempDir(), true); err == nil {
		t.Error("Create of a directory: no error")
	}
}

// TestResumeChecksHeader: a resumed log keeps its header and refuses a run
// that differs from it in any field, naming the field; a log with records
// and no header (an older verdict's) is refused with what to do.
func TestResumeChecksHeader(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.jsonl")
	w, _, _ := Create(path, false)
	w.SetHeader(testHeader)
	w.Write(Record{ID: "a", Line: 1, Error: "e"})
	w.Close()
	other := func(f func(*Header)) Header { h := testHeader; f(&h); return h }
	for _, c := range []struct {
		run  Header
		want string // "" for none
	}{
		{testHeader, ""},
		{other(func(h *Header) { h.Model = "renamed" }), ""}, // the content hash is what counts
		{other(func(h *Header) { h.Temperature = 0.5 }), "out.jsonl was scored with --temperature 1, this run with --temperature 0.5"},
		{other(func(h *Header) { h.Weights, h.Group = "q4", 64 }), "--weights f32, this run with --weights q4"},
		{other(func(h *Header) { h.Group = 32 }), "--group 0, this run with --group 32"},
		{other(func(h *Header) { h.Normalize = "pmi" }), "--normalize none, this run with --normalize pmi"},
		{other(func(h *Header) { h.Backend = "catalog" }), "--backend json, this run with --backend catalog"},
		{other(func(h *Header) { h.SchemaHash = "sha256:22" }), "--schema of hash sha256:11, this run with --schema of hash sha256:22"},
		{other(func(h *Header) { h.Calibration = "sha256:33" }), "--calibration none, this run with --calibration sha256:33"},
		{other(func(h *Header) { h.ModelHash = "sha256:44" }), "--model fake (content sha256:00), this run with --model fake (content sha256:44)"},
		{other(func(h *Header) { h.Version = "v2" }), "verdict version test, this run with verdict version v2"},
	} {
		w, log, err := Create(path, true)
		if err != nil {
			t.Fatal(err)
		}
		if log.Header == nil || *log.Header != testHeader || len(log.Records) != 1 {
			t.Fatalf("resumed log: %+v", log)
		}
		err = w.SetHeader(c.run)
		var me *MismatchError
		if (err == nil) != (c.want == "") || err != nil && (!errors.As(err, &me) || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("run %+v: %v, want %q", c.run, err, c.want)
		}
		w.Close()
	}
	b, _ := os.ReadFile(path)
	if strings.Count(string(b), "\n") != 2 {
		t.Errorf("the log after the resumes: %q", b)
	}
	old := filepath.Join(dir, "old.jsonl")
	os.WriteFile(old, []byte(`{"id":"a","index":0,"line":1,"error":"e"}`+"\n"), 0o644)
	_, _, err := Create(old, true)
	var nh *NoHeaderError
	if !errors.As(err, &nh) || !strings.Contains(err.Error(), "old.jsonl has no header line: it was written by an older verdict") {
		t.Errorf("resume of a log without a header: %v", err)
	}
}

func TestParseShard(t *testing.T) {
	cases := []struct {
		in   string
		want Shard
		err  string
	}{
		{"0/1", Shard{0, 1}, ""}, {"3/4", Shard{3, 4}, ""}, {" 2 / 5", Shard{2, 5}, ""},
		{"4/4", Shard{}, "0 <= I < N"}, {"-1/2", Shard{}, "0 <= I < N"}, {"1/0", Shard{}, "0 <= I < N"},
		{"1", Shard{}, "want I/N"}, {"a/b", Shard{}, "want I/N"},
	}
	for _, c := range cases {
		s, err := ParseShard(c.in)
		if s != c.want || (err == nil) != (c.err == "") || err != nil && !strings.Contains(err.Error(), c.err) {
			t.Errorf("ParseShard(%q) = %v, %v; want %v, %q", c.in, s, err, c.want, c.err)
		}
	}
}

// BenchmarkWrite measures a record's write with an fsync after every line
// (every-line) against DefaultSyncEvery (batched): the cost that chose it.
func BenchmarkWrite(b *testing.B) {
	res := []byte(`{"answer":{"x":"` + strings.Repeat("y", 3000) + `"}}`)
	for _, c := range []struct {
		name  string
		every time.Duration
	}{{"every-line", 0}, {"batched", DefaultSyncEvery}} {
		b.Run(c.name, func(b *testing.B) {
			w, _, err := Create(filepath.Join(b.TempDir(), "out.jsonl"), false)
			if err != nil {
				b.Fatal(err)
			}
			w.SetHeader(testHeader)
			defer w.Close()
			w.SyncEvery = c.every
			for i := 0; i < b.N; i++ {
				if err := w.Write(Record{ID: "x", Index: i, Line: i + 1, Result: res}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
