package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"verdict/engine/dataset"
	"verdict/engine/fixture/testmodel"
)

var ticketSchema = filepath.Join("..", "..", "engine", "scorer", "testdata", "ticket.json")

// stable is a result log without what differs between runs (timings): the
// records, their answers and every probability.
func stable(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("%s: %v in %q", path, err, line)
		}
		delete(rec, "elapsed_ms")
		if res, ok := rec["result"].(map[string]any); ok {
			delete(res, "timings")
			for _, f := range res["fields"].([]any) {
				delete(f.(map[string]any), "elapsed_ms")
			}
		}
		s, _ := json.Marshal(rec)
		out = append(out, string(s))
	}
	return strings.Join(out, "\n")
}

func writeInput(t *testing.T, dir string) string {
	in := filepath.Join(dir, "in.jsonl")
	var b strings.Builder
	texts := []string{"My parcel is late.", "Thanks, all good!", "The box arrived broken, I want my money back.",
		"Where is my order?", "I am furious: third time it is late.", "Can I change the address?", "Refund please.",
		"Great service.", "It never came."}
	for i, s := range texts {
		if i%3 == 0 {
			fmt.Fprintf(&b, "{\"id\": \"t%d\", \"text\": %q}\n", i, s)
		} else {
			fmt.Fprintf(&b, "{\"text\": %q}\n", s)
		}
		if i == 4 {
			b.WriteString("{not json\n{\"text\": \"   \"}\n")
		}
	}
	if err := os.WriteFile(in, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return in
}

// TestScoreFileShardsMerge: three shards merged equal one run on the whole
// file, record for record and probability for probability; a run stopped
// with a torn last line and resumed equals it too.
func TestScoreFileShardsMerge(t *testing.T) {
	testmodel.Tokenizer(t)
	dir := t.TempDir()
	in := writeInput(t, dir)
	base := []string{"score-file", "--model", "builtin", "--schema", ticketSchema, "--input", in}
	single := filepath.Join(dir, "single.jsonl")
	code, out, errOut := run(append(base, "--output", single)...)
	if code != 0 || !strings.Contains(out, "11 records, shard 0/1: scored 11 (2 errors)") {
		t.Fatalf("single run: exit %d, %s %s", code, out, errOut)
	}
	want := stable(t, single)
	if !strings.Contains(want, `"error":"the text is empty","id":"7"`) || !strings.Contains(want, `"id":"t0"`) {
		t.Fatalf("the single run's log: %s", want)
	}
	// Fields first: another prompt, every record's answer, the header says so.
	ff := filepath.Join(dir, "fields-first.jsonl")
	if code, out, errOut := run(append(base, "--output", ff, "--layout", "fields-first", "--concurrency", "4")...); code != 0 ||
		!strings.Contains(out, "scored 11 (2 errors)") {
		t.Fatalf("--layout fields-first: exit %d, %s %s", code, out, errOut)
	}
	if b, _ := os.ReadFile(ff); !strings.Contains(strings.SplitN(string(b), "\n", 2)[0], `"layout":"fields-first"`) {
		t.Errorf("--layout fields-first: header %s", strings.SplitN(string(b), "\n", 2)[0])
	}
	if got := stable(t, ff); got == want || strings.Count(got, `"answer"`) != 9 {
		t.Errorf("--layout fields-first: %d answers, the same log as input first: %v", strings.Count(got, `"answer"`), got == want)
	}
	// Records in flight at once, batched through one scheduler: the same
	// log, in input order, bit for bit.
	for _, c := range []string{"1", "4", "16"} {
		p := filepath.Join(dir, "concurrent-"+c+".jsonl")
		code, out, errOut := run(append(base, "--output", p, "--concurrency", c)...)
		if code != 0 || !strings.Contains(out, "scored 11 (2 errors)") {
			t.Fatalf("--concurrency %s: exit %d, %s %s", c, code, out, errOut)
		}
		if got := stable(t, p); got != want {
			t.Errorf("--concurrency %s:\n%s\nwant (the default)\n%s", c, got, want)
		}
	}

	var logs []string
	for i := 0; i < 3; i++ {
		p := filepath.Join(dir, fmt.Sprintf("out-%d.jsonl", i))
		code, out, errOut := run(append(base, "--output", p, "--shard", fmt.Sprintf("%d/3", i))...)
		if code != 0 || !strings.Contains(out, fmt.Sprintf("shard %d/3: scored %d", i, []int{4, 4, 3}[i])) {
			t.Fatalf("shard %d: exit %d, %s %s", i, code, out, errOut)
		}
		logs = append(logs, p)
	}
	// Missing a shard: refused with --input, a note without.
	all := filepath.Join(dir, "all.jsonl")
	code, _, errOut = run("merge", logs[0], logs[2], "--output", all, "--input", in)
	if code != 1 || !strings.Contains(errOut, "4 of the 11 records") {
		t.Errorf("merge without shard 1: exit %d, %s", code, errOut)
	}
	code, _, errOut = run("merge", logs[0], logs[1], "--output", all)
	if code != 0 || !strings.Contains(errOut, "note: 3 records before the last are in no log") {
		t.Errorf("merge without shard 2... wait, shard 2 holds the last: exit %d, %s", code, errOut)
	}
	code, out, errOut = run("merge", logs[2], logs[0], logs[1], "--output", all, "--input", in)
	if code != 0 || !strings.Contains(out, "merged 11 records (2 errors) from 3 logs, every record of") {
		t.Fatalf("merge: exit %d, %s %s", code, out, errOut)
	}
	if got := stable(t, all); got != want {
		t.Errorf("merged shards:\n%s\nwant (one run)\n%s", got, want)
	}
	csvOut := filepath.Join(dir, "all.csv")
	if code, _, errOut := run("merge", all, "--output", csvOut); code != 0 {
		t.Fatalf("merge to CSV: %s", errOut)
	}
	csv, _ := os.ReadFile(csvOut)
	if lines := strings.Split(string(csv), "\n"); len(lines) != 13 || lines[0] != "id,line,error,elapsed_ms,priority,department,refund_requested,issues.late delivery,issues.damaged item,issues.double charge,issues.login problem,anger" {
		t.Errorf("CSV: %d lines, header %q", len(lines), lines[0])
	}

	// A crash: the header and the first four records, then half of the fifth.
	b, _ := os.ReadFile(single)
	lines := strings.SplitAfter(string(b), "\n")
	crashed := filepath.Join(dir, "crashed.jsonl")
	os.WriteFile(crashed, []byte(strings.Join(lines[:5], "")+lines[5][:len(lines[5])/2]), 0o644)
	code, _, errOut = run(append(base, "--output", crashed)...)
	if code != 1 || !strings.Contains(errOut, "give --resume") {
		t.Errorf("over a log without --resume: exit %d, %s", code, errOut)
	}
	code, _, errOut = run("merge", crashed, "--output", all)
	if code != 1 || !strings.Contains(errOut, "line 6 is torn") {
		t.Errorf("merge of a torn log: exit %d, %s", code, errOut)
	}
	other := filepath.Join(dir, "other.json")
	b, _ = os.ReadFile(ticketSchema)
	os.WriteFile(other, []byte(strings.Replace(string(b), `"priority"`, `"urgency"`, 1)), 0o644)
	code, _, errOut = run("score-file", "--model", "builtin", "--schema", other, "--input", in, "--output", crashed, "--resume")
	if code != 1 || !strings.Contains(errOut, "crashed.jsonl was scored with --schema of hash sha256:") {
		t.Errorf("resume with another schema: exit %d, %s", code, errOut)
	}
	// Each setting that changes the results is refused, named.
	for _, c := range []struct {
		flags []string
		want  string
	}{
		{[]string{"--backend", "catalog"}, "was scored with --backend json, this run with --backend catalog"},
		{[]string{"--temperature", "0.5"}, "was scored with --temperature 1, this run with --temperature 0.5"},
		{[]string{"--normalize", "pmi"}, "was scored with --normalize none, this run with --normalize pmi"},
		{[]string{"--weights", "f32"}, "was scored with --weights q4, this run with --weights f32"},
		{[]string{"--group", "32"}, "was scored with --group 64, this run with --group 32"},
		{[]string{"--layout", "fields-first"}, "was scored with --layout input-first, this run with --layout fields-first"},
	} {
		code, _, errOut = run(append(append(base, "--output", crashed, "--resume"), c.flags...)...)
		if code != 1 || !strings.Contains(errOut, c.want) {
			t.Errorf("resume with %v: exit %d, %s; want %q", c.flags, code, errOut, c.want)
		}
	}
	code, out, errOut = run(append(base, "--output", crashed, "--resume")...)
	if code != 0 || !strings.Contains(out, "scored 7 (2 errors)") || !strings.Contains(out, "4 resumed") {
		t.Fatalf("resume: exit %d, %s %s", code, out, errOut)
	}
	if got := stable(t, crashed); got != want {
		t.Errorf("resumed:\n%s\nwant\n%s", got, want)
	}
	code, out, _ = run(append(base, "--output", crashed, "--resume")...)
	if code != 0 || !strings.Contains(out, "nothing left to score (11 in") {
		t.Errorf("resume of a finished log: exit %d, %s", code, out)
	}

	// The header says what scored the log; a shard scored otherwise is
	// not merged with the others.
	var head map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &head); err != nil {
		t.Fatal(err)
	}
	if head["verdict_result_log"] != 1.0 || head["model"] != "built-in tiny Gemma 3n (random weights)" || !strings.HasPrefix(head["model_hash"].(string), "sha256:") ||
		head["weights"] != "q4" || head["group"] != 64.0 || head["backend"] != "json" || head["layout"] != "input-first" || head["temperature"] != 1.0 || head["normalize"] != "none" || head["calibration"] != "" {
		t.Errorf("header %s", lines[0])
	}
	hot := filepath.Join(dir, "hot-1.jsonl")
	if code, _, errOut := run(append(base, "--output", hot, "--shard", "1/3", "--temperature", "2")...); code != 0 {
		t.Fatalf("shard 1 at another temperature: %s", errOut)
	}
	code, _, errOut = run("merge", logs[0], hot, logs[2], "--output", all)
	if code != 1 || !strings.Contains(errOut, "out-0.jsonl was scored with --temperature 1, "+hot+" with --temperature 2") {
		t.Errorf("merge of a shard at another temperature: exit %d, %s", code, errOut)
	}
	// A log of an older verdict (no header) is neither resumed nor merged.
	old := filepath.Join(dir, "old.jsonl")
	os.WriteFile(old, []byte(strings.Join(lines[1:5], "")), 0o644)
	code, _, errOut = run(append(base, "--output", old, "--resume")...)
	if code != 1 || !strings.Contains(errOut, "old.jsonl has no header line: it was written by an older verdict") {
		t.Errorf("resume of a log without a header: exit %d, %s", code, errOut)
	}
	code, _, errOut = run("merge", logs[0], old, "--output", all)
	if code != 1 || !strings.Contains(errOut, "old.jsonl has no header line") {
		t.Errorf("merge of a log without a header: exit %d, %s", code, errOut)
	}
}

