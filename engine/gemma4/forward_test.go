package gemma4

import "testing"

var fixtures = []string{"gemma4-synthetic-tiny", "gemma4-synthetic-tiny-moe", "gemma4-synthetic-tiny-f64"}

// TestForward: every output of the three fixtures, within its tolerance
// (meta.json's for the f64 fixture, TolF32 otherwise); argmax, top-k
// indices and greedy tokens exact.
func TestForward(t *testing.T) {
	for _, name := range fixtures {
		t.Run(name, func(t *testing.T) {
			fx := loadFixture(t, name)
			checks, err := fx.Run(fx.model(t))
			if err != nil {
				t.Fatal(err)
			}
			want := []string{"logits", "logsumexp_all", "argmax_all", "hidden_states", "logits_decode", "decode_vs_prefill", "greedy_8",
				"extra1_logits", "extra1_greedy_8", "extra2_logits", "extra2_greedy_8",
				"scoring_ids.priority", "scoring_ids.refund_requested", "scoring_ids.anger"}
			if fx.Cfg.PerLayerInput > 0 {
				want = append(want, "per_layer_inputs")
			}
			if fx.Cfg.MoE {
				want = append(want, "moe_router_probs", "moe_top_k_index", "moe_top_k_weights")
			}
			seen := map[string]bool{}
			for _, c := range checks {
				seen[c.Name] = true
				status := "ok"
				if !c.OK() {
					status = "FAIL"
					t.Errorf("%s: max error %.3g > tolerance %.3g (%s)", c.Name, c.MaxErr, c.Tol, c.Note)
				}
				t.Logf("%-4s %-28s max error %-9.3g tolerance %-9.3g %s", status, c.Name, c.MaxErr, c.Tol, c.Note)
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
			checks, err := fx.Run(m)
			if err != nil {
				t.Fatal(err)
			}
			byName := map[string]Check{}
			for _, c := range checks {
				byName[c.Name] = c
			}
			for _, name := range tc.mustFail {
				c, ok := byName[name]
				switch {
				case !ok:
					t.Errorf("%s did not run", name)
				case c.OK():
					t.Errorf("%s still passes (max error %.3g ≤ %.3g): it cannot see this mistake", name, c.MaxErr, c.Tol)
				default:
					t.Logf("%-28s fails as it should: max error %.3g > %.3g", name, c.MaxErr, c.Tol)
				}
			}
		})
	}
}
