package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"verdict/engine/fixture/testmodel"
)

type catalogFixture struct {
	Catalog []map[string]any `json:"catalog"`
	Cases   []struct {
		Intent         string   `json:"intent"`
		K              int      `json:"k"`
		PromptText     string   `json:"prompt_text"`
		ExpectedNames  []string `json:"expected_names"`
		ExpectedTokens []int32  `json:"expected_tokens"`
		Steps          []struct {
			Node   int32   `json:"node"`
			Legal  []int32 `json:"legal"`
			Chosen int32   `json:"chosen"`
		} `json:"steps"`
	} `json:"cases"`
}

// writeCatalog writes the fixture's catalog (with its token ids) to a file.
func writeCatalog(t *testing.T) (string, catalogFixture) {
	t.Helper()
	data, err := os.ReadFile(testmodel.Testdata("catalog-tiny.json"))
	if err != nil {
		t.Fatal(err)
	}
	var f catalogFixture
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "tools.json")
	b, _ := json.Marshal(f.Catalog)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path, f
}

// TestCatalogCommand: verdict catalog on the built-in model (the fixture's
// weights) with --weights f32 gives the fixture's answers, through the
// prompt builder and through --raw, alone and in --batch.
func TestCatalogCommand(t *testing.T) {
	testmodel.Tokenizer(t)
	cat, f := writeCatalog(t)
	c := f.Cases[3]
	code, out, errOut := run("catalog", "--weights", "f32", "--catalog", cat, "--k", "3", "--text", c.Intent, "--json", "--check-dense")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var got struct {
		Names  []string `json:"names"`
		Tokens []int32  `json:"tokens"`
		Steps  []struct {
			Node   int32   `json:"node"`
			Legal  []int32 `json:"legal"`
			Chosen int32   `json:"chosen"`
		} `json:"steps"`
		Timing map[string]float64 `json:"timing"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if !slices.Equal(got.Names, c.ExpectedNames) || !slices.Equal(got.Tokens, c.ExpectedTokens) || len(got.Steps) != len(c.Steps) {
		t.Fatalf("names %v tokens %v; fixture %v %v", got.Names, got.Tokens, c.ExpectedNames, c.ExpectedTokens)
	}
	for i, s := range got.Steps {
		if s.Node != c.Steps[i].Node || !slices.Equal(s.Legal, c.Steps[i].Legal) || s.Chosen != c.Steps[i].Chosen {
			t.Fatalf("step %d: %+v, fixture %+v", i, s, c.Steps[i])
		}
	}
	if got.Timing["tokens"] != float64(len(c.ExpectedTokens)) || !strings.Contains(errOut, "same winners") {
		t.Fatalf("timing %v, stderr %q", got.Timing, errOut)
	}

	// --raw: the fixture's prompt text, special tokens written as text.
	pf := filepath.Join(t.TempDir(), "prompt.txt")
	os.WriteFile(pf, []byte(f.Cases[5].PromptText), 0o644)
	code, out, errOut = run("catalog", "--weights", "f32", "--catalog", cat, "--k", "3", "--prompt-file", pf, "--raw")
	if want := strings.Join(f.Cases[5].ExpectedNames, "\n") + "\n"; code != 0 || out != want {
		t.Fatalf("--raw: exit %d, stdout %q, want %q (%s)", code, out, want, errOut)
	}

	// --batch: every case in one file.
	var lines []string
	for _, c := range f.Cases {
		b, _ := json.Marshal(map[string]any{"text": c.Intent, "k": c.K})
		lines = append(lines, string(b))
	}
	bf := filepath.Join(t.TempDir(), "batch.jsonl")
	os.WriteFile(bf, []byte(strings.Join(lines, "\n")+"\n"), 0o644)
	code, out, errOut = run("catalog", "--weights", "f32", "--catalog", cat, "--batch", bf)
	if code != 0 || !strings.Contains(errOut, "requests/s") {
		t.Fatalf("--batch: exit %d: %s", code, errOut)
	}
	outs := strings.Split(strings.TrimSpace(out), "\n")
	if len(outs) != len(f.Cases) {
		t.Fatalf("--batch: %d lines for %d requests", len(outs), len(f.Cases))
	}
	for i, l := range outs {
		var r struct {
			Request int      `json:"request"`
			Names   []string `json:"names"`
		}
		if err := json.Unmarshal([]byte(l), &r); err != nil || r.Request != i+1 || !slices.Equal(r.Names, f.Cases[i].ExpectedNames) {
			t.Fatalf("--batch line %d: %s (%v), want %v", i, l, err, f.Cases[i].ExpectedNames)
		}
	}
}

func TestCatalogCommandErrors(t *testing.T) {
	testmodel.Tokenizer(t)
	cat, _ := writeCatalog(t)
	dir := t.TempDir()
	file := func(name, body string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(body), 0o644)
		return p
	}
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--k", "1", "--text", "x"}, 2, "--catalog is required"},
		{[]string{"--catalog", cat, "--text", "x"}, 2, "--k must be at least 1"},
		{[]string{"--catalog", cat, "--k", "1"}, 2, "exactly one of --text and --prompt-file"},
		{[]string{"--catalog", cat, "--k", "1", "--text", "  "}, 2, "the request is empty"},
		{[]string{"--catalog", cat, "--k", "1", "--text", "\xff\xfe"}, 2, "not valid UTF-8"},
		{[]string{"--catalog", cat, "--k", "43", "--text", "x"}, 1, "k = 43, but the catalog has 42 entries"},
		{[]string{"--catalog", file("empty.json", "[]"), "--k", "1", "--text", "x"}, 1, "no entries"},
		{[]string{"--catalog", file("obj.json", `{"name": "a"}`), "--k", "1", "--text", "x"}, 1, "a catalog is a JSON list"},
		{[]string{"--catalog", file("dup.json", `[{"name": "a"}, {"name": "a"}]`), "--k", "1", "--text", "x"}, 1, `same name "a"`},
		{[]string{"--catalog", file("key.json", `[{"name": "a", "desc": "x"}]`), "--k", "1", "--text", "x"}, 1, `unknown field "desc"`},
		{[]string{"--catalog", file("ids.json", `[{"name": "a", "token_ids": [5]}]`), "--k", "1", "--text", "x"}, 1, "token_ids [5]"},
		{[]string{"--catalog", "/dev/zero", "--k", "1", "--text", "x"}, 1, "not a regular file"},
		{[]string{"--catalog", cat, "--batch", file("b.jsonl", `{"text": "x"}`)}, 1, "b.jsonl: none of its 1 requests can be decoded"},
		{[]string{"--catalog", cat, "--batch", file("b7.jsonl", "{\"text\": \"x\", \"k\": 1}\n{\"text\": \"x\", \"k\": 0}\n"), "--gates", "1"}, 1,
			"b7.jsonl line 2: k = 0: k must be at least 1 (the number of distinct entries to name) (the gates take only requests that can be decoded)"},
		{[]string{"--catalog", file("blank.json", `[{"name": "a"}, {"name": " "}]`), "--k", "1", "--text", "x"}, 1, `entry 1 has an empty name: " " is only white space`},
		{[]string{"--catalog", cat, "--batch", file("b2.jsonl", `{"text": "x", "k": 1}`), "--k", "2"}, 2, "no --text, --prompt-file or --k"},
		{[]string{"--catalog", cat, "--k", "1", "--text", "x", "--gates", "3"}, 2, "--gates needs --batch"},
		{[]string{"--catalog", cat, "--batch", file("b3.jsonl", `{"text": "x", "k": 1}`), "--gates", "100001"}, 2, "at most 100000"},
		{[]string{"--catalog", cat, "--k", "1", "--text", "x", "--max-batch", "2"}, 2, "--max-batch 2: want a positive count, with --batch"},
		{[]string{"--catalog", cat, "--batch", file("b4.jsonl", `{"text": "x", "k": 1}`), "--max-batch", "-1"}, 2, "--max-batch -1"},
		{[]string{"--catalog", cat, "--batch", file("b5.jsonl", `{"text": "x", "k": 1}`), "--max-batch", "2", "--loop", "host"}, 2, "without --loop or --gates"},
		{[]string{"--catalog", cat, "--batch", file("b6.jsonl", `{"text": "x", "k": 1}`), "--max-batch", "1000000000"}, 1, "a batch of 1000000000 sequences exceeds"},
	}
	for _, c := range cases {
		code, _, errOut := run(append([]string{"catalog"}, c.args...)...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and %q", c.args, code, errOut, c.code, c.want)
		}
	}
}

// TestCatalogBatchErrorLines: the lines of a --batch that cannot be decoded
// are error lines in their place, with their line, and the others are
// decoded as they would be alone.
func TestCatalogBatchErrorLines(t *testing.T) {
	testmodel.Tokenizer(t)
	cat, f := writeCatalog(t)
	req := func(c int) string {
		b, _ := json.Marshal(map[string]any{"text": f.Cases[c].Intent, "k": f.Cases[c].K})
		return string(b)
	}
	lines := []string{
		req(0),
		"{not json",
		`{"text": "x"}`,
		"",
		`{"text": "x", "k": 0}`,
		req(1),
		`{"text": "x", "k": 43}`,
		`{"text": "  ", "k": 1}`,
		`{"text": "look: <start_of_image>", "k": 1}`,
		req(2),
	}
	bf := filepath.Join(t.TempDir(), "batch.jsonl")
	os.WriteFile(bf, []byte(strings.Join(lines, "\n")+"\n"), 0o644)
	code, out, errOut := run("catalog", "--weights", "f32", "--catalog", cat, "--batch", bf)
	if code != 0 || !strings.Contains(errOut, "6 of the 9 requests of "+bf+" cannot be decoded") || !strings.Contains(errOut, "requests/s") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	type line struct {
		Request int      `json:"request"`
		Line    int      `json:"line"`
		Names   []string `json:"names"`
		Error   string   `json:"error"`
	}
	want := []line{
		{Request: 1, Names: f.Cases[0].ExpectedNames},
		{Request: 2, Line: 2, Error: "bad JSON: invalid character 'n' looking for beginning of object key string"},
		{Request: 3, Line: 3, Error: `want {"text": …, "k": …}`},
		{Request: 4, Line: 5, Error: "k = 0: k must be at least 1 (the number of distinct entries to name)"},
		{Request: 5, Names: f.Cases[1].ExpectedNames},
		{Request: 6, Line: 7, Error: "k = 43, but the catalog has 42 entries (k must be at most 42)"},
		{Request: 7, Line: 8, Error: "the request is empty"},
		{Request: 8, Line: 9, Error: "the text holds <start_of_image>, the model's start-of-image token"},
		{Request: 9, Names: f.Cases[2].ExpectedNames},
	}
	outs := strings.Split(strings.TrimSpace(out), "\n")
	if len(outs) != len(want) {
		t.Fatalf("%d output lines, want %d:\n%s", len(outs), len(want), out)
	}
	for i, l := range outs {
		var got line
		if err := json.Unmarshal([]byte(l), &got); err != nil {
			t.Fatal(err)
		}
		w := want[i]
		if got.Request != w.Request || got.Line != w.Line || !slices.Equal(got.Names, w.Names) || !strings.HasPrefix(got.Error, w.Error) || (got.Error == "") != (w.Error == "") {
			t.Errorf("line %d: %s, want %+v", i+1, l, w)
		}
	}
}

// --gates runs the decoder's gates over the batch's requests and prints
// every gate with its counts; here all pass.
func TestCatalogGates(t *testing.T) {
	testmodel.Tokenizer(t)
	cat, _ := writeCatalog(t)
	reqs := filepath.Join("..", "..", "testdata", "catalog-gate-requests.jsonl")
	code, out, errOut := run("catalog", "--catalog", cat, "--batch", reqs, "--gates", "3")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 14 {
		t.Fatalf("%d gate lines, want 14:\n%s", len(lines), out)
	}
	for _, l := range lines {
		if !strings.Contains(l, " 0 failed") || strings.Contains(l, " 0 passed") {
			t.Errorf("gate line %q", l)
		}
	}
}

// --loop decodes the batch as one loop of backend steps: the same names as
// the batched decoder, driven either way; an unknown driver is refused.
func TestCatalogLoop(t *testing.T) {
	testmodel.Tokenizer(t)
	cat, _ := writeCatalog(t)
	reqs := filepath.Join("..", "..", "testdata", "catalog-gate-requests.jsonl")
	code, want, errOut := run("catalog", "--catalog", cat, "--batch", reqs)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, b := range []string{"1", "3"} {
		if code, out, errOut := run("catalog", "--catalog", cat, "--batch", reqs, "--max-batch", b); code != 0 || out != want {
			t.Errorf("--max-batch %s: exit %d, output %q (want %q), stderr %s", b, code, out, want, errOut)
		}
	}
	for _, mode := range []string{"device", "host"} {
		code, out, errOut := run("catalog", "--catalog", cat, "--batch", reqs, "--loop", mode)
		if code != 0 || out != want || !strings.Contains(errOut, "loop: ") {
			t.Errorf("--loop %s: exit %d, output %q (want %q), stderr %s", mode, code, out, want, errOut)
		}
	}
	if code, _, errOut := run("catalog", "--catalog", cat, "--batch", reqs, "--loop", "gpu"); code != 2 || !strings.Contains(errOut, `--loop "gpu"`) {
		t.Errorf("--loop gpu: exit %d, %s", code, errOut)
	}
}