// TestScoreFileOutputLinkedToInput: an --output that is the input through a
// symbolic or a hard link is refused before anything is opened for
// writing: the input keeps every byte, with --resume too.
func TestScoreFileOutputLinkedToInput(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.jsonl")
	body := "{\"id\": \"a\", \"text\": \"My parcel is late.\"}\n"
	os.WriteFile(in, []byte(body), 0o644)
	sym, hard := filepath.Join(dir, "sym.jsonl"), filepath.Join(dir, "hard.jsonl")
	if err := os.Symlink(in, sym); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(in, hard); err != nil {
		t.Fatal(err)
	}
	for _, out := range []string{sym, hard} {
		for _, resume := range []bool{false, true} {
			args := []string{"score-file", "--model", "builtin", "--schema", ticketSchema, "--input", in, "--output", out}
			if resume {
				args = append(args, "--resume")
			}
			code, _, errOut := run(args...)
			if code != 2 || !strings.Contains(errOut, "--output is the input file") {
				t.Errorf("%v: exit %d, %s", args, code, errOut)
			}
			if b, _ := os.ReadFile(in); string(b) != body {
				t.Fatalf("%v: the input is now %q", args, b)
			}
		}
	}
	code, _, errOut := run("merge", in, "--output", hard)
	if code != 2 || !strings.Contains(errOut, "is one of the logs") {
		t.Errorf("merge into a hard link of its log: exit %d, %s", code, errOut)
	}
}

