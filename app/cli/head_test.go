package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"verdict/engine/fixture/testmodel"
)

const noteSchema = `{"instructions": "Read the note and answer every field in JSON.", "input_label": "Note", "fields": [
  {"name": "kind", "question": "What does the note mention?", "type": "choice", "options": ["animal", "music", "food"]},
  {"name": "urgent", "question": "Is the note urgent?", "type": "bool"}]}`

// noteExamples writes n examples whose labels are planted in the text.
func noteExamples(t *testing.T, path string, n int) {
	t.Helper()
	fill := strings.Fields("the parcel left early today and someone said it was fine near the old station")
	marker := map[string]string{"animal": "zebra", "music": "violin", "food": "tomato"}
	kinds := []string{"animal", "music", "food"}
	var b strings.Builder
	for i := range n {
		k, urgent := kinds[i%3], i%5 < 2
		var w []string
		for j := range 4 {
			w = append(w, fill[(i*7+j*3+i/3)%len(fill)])
		}
		w = append(w, map[bool]string{true: "now", false: "later"}[urgent], marker[k])
		line, _ := json.Marshal(map[string]any{"text": strings.Join(w, " ") + ".", "labels": map[string]any{"kind": k, "urgent": urgent}})
		b.Write(append(line, '\n'))
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestTrainHead: train-head prints the head beside the json backend on the
// held-out split and saves a head that score --backend head uses; a head
// that is missing, not asked for, or for other weights or another schema
// is refused by name.
func TestTrainHead(t *testing.T) {
	testmodel.Tokenizer(t)
	dir := t.TempDir()
	schema, examples, out := filepath.Join(dir, "schema.json"), filepath.Join(dir, "ex.jsonl"), filepath.Join(dir, "head.safetensors")
	os.WriteFile(schema, []byte(noteSchema), 0o644)
	noteExamples(t, examples, 60)
	code, stdout, stderr := run("train-head", "--weights", "f32", "--schema", schema, "--examples", examples, "--out", out)
	if code != 0 {
		t.Fatalf("train-head: exit %d\n%s%s", code, stdout, stderr)
	}
	t.Logf("train-head:\n%s", stdout)
	for _, want := range []string{"trained on 45 examples, 15 held out (seed 1)", "head, held out", "json, held out", "held out, by field", "  kind ", "  urgent ", "saved " + out} {
		if !strings.Contains(stdout, want) {
			t.Errorf("train-head output lacks %q:\n%s", want, stdout)
		}
	}
	code, stdout, stderr = run("score", "--weights", "f32", "--schema", schema, "--backend", "head", "--head", out, "--text", "the old station said now zebra.")
	if code != 0 {
		t.Fatalf("score --backend head: exit %d\n%s", code, stderr)
	}
	var res struct {
		Backend string `json:"backend"`
		Source  string `json:"probability_source"`
	}
	if err := json.Unmarshal([]byte(stdout), &res); err != nil || res.Backend != "head" || !strings.HasPrefix(res.Source, "decision head") {
		t.Errorf("score --backend head: backend %q, source %q (%v)", res.Backend, res.Source, err)
	}
	// score-file with the head: its log's header names the head, and a
	// resume without it is refused.
	in, log := filepath.Join(dir, "notes.jsonl"), filepath.Join(dir, "notes.log.jsonl")
	os.WriteFile(in, []byte(`{"id": "a", "text": "the old station said now zebra."}`+"\n"+`{"id": "b", "text": "later violin."}`+"\n"), 0o644)
	code, _, stderr = run("score-file", "--weights", "f32", "--schema", schema, "--backend", "head", "--head", out, "--input", in, "--output", log)
	if code != 0 {
		t.Fatalf("score-file --backend head: exit %d\n%s", code, stderr)
	}
	logged, _ := os.ReadFile(log)
	lines := strings.Split(strings.TrimSpace(string(logged)), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], `"head":"sha256:`) || !strings.Contains(lines[0], `"backend":"head"`) {
		t.Errorf("score-file --backend head: want a header naming the head and 2 records, got:\n%s", logged)
	}
	for _, l := range lines[1:] {
		if !strings.Contains(l, `"probability_source":"decision head`) || strings.Contains(l, `"error"`) {
			t.Errorf("score-file --backend head: record not scored by the head: %s", l)
		}
	}
	code, _, stderr = run("score-file", "--weights", "f32", "--schema", schema, "--input", in, "--output", log, "--resume")
	if code == 0 || !strings.Contains(stderr, "--backend") {
		t.Errorf("score-file --resume without the head: exit %d, stderr %q; want a refusal naming --backend", code, stderr)
	}
	ticket := filepath.Join("..", "..", "engine", "scorer", "testdata", "ticket.json")
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--schema", schema, "--backend", "head"}, 2, "--backend head needs --head FILE"},
		{[]string{"--schema", schema, "--head", out}, 2, "--head applies to --backend head only"},
		{[]string{"--schema", schema, "--backend", "head", "--head", out, "--image", "x.png"}, 2, "scores text inputs only"},
		{[]string{"--schema", schema, "--backend", "head", "--head", filepath.Join(dir, "none")}, 1, "does not exist: train a head"},
		{[]string{"--schema", ticket, "--backend", "head", "--head", out, "--weights", "f32"}, 1, "trained for another schema (fields kind, urgent"},
		{[]string{"--schema", schema, "--backend", "head", "--head", out, "--weights", "q4"}, 1, "trained over f32 weights, this model runs q4"},
	} {
		code, _, stderr := run(append([]string{"score", "--text", "zebra now."}, c.args...)...)
		if code != c.code || !strings.Contains(stderr, c.want) {
			t.Errorf("score %v: exit %d, stderr %q; want %d and %q", c.args, code, stderr, c.code, c.want)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--schema", schema}, "--examples is required"},
		{[]string{"--schema", schema, "--examples", examples, "--held-out", "1"}, "--held-out must be between 0 and 1"},
		{[]string{"--schema", schema, "--examples", examples, "--rank", "0"}, "must be positive"},
	} {
		code, _, stderr := run(append([]string{"train-head", "--out", filepath.Join(dir, "x")}, c.args...)...)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("train-head %v: exit %d, stderr %q; want 2 and %q", c.args, code, stderr, c.want)
		}
	}
}

