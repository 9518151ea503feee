package gemma4

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

func loadAudioFixture(t testing.TB) (*towerFixture, *Audio) {
	t.Helper()
	fx := openTowerFixture(t, "gemma4-synthetic-audio")
	cfg, err := ParseAudioConfig(fx.cfg)
	if err != nil {
		t.Fatal(err)
	}
	a, err := LoadAudio(cfg, fx.st)
	if err != nil {
		t.Fatal(err)
	}
	return fx, a
}

// audioClip is clip b of the fixture's batch: features [T, bins] and mask.
func audioClip(t testing.TB, fx *towerFixture, b int) ([]float32, []bool) {
	t.Helper()
	f, m, err := fx.clip(b)
	if err != nil {
		t.Fatal(err)
	}
	return f, m
}

// audioChecks runs a over both clips and compares every stage on the valid
// output frames (audioTowerChecks).
func audioChecks(t testing.TB, fx *towerFixture, a *Audio) []towerCheck {
	t.Helper()
	return audioChecksOf(t, fx, a.Cfg, a.Encode)
}

func TestAudioForward(t *testing.T) {
	fx, a := loadAudioFixture(t)
	for _, c := range audioChecks(t, fx, a) {
		t.Logf("%-24s max err %.3g (tolerance %.3g)", c.name, c.err, c.tol)
		if !c.ok() {
			t.Errorf("%s: error %.3g over the tolerance %.3g", c.name, c.err, c.tol)
		}
	}
	var n []int
	if err := json.Unmarshal(fx.meta.NumSoft, &n); err != nil {
		t.Fatal(err)
	}
	for b, want := range n {
		feats, mask := audioClip(t, fx, b)
		_, om, err := a.Encode(feats, mask, nil)
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for _, m := range om {
			if m {
				got++
			}
		}
		if got != want {
			t.Errorf("clip %d: %d valid soft tokens, transformers kept %d", b, got, want)
		}
	}
}

func TestAudioRefuses(t *testing.T) {
	fx, a := loadAudioFixture(t)
	feats, mask := audioClip(t, fx, 0)
	for _, tc := range []struct {
		name  string
		feats []float32
		mask  []bool
		want  string
	}{
		{"no frames", nil, nil, "no frames"},
		{"ragged", feats[:len(feats)-1], mask, "feature values"},
		{"64 bins", feats[:len(mask)*64], mask, "mel bins"},
	} {
		if _, _, err := a.Encode(tc.feats, tc.mask, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want one containing %q", tc.name, err, tc.want)
		}
	}
	var m map[string]any
	if err := json.Unmarshal(fx.cfg, &m); err != nil {
		t.Fatal(err)
	}
	ac := m["audio_config"].(map[string]any)
	for _, tc := range []struct {
		key  string
		val  any
		want string
	}{
		{"num_attention_heads", 5.0, "multiple of num_attention_heads"},
		{"hidden_act", "gelu", "hidden_act"},
		{"subsampling_conv_channels", []any{128.0}, "subsampling_conv_channels"},
		{"attention_logit_cap", 0.0, "attention_logit_cap"},
		{"attention_chunk_size", 0.0, "attention_chunk_size"},
	} {
		old := ac[tc.key]
		ac[tc.key] = tc.val
		js, _ := json.Marshal(m)
		ac[tc.key] = old
		if _, err := ParseAudioConfig(js); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s = %v: err %v, want one containing %q", tc.key, tc.val, err, tc.want)
		}
	}
	cfg, err := ParseAudioConfig(fx.cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConvKernel = 4
	if _, err := LoadAudio(cfg, fx.st); err == nil || !strings.Contains(err.Error(), "depthwise_conv1d.weight: shape") {
		t.Errorf("conv kernel 4: err %v, want the depthwise weight's shape named", err)
	}
}

// TestAudioChecksCanFail perturbs one weight or setting at a time and
// requires the checks to catch it. The attention's own output is small
// (~1e-3 here), so changes inside it show on the block's output, after
// norm_post_attn rescales it.
func TestAudioChecksCanFail(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(a *Audio)
		fails  string
	}{
		{"subsampling LayerNorm weight[1] × 1.01", func(a *Audio) { a.Norm1[1] *= 1.01 }, "hidden_states[0]"},
		{"layer 0 softplus(per_dim_scale)[0] × 1.05", func(a *Audio) { a.Layers[0].qScale[0] *= 1.05 }, "hidden_states[1]"},
		{"layer 0 relative keys × 1.05", func(a *Audio) {
			for i := range a.Layers[0].relK {
				a.Layers[0].relK[i] *= 1.05
			}
		}, "hidden_states[1]"},
		{"attention window one frame wider", func(a *Audio) { a.Cfg.ContextLeft++ }, "layer0_attn"},
		{"no logit cap", func(a *Audio) { a.Cfg.LogitCap = 1e30 }, "hidden_states[1]"},
		{"layer 1 depthwise tap 0 × 1.05", func(a *Audio) {
			for ch := range a.Cfg.Hidden {
				a.Layers[1].Depthwise[ch*a.Cfg.ConvKernel] *= 1.05
			}
		}, "layer1_lconv"},
		{"residual weight 0.51", func(a *Audio) { a.Cfg.ResidualWeight = 0.51 }, "layer0_ff1"},
		{"layer 1 ffw_layer_2 output clip off", func(a *Audio) {
			a.Layers[1].FF2.L2.outMin, a.Layers[1].FF2.L2.outMax = float32(math.Inf(-1)), float32(math.Inf(1))
		}, "layer1_ff2"},
		{"output_proj bias[0] + 0.01", func(a *Audio) { a.OutBias[0] += 0.01 }, "tower_output"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fx, a := loadAudioFixture(t)
			tc.mutate(a)
			for _, c := range audioChecks(t, fx, a) {
				if c.name == tc.fails {
					if c.ok() {
						t.Errorf("%s still passes (error %.3g, tolerance %.3g)", c.name, c.err, c.tol)
					}
					return
				}
			}
			t.Fatalf("no check %s", tc.fails)
		})
	}
}
