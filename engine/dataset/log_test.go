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
	good := `{"id":"a","index":0,"line":1,"result":{"answer":{}},"elapsed_ms":1}` + "\n"
	cases := []struct {
		name, in string
		torn     bool
		recs     int
		good     int64
		err      string
	}{
		{"empty", "", false, 0, 0, ""},
		{"complete", good + good, false, 2, int64(2 * len(good)), ""},
		{"torn last line cut", good + `{"id":"b","ind`, true, 1, int64(len(good)), ""},
		{"torn last line refused", good + `{"id":"b","ind`, false, 0, 0, "line 2 is torn"},
		{"zeros at the end (a machine crash)", good + "\x00\x00\x00\n", true, 1, int64(len(good)), ""},
		{"a bad line in the middle", good + "{}\n" + good, true, 0, 0, `line 2 is not a result record: no "id"`},
		{"an unknown key", `{"id":"a","index":0,"line":1,"error":"x","extra":1}` + "\n" + good, true, 0, 0, "line 1 is not a result record"},
		{"neither result nor error", `{"id":"a","index":0,"line":1}` + "\n" + good, true, 0, 0, "neither"},
	}
	for _, c := range cases {
		recs, n, err := ReadLog(strings.NewReader(c.in), "out.jsonl", c.torn)
		if len(recs) != c.recs || n != c.good || (err == nil) != (c.err == "") || err != nil && !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s: %d records, good %d, %v; want %d, %d, %q", c.name, len(recs), n, err, c.recs, c.good, c.err)
		}
	}
}

func TestWriterSyncs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.jsonl")
	w, _, err := Create(path, false)
	if err != nil {
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
	if strings.Count(string(b), "\n") != 4 || !strings.Contains(string(b), `"<&>"`) {
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
