package gemma4_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"verdict/engine/fixture/testmodel"
	"verdict/engine/gemma4"
	"verdict/engine/head"
	"verdict/engine/scorer"
)

// headSchema is a choice and a bool whose labels the notes plant.
const headSchema = `{"instructions": "Read the note and answer every field in JSON.", "input_label": "Note",
 "fields": [
  {"name": "kind", "question": "What does the note mention?", "type": "choice", "options": ["animal", "music", "food"]},
  {"name": "urgent", "question": "Is the note urgent?", "type": "bool"}]}`

// headExamples are n labelled notes: a marker word decides kind, "now" or
// "later" urgent, with filler words between, all chosen by i.
func headExamples(n int) []scorer.Example {
	kinds := []string{"animal", "music", "food"}
	marker := map[string]string{"animal": "zebra", "music": "violin", "food": "tomato"}
	fill := strings.Fields("the parcel left early today and someone said it was fine")
	out := make([]scorer.Example, n)
	for i := range out {
		kind, urgent := kinds[i%3], (i/3)%2 == 0
		words := []string{fill[i%len(fill)], fill[(3*i+1)%len(fill)], map[bool]string{true: "now", false: "later"}[urgent], marker[kind]}
		out[i] = scorer.Example{Text: strings.Join(words, " ") + ".", Labels: map[string]json.RawMessage{
			"kind": json.RawMessage(fmt.Sprintf("%q", kind)), "urgent": json.RawMessage(fmt.Sprint(urgent))}}
	}
	return out
}

