package gemma4

import (
	"fmt"
	"math"
	"testing"
)

// The float32 fixtures' tolerance. Their references are transformers'
// float32 run on the GPU; this decoder is float32 too (kernels.go), with a
// different summation order, so the two differ by float32 rounding carried
// through 6 layers. The f64 fixture measures that carry for transformers
// itself: its float32 lies 1.0e-5 from float64 on the logits and 1.2e-5
// (scaled) on the hidden states; this decoder lies 5.4e-6 and 6.7e-6 from
// float64, and at most 5.5e-6 / 7.5e-6 from the float32 references.
// tolF32 = 2.5e-5 is 2.5 times transformers' own float32 error and 3 times
// ours, and still 15 times below the smallest top-2 logit margin (3.8e-4
// tiny, 1.2e-3 moe), so that argmax and greedy stay exact. Logits (soft-capped
// at 1), router probabilities and per-layer inputs are O(1) here, so this is
// both an absolute and a relative bound; hidden states are compared scaled
// by max(1, the layer's largest |reference|), as verify-fixture does. A real
// mistake (a norm weight off by 1%, a window off by one, a wrong RoPE
// fraction) moves these by 1e-4 or more: TestChecksCanFail.
const tolF32 = 2.5e-5

// check is one comparison against a fixture.
type check struct {
	name string
	err  float64 // max error (a count for the exact checks)
	tol  float64
	note string
}

func (c check) ok() bool { return c.err <= c.tol }

// tolerance is the f64 fixture's tolerance for key when it has one, else tolF32.
func (fx *fixtureData) tolerance(key string) float64 {
	if v, ok := fx.meta.Tolerances[key]; ok {
		if key == "argmax_all" {
			return v
		}
		return math.Max(v, 0)
	}
	if key == "argmax_all" {
		return 0
	}
	return tolF32
}