// TestHeadTicketSchema: a head trained on the tiny fixture's schema (every
// field type, labels in both forms) scores it end to end.
func TestHeadTicketSchema(t *testing.T) {
	testmodel.Tokenizer(t)
	dir := t.TempDir()
	ticket := filepath.Join("..", "..", "engine", "scorer", "testdata", "ticket.json")
	examples, out := filepath.Join(dir, "ex.jsonl"), filepath.Join(dir, "head.safetensors")
	lines := []string{
		`{"text": "My parcel is two weeks late.", "labels": {"priority": "medium", "department": "shipping", "refund_requested": false, "issues": ["late delivery"], "anger": 2}}`,
		`{"text": "You charged me twice, refund me now!", "labels": {"priority": "high", "department": "billing", "refund_requested": true, "issues": {"double charge": true, "login problem": false}, "anger": 5}}`,
		`{"text": "I cannot log in since yesterday.", "labels": {"priority": "high", "department": "technical support", "issues": ["login problem"], "anger": 3}}`,
		`{"text": "The manual has a typo on page 4.", "labels": {"priority": "low", "department": "technical writing", "refund_requested": false, "anger": 1}}`,
		`{"text": "Do you sell gift cards?", "labels": {"priority": "low", "department": "sales", "refund_requested": false, "issues": [], "anger": 1}}`,
		`{"text": "The screen arrived cracked, I want my money back.", "labels": {"priority": "critical", "department": "shipping", "refund_requested": true, "issues": ["damaged item"], "anger": 4}}`,
	}
	os.WriteFile(examples, []byte(strings.Join(lines, "\n")+"\n"), 0o644)
	code, stdout, stderr := run("train-head", "--weights", "f32", "--schema", ticket, "--examples", examples, "--out", out, "--epochs", "20")
	if code != 0 {
		t.Fatalf("train-head: exit %d\n%s%s", code, stdout, stderr)
	}
	if !strings.Contains(stdout, "trained on 4 examples, 2 held out") {
		t.Errorf("train-head output:\n%s", stdout)
	}
	code, stdout, stderr = run("score", "--weights", "f32", "--schema", ticket, "--backend", "head", "--head", out, "--text", "My order is late and I was charged twice.")
	if code != 0 {
		t.Fatalf("score: exit %d\n%s", code, stderr)
	}
	var res struct {
		Answer map[string]json.RawMessage `json:"answer"`
	}
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"priority", "department", "refund_requested", "issues", "anger"} {
		if _, ok := res.Answer[f]; !ok {
			t.Errorf("answer lacks %s: %s", f, stdout)
		}
	}
}