// trainHead collects the examples' features on sc and trains a head.
func trainHead(t testing.TB, sc *scorer.Scorer, s *scorer.Schema, name string, ex []scorer.Example, epochs int) *head.Head {
	t.Helper()
	ctx := context.Background()
	feats, err := head.Collect(ctx, sc, s, ex, scorer.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	meta, fp, err := head.NewMeta(sc.Model(), name, s)
	if err != nil {
		t.Fatal(err)
	}
	h, _, err := head.Train(ctx, feats, meta, fp, head.TrainOptions{Epochs: epochs, Patience: epochs})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// headDirect is the head backend's distributions on input computed apart
// from it: each decision's answer state from a direct Forward of the prompt
// and the decision's key through the Decoder, each candidate's feature its
// mean token embedding scaled to unit RMS, the json backend's
// log-likelihoods, then h's scores under softmax. swapTok replaces the
// first candidate's first token by the second's (the perturbation test).
func headDirect(t testing.TB, sc *scorer.Scorer, d *gemma4.Decoder, h *head.Head, s *scorer.Schema, input string, swapTok bool) map[string][]float64 {
	t.Helper()
	prefix, decs, err := sc.Tokens(s, input)
	if err != nil {
		t.Fatal(err)
	}
	js, err := sc.Score(context.Background(), s, input, scorer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ll := map[string][]float64{}
	for _, dec := range resDecisions(js) {
		for _, c := range dec.Candidates {
			ll[dec.Name] = append(ll[dec.Name], c.LogLikelihood)
		}
	}
	D := d.Config().Hidden
	out := map[string][]float64{}
	for _, dt := range decs {
		hid, err := d.Forward(nil, append(slices.Clone(prefix), dt.Shared[:dt.Key]...), nil)
		if err != nil {
			t.Fatal(err)
		}
		hd := head.Decision{Name: dt.Name, Field: s.Fields[dt.Field].Name, Q: hid[len(hid)-D:], LL: ll[dt.Name], Label: -1}
		for j, c := range dt.Cands {
			ids := slices.Clone(c)
			if swapTok && j == 0 {
				ids[0] = dt.Cands[1][0]
			}
			e, err := d.Embed(ids)
			if err != nil {
				t.Fatal(err)
			}
			mean := make([]float64, D)
			for r := range ids {
				for k := range D {
					mean[k] += float64(e[r*D+k]) / float64(len(ids))
				}
			}
			var ss float64
			for _, v := range mean {
				ss += v * v
			}
			rms := math.Sqrt(ss / float64(D))
			f := make([]float32, D)
			for k := range f {
				f[k] = float32(mean[k] / rms)
			}
			hd.C = append(hd.C, f)
		}
		out[dt.Name] = scorer.Softmax(h.Scores(hd), 1)
	}
	return out
}

// compareProbs returns the largest gap between a result's probabilities and
// want's, and an error naming the first one over tol.
func compareProbs(res *scorer.Result, want map[string][]float64, tol float64) (float64, error) {
	worst := 0.0
	var first error
	for _, dec := range resDecisions(res) {
		w := want[dec.Name]
		if len(w) != len(dec.Candidates) {
			return math.Inf(1), fmt.Errorf("decision %s: %d candidates, %d computed", dec.Name, len(dec.Candidates), len(w))
		}
		for j, c := range dec.Candidates {
			e := math.Abs(c.Probability - w[j])
			worst = math.Max(worst, e)
			if !(e <= tol) && first == nil {
				first = fmt.Errorf("%s = %s: probability %.7f, computed %.7f", dec.Name, c.Value, c.Probability, w[j])
			}
		}
	}
	return worst, first
}

// headTol bounds the head backend's probabilities against headDirect: the
// answer states differ by the float32 error of a forked prefix against a
// whole Forward (about 1e-6), the features by float32 rounding.
const headTol = 1e-5

// TestHeadOnGemma4: a decision head trained on the tiny Gemma 4 (dense)
// over a handful of labelled notes saves, loads and scores through
// BackendHead; its distributions are those computed apart from it
// (headDirect, within headTol; a candidate's token swapped fails the
// check); training and scoring twice give the same bits; a head trained on
// Gemma 3n, or on the other Gemma 4 fixture, is refused by Check and by the
// backend with an error naming the other model.
func TestHeadOnGemma4(t *testing.T) {
	ctx := context.Background()
	tok := testTokenizer(t)
	s, err := scorer.ParseSchema([]byte(headSchema))
	if err != nil {
		t.Fatal(err)
	}
	_, d := openTiny(t, "gemma4-synthetic-tiny")
	sc := scorer.New(d, tok)
	ex := headExamples(12)
	h := trainHead(t, sc, s, "gemma4-tiny", ex, 40)
	again := trainHead(t, sc, s, "gemma4-tiny", ex, 40)
	if !slices.Equal(h.A, again.A) || !slices.Equal(h.B, again.B) || !slices.Equal(h.U, again.U) || h.Alpha != again.Alpha ||
		!slices.Equal(h.MuQ, again.MuQ) || !slices.Equal(h.SdQ, again.SdQ) {
		t.Fatal("two trainings on the same examples gave different heads")
	}
	path := filepath.Join(t.TempDir(), "gemma4.head.safetensors")
	if err := h.Save(path); err != nil {
		t.Fatal(err)
	}
	loaded, err := head.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := loaded.Check(sc, s); err != nil {
		t.Fatalf("the head on its own model: %v", err)
	}
	worst := 0.0
	for _, input := range []string{"someone said now zebra.", "the parcel later violin."} {
		res, err := sc.Score(ctx, s, input, scorer.Options{Backend: scorer.BackendHead, Head: loaded})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(res.ProbabilitySource, "decision head") {
			t.Fatalf("probability source %q", res.ProbabilitySource)
		}
		e, err := compareProbs(res, headDirect(t, sc, d, loaded, s, input, false), headTol)
		if err != nil {
			t.Fatal(err)
		}
		worst = math.Max(worst, e)
		if _, err := compareProbs(res, headDirect(t, sc, d, loaded, s, input, true), headTol); err == nil {
			t.Errorf("%q: a candidate's token swapped, the check passed", input)
		}
		twice, err := sc.Score(ctx, s, input, scorer.Options{Backend: scorer.BackendHead, Head: loaded})
		if err != nil {
			t.Fatal(err)
		}
		for i, dec := range resDecisions(res) {
			for j, c := range dec.Candidates {
				if c2 := resDecisions(twice)[i].Candidates[j]; c2.Probability != c.Probability || c2.Value != c.Value {
					t.Errorf("%q %s = %s: probability %v, then %v", input, dec.Name, c.Value, c.Probability, c2.Probability)
				}
			}
		}
	}
	t.Logf("head (loaded) against its distributions computed apart: largest gap %.3g (tolerance %g)", worst, headTol)

	// Heads of other models are refused, by Check and by the backend.
	g3 := trainHead(t, scorer.New(testmodel.Tiny(t), testmodel.Tokenizer(t)), s, "gemma3n-tiny", headExamples(4), 2)
	_, moe := openTiny(t, "gemma4-synthetic-tiny-moe")
	scMoE := scorer.New(moe, tok)
	for _, c := range []struct {
		name string
		h    *head.Head
		sc   *scorer.Scorer
		want string
	}{
		{"Gemma 3n head on Gemma 4", g3, sc, "trained for another model (gemma3n-tiny, configuration " + g3.Meta.ModelConfig + ")"},
		{"dense Gemma 4 head on the MoE", loaded, scMoE, "trained for another model (gemma4-tiny, configuration " + loaded.Meta.ModelConfig + ")"},
	} {
		err := c.h.Check(c.sc, s)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Check says %v, want %q", c.name, err, c.want)
		}
		_, err = c.sc.Score(ctx, s, "zebra now.", scorer.Options{Backend: scorer.BackendHead, Head: c.h})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: the head backend says %v, want %q", c.name, err, c.want)
		}
	}
}
