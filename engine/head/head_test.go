package head_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"verdict/engine/fixture/testmodel"
	"verdict/engine/head"
	"verdict/engine/scorer"
)

// plantedSchema asks for a choice and a bool that the planted task decides.
const plantedSchema = `{
  "instructions": "Read the note and answer every field in JSON.",
  "input_label": "Note",
  "fields": [
    {"name": "kind", "question": "What does the note mention?", "type": "choice", "options": ["animal", "music", "food"]},
    {"name": "urgent", "question": "Is the note urgent?", "type": "bool"},
    {"name": "level", "question": "Which level?", "type": "score", "levels": ["1", "2", "3"]}
  ]
}`

// markers plant the kind label: the note mentions one of them.
var markers = map[string][]string{
	"animal": {"zebra"},
	"music":  {"violin"},
	"food":   {"tomato"},
}

// nFill filler words, drawn at random, sit between the two planted words.
const nFill = 4

var fillers = strings.Fields("the parcel left early today and someone said it was fine near the old station")

// planted returns n examples whose labels are planted in the text: its
// first word (a marker) decides kind, its last ("now" or "later") urgent;
// the words between are random fillers. (A random-weight model's states
// carry a word best at a fixed distance from the answer.)
func planted(n int, seed uint64) []scorer.Example {
	rng := rand.New(rand.NewPCG(seed, 7))
	kinds := []string{"animal", "music", "food"}
	out := make([]scorer.Example, n)
	for i := range out {
		kind := kinds[i%3]
		urgent := rng.IntN(2) == 0
		var words []string
		for range nFill {
			words = append(words, fillers[rng.IntN(len(fillers))])
		}
		words = append(words, map[bool]string{true: "now", false: "later"}[urgent], markers[kind][rng.IntN(len(markers[kind]))])
		out[i] = scorer.Example{
			Text:   strings.Join(words, " ") + ".",
			Labels: map[string]json.RawMessage{"kind": json.RawMessage(fmt.Sprintf("%q", kind)), "urgent": json.RawMessage(fmt.Sprint(urgent)), "level": json.RawMessage(fmt.Sprint(1 + i%3))},
		}
	}
	return out
}

