package gemma4

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"verdict/native"
	"verdict/native/nativetest"
)

// visionEncoder is Vision.Encode's signature: the plain-Go tower and
// VisionOps both have it.
type visionEncoder func(pixels []float32, pos []Patch, trace *VisionTrace) ([]float32, int, error)

// visionChecksOf is visionChecks for any encoder: every stage against the
// fixture's references, with the fixture's tolerances.
func visionChecksOf(t testing.TB, fx *towerFixture, cfg *VisionConfig, enc visionEncoder) []towerCheck {
	t.Helper()
	pv, pos := visionPatches(t, fx)
	var tr VisionTrace
	soft, n, err := enc(pv, pos, &tr)
	if err != nil {
		t.Fatal(err)
	}
	var out []towerCheck
	scaled := func(name string, got, want []float32, tol float64) {
		if len(got) != len(want) {
			t.Fatalf("%s: %d values, the reference has %d", name, len(got), len(want))
		}
		out = append(out, towerCheck{name, scaledErr(got, want, len(want)), tol})
	}
	hs := fx.f32(t, "hidden_states")
	block := len(pos) * cfg.Hidden
	if len(tr.Hidden)*block != len(hs) {
		t.Fatalf("%d hidden states of %d, the reference holds %d values", len(tr.Hidden), block, len(hs))
	}
	for l, h := range tr.Hidden {
		scaled(fmt.Sprintf("hidden_states[%d]", l), h, hs[l*block:(l+1)*block], fx.tol(t, "vision_hidden_states_scaled"))
	}
	scaled("pooled", tr.Pooled, fx.f32(t, "pooled"), fx.tol(t, "vision_pooled"))
	scaled("pooled_f64", tr.Pooled, fx.f32(t, "pooled_f64"), fx.tol(t, "vision_pooled"))
	abs := func(name string, got []float32, ref, tolKey string) {
		e, err := maxAbs(got, fx.f32(t, ref))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out = append(out, towerCheck{name, e, fx.tol(t, tolKey)})
	}
	abs("tower_output", tr.TowerOut, "tower_output", "vision_tower_output")
	abs("tower_output_f64", tr.TowerOut, "tower_output_f64", "vision_tower_output")
	abs("soft_tokens", soft, "soft_tokens", "vision_soft_tokens")
	abs("soft_tokens_f64", soft, "soft_tokens_f64", "vision_soft_tokens")
	if want := len(fx.f32(t, "soft_tokens")) / cfg.TextHidden; n != want {
		t.Fatalf("%d soft tokens, the reference has %d", n, want)
	}
	return out
}

func newVisionOps(t testing.TB, v *Vision, be *native.Backend) *VisionOps {
	t.Helper()
	o, err := NewVisionOps(v, be)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(o.Close)
	return o
}

// TestVisionOpsForward: the encoder on the backend's operations (the CPU
// backend here) passes the fixture's checks with its tolerances, and uses
// no operation the backend lacks.
func TestVisionOpsForward(t *testing.T) {
	fx, v := loadVisionFixture(t)
	o := newVisionOps(t, v, nil)
	if u := o.Unsupported(); len(u) != 0 {
		t.Errorf("the CPU backend leaves %v to the fallback", u)
	}
	for _, c := range visionChecksOf(t, fx, v.Cfg, o.Encode) {
		t.Logf("%-18s max err %.3g (tolerance %.3g)", c.name, c.err, c.tol)
		if !c.ok() {
			t.Errorf("%s: error %.3g over the tolerance %.3g", c.name, c.err, c.tol)
		}
	}
}

// TestVisionOpsMatchesGo: every stage of the ops path against the
// plain-Go tower, within the fixture's tolerances (the differences are
// logged: the sums' orders differ, the arithmetic does not).
func TestVisionOpsMatchesGo(t *testing.T) {
	fx, v := loadVisionFixture(t)
	o := newVisionOps(t, v, nil)
	pv, pos := visionPatches(t, fx)
	var want, got VisionTrace
	ws, wn, err := v.Encode(pv, pos, &want)
	if err != nil {
		t.Fatal(err)
	}
	gs, gn, err := o.Encode(pv, pos, &got)
	if err != nil {
		t.Fatal(err)
	}
	if gn != wn {
		t.Fatalf("%d soft tokens, the Go tower gives %d", gn, wn)
	}
	ht := fx.tol(t, "vision_hidden_states_scaled")
	var worst float64
	for l := range want.Hidden {
		worst = max(worst, scaledErr(got.Hidden[l], want.Hidden[l], len(want.Hidden[l])))
	}
	pe := scaledErr(got.Pooled, want.Pooled, len(want.Pooled))
	te, _ := maxAbs(got.TowerOut, want.TowerOut)
	se, _ := maxAbs(gs, ws)
	t.Logf("ops vs Go: hidden states %.3g (scaled), pooled %.3g (scaled), tower_output %.3g, soft tokens %.3g", worst, pe, te, se)
	for _, c := range []towerCheck{{"hidden", worst, ht}, {"pooled", pe, fx.tol(t, "vision_pooled")},
		{"tower_output", te, fx.tol(t, "vision_tower_output")}, {"soft_tokens", se, fx.tol(t, "vision_soft_tokens")}} {
		if !c.ok() {
			t.Errorf("%s: the ops path differs from the Go tower by %.3g, over %.3g", c.name, c.err, c.tol)
		}
	}
}