func TestScoreFileCSVInput(t *testing.T) {
	testmodel.Tokenizer(t)
	dir := t.TempDir()
	in := filepath.Join(dir, "in.txt")
	os.WriteFile(in, []byte("id,text\na,\"late, again\"\nb,\"\"\n"), 0o644)
	out := filepath.Join(dir, "out.jsonl")
	code, stdout, errOut := run("score-file", "--model", "builtin", "--schema", ticketSchema, "--input", in, "--format", "csv", "--output", out)
	if code != 0 || !strings.Contains(stdout, "2 records, shard 0/1: scored 2 (1 errors)") {
		t.Fatalf("exit %d, %s %s", code, stdout, errOut)
	}
	got := stable(t, out)
	if !strings.Contains(got, `"id":"a","index":0,"line":2,"result":{"answer":{"anger":`) || !strings.Contains(got, `{"error":"the text is empty","id":"b","index":1,"line":3}`) {
		t.Errorf("log: %s", got)
	}
}

func TestScoreFileUsage(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.jsonl")
	os.WriteFile(in, []byte("{\"id\": \"a\", \"text\": \"x\"}\n{\"id\": \"a\", \"text\": \"y\"}\n"), 0o644)
	out := filepath.Join(dir, "out.jsonl")
	sf := []string{"score-file", "--model", "builtin", "--schema", ticketSchema}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{sf, 2, "--input and --output are required"},
		{append(sf, "--input", "-", "--output", out), 2, "--input must be a file"},
		{append(sf, "--input", in, "--output", "o.csv"), 2, "make CSV from it with verdict merge"},
		{append(sf, "--input", in, "--output", out, "--shard", "3/3"), 2, "--shard: shard \"3/3\": want 0 <= I < N"},
		{append(sf, "--input", "in.txt", "--output", out), 2, "cannot tell the format"},
		{append(sf, "--input", in, "--output", in), 2, "--output is the input file"},
		{append(sf, "--input", in, "--output", out, "--concurrency", "-1"), 2, "--concurrency must be from 0 to 4096, got -1"},
		{append(sf, "--input", in, "--output", out), 1, `id "a" is on line 1 and again on line 2`},
		{append(sf, "--input", filepath.Join(dir, "none.jsonl"), "--output", out), 1, "no such file"},
		{[]string{"merge", "--output", out}, 2, "give the result logs and --output"},
		{[]string{"merge", out, "--output", out}, 2, "is one of the logs"},
		{[]string{"merge", in, "--output", filepath.Join(dir, "m.jsonl")}, 1, "line 1 is not a result record"},
	} {
		code, _, errOut := run(tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("verdict %v: exit %d, stderr %q; want exit %d and %q", tc.args, code, errOut, tc.code, tc.want)
		}
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("the failed runs left %s behind: %v", out, err)
	}
}