// runChecks runs m over fx's prompts and compares everything the fixture
// holds. It reports an error only for a failure to run.
func runChecks(fx *fixtureData, m *Model) ([]check, error) {
	c := m.Cfg
	V, D, L := c.Vocab, c.Hidden, c.Layers
	var out []check
	add := func(name string, err, tol float64, note string) {
		out = append(out, check{name, err, tol, note})
	}
	diff := func(name string, got []float32, want tensor) (float64, error) {
		e, err := maxAbs(got, want.f)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", name, err)
		}
		return e, nil
	}

	ids := fx.meta.IDs
	n := len(ids)
	var tr Trace
	logits, err := m.Forward(ids, nil, &tr)
	if err != nil {
		return nil, err
	}
	want := fx.exp["logits"]
	e, err := diff("logits", logits, want)
	if err != nil {
		return nil, err
	}
	add("logits", e, fx.tolerance("logits"), fmt.Sprintf("%d positions × %d, max |ref| %.3g", n, V, maxOf(want.f)))

	// logsumexp_all, in float64 from the float32 logits.
	lse := make([]float32, n)
	am := make([]int, n)
	for i := range n {
		row := logits[i*V : (i+1)*V]
		mx := maxOf(row)
		var s float64
		for _, v := range row {
			s += math.Exp(float64(v) - mx)
		}
		lse[i] = float32(mx + math.Log(s))
		am[i] = argmax(row)
	}
	if e, err = diff("logsumexp_all", lse, fx.exp["logsumexp_all"]); err != nil {
		return nil, err
	}
	add("logsumexp_all", e, fx.tolerance("logsumexp_all"), "")
	mis := 0
	for i, a := range fx.exp["argmax_all"].i {
		if i >= n || am[i] != a {
			mis++
		}
	}
	add("argmax_all", float64(mis), fx.tolerance("argmax_all"), "mismatches")

	// hidden_states [L+1, 1, n, D], each layer scaled by max(1, max |ref|).
	hs := fx.exp["hidden_states"]
	if len(tr.Hidden) != L+1 || len(hs.f) != (L+1)*n*D {
		return nil, fmt.Errorf("hidden_states: %d layers traced, reference holds %d values", len(tr.Hidden), len(hs.f))
	}
	worst, per := 0.0, ""
	for k := range L + 1 {
		ref := hs.f[k*n*D : (k+1)*n*D]
		e, err := maxAbs(tr.Hidden[k], ref)
		if err != nil {
			return nil, err
		}
		e /= math.Max(1, maxOf(ref))
		worst = math.Max(worst, e)
		per += fmt.Sprintf(" %.2g", e)
	}
	add("hidden_states", worst, fx.tolerance("hidden_states"), "scaled, per layer:"+per)

	if w, ok := fx.exp["per_layer_inputs"]; ok {
		if e, err = diff("per_layer_inputs", tr.PerLayerInputs, w); err != nil {
			return nil, err
		}
		add("per_layer_inputs", e, fx.tolerance("per_layer_inputs"), "")
	}
	if w, ok := fx.exp["moe_router_probs"]; ok {
		var probs, weights []float32
		var index []int
		for l := range L {
			probs = append(probs, tr.RouterProbs[l]...)
			weights = append(weights, tr.TopKWeights[l]...)
			index = append(index, tr.TopKIndex[l]...)
		}
		if e, err = diff("moe_router_probs", probs, w); err != nil {
			return nil, err
		}
		add("moe_router_probs", e, fx.tolerance("moe_router_probs"), "")
		wi := fx.exp["moe_top_k_index"].i
		if len(wi) != len(index) {
			return nil, fmt.Errorf("moe_top_k_index: %d, want %d", len(index), len(wi))
		}
		mis := 0
		for k := range wi {
			if wi[k] != index[k] {
				mis++
			}
		}
		add("moe_top_k_index", float64(mis), 0, "mismatches")
		if e, err = diff("moe_top_k_weights", weights, fx.exp["moe_top_k_weights"]); err != nil {
			return nil, err
		}
		add("moe_top_k_weights", e, fx.tolerance("moe_top_k_weights"), "")
	}

	// Decoding with the cache gives the prefill's logits: prefill n-8, then
	// one token at a time.
	cache := m.NewCache()
	split := n - 8
	dec, err := m.Forward(ids[:split], cache, nil)
	if err != nil {
		return nil, err
	}
	for i := split; i < n; i++ {
		row, err := m.Forward(ids[i:i+1], cache, nil)
		if err != nil {
			return nil, err
		}
		dec = append(dec, row...)
	}
	if e, err = diff("logits (cached decode)", dec, want); err != nil {
		return nil, err
	}
	add("logits_decode", e, fx.tolerance("logits"), fmt.Sprintf("prefill %d then %d one by one", split, n-split))
	// …and bit for bit this decoder's own prefill (a token's arithmetic does
	// not depend on what runs beside it).
	e, _ = maxAbs(dec, logits)
	add("decode_vs_prefill", e, 0, "this decoder's cached decode against its own prefill")

	g, err := m.Generate(ids, len(fx.meta.Greedy8))
	if err != nil {
		return nil, err
	}
	add("greedy_8", float64(mismatches(g, fx.meta.Greedy8)), 0, fmt.Sprint(g))

	for _, x := range fx.meta.ExtraPrompts {
		lg, err := m.Forward(x.IDs, nil, nil)
		if err != nil {
			return nil, err
		}
		if e, err = diff(x.Logits, lg, fx.exp[x.Logits]); err != nil {
			return nil, err
		}
		note := fmt.Sprintf("%d tokens", len(x.IDs))
		if len(x.IDs) > c.SlidingWindow {
			note += fmt.Sprintf(", past the window of %d", c.SlidingWindow)
		}
		add(x.Logits, e, fx.tolerance(x.Logits), note)
		g, err := m.Generate(x.IDs, len(x.Greedy8))
		if err != nil {
			return nil, err
		}
		add(x.Name+"_greedy_8", float64(mismatches(g, x.Greedy8)), 0, fmt.Sprint(g))
	}
	// scoring_ids.json: log-likelihood sums of candidate id sequences after
	// a prefix and a field, in float64 from the float32 logits.
	for _, f := range fx.scoring.Fields {
		worst := 0.0
		for ci, cand := range f.Candidates {
			seq := append(append(append([]int(nil), fx.scoring.Prefix...), f.FieldIDs...), cand...)
			lg, err := m.Forward(seq, nil, nil)
			if err != nil {
				return nil, err
			}
			start := len(seq) - len(cand)
			var sum float64
			for k, tok := range cand {
				row := lg[(start+k-1)*V : (start+k)*V]
				mx := maxOf(row)
				var z float64
				for _, v := range row {
					z += math.Exp(float64(v) - mx)
				}
				sum += float64(row[tok]) - mx - math.Log(z)
			}
			worst = math.Max(worst, math.Abs(sum-f.LogprobSums[ci]))
		}
		add("scoring_ids."+f.Name, worst, fx.tolerance("scoring_ids.logprob_sums"), fmt.Sprintf("%d candidates", len(f.Candidates)))
	}
	return out, nil
}

