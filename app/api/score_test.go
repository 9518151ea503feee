package api

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// TestScore: the built-in model scores the moderation preset; every
// decision of every field is a distribution summing to 1, in the result JSON
// of `verdict score`.
func TestScore(t *testing.T) {
	ts, _, _ := newAPI(t, true)
	schema, err := os.ReadFile(filepath.Join("..", "presets", "moderation.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, extra string
		backend     string
	}{
		{"default", `,"model":"builtin"`, "json"},
		{"cached, contextual", `,"backend":"cached","normalize":"contextual","temperature":2,"branch_batch":4`, "cached"},
		{"logprobs", `,"token_logprobs":true`, "json"},
	} {
		body := `{"schema":` + string(schema) + `,"input":{"text":"Buy cheap watches at http://spam.example now!!!"}` + c.extra + `}`
		resp, b := call(t, "POST", ts.URL+"/v1/score", body, nil)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", c.name, resp.StatusCode, b)
		}
		var out struct {
			Model         string `json:"model"`
			RandomWeights bool   `json:"random_weights"`
			Backend       string `json:"backend"`
			Answer        map[string]any
			Fields        []struct {
				Name      string
				Decisions []struct {
					Candidates []struct {
						Value         string
						Probability   float64
						TokenLogprobs []float64 `json:"token_logprobs"`
					}
				}
			}
			Timings map[string]any
		}
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatal(err)
		}
		if !out.RandomWeights || out.Backend != c.backend || out.Model == "" || len(out.Timings) == 0 {
			t.Errorf("%s: model %q random %v backend %q timings %v", c.name, out.Model, out.RandomWeights, out.Backend, out.Timings)
		}
		if len(out.Fields) != 4 || len(out.Answer) != 4 {
			t.Fatalf("%s: %d fields, answer %v", c.name, len(out.Fields), out.Answer)
		}
		for _, f := range out.Fields {
			if len(f.Decisions) == 0 {
				t.Errorf("%s: field %s has no decisions", c.name, f.Name)
			}
			for _, d := range f.Decisions {
				sum := 0.0
				for _, cd := range d.Candidates {
					sum += cd.Probability
					if c.name == "logprobs" && len(cd.TokenLogprobs) == 0 {
						t.Errorf("%s: %s=%s without token log-probabilities", c.name, f.Name, cd.Value)
					}
				}
				if len(d.Candidates) < 2 || math.Abs(sum-1) > 1e-9 {
					t.Errorf("%s: field %s: %d candidates summing to %v", c.name, f.Name, len(d.Candidates), sum)
				}
			}
		}
	}
}

// TestScoreImage: an image passed as base64 data goes through the model's
// vision tower, or is refused by name when the model has none.
func TestScoreImage(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the vision tower (seconds on a CPU)")
	}
	ts, svc, _ := newAPI(t, true)
	img := image.NewRGBA(image.Rect(0, 0, 16, 16))
	for i := range img.Pix {
		img.Pix[i] = uint8(i)
	}
	img.Set(3, 3, color.White)
	var buf bytes.Buffer
	png.Encode(&buf, img)
	body := `{"schema":` + boolSchema + `,"input":{"text":"Is there a dot?","images":[{"data":"` + base64.StdEncoding.EncodeToString(buf.Bytes()) + `","name":"dot.png"}]}}`
	resp, b := call(t, "POST", ts.URL+"/v1/score", body, nil)
	vision := false
	for _, in := range svc.Models.Info().Inputs {
		if in.Name == "image" {
			vision = in.Supported
		}
	}
	if !vision {
		if e := errorOf(t, b); resp.StatusCode != 400 || e.Code != CodeBadMedia {
			t.Errorf("image without a vision tower: %d %v", resp.StatusCode, e)
		}
		return
	}
	var out struct {
		PromptTokens int `json:"prompt_tokens"`
	}
	if resp.StatusCode != 200 || json.Unmarshal(b, &out) != nil {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	if out.PromptTokens < 256 {
		t.Errorf("prompt tokens %d: the image's soft tokens are missing", out.PromptTokens)
	}
}

// TestConcurrentClients: many clients at once, scoring and generating, are
// all served (none is told the model is busy), each with the answer it gets
// alone: its fields' probabilities, its greedy tokens.
func TestConcurrentClients(t *testing.T) {
	ts, _, _ := newAPI(t, true)
	schema, err := os.ReadFile(filepath.Join("..", "presets", "moderation.json"))
	if err != nil {
		t.Fatal(err)
	}
	texts := []string{"Buy cheap watches now!!!", "You are all idiots.", "Lovely weather today.", "Click here to win."}
	scoreBody := func(i int) string {
		return `{"schema":` + string(schema) + `,"input":{"text":"` + texts[i%len(texts)] + `"}}`
	}
	genBody := func(i int) string {
		return fmt.Sprintf(`{"prompt":"Say %d things.","max_tokens":6,"temperature":0}`, i%3)
	}
	// What each request's answer is alone, one at a time.
	strip := func(path string, b []byte) string {
		var out map[string]any
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatalf("%s: %v: %s", path, err, b)
		}
		if path == "/v1/score" {
			return fmt.Sprint(out["answer"], out["fields"] != nil, fieldsProbs(out["fields"]))
		}
		return fmt.Sprint(out["text"], out["tokens"], out["finish_reason"])
	}
	type req struct{ path, body string }
	var reqs []req
	for i := 0; i < 12; i++ {
		if i%2 == 0 {
			reqs = append(reqs, req{"/v1/score", scoreBody(i / 2)})
		} else {
			reqs = append(reqs, req{"/v1/generate", genBody(i / 2)})
		}
	}
	alone := make([]string, len(reqs))
	for i, r := range reqs {
		resp, b := call(t, "POST", ts.URL+r.path, r.body, nil)
		if resp.StatusCode != 200 {
			t.Fatalf("%s alone: %d %s", r.path, resp.StatusCode, b)
		}
		alone[i] = strip(r.path, b)
	}
	got := make([]string, len(reqs))
	status := make([]int, len(reqs))
	var wg sync.WaitGroup
	for i, r := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, b := call(t, "POST", ts.URL+r.path, r.body, nil)
			status[i] = resp.StatusCode
			if resp.StatusCode == 200 {
				got[i] = strip(r.path, b)
			} else {
				got[i] = string(b)
			}
		}()
	}
	wg.Wait()
	for i := range reqs {
		if status[i] != 200 || got[i] != alone[i] {
			t.Errorf("client %d (%s) beside %d others: %d %s\nalone: %s", i, reqs[i].path, len(reqs)-1, status[i], got[i], alone[i])
		}
	}
}

// fieldsProbs lists every candidate's probability of a score response's
// fields.
func fieldsProbs(v any) []any {
	var out []any
	fs, _ := v.([]any)
	for _, f := range fs {
		ds, _ := f.(map[string]any)["decisions"].([]any)
		for _, d := range ds {
			cs, _ := d.(map[string]any)["candidates"].([]any)
			for _, c := range cs {
				out = append(out, c.(map[string]any)["probability"], c.(map[string]any)["log_likelihood"])
			}
		}
	}
	return out
}
