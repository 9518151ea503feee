package dataset

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fakeScore answers {"size": "short"|"long"} and fails on texts with "fail".
func fakeScore(_ context.Context, text string) (json.RawMessage, error) {
	if strings.Contains(text, "fail") {
		return nil, errors.New("the scorer refused it")
	}
	size := "short"
	if len(text) > 5 {
		size = "long"
	}
	return json.RawMessage(fmt.Sprintf(`{"answer":{"size":%q},"timings":{"total_ms":1}}`, size)), nil
}

// testHeader is the header of the tests' logs.
var testHeader = Header{Format: LogFormat, Version: "test", Model: "fake", ModelHash: "sha256:00", Weights: "f32", Backend: "json",
	SchemaHash: "sha256:11", Temperature: 1, Normalize: "none"}

func scanString(s string) func(func(Item) error) error {
	return func(fn func(Item) error) error { return Scan(strings.NewReader(s), JSONL, fn) }
}

// randomInput is n JSONL lines, some with ids, some blank, some bad.
func randomInput(rng *rand.Rand, n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		switch rng.Intn(10) {
		case 0:
			b.WriteString("\n")
		case 1:
			b.WriteString("{broken\n")
		case 2:
			fmt.Fprintf(&b, "{\"id\": \"x%d\", \"text\": \"fail %d\"}\n", i, i)
		case 3, 4:
			fmt.Fprintf(&b, "{\"id\": \"x%d\", \"text\": %q}\n", i, strings.Repeat("w", rng.Intn(9)+1))
		default:
			fmt.Fprintf(&b, "{\"text\": %q}\n", strings.Repeat("v", rng.Intn(9)+1))
		}
	}
	return b.String()
}

func strip(recs []Record) []Record {
	out := make([]Record, len(recs))
	for i, r := range recs {
		r.ElapsedMS = 0
		out[i] = r
	}
	return out
}

// TestShardsCoverEveryRecordOnce: over several N and inputs, every record
// is in exactly one shard, the shards' sizes differ by at most one, and the
// merged shard logs equal one run over the whole file.
func TestShardsCoverEveryRecordOnce(t *testing.T) {
	rng := rand.New(rand.NewSource(15))
	for _, size := range []int{0, 1, 2, 7, 40, 203} {
		in := randomInput(rng, size)
		whole, err := NewPlan(scanString(in), All, nil)
		if err != nil {
			t.Fatal(err)
		}
		var single []Record
		if _, err := whole.Run(context.Background(), scanString(in), fakeScore, nil, func(r Record) { single = append(single, r) }, nil); err != nil {
			t.Fatal(err)
		}
		if len(single) != whole.Records {
			t.Fatalf("size %d: %d records scored of %d", size, len(single), whole.Records)
		}
		for _, n := range []int{1, 2, 3, 5, 8, 13} {
			seen := map[int]int{}
			var srcs []Source
			lo, hi := len(single), 0
			for i := 0; i < n; i++ {
				p, err := NewPlan(scanString(in), Shard{i, n}, nil)
				if err != nil {
					t.Fatal(err)
				}
				var recs []Record
				if _, err := p.Run(context.Background(), scanString(in), fakeScore, nil, func(r Record) { recs = append(recs, r) }, nil); err != nil {
					t.Fatal(err)
				}
				if len(recs) != p.Todo {
					t.Fatalf("shard %d/%d: planned %d, scored %d", i, n, p.Todo, len(recs))
				}
				for _, r := range recs {
					seen[r.Index]++
				}
				lo, hi = min(lo, len(recs)), max(hi, len(recs))
				// Shards in reverse order: merge orders by input, not by file.
				srcs = append([]Source{{fmt.Sprintf("shard %d", i), Log{&testHeader, recs}}}, srcs...)
			}
			for idx := 0; idx < whole.Records; idx++ {
				if seen[idx] != 1 {
					t.Fatalf("size %d, %d shards: record %d is in %d shards", size, n, idx, seen[idx])
				}
			}
			if len(seen) != whole.Records {
				t.Fatalf("size %d, %d shards: %d indexes for %d records", size, n, len(seen), whole.Records)
			}
			if whole.Records > 0 && hi-lo > 1 {
				t.Errorf("size %d, %d shards: sizes from %d to %d", size, n, lo, hi)
			}
			h, merged, err := Merge(srcs)
			if err != nil {
				t.Fatal(err)
			}
			if n > 0 && h != &testHeader {
				t.Fatalf("merged header %v", h)
			}
			if fmt.Sprint(strip(merged)) != fmt.Sprint(strip(single)) {
				t.Fatalf("size %d, %d shards: merged\n%v\nwant\n%v", size, n, strip(merged), strip(single))
			}
		}
	}
}

