package gemma4

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"verdict/native"
	"verdict/native/nativetest"
)

// audioChecksOf is audioTowerChecks as towerChecks: every stage of both
// clips against the fixture's references on the valid output frames, with
// the fixture's tolerances.
func audioChecksOf(t testing.TB, fx *towerFixture, cfg *AudioConfig, enc audioEncoder) []towerCheck {
	t.Helper()
	cs, err := audioTowerChecks(fx, cfg, enc)
	if err != nil {
		t.Fatal(err)
	}
	return towerChecks(t, cs)
}

func newAudioOps(t testing.TB, a *Audio, be *native.Backend) *AudioOps {
	t.Helper()
	o, err := NewAudioOps(a, be)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(o.Close)
	return o
}

// TestAudioOpsForward: the encoder on the backend's operations (the CPU
// backend here) passes the fixture's checks with its tolerances, and uses
// no operation the backend lacks.
func TestAudioOpsForward(t *testing.T) {
	fx, a := loadAudioFixture(t)
	o := newAudioOps(t, a, nil)
	if u := o.Unsupported(); len(u) != 0 {
		t.Errorf("the CPU backend leaves %v to the fallback", u)
	}
	for _, c := range audioChecksOf(t, fx, a.Cfg, o.Encode) {
		t.Logf("%-24s max err %.3g (tolerance %.3g)", c.name, c.err, c.tol)
		if !c.ok() {
			t.Errorf("%s: error %.3g over the tolerance %.3g", c.name, c.err, c.tol)
		}
	}
}

// validRowsErr is the largest |a − b| over the rows of width w that mask
// keeps, scaled by max(1, the largest |b| there) when scaled.
func validRowsErr(a, b []float32, mask []bool, w int, scaled bool) float64 {
	var e, m float64
	for i, ok := range mask {
		if !ok {
			continue
		}
		d, _ := maxAbs(a[i*w:(i+1)*w], b[i*w:(i+1)*w])
		e = max(e, d)
		m = max(m, maxMag(b[i*w:(i+1)*w]))
	}
	if scaled {
		e /= max(1, m)
	}
	return e
}

// audioOpsVsGo runs both encoders on one clip and returns the largest
// differences on the valid frames: hidden states (scaled), tower output,
// soft tokens.
func audioOpsVsGo(t testing.TB, a *Audio, o *AudioOps, feats []float32, mask []bool) (hid, tower, soft float64) {
	t.Helper()
	var want, got AudioTrace
	ws, wm, err := a.Encode(feats, mask, &want)
	if err != nil {
		t.Fatal(err)
	}
	gs, gm, err := o.Encode(feats, mask, &got)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(gm, wm) {
		t.Fatalf("output mask %v, the Go tower's %v", gm, wm)
	}
	H := a.Cfg.Hidden
	for l := range want.Hidden {
		hid = max(hid, validRowsErr(got.Hidden[l], want.Hidden[l], wm, H, true))
	}
	for l := range want.FF1 {
		for _, p := range [][2][]float32{{got.FF1[l], want.FF1[l]}, {got.Attn[l], want.Attn[l]}, {got.LConv[l], want.LConv[l]}, {got.FF2[l], want.FF2[l]}} {
			hid = max(hid, validRowsErr(p[0], p[1], wm, H, true))
		}
	}
	return hid, validRowsErr(got.TowerOut, want.TowerOut, wm, a.Cfg.OutputDims, false),
		validRowsErr(gs, ws, wm, a.Cfg.TextHidden, false)
}

