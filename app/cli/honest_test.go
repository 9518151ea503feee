package cli

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"verdict/engine/fixture/testmodel"
)

// TestScoreFlagHonesty: values the scorer used to replace silently, and
// inputs the app refuses, are errors; none of these load the model.
func TestScoreFlagHonesty(t *testing.T) {
	dir := t.TempDir()
	schema := filepath.Join("..", "..", "engine", "scorer", "testdata", "ticket.json")
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	bin := write("bin.txt", "late \xff\xfe parcel")
	blank := write("blank.txt", " \n\t ")
	arr := write("array.json", `[{"name": "a", "question": "A?", "type": "bool"}]`)
	extra := write("extra.json", `{"global_temperature": 1.2, "field_temperatures": {"priority": 0.9}, "temperature": 2}`)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"score", "--schema", schema, "--text", "x", "--temperature", "0"}, 2, "--temperature must be positive, got 0"},
		{[]string{"score", "--schema", schema, "--text", "x", "--temperature", "-1"}, 2, "--temperature must be positive"},
		{[]string{"score", "--schema", schema, "--text", "x", "--branch-batch", "-1"}, 2, "--branch-batch must be from 1 to 64 (0: the device's default), got -1"},
		{[]string{"score", "--schema", schema, "--text", "x", "--branch-batch", "65"}, 2, "--branch-batch must be from 1 to 64"},
		{[]string{"calibrate", "--schema", schema, "--examples", "ex.jsonl", "--temperature", "2"}, 2, "--temperature does not apply to calibrate"},
		{[]string{"calibrate", "--schema", schema, "--examples", "ex.jsonl", "--branch-batch", "-1"}, 2, "--branch-batch must be from 1 to 64"},
		{[]string{"calibrate", "--schema", schema, "--examples", "ex.jsonl", "--calibration", extra}, 2, "--calibration does not apply to calibrate"},
		{[]string{"score", "--schema", schema, "--text", "  \n "}, 1, "the input is empty"},
		{[]string{"score", "--schema", schema, "--text-file", blank}, 1, blank + ": the input is empty"},
		{[]string{"score", "--schema", schema, "--text-file", bin}, 1, bin + ": the input is not valid UTF-8 text"},
		{[]string{"score", "--schema", arr, "--text", "x"}, 1, `the schema must be a JSON object like {"fields": [...]}, but it is an array`},
		{[]string{"score", "--schema", schema, "--text", "x", "--calibration", extra}, 1, `unknown field "temperature"`},
		{[]string{"calibrate", "--schema", schema, "--examples", "ex.jsonl", "--out", filepath.Join(dir, "no", "such", "dir", "c.json")}, 1, "--out " + filepath.Join(dir, "no", "such", "dir", "c.json") + " is not writable"},
	} {
		code, _, errOut := run(tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("verdict %v: exit %d, stderr %q; want exit %d and %q", tc.args, code, errOut, tc.code, tc.want)
		}
	}
}

// TestScoreCalibrationHonesty: a calibration for another schema is refused;
// one that replaces --temperature says so on stderr and in the result.
func TestScoreCalibrationHonesty(t *testing.T) {
	testmodel.Tokenizer(t)
	dir := t.TempDir()
	schema := filepath.Join("..", "..", "engine", "scorer", "testdata", "ticket.json")
	foreign := filepath.Join(dir, "foreign.json")
	os.WriteFile(foreign, []byte(`{"global_temperature": 1.2, "field_temperatures": {"sentiment": 0.9}}`), 0o644)
	code, _, errOut := run("score", "--model", "builtin", "--schema", schema, "--text", "late", "--calibration", foreign)
	if code != 1 || !strings.Contains(errOut, `field "sentiment" is not in the schema`) {
		t.Errorf("foreign calibration: exit %d, %s", code, errOut)
	}
	cal := filepath.Join(dir, "cal.json")
	os.WriteFile(cal, []byte(`{"global_temperature": 1.2, "field_temperatures": {"priority": 0.9}}`), 0o644)
	code, out, errOut := run("score", "--model", "builtin", "--schema", schema, "--text", "late", "--calibration", cal, "--temperature", "2")
	if code != 0 || !strings.Contains(errOut, "replace --temperature 2") || !strings.Contains(out, `"overridden_temperature": 2`) {
		t.Errorf("calibration over --temperature: exit %d, stdout %.400s, stderr %s", code, out, errOut)
	}
	code, out, errOut = run("score", "--model", "builtin", "--schema", schema, "--text", "late", "--calibration", cal)
	if code != 0 || strings.Contains(errOut, "replace") || strings.Contains(out, "overridden_temperature") {
		t.Errorf("calibration without --temperature: exit %d, stderr %s", code, errOut)
	}
}

// failWriter fails every write; cancelWriter cancels a context on the first.
type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

type cancelWriter struct {
	cancel context.CancelFunc
	b      strings.Builder
}

func (w *cancelWriter) Write(p []byte) (int, error) {
	w.cancel()
	return w.b.Write(p)
}

// TestGenerateHonesty: no speed figures for a failed run, exit 0 with the
// text so far on Ctrl-C, prompts past max_position_embeddings and media
// placeholders in a --raw prompt refused.
func TestGenerateHonesty(t *testing.T) {
	testmodel.Tokenizer(t)
	args := []string{"--model", "builtin", "--prompt", "Hello", "--max-tokens", "20", "--temperature", "0"}
	var errOut strings.Builder
	err := generateCmd(context.Background(), args, failWriter{}, &errOut)
	if err == nil || !strings.Contains(err.Error(), "disk full") || strings.Contains(errOut.String(), "tokens/s") {
		t.Errorf("failed run: %v, stderr %q (want the error and no speed figures)", err, errOut.String())
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := &cancelWriter{cancel: cancel}
	errOut.Reset()
	err = generateCmd(ctx, args, w, &errOut)
	if err != nil || w.b.Len() == 0 || strings.Contains(errOut.String(), "tokens/s") || !strings.Contains(errOut.String(), "interrupted after") {
		t.Errorf("interrupted run: %v, stdout %q, stderr %q (want no error, the text so far, no speed)", err, w.b.String(), errOut.String())
	}
	code, _, stderr := run("generate", "--model", "builtin", "--prompt", strings.Repeat("late parcel ", 3000), "--max-tokens", "1")
	if code != 1 || !strings.Contains(stderr, "more than the model's max_position_embeddings of 4096") {
		t.Errorf("long prompt: exit %d, %s", code, stderr)
	}
	code, _, stderr = run("generate", "--model", "builtin", "--raw", "--prompt", "look <image_soft_token>", "--max-tokens", "1")
	if code != 1 || !strings.Contains(stderr, "--raw prompt: the text holds <image_soft_token> (id 262144 in this tokenizer), which the model reads as its end-of-image token") {
		t.Errorf("placeholder in a raw prompt: exit %d, %s", code, stderr)
	}
	code, _, stderr = run("generate", "--model", "builtin", "--prompt", "look <image_soft_token>", "--max-tokens", "1")
	if code != 1 || !strings.Contains(stderr, "the text holds <image_soft_token>") {
		t.Errorf("placeholder in a chat prompt: exit %d, %s", code, stderr)
	}
	code, _, stderr = run("generate", "--model", "builtin", "--prompt", "  \n", "--max-tokens", "1")
	if code != 2 || !strings.Contains(stderr, "--prompt is required") {
		t.Errorf("blank prompt: exit %d, %s", code, stderr)
	}
}