func mustSchema(t testing.TB, src string) *scorer.Schema {
	t.Helper()
	s, err := scorer.ParseSchema([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestPlantedLabels: on a task whose labels are planted in the input, a
// head trained over the built-in model's hidden states is right on the
// held-out split far more often than chance and than the json backend
// (random weights: near chance).
func TestPlantedLabels(t *testing.T) {
	m, tk := testmodel.Tiny(t), testmodel.Tokenizer(t)
	sc, s := scorer.New(m, tk), mustSchema(t, plantedSchema)
	ctx := context.Background()
	start := time.Now()
	ex, err := head.Collect(ctx, sc, s, planted(120, 1), scorer.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	collect := time.Since(start)
	meta, fp, err := head.NewMeta(m, "tiny", s)
	if err != nil {
		t.Fatal(err)
	}
	h, rep, err := head.Train(ctx, ex, meta, fp, head.TrainOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("features of %d examples in %v; trained in %v, %d epochs (best %d)", len(ex), collect.Round(time.Millisecond), rep.Elapsed.Round(time.Millisecond), rep.Epochs, rep.BestEpoch)
	for _, r := range []struct {
		name string
		m    head.Metrics
	}{{"head train", rep.Train}, {"head held-out", rep.Held}, {"json held-out", rep.JSON}} {
		t.Logf("%-14s %3d decisions  accuracy %.3f  NLL %.3f  ECE %.3f", r.name, r.m.Decisions, r.m.Accuracy, r.m.NLL, r.m.ECE)
	}
	// Chance: 1/3 for kind and level, 1/2 for urgent.
	if rep.Held.Accuracy < 0.75 || rep.Held.Accuracy < rep.JSON.Accuracy+0.2 {
		t.Errorf("held-out accuracy %.3f, json %.3f: want at least 0.75 and 0.2 above json", rep.Held.Accuracy, rep.JSON.Accuracy)
	}
	if rep.Held.NLL >= rep.JSON.NLL {
		t.Errorf("held-out NLL %.3f not below json's %.3f", rep.Held.NLL, rep.JSON.NLL)
	}

	// Saved and loaded, the head scores the same; as the head backend it
	// answers new inputs of the task.
	path := filepath.Join(t.TempDir(), "head.safetensors")
	if err := h.Save(path); err != nil {
		t.Fatal(err)
	}
	loaded, err := head.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ex[0] {
		want, got := h.Scores(d), loaded.Scores(d)
		for j := range want {
			if math.Abs(want[j]-got[j]) > 1e-3*(1+math.Abs(want[j])) {
				t.Errorf("decision %s candidate %d: score %v after loading, %v before", d.Name, j, got[j], want[j])
			}
		}
	}
	fresh := planted(12, 2)
	right, total := 0, 0
	for _, e := range fresh {
		res, err := sc.Score(ctx, s, e.Text, scorer.Options{Backend: scorer.BackendHead, Head: loaded})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(res.ProbabilitySource, "decision head") {
			t.Fatalf("probability source %q", res.ProbabilitySource)
		}
		var ans map[string]any
		if err := json.Unmarshal(res.Answer, &ans); err != nil {
			t.Fatal(err)
		}
		for name, raw := range e.Labels {
			var want any
			json.Unmarshal(raw, &want)
			total++
			if fmt.Sprint(ans[name]) == fmt.Sprint(want) {
				right++
			}
		}
		for _, f := range res.Fields {
			for _, d := range f.Decisions {
				var sum float64
				for _, c := range d.Candidates {
					sum += c.Probability
				}
				if math.Abs(sum-1) > 1e-9 {
					t.Errorf("decision %s: probabilities sum to %v", d.Name, sum)
				}
			}
		}
	}
	t.Logf("head backend on %d new inputs: %d of %d answers right", len(fresh), right, total)
	if float64(right) < 0.75*float64(total) {
		t.Errorf("head backend: %d of %d answers right on new inputs", right, total)
	}
}

// TestRefusals: the head backend without a head, with a missing or broken
// file, or with a head trained for another schema or model, is a clear
// error naming the problem.
func TestRefusals(t *testing.T) {
	m, tk := testmodel.Tiny(t), testmodel.Tokenizer(t)
	sc, s := scorer.New(m, tk), mustSchema(t, plantedSchema)
	ctx := context.Background()
	ex, err := head.Collect(ctx, sc, s, planted(4, 3), scorer.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	meta, fp, err := head.NewMeta(m, "tiny", s)
	if err != nil {
		t.Fatal(err)
	}
	h, _, err := head.Train(ctx, ex, meta, fp, head.TrainOptions{Epochs: 2})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	good := filepath.Join(dir, "head.safetensors")
	if err := h.Save(good); err != nil {
		t.Fatal(err)
	}
	junk := filepath.Join(dir, "junk.safetensors")
	os.WriteFile(junk, []byte("not a head at all"), 0o644)
	cut := filepath.Join(dir, "cut.safetensors")
	b, _ := os.ReadFile(good)
	os.WriteFile(cut, b[:len(b)-8], 0o644)

	otherSchema := mustSchema(t, strings.Replace(plantedSchema, "Is the note urgent?", "Is it urgent?", 1))
	otherConfig, otherWeights, otherFormat := *h, *h, *h
	otherFormat.Meta.Weights, otherFormat.Meta.Group = "q4", 64
	otherConfig.Meta.ModelConfig = "0123456789abcdef"
	otherWeights.Fingerprint = append([]float32(nil), h.Fingerprint...)
	for i := range otherWeights.Fingerprint {
		otherWeights.Fingerprint[i] = float32(i%7) - 3
	}
	load := func(path string) func() (*head.Head, error) {
		return func() (*head.Head, error) { return head.Load(path) }
	}
	given := func(h *head.Head) func() (*head.Head, error) { return func() (*head.Head, error) { return h, nil } }
	for _, c := range []struct {
		name   string
		head   func() (*head.Head, error)
		schema *scorer.Schema
		opt    scorer.Options
		want   string
	}{
		{"no head", given(nil), s, scorer.Options{}, "needs a trained decision head"},
		{"missing file", load(filepath.Join(dir, "none.safetensors")), s, scorer.Options{}, "does not exist: train a head"},
		{"not a head", load(junk), s, scorer.Options{}, "not a safetensors file"},
		{"truncated", load(cut), s, scorer.Options{}, "data offsets"},
		{"other schema", given(h), otherSchema, scorer.Options{}, "trained for another schema (fields kind, urgent, level"},
		{"other model", given(&otherConfig), s, scorer.Options{}, "trained for another model (tiny, configuration 0123456789abcdef)"},
		{"other weights", given(&otherWeights), s, scorer.Options{}, "trained for another model's weights"},
		{"other weight format", given(&otherFormat), s, scorer.Options{}, "trained over q4 (group 64) weights, this model runs f32"},
		{"calibration", given(h), s, scorer.Options{Calibration: &scorer.Calibration{Global: 1}}, "calibration does not apply"},
		{"media", given(h), s, scorer.Options{Media: func() (*scorer.Media, error) { return &scorer.Media{}, nil }}, "text inputs only"},
	} {
		t.Run(c.name, func(t *testing.T) {
			hd, err := c.head()
			if err == nil {
				c.opt.Backend = scorer.BackendHead
				if hd != nil {
					c.opt.Head = hd
				}
				_, err = sc.Score(ctx, c.schema, "zebra now.", c.opt)
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one saying %q", err, c.want)
			}
		})
	}
	// The same head on its own schema scores.
	if _, err := sc.Score(ctx, s, "zebra now.", scorer.Options{Backend: scorer.BackendHead, Head: h}); err != nil {
		t.Errorf("its own schema: %v", err)
	}
}

// TestModelHashPinned: a model's configuration hash, which every trained
// head records, is the one heads were trained with before the model
// interface (sha256 of Gemma 3n's "%+v|%+v" of its text config and media
// tokens): heads trained then still load.
func TestModelHashPinned(t *testing.T) {
	if got, want := head.ModelHash(testmodel.Tiny(t)), "7b5713b032571690"; got != want {
		t.Errorf("the tiny model's hash is %s, heads were trained with %s", got, want)
	}
}