func mismatches(a, b []int) int {
	n := 0
	for i := range max(len(a), len(b)) {
		if i >= len(a) || i >= len(b) || a[i] != b[i] {
			n++
		}
	}
	return n
}

var fixtures = []string{"gemma4-synthetic-tiny", "gemma4-synthetic-tiny-moe", "gemma4-synthetic-tiny-f64"}

// TestForward: every output of the three fixtures, within its tolerance
// (meta.json's for the f64 fixture, tolF32 otherwise); argmax, top-k
// indices and greedy tokens exact.
func TestForward(t *testing.T) {
	for _, name := range fixtures {
		t.Run(name, func(t *testing.T) {
			fx := loadFixture(t, name)
			checks, err := runChecks(fx, fx.model(t))
			if err != nil {
				t.Fatal(err)
			}
			want := []string{"logits", "logsumexp_all", "argmax_all", "hidden_states", "logits_decode", "decode_vs_prefill", "greedy_8",
				"extra1_logits", "extra1_greedy_8", "extra2_logits", "extra2_greedy_8",
				"scoring_ids.priority", "scoring_ids.refund_requested", "scoring_ids.anger"}
			if fx.cfg.PerLayerInput > 0 {
				want = append(want, "per_layer_inputs")
			}
			if fx.cfg.MoE {
				want = append(want, "moe_router_probs", "moe_top_k_index", "moe_top_k_weights")
			}
			seen := map[string]bool{}
			for _, c := range checks {
				seen[c.name] = true
				status := "ok"
				if !c.ok() {
					status = "FAIL"
					t.Errorf("%s: max error %.3g > tolerance %.3g (%s)", c.name, c.err, c.tol, c.note)
				}
				t.Logf("%-4s %-28s max error %-9.3g tolerance %-9.3g %s", status, c.name, c.err, c.tol, c.note)
			}
			for _, w := range want {
				if !seen[w] {
					t.Errorf("check %s did not run", w)
				}
			}
		})
	}
}

