package cli

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"verdict/engine/fixture/testmodel"
)

func run(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = Main(args, &o, &e)
	return code, o.String(), e.String()
}

func TestVerifyFixture(t *testing.T) {
	testmodel.Tokenizer(t)
	code, out, errOut := run("verify-fixture", filepath.Join("..", "..", "testdata", "gemma3n-micro-bf16.tar.gz"))
	if code != 0 || !strings.HasSuffix(out, "1 passed, 0 failed\n") || !strings.Contains(out, "logits ") {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	// A fixture whose reference disagrees fails with status 1.
	dir := testmodel.Dir(t, "gemma3n-micro-bf16.tar.gz")
	exp := filepath.Join(dir, "expected.safetensors")
	b, err := os.ReadFile(exp)
	if err != nil {
		t.Fatal(err)
	}
	hdr := 8 + int(binary.LittleEndian.Uint64(b))
	clear(b[hdr:]) // every reference logit becomes 0
	if err := os.WriteFile(exp, b, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, _ = run("verify-fixture", dir)
	if code != 1 || !strings.Contains(out, "FAIL") || !strings.HasSuffix(out, "0 passed, 1 failed\n") {
		t.Errorf("corrupted reference: exit %d, stdout %q", code, out)
	}
}

// TestVerifyPreprocessing: the image processor and the feature extractor
// match transformers on the preprocessing references, the JPEG photo
// included (decoded by libjpeg's djpeg, as PIL decodes it).
func TestVerifyPreprocessing(t *testing.T) {
	if _, err := exec.LookPath("djpeg"); err != nil {
		if os.Getenv("VERDICT_REQUIRE_MEDIA_TOOLS") == "1" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	for _, f := range []string{"gemma3n-preprocess.tar.gz", "gemma3n-preprocess-downscale.tar.gz"} {
		code, out, errOut := run("verify-fixture", filepath.Join("..", "..", "testdata", f))
		if code != 0 || !strings.HasSuffix(out, "4 passed, 0 failed\n") {
			t.Errorf("%s: exit %d\n%s%s", f, code, out, errOut)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "Usage: verdict"},
		{[]string{"nope"}, 2, `unknown command "nope"`},
		{[]string{"verify-fixture"}, 2, "want exactly one fixture PATH"},
		{[]string{"verify-fixture", "/nonexistent"}, 1, "no such file"},
		{[]string{"generate"}, 2, "--prompt is required"},
		{[]string{"score", "--text", "x"}, 2, "--schema is required"},
		{[]string{"score", "--schema", "s.json"}, 2, "exactly one of --text and --text-file"},
		{[]string{"score", "--schema", "s.json", "--text", "x", "--backend", "bogus"}, 2, `backend "bogus" is not available (available: json, cached, catalog, head)`},
		{[]string{"score", "--schema", "s.json", "--text", "x", "--normalize", "zscore"}, 2, `--normalize "zscore" is not one of none, contextual, pmi`},
		{[]string{"calibrate", "--schema", "s.json", "--examples", "e.jsonl", "--normalize", "pmi"}, 2, "--normalize does not apply to calibrate"},
		{[]string{"calibrate", "--schema", "s.json", "--examples", "e.jsonl", "--backend", "catalog"}, 2, "--backend catalog does not apply to calibrate"},
		{[]string{"generate", "--prompt", "x", "--bogus"}, 2, "flag provided but not defined"},
		{[]string{"calibrate", "--schema", "s.json"}, 2, "--examples is required"},
	} {
		code, _, errOut := run(tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("verdict %v: exit %d, stderr %q; want exit %d and %q", tc.args, code, errOut, tc.code, tc.want)
		}
	}
}

func TestScoreBuiltin(t *testing.T) {
	testmodel.Tokenizer(t)
	schema := filepath.Join("..", "..", "engine", "scorer", "testdata", "ticket.json")
	code, out, errOut := run("score", "--model", "builtin", "--schema", schema, "--text", "My parcel is late.", "--branch-batch", "3")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var res struct {
		Model         string          `json:"model"`
		RandomWeights bool            `json:"random_weights"`
		Answer        json.RawMessage `json:"answer"`
		Fields        []struct {
			Name string `json:"name"`
		} `json:"fields"`
		Calibration struct {
			Applied bool `json:"applied"`
		} `json:"calibration"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	if !res.RandomWeights || !strings.Contains(res.Model, "random weights") || len(res.Fields) != 5 || res.Calibration.Applied {
		t.Errorf("unexpected result: %+v", res)
	}

	// Calibrate on two labelled examples, then score with the calibration.
	dir := t.TempDir()
	ex := filepath.Join(dir, "ex.jsonl")
	os.WriteFile(ex, []byte(`{"text": "late parcel", "labels": {"priority": "high", "refund_requested": true, "issues": ["late delivery"], "anger": 4}}
{"text": "thanks, all good", "labels": {"priority": "low", "refund_requested": false, "issues": {"late delivery": false}, "anger": 1}}
`), 0o644)
	cal := filepath.Join(dir, "cal.json")
	html := filepath.Join(dir, "report.html")
	code, out, errOut = run("calibrate", "--model", "builtin", "--schema", schema, "--examples", ex, "--out", cal, "--report", html)
	if code != 0 || !strings.Contains(out, "global temperature") || !strings.Contains(out, "ECE") {
		t.Fatalf("calibrate: exit %d, %s %s", code, out, errOut)
	}
	t.Logf("calibrate --report:\n%s", out)
	if page, err := os.ReadFile(html); err != nil || strings.Count(string(page), "<svg") != 5 || !strings.Contains(string(page), "refund_requested") {
		t.Errorf("report: %v, %d diagrams", err, strings.Count(string(page), "<svg"))
	}
	code, out, errOut = run("score", "--model", "builtin", "--schema", schema, "--text", "late", "--calibration", cal)
	if code != 0 || !strings.Contains(out, `"applied": true`) {
		t.Errorf("score with calibration: exit %d, %s", code, errOut)
	}
	// A label that is not one of the values is an error naming it.
	os.WriteFile(ex, []byte(`{"text": "x", "labels": {"priority": "urgent"}}`+"\n"), 0o644)
	code, _, errOut = run("calibrate", "--model", "builtin", "--schema", schema, "--examples", ex, "--out", cal)
	if code != 1 || !strings.Contains(errOut, `"urgent" is not one of its values`) {
		t.Errorf("bad label: exit %d, %s", code, errOut)
	}
}

func TestGenerateBuiltin(t *testing.T) {
	testmodel.Tokenizer(t)
	code, out, errOut := run("generate", "--model", "builtin", "--prompt", "Hello", "--max-tokens", "5", "--temperature", "0")
	if code != 0 || out == "" || !strings.Contains(errOut, "random weights") || !strings.Contains(errOut, "tokens/s") {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

func TestBenchJSON(t *testing.T) {
	testmodel.Tokenizer(t)
	code, out, errOut := run("bench", "--model", "builtin", "--prompt-tokens", "16", "--decode-tokens", "2",
		"--limits=false", "--towers=false", "--json")
	var r struct {
		Models []struct {
			Weights string `json:"weights"`
			Prefill struct {
				TPS float64 `json:"tokens_per_second"`
			} `json:"prefill"`
			Decode struct {
				TPS float64 `json:"tokens_per_second"`
			} `json:"decode"`
			Scorer struct {
				Seconds     float64   `json:"seconds"`
				BranchBatch int       `json:"branch_batch"`
				Passes      []float64 `json:"branch_passes_ms"`
			} `json:"scorer"`
		} `json:"models"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil || len(r.Models) != 1 || r.Models[0].Weights != "q4" ||
		r.Models[0].Prefill.TPS <= 0 || r.Models[0].Decode.TPS <= 0 || r.Models[0].Scorer.Seconds <= 0 {
		t.Errorf("exit %d, %s %s", code, out, errOut)
	}
	// The scorer's passes of branch rows after the prefix, each timed.
	if sc := r.Models[0].Scorer; sc.BranchBatch < 1 || len(sc.Passes) == 0 || slices.ContainsFunc(sc.Passes, func(ms float64) bool { return !(ms > 0) }) {
		t.Errorf("scorer branch batch %d, passes %v ms: want a batch and each pass's time", sc.BranchBatch, sc.Passes)
	}
	code, _, errOut = run("bench", "--weights", "f16")
	if code != 2 || !strings.Contains(errOut, "want f32 or q4") {
		t.Errorf("--weights f16: exit %d, %s", code, errOut)
	}
}

// TestScoreMedia: an image, a WAV and a silent video on the built-in model.
func TestScoreMedia(t *testing.T) {
	testmodel.Tokenizer(t)
	for _, tool := range []string{"ffmpeg", "espeak-ng"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("VERDICT_REQUIRE_MEDIA_TOOLS") == "1" {
				t.Fatal(err)
			}
			t.Skip(err)
		}
	}
	dir := t.TempDir()
	wav, vid, png := filepath.Join(dir, "s.wav"), filepath.Join(dir, "v.mp4"), filepath.Join(dir, "i.png")
	for _, c := range [][]string{
		{"espeak-ng", "-w", wav, "The parcel is late."},
		{"ffmpeg", "-loglevel", "error", "-f", "lavfi", "-i", "testsrc=duration=1:size=160x120:rate=5", wav + ".mp4"},
		{"ffmpeg", "-loglevel", "error", "-f", "lavfi", "-i", "testsrc=duration=1:size=200x150:rate=1", "-frames:v", "1", png},
	} {
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", c, err, out)
		}
	}
	os.Rename(wav+".mp4", vid)
	schema := filepath.Join("..", "..", "engine", "scorer", "testdata", "ticket.json")
	code, out, errOut := run("score", "--model", "builtin", "--schema", schema, "--text", "see attached",
		"--image", png, "--audio", wav, "--video", vid)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var res struct {
		PromptTokens int `json:"prompt_tokens"`
		Fields       []json.RawMessage
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || len(res.Fields) != 5 {
		t.Fatalf("%v: %.300s", err, out)
	}
	// Text, 2 images of 256 tokens (the picture and the video's one frame) and 188 audio tokens.
	if res.PromptTokens < 2*256+188 {
		t.Errorf("prompt of %d tokens cannot hold the media", res.PromptTokens)
	}
	// Limits are checked before any tower runs.
	args := []string{"score", "--model", "builtin", "--schema", schema, "--text", "x"}
	for i := 0; i < 9; i++ {
		args = append(args, "--image", png)
	}
	if code, _, errOut := run(args...); code != 1 || !strings.Contains(errOut, "exceeds the limit of 8") {
		t.Errorf("nine images: exit %d, %s", code, errOut)
	}
	if code, _, errOut := run("generate", "--model", "builtin", "--prompt", "x", "--audio", png); code != 1 || !strings.Contains(errOut, png) {
		t.Errorf("an image given as audio: exit %d, %s", code, errOut)
	}
}

// TestScoreBackendsBuiltin: the cached backend and both corrections score
// the ticket schema end to end; the source says which, and a correction
// keeps the raw answer beside the corrected one.
func TestScoreBackendsBuiltin(t *testing.T) {
	testmodel.Tokenizer(t)
	schema := filepath.Join("..", "..", "engine", "scorer", "testdata", "ticket.json")
	for _, tc := range []struct{ backend, normalize, source string }{
		{"cached", "none", "cached: single-token answer codes"},
		{"cached", "contextual", "contextual calibration"},
		{"json", "pmi", "domain-conditional PMI"},
	} {
		code, out, errOut := run("score", "--model", "builtin", "--schema", schema, "--text", "My parcel is late.", "--backend", tc.backend, "--normalize", tc.normalize)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", tc, code, errOut)
		}
		var res struct {
			Backend   string          `json:"backend"`
			Source    string          `json:"probability_source"`
			Answer    json.RawMessage `json:"answer"`
			RawAnswer json.RawMessage `json:"raw_answer"`
			Fields    []struct {
				Decisions []struct {
					Correction *struct {
						Raw []float64 `json:"raw_probabilities"`
					} `json:"correction"`
				} `json:"decisions"`
			} `json:"fields"`
		}
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatalf("%v in %s", err, out)
		}
		corrected := tc.normalize != "none"
		if res.Backend != tc.backend || !strings.Contains(res.Source, tc.source) || len(res.Fields) != 5 || len(res.Answer) == 0 ||
			(len(res.RawAnswer) > 0) != corrected || (res.Fields[0].Decisions[0].Correction != nil) != corrected {
			t.Errorf("%v: backend %q, source %q, raw answer %s, %d fields", tc, res.Backend, res.Source, res.RawAnswer, len(res.Fields))
		}
	}
}
