package models_test

import (
	"context"
	"math"
	"os"
	"sort"
	"testing"

	"verdict/engine/fixture/testmodel"
	"verdict/engine/gemma3n"
	"verdict/engine/models"
	"verdict/engine/scorer"
)

var ticketTexts = []string{
	"My parcel arrived two weeks late and the screen was cracked. I want my money back now!",
	"Hello, I was charged twice for my subscription this month. Could you look into it? Thanks.",
	"I cannot log in to my account since yesterday; the password reset link does not work.",
	"The manual for the router has a typo on page 4. Not urgent at all.",
	"Where is my order? It has been a month. This is the third time I write, I am furious.",
}

// fieldDiff is the largest divergence of a field's distributions between
// two models over the texts and the field's decisions.
type fieldDiff struct {
	kl, dp float64
}

// scoreDiffs scores the ticket schema on every text with both models and
// returns, per field, the largest KL(ref ‖ got) and probability difference.
func scoreDiffs(t *testing.T, ref, got *models.Model) map[string]fieldDiff {
	t.Helper()
	tok := testmodel.Tokenizer(t)
	b, err := os.ReadFile("../scorer/testdata/ticket.json")
	if err != nil {
		t.Fatal(err)
	}
	s, err := scorer.ParseSchema(b)
	if err != nil {
		t.Fatal(err)
	}
	sr, sg := scorer.New(ref.Model, tok), scorer.New(got.Model, tok)
	out := map[string]fieldDiff{}
	for _, text := range ticketTexts {
		rr, err := sr.Score(context.Background(), s, text, scorer.Options{})
		if err != nil {
			t.Fatal(err)
		}
		rg, err := sg.Score(context.Background(), s, text, scorer.Options{})
		if err != nil {
			t.Fatal(err)
		}
		for i, f := range rr.Fields {
			d := out[f.Name]
			for j, dec := range f.Decisions {
				gd := rg.Fields[i].Decisions[j]
				for k, c := range dec.Candidates {
					p, q := c.Probability, gd.Candidates[k].Probability
					d.dp = math.Max(d.dp, math.Abs(p-q))
				}
				var kl float64
				for k, c := range dec.Candidates {
					p, q := c.Probability, gd.Candidates[k].Probability
					if p > 0 {
						kl += p * math.Log(p/math.Max(q, 1e-300))
					}
				}
				d.kl = math.Max(d.kl, kl)
			}
			out[f.Name] = d
		}
	}
	return out
}

// TestQ4ScorerAccuracy holds the q4 path's scorer distributions near the
// float32 ones on the tiny fixture (its random weights are 4-bit's worst
// case: uniform, no redundancy): per field of the ticket schema, the
// largest KL divergence and probability difference over five tickets.
func TestQ4ScorerAccuracy(t *testing.T) {
	dir := testmodel.Dir(t, "gemma3n-synthetic-tiny.tar.gz")
	ref, err := models.OpenWith(dir, models.Options{Weights: gemma3n.WeightsF32})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	for _, g := range []int{32, 64, 128} {
		q, err := models.OpenWith(dir, models.Options{Weights: gemma3n.WeightsQ4, Group: g, CacheDir: "off"})
		if err != nil {
			t.Fatal(err)
		}
		diffs := scoreDiffs(t, ref, q)
		q.Close()
		var names []string
		for n := range diffs {
			names = append(names, n)
		}
		sort.Strings(names)
		var worstKL, worstDP float64
		for _, n := range names {
			d := diffs[n]
			t.Logf("group %3d  %-18s KL %.2e  max |dp| %.4f", g, n, d.kl, d.dp)
			worstKL, worstDP = math.Max(worstKL, d.kl), math.Max(worstDP, d.dp)
		}
		t.Logf("group %3d  largest KL %.2e, largest |dp| %.4f", g, worstKL, worstDP)
		if g == gemma3n.DefaultGroup && (worstKL > q4MaxKL || worstDP > q4MaxDP) {
			t.Errorf("group %d: largest KL %.3g (bound %g), largest probability difference %.3g (bound %g)",
				g, worstKL, q4MaxKL, worstDP, q4MaxDP)
		}
	}
}

// Bounds of TestQ4ScorerAccuracy at the default group size.
const (
	q4MaxKL = 0.02
	q4MaxDP = 0.1
)

// TestOpenWith: Open packs to q4 by default; OpenWith gives f32 on request.
func TestOpenWith(t *testing.T) {
	t.Setenv("VERDICT_PACKED_CACHE", "off")
	for _, c := range []struct {
		opt  models.Options
		want gemma3n.Weights
	}{
		{models.Options{}, gemma3n.WeightsQ4},
		{models.Options{Weights: gemma3n.WeightsF32}, gemma3n.WeightsF32},
		{models.Options{Weights: gemma3n.WeightsQ4, Group: 32}, gemma3n.WeightsQ4},
	} {
		m, err := models.OpenWith(models.Builtin, c.opt)
		if err != nil {
			t.Fatal(err)
		}
		if m.Weights() != c.want {
			t.Errorf("OpenWith(%+v): %s weights, want %s", c.opt, m.Weights(), c.want)
		}
		if _, err := m.Forward(m.NewCache(), []int32{2, 105}, nil); err != nil {
			t.Error(err)
		}
		m.Close()
	}
	m, err := models.Open(models.Builtin)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.Weights() != models.DefaultWeights || m.Group() != gemma3n.DefaultGroup {
		t.Errorf("Open: %s weights, group %d", m.Weights(), m.Group())
	}
	if _, err := models.OpenWith(models.Builtin, models.Options{Weights: "int8"}); err == nil {
		t.Error("OpenWith accepted weights int8")
	}
}