// TestAudioOpsMatchesGo: every stage of the ops path against the
// plain-Go tower on the valid frames of both clips, within the fixture's
// tolerances (the differences are logged).
func TestAudioOpsMatchesGo(t *testing.T) {
	fx, a := loadAudioFixture(t)
	o := newAudioOps(t, a, nil)
	_, oshape := fx.ints(t, "output_mask")
	var hid, tower, soft float64
	for b := range oshape[0] {
		feats, mask := audioClip(t, fx, b)
		h, tw, s := audioOpsVsGo(t, a, o, feats, mask)
		hid, tower, soft = max(hid, h), max(tower, tw), max(soft, s)
	}
	t.Logf("ops vs Go: hidden states and block parts %.3g (scaled), tower_output %.3g, soft tokens %.3g", hid, tower, soft)
	for _, c := range []towerCheck{{"hidden", hid, fx.tol(t, "audio_hidden_states_scaled")},
		{"tower_output", tower, fx.tol(t, "audio_tower_output")}, {"soft_tokens", soft, fx.tol(t, "audio_soft_tokens")}} {
		if !c.ok() {
			t.Errorf("%s: the ops path differs from the Go tower by %.3g, over %.3g", c.name, c.err, c.tol)
		}
	}
}

// TestAudioOpsChecksCanFail: one weight or setting changed at a time, the
// check that should see it fails on the ops path.
func TestAudioOpsChecksCanFail(t *testing.T) {
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
		{"layer 1 ffw_layer_2 output clip off", func(a *Audio) {
			a.Layers[1].FF2.L2.outMin, a.Layers[1].FF2.L2.outMax = float32(math.Inf(-1)), float32(math.Inf(1))
		}, "layer1_ff2"},
		{"output_proj bias[0] + 0.01", func(a *Audio) { a.OutBias[0] += 0.01 }, "tower_output"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fx, a := loadAudioFixture(t)
			tc.mutate(a)
			o := newAudioOps(t, a, nil)
			for _, c := range audioChecksOf(t, fx, a.Cfg, o.Encode) {
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

// TestAudioOpsRefuses: inputs the Go tower refuses are refused with its
// errors, and the ops path's own limits (the frame budget, an empty clip,
// a real frame after padding, attention_context_left 1) are named; a
// closed encoder and a backend whose passes fail give errors, not panics.
func TestAudioOpsRefuses(t *testing.T) {
	fx, a := loadAudioFixture(t)
	o := newAudioOps(t, a, nil)
	feats, mask := audioClip(t, fx, 0)
	empty := make([]bool, len(mask))
	gap := slices.Clone(mask)
	gap[1] = false
	gap[len(gap)-1] = true
	for _, tc := range []struct {
		name   string
		budget int
		feats  []float32
		mask   []bool
		want   string
	}{
		{"no frames", 0, nil, nil, "no frames"},
		{"over the budget", len(mask) - 1, feats, mask, "over the budget"},
		{"ragged", 0, feats[:len(feats)-1], mask, "feature values"},
		{"64 bins", 0, feats[:len(mask)*64], mask, "mel bins"},
		{"empty clip", 0, feats, empty, "every frame is padding"},
		{"real after padding", 0, feats, gap, "real after padding"},
	} {
		o.MaxFrames = maxAudioFrames
		if tc.budget > 0 {
			o.MaxFrames = tc.budget
		}
		if _, _, err := o.Encode(tc.feats, tc.mask, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want one containing %q", tc.name, err, tc.want)
		}
	}
	o.MaxFrames = maxAudioFrames
	if _, err := NewAudioOps(nil, nil); err == nil {
		t.Error("NewAudioOps(nil): no error")
	}
	narrow := *a
	cfg := *a.Cfg
	cfg.ContextLeft = 1
	narrow.Cfg = &cfg
	if _, err := NewAudioOps(&narrow, nil); err == nil || !strings.Contains(err.Error(), "attention_context_left") {
		t.Errorf("attention_context_left 1: err %v", err)
	}
	u, err := NewAudioOps(a, nativetest.Unimplemented(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := u.Encode(feats, mask, nil); !errors.Is(err, native.ErrUnimplemented) {
		t.Errorf("on a backend without the operations: err %v, want ErrUnimplemented", err)
	}
	u.Close()
	c := newAudioOps(t, a, nil)
	c.Close()
	if _, _, err := c.Encode(feats, mask, nil); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("after Close: err %v", err)
	}
}

// randomAudio is an Audio of cfg with random weights (prepared as
// LoadAudio prepares them).
func randomAudio(cfg AudioConfig, seed uint64) *Audio {
	g := towerRand{rand.New(rand.NewPCG(seed, 2))}
	c := &cfg
	H, C0, C1, K := c.Hidden, c.ConvChannels[0], c.ConvChannels[1], c.ConvKernel
	ff := func() audioFF {
		return audioFF{PreNorm: g.norm(H), PostNorm: g.norm(H), L1: g.linear(4*H, H), L2: g.linear(H, 4*H)}
	}
	a := &Audio{Cfg: c, Conv0: g.vec(C0*9, 0.4), Norm0: g.norm(C0), Conv1: g.vec(C1*C0*9, 0.1), Norm1: g.norm(C1),
		InputProj: g.vec(H*C0/4*C1, 0.3), OutProj: g.vec(c.OutputDims*H, 0.2), OutBias: g.vec(c.OutputDims, 0.1),
		EmbedProj: g.vec(c.TextHidden*c.OutputDims, 0.2), Layers: make([]AudioLayer, c.Layers)}
	for i := range a.Layers {
		a.Layers[i] = AudioLayer{FF1: ff(), FF2: ff(), NormPreAttn: g.norm(H), NormPostAttn: g.norm(H), NormOut: g.norm(H),
			PerDimScale: g.vec(H/c.Heads, 0.5), Q: g.linear(H, H), K: g.linear(H, H), V: g.linear(H, H), Post: g.linear(H, H),
			RelK: g.vec(H*H, 0.3), ConvPreNorm: g.norm(H), ConvNorm: g.norm(H), ConvStart: g.linear(2*H, H),
			ConvEnd: g.linear(H, H), Depthwise: g.vec(H*K, 0.4)}
	}
	a.prepare()
	return a
}

// TestAudioOpsGenerated: configurations the fixture does not have (a right
// context, a window whose relative-key table is shorter than the window, so
// that pos rows past it are zero; a gradient clip that bites; no padding)
// give the plain-Go tower's results on the valid frames.
func TestAudioOpsGenerated(t *testing.T) {
	base := AudioConfig{Hidden: 32, Layers: 2, Heads: 4, ConvChannels: [2]int{16, 4}, ConvKernel: 3, ResidualWeight: 0.5,
		ChunkSize: 4, ContextLeft: 6, ContextRight: 3, LogitCap: 0.5, InvalidLogit: -1e9, ClippedLinears: true, Eps: 1e-6,
		GradientClipping: 1e10, OutputDims: 20, TextHidden: 24}
	for _, tc := range []struct {
		name                  string
		chunk, left, right    int
		clip                  float64
		frames, padding, seed int
	}{
		{"right context 3", 4, 6, 3, 1e10, 40, 9, 1},
		{"right context 1, clip 2", 5, 3, 1, 2, 37, 0, 2},
		{"left 13 chunk 12", 12, 13, 0, 1e10, 90, 21, 3},
		{"left 2, right 5", 3, 2, 5, 1e10, 30, 5, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base
			cfg.ChunkSize, cfg.ContextLeft, cfg.ContextRight, cfg.GradientClipping = tc.chunk, tc.left, tc.right, tc.clip
			a := randomAudio(cfg, uint64(tc.seed))
			o := newAudioOps(t, a, nil)
			g := towerRand{rand.New(rand.NewPCG(5, uint64(tc.seed)))}
			feats := g.vec(tc.frames*16, 1)
			mask := make([]bool, tc.frames)
			for i := range tc.frames - tc.padding {
				mask[i] = true
			}
			hid, tower, soft := audioOpsVsGo(t, a, o, feats, mask)
			t.Logf("ops vs Go: hidden states and block parts %.3g (scaled), tower_output %.3g, soft tokens %.3g", hid, tower, soft)
			if hid > 1e-5 || tower > 1e-5 || soft > 1e-5 {
				t.Errorf("the ops path differs from the Go tower: %.3g, %.3g, %.3g (over 1e-5)", hid, tower, soft)
			}
		})
	}
}