func readLogFile(t *testing.T, path string) []Record {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	log, _, err := ReadLog(f, path, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(log.Records) > 0 && (log.Header == nil || *log.Header != testHeader) {
		t.Fatalf("%s: header %v", path, log.Header)
	}
	return log.Records
}

func runTo(t *testing.T, path, in string, shard Shard, resume bool, stopAfter int) error {
	t.Helper()
	w, logged, err := Create(path, resume)
	if err != nil {
		return err
	}
	defer w.Close()
	if err := w.SetHeader(testHeader); err != nil {
		return err
	}
	p, err := NewPlan(scanString(in), shard, logged.Records)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n := 0
	_, err = p.Run(ctx, scanString(in), fakeScore, w, func(Record) {
		if n++; n == stopAfter {
			cancel()
		}
	}, nil)
	return err
}

// TestResumeAfterCrash: a run stopped part way whose log ends in a torn
// line, resumed, gives the log of a run that was never stopped.
func TestResumeAfterCrash(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	dir := t.TempDir()
	for trial, stop := range []int{1, 5, 9} {
		in := randomInput(rng, 30)
		ref := filepath.Join(dir, fmt.Sprintf("ref%d.jsonl", trial))
		if err := runTo(t, ref, in, Shard{1, 2}, false, 0); err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(dir, fmt.Sprintf("out%d.jsonl", trial))
		if err := runTo(t, out, in, Shard{1, 2}, false, stop); !errors.Is(err, context.Canceled) {
			t.Fatalf("stopped run: %v", err)
		}
		if got := len(readLogFile(t, out)); got != stop {
			t.Fatalf("the stopped run wrote %d records, want %d", got, stop)
		}
		// The crash: half of the next record's line.
		f, _ := os.OpenFile(out, os.O_WRONLY|os.O_APPEND, 0)
		f.WriteString(`{"id":"9","index":18,"line":2`)
		f.Close()
		if _, _, err := ReadLog(mustOpen(t, out), out, false); err == nil {
			t.Fatal("ReadLog took a torn line without torn")
		}
		if err := runTo(t, out, in, Shard{1, 2}, false, 0); !errors.Is(err, ErrExists) {
			t.Fatalf("a second run without --resume: %v, want ErrExists", err)
		}
		if err := runTo(t, out, in, Shard{1, 2}, true, 0); err != nil {
			t.Fatalf("resume: %v", err)
		}
		got, want := strip(readLogFile(t, out)), strip(readLogFile(t, ref))
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("stopped after %d and resumed:\n%v\nwant\n%v", stop, got, want)
		}
		// Resuming a finished log scores nothing more.
		if err := runTo(t, out, in, Shard{1, 2}, true, 0); err != nil || len(readLogFile(t, out)) != len(want) {
			t.Fatalf("resuming a finished log: %v, %d records", err, len(readLogFile(t, out)))
		}
	}
}