// TestChecksCanFail: each check of TestForward fails when the decoder is
// wrong. One weight (or config value) at a time is perturbed in a loaded
// model, and the checks that must notice it are required to fail; their
// errors are logged. The fixture files are not touched.
func TestChecksCanFail(t *testing.T) {
	bump := func(x []float32, i int, f float32) { x[i] *= f }
	cases := []struct {
		fixture  string
		what     string
		mutate   func(m *Model)
		mustFail []string
	}{
		{"gemma4-synthetic-tiny", "layer 2's layer_scalar × 1.01", func(m *Model) { m.Layers[2].Scalar *= 1.01 },
			[]string{"logits", "hidden_states", "logits_decode", "extra1_logits", "extra2_logits", "scoring_ids.priority", "scoring_ids.anger"}},
		// The last layer's scalar scales the whole stream before the final
		// RMSNorm, which undoes it: only the hidden states can see it.
		{"gemma4-synthetic-tiny", "layer 5's layer_scalar × 1.01", func(m *Model) { m.Layers[5].Scalar *= 1.01 },
			[]string{"hidden_states"}},
		{"gemma4-synthetic-tiny", "per_layer_projection_norm[3] × 1.01", func(m *Model) { bump(m.PLNorm, 3, 1.01) },
			[]string{"per_layer_inputs", "hidden_states", "logits"}},
		{"gemma4-synthetic-tiny", "layer 3's k_norm[0] × 1.05 (the KV source of layer 4)", func(m *Model) { bump(m.Layers[3].KNorm, 0, 1.05) },
			[]string{"hidden_states", "logits"}},
		{"gemma4-synthetic-tiny", "layer 4's double-wide down_proj, column 200 × 1.1", func(m *Model) {
			for o := range m.Cfg.Hidden {
				bump(m.Layers[4].Down, o*256+200, 1.1)
			}
		}, []string{"hidden_states", "logits"}},
		{"gemma4-synthetic-tiny", "sliding window 17 instead of 16", func(m *Model) { m.Cfg.SlidingWindow = 17 },
			[]string{"logits", "extra2_logits"}},
		{"gemma4-synthetic-tiny", "full-layer RoPE: 9 pairs rotate instead of 8", func(m *Model) {
			r := m.Cfg.Rope[Full]
			r.PartialRotaryFactor = 9.0 / 32
			m.rope[Full] = newRopeTable(r, m.Cfg.GlobalHeadDim)
		}, []string{"logits", "hidden_states", "extra1_logits"}},
		{"gemma4-synthetic-tiny", "final norm negated", func(m *Model) {
			for i := range m.Norm {
				m.Norm[i] = -m.Norm[i]
			}
		}, []string{"logits", "argmax_all", "logsumexp_all", "greedy_8", "extra1_greedy_8", "extra2_greedy_8"}},
		{"gemma4-synthetic-tiny", "no soft-cap", func(m *Model) { m.Cfg.SoftCap = 0 },
			[]string{"logits", "logsumexp_all"}},
		{"gemma4-synthetic-tiny-moe", "layer 1's router.per_expert_scale × 1.01", func(m *Model) {
			for e := range m.Layers[1].PerExpertScale {
				bump(m.Layers[1].PerExpertScale, e, 1.01)
			}
		}, []string{"moe_top_k_weights", "hidden_states", "logits"}},
		{"gemma4-synthetic-tiny-moe", "layer 0's router.scale[5] × 1.01", func(m *Model) { bump(m.Layers[0].RouterScale, 5, 1.01) },
			[]string{"moe_router_probs", "moe_top_k_weights"}},
		{"gemma4-synthetic-tiny-moe", "layer 0's router rows of experts 0 and 1 swapped", func(m *Model) {
			r, D := m.Layers[0].RouterProj, m.Cfg.Hidden
			for j := range D {
				r[j], r[D+j] = r[D+j], r[j]
			}
		}, []string{"moe_router_probs", "moe_top_k_index"}},
		{"gemma4-synthetic-tiny-moe", "layer 2's expert gate_up_proj of every expert, row 0 × 1.1", func(m *Model) {
			ly := &m.Layers[2]
			for e := range m.Cfg.Experts {
				for j := range m.Cfg.Hidden {
					bump(ly.ExpertGateUp, e*64*64+j, 1.1)
				}
			}
		}, []string{"hidden_states", "logits"}},
		{"gemma4-synthetic-tiny-moe", "layer 2's k_norm[0] × 1.05 (a V = K layer: V is K before k_norm)", func(m *Model) { bump(m.Layers[2].KNorm, 0, 1.05) },
			[]string{"hidden_states", "logits"}},
		{"gemma4-synthetic-tiny-f64", "layer 0's q_norm[1] × 1.01", func(m *Model) { bump(m.Layers[0].QNorm, 1, 1.01) },
			[]string{"hidden_states", "logits", "extra1_logits", "extra2_logits"}},
	}
	for _, tc := range cases {
		t.Run(tc.fixture+"/"+tc.what, func(t *testing.T) {
			fx := loadFixture(t, tc.fixture)
			m := fx.model(t)
			cfg := *m.Cfg
			m.Cfg = &cfg
			tc.mutate(m)
			checks, err := runChecks(fx, m)
			if err != nil {
				t.Fatal(err)
			}
			byName := map[string]check{}
			for _, c := range checks {
				byName[c.name] = c
			}
			for _, name := range tc.mustFail {
				c, ok := byName[name]
				switch {
				case !ok:
					t.Errorf("%s did not run", name)
				case c.ok():
					t.Errorf("%s still passes (max error %.3g ≤ %.3g): it cannot see this mistake", name, c.err, c.tol)
				default:
					t.Logf("%-28s fails as it should: max error %.3g > %.3g", name, c.err, c.tol)
				}
			}
		})
	}
}
