package api

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"path/filepath"
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