// TestVisionOpsPerturbed: the checks can fail. A weight changed after
// binding (the bound memory is the Vision's) and a changed pixel each take
// the ops path's output past the tolerances.
func TestVisionOpsPerturbed(t *testing.T) {
	fx, v := loadVisionFixture(t)
	o := newVisionOps(t, v, nil)
	failed := func(name string) {
		t.Helper()
		bad := 0
		for _, c := range visionChecksOf(t, fx, v.Cfg, o.Encode) {
			if !c.ok() {
				bad++
			}
		}
		if bad == 0 {
			t.Errorf("%s: every check still passes", name)
		}
	}
	last := &v.Layers[len(v.Layers)-1]
	old := last.PostFFNorm[3]
	last.PostFFNorm[3] += 0.05
	failed("post_feedforward_layernorm[3] + 0.05")
	last.PostFFNorm[3] = old
	// The bounds of a clipped linear are read at Encode: narrowed, they
	// must change the result.
	if v.Cfg.ClippedLinears {
		q := &o.layers[0].q
		lo, hi := q.outMin, q.outMax
		q.outMin, q.outMax = lo/4, hi/4
		failed("q_proj output bounds / 4")
		q.outMin, q.outMax = lo, hi
	}
	pv, pos := visionPatches(t, fx)
	want, _, err := o.Encode(pv, pos, nil)
	if err != nil {
		t.Fatal(err)
	}
	pv2 := slices.Clone(pv)
	pv2[7] += 0.25
	got, _, err := o.Encode(pv2, pos, nil)
	if err != nil {
		t.Fatal(err)
	}
	if e, _ := maxAbs(got, want); e <= fx.tol(t, "vision_soft_tokens") {
		t.Errorf("one pixel + 0.25 moves the soft tokens by %.3g, within the tolerance", e)
	}
}

// TestVisionOpsRefuses: inputs the Go tower refuses are refused with its
// errors, and the ops path's own limits (the patch budget, a cell given
// more than k² patches) are named; a closed encoder and a backend whose
// passes fail give errors, not panics.
func TestVisionOpsRefuses(t *testing.T) {
	fx, v := loadVisionFixture(t)
	o := newVisionOps(t, v, nil)
	pv, pos := visionPatches(t, fx)
	k := v.Cfg.PoolingKernel
	pd := len(pv) / len(pos)
	outside := slices.Clone(pos)
	outside[0] = Patch{v.Cfg.PositionEmbeddingSize, 0}
	allPad := make([]Patch, len(pos))
	for i := range allPad {
		allPad[i] = Patch{-1, -1}
	}
	repeated := slices.Clone(pos)
	for i := range k*k + 1 {
		repeated[i] = pos[0]
	}
	for _, tc := range []struct {
		name   string
		budget int
		pixels []float32
		pos    []Patch
		want   string
	}{
		{"no patches", 0, nil, nil, "no patches"},
		{"over the budget", len(pos) - k*k, pv, pos, "over the budget"},
		{"ragged pixels", 0, pv[:len(pv)-1], pos, "pixel values"},
		{"not a pooling multiple", 0, pv[:(len(pos)-1)*pd], pos[:len(pos)-1], "multiple of pooling_kernel_size"},
		{"outside the table", 0, pv, outside, "outside the position table"},
		{"every patch padding", 0, pv, allPad, "every patch is padding"},
		{"repeated positions", 0, pv, repeated, "pooled into cell"},
	} {
		o.MaxPatches = maxImageSoftTokens * k * k
		if tc.budget > 0 {
			o.MaxPatches = tc.budget
		}
		if _, _, err := o.Encode(tc.pixels, tc.pos, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want one containing %q", tc.name, err, tc.want)
		}
	}
	o.MaxPatches = maxImageSoftTokens * k * k
	if _, err := NewVisionOps(nil, nil); err == nil {
		t.Error("NewVisionOps(nil): no error")
	}
	// A backend whose passes fail: the error says so.
	u, err := NewVisionOps(v, nativetest.Unimplemented(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := u.Encode(pv, pos, nil); !errors.Is(err, native.ErrUnimplemented) {
		t.Errorf("on a backend without the operations: err %v, want ErrUnimplemented", err)
	}
	u.Close()
	c := newVisionOps(t, v, nil)
	c.Close()
	if _, _, err := c.Encode(pv, pos, nil); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("after Close: err %v", err)
	}
}