func TestItemsLine(t *testing.T) {
	cases := []struct {
		p    dataset.Progress
		want string
	}{
		{dataset.Progress{Done: 0, Total: 8}, "scoring [........................]   0% 0 of 8 records · 0.0/s · 0s"},
		{dataset.Progress{Done: 2, Total: 8, Errors: 1, Elapsed: 4 * time.Second},
			"scoring [######..................]  25% 2 of 8 records · 1 errors · 0.5/s · 4s, about 12s left"},
	}
	for _, c := range cases {
		if got := itemsLine(c.p); got != c.want {
			t.Errorf("itemsLine(%+v) =\n%q\nwant\n%q", c.p, got, c.want)
		}
	}
	// Off a terminal: a plain line every 30 s, none before.
	var b strings.Builder
	clock := time.Unix(0, 0)
	plain := plainProgress(&b, false, func() time.Time { return clock })
	for i := 1; i <= 4; i++ {
		clock = clock.Add(20 * time.Second)
		plain(dataset.Progress{Done: i, Total: 4, Elapsed: time.Duration(i) * 20 * time.Second})
	}
	if got := strings.Count(b.String(), "\n"); got != 2 || !strings.HasPrefix(b.String(), "scoring [############............]  50% 2 of 4") {
		t.Errorf("plain progress: %d lines: %q", got, b.String())
	}
}