func mustOpen(t *testing.T, path string) io.Reader {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestErrorsDoNotStopTheRun(t *testing.T) {
	in := "{\"text\": \"fine\"}\n{oops\n{\"text\": \"\"}\n{\"text\": \"fail me\"}\n{\"text\": \"last one\"}\n"
	p, err := NewPlan(scanString(in), All, nil)
	if err != nil {
		t.Fatal(err)
	}
	var recs []Record
	pr, err := p.Run(context.Background(), scanString(in), fakeScore, nil, func(r Record) { recs = append(recs, r) }, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range recs {
		got = append(got, fmt.Sprintf("%s:%s%s", r.ID, r.Answer(), r.Error))
	}
	want := `[1:{"size":"short"} 2:bad JSON: invalid character 'o' looking for beginning of object key string 3:the text is empty 4:the scorer refused it 5:{"size":"long"}]`
	if fmt.Sprint(got) != want || pr.Done != 5 || pr.Errors != 3 {
		t.Errorf("got %v (%d done, %d errors)\nwant %s", got, pr.Done, pr.Errors, want)
	}
}

func TestPlanRefuses(t *testing.T) {
	in := "{\"id\": \"a\", \"text\": \"x\"}\n{\"text\": \"y\"}\n{\"id\": \"a\", \"text\": \"z\"}\n"
	_, err := NewPlan(scanString(in), All, nil)
	var de *DuplicateError
	if !errors.As(err, &de) || de.ID != "a" || de.First != 1 || de.Then != 3 {
		t.Errorf("duplicate ids: %v", err)
	}
	in = "{\"id\": \"a\", \"text\": \"x\"}\n{\"text\": \"y\"}\n"
	cases := []struct {
		logged []Record
		shard  Shard
		want   string
	}{
		{[]Record{{ID: "a", Index: 0, Line: 3, Error: "e"}}, All, "of line 3, but the input has it on line 1"},
		{[]Record{{ID: "zz", Index: 5, Line: 6, Error: "e"}}, All, `record "zz" that the input does not`},
		{[]Record{{ID: "a", Index: 0, Line: 1, Error: "e"}}, Shard{1, 2}, "of another shard"},
	}
	for _, c := range cases {
		if _, err := NewPlan(scanString(in), c.shard, c.logged); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("logged %v: %v, want %q", c.logged, err, c.want)
		}
	}
	p, err := NewPlan(scanString(in), All, []Record{{ID: "a", Index: 0, Line: 1, Error: "e"}})
	if err != nil || p.Done != 1 || p.Todo != 1 {
		t.Errorf("a log of the first record: %+v, %v", p, err)
	}
}

// TestConcurrentRunKeepsOrder: records scored several at once, finishing
// in any order, are written in input order, as one at a time writes them;
// a run stopped part way leaves a log with no gap that resumes to the same.
func TestConcurrentRunKeepsOrder(t *testing.T) {
	rng := rand.New(rand.NewSource(9))
	dir := t.TempDir()
	in := randomInput(rng, 60)
	ref := filepath.Join(dir, "ref.jsonl")
	if err := runTo(t, ref, in, All, false, 0); err != nil {
		t.Fatal(err)
	}
	want := strip(readLogFile(t, ref))
	var inFlight, most atomic.Int32
	slow := func(ctx context.Context, text string) (json.RawMessage, error) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		select {
		case <-time.After(time.Duration(len(text)%7) * time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return fakeScore(ctx, text)
	}
	for _, c := range []int{2, 8} {
		for _, stop := range []int{0, 7} {
			out := filepath.Join(dir, fmt.Sprintf("c%d-%d.jsonl", c, stop))
			run := func(resume bool, stopAfter int) error {
				w, logged, err := Create(out, resume)
				if err != nil {
					return err
				}
				defer w.Close()
				if err := w.SetHeader(testHeader); err != nil {
					return err
				}
				p, err := NewPlan(scanString(in), All, logged.Records)
				if err != nil {
					return err
				}
				p.Concurrency = c
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				n := 0
				_, err = p.Run(ctx, scanString(in), slow, w, func(Record) {
					if n++; n == stopAfter {
						cancel()
					}
				}, nil)
				return err
			}
			most.Store(0)
			if err := run(false, stop); stop > 0 != errors.Is(err, context.Canceled) {
				t.Fatalf("concurrency %d, stop %d: %v", c, stop, err)
			}
			if stop > 0 {
				got := strip(readLogFile(t, out))
				if len(got) < stop || fmt.Sprint(got) != fmt.Sprint(want[:len(got)]) {
					t.Fatalf("concurrency %d stopped after %d: the log is not a prefix of the whole run's:\n%v", c, stop, got)
				}
				if err := run(true, 0); err != nil {
					t.Fatal(err)
				}
			}
			if got := strip(readLogFile(t, out)); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("concurrency %d (stop %d):\n%v\nwant\n%v", c, stop, got, want)
			}
			if stop == 0 && most.Load() < 2 {
				t.Errorf("concurrency %d: at most %d records were scored at once", c, most.Load())
			}
			if most.Load() > int32(c) {
				t.Errorf("concurrency %d: %d records were scored at once", c, most.Load())
			}
		}
	}
}
