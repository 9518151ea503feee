package head_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
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
	// Chance: 1/3 for kind, 1/2 for urgent, about 0.42 over both.
	if rep.Held.Accuracy < 0.75 || rep.Held.Accuracy < rep.JSON.Accuracy+0.2 {
		t.Errorf("held-out accuracy %.3f, json %.3f: want at least 0.75 and 0.2 above json", rep.Held.Accuracy, rep.JSON.Accuracy)
	}
	if rep.Held.NLL >= rep.JSON.NLL {
		t.Errorf("held-out NLL %.3f not below json's %.3f", rep.Held.NLL, rep.JSON.NLL)
	}
	_ = h
	_ = filepath.Join
}
