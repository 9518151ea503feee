package gemma4

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"verdict/native"
	"verdict/native/nativetest"
)

// visionChecksOf is visionTowerChecks as towerChecks: every stage against
// the fixture's references, with the fixture's tolerances.
func visionChecksOf(t testing.TB, fx *towerFixture, cfg *VisionConfig, enc visionEncoder) []towerCheck {
	t.Helper()
	cs, err := visionTowerChecks(fx, cfg, enc)
	if err != nil {
		t.Fatal(err)
	}
	return towerChecks(t, cs)
}

// towerChecks converts the library's checks; the exact ones (a count of
// differences) must be 0 outright.
func towerChecks(t testing.TB, cs []Check) []towerCheck {
	t.Helper()
	var out []towerCheck
	for _, c := range cs {
		if c.Tol == 0 {
			if c.MaxErr != 0 {
				t.Fatalf("%s: %g (%s)", c.Name, c.MaxErr, c.Note)
			}
			continue
		}
		out = append(out, towerCheck{c.Name, c.MaxErr, c.Tol})
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

// towerRand fills tower weights for the generated configurations.
type towerRand struct{ r *rand.Rand }

func (g towerRand) vec(n int, scale float32) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(g.r.NormFloat64()) * scale
	}
	return v
}

// norm is a norm weight near 1.
func (g towerRand) norm(n int) []float32 {
	v := g.vec(n, 0.1)
	for i := range v {
		v[i]++
	}
	return v
}

// linear is a clipped linear whose bounds cut some of its inputs and
// outputs.
func (g towerRand) linear(out, in int) clipLinear {
	return clipLinear{W: g.vec(out*in, 1/float32(math.Sqrt(float64(in)))), out: out, in: in, clip: true,
		inMin: -1.5 - g.r.Float32(), inMax: 1.5 + g.r.Float32(), outMin: -0.8 - g.r.Float32(), outMax: 0.8 + g.r.Float32()}
}

// randomVision is a Vision of cfg with random weights.
func randomVision(cfg VisionConfig, seed uint64) *Vision {
	g := towerRand{rand.New(rand.NewPCG(seed, 1))}
	c := &cfg
	H, hd := c.Hidden, c.HeadDim
	v := &Vision{Cfg: c, InputProj: g.vec(H*3*c.PatchSize*c.PatchSize, 0.3), PosTable: g.vec(2*c.PositionEmbeddingSize*H, 0.5),
		StdBias: g.vec(H, 0.1), StdScale: g.norm(H), EmbedProj: g.vec(c.TextHidden*H, 0.2), Layers: make([]VisionLayer, c.Layers)}
	for i := range v.Layers {
		v.Layers[i] = VisionLayer{InputNorm: g.norm(H), PostAttnNorm: g.norm(H), PreFFNorm: g.norm(H), PostFFNorm: g.norm(H),
			QNorm: g.norm(hd), KNorm: g.norm(hd), Q: g.linear(c.Heads*hd, H), K: g.linear(c.KVHeads*hd, H),
			V: g.linear(c.KVHeads*hd, H), O: g.linear(H, c.Heads*hd), Gate: g.linear(c.Intermediate, H),
			Up: g.linear(c.Intermediate, H), Down: g.linear(H, c.Intermediate)}
	}
	v.invFreq = make([]float32, hd/4)
	for i := range v.invFreq {
		v.invFreq[i] = 1 / float32(math.Pow(c.RopeTheta, float64(float32(2*i)/float32(hd/2))))
	}
	return v
}

// TestVisionOpsGenerated: configurations the fixture does not have (GQA
// with several KV heads, as many KV heads as heads, one KV head without
// padding, a pooling kernel of 2) give the plain-Go tower's results on the
// ops path.
func TestVisionOpsGenerated(t *testing.T) {
	base := VisionConfig{Hidden: 32, Intermediate: 48, Layers: 2, HeadDim: 8, PatchSize: 2, PoolingKernel: 2,
		PositionEmbeddingSize: 16, RopeTheta: 100, Eps: 1e-6, ClippedLinears: true, Standardize: true, TextHidden: 24}
	for _, tc := range []struct {
		heads, kv, pad int
	}{{4, 2, 4}, {2, 2, 4}, {4, 1, 0}, {6, 3, 8}} {
		t.Run(fmt.Sprintf("heads %d kv %d padding %d", tc.heads, tc.kv, tc.pad), func(t *testing.T) {
			cfg := base
			cfg.Heads, cfg.KVHeads = tc.heads, tc.kv
			v := randomVision(cfg, uint64(tc.heads*10+tc.kv))
			o := newVisionOps(t, v, nil)
			var pos []Patch
			for y := range 4 {
				for x := range 6 {
					pos = append(pos, Patch{x, y})
				}
			}
			for range tc.pad {
				pos = append(pos, Patch{-1, -1})
			}
			g := towerRand{rand.New(rand.NewPCG(3, 4))}
			pixels := g.vec(len(pos)*3*4, 0.5)
			var want, got VisionTrace
			ws, wn, err := v.Encode(pixels, pos, &want)
			if err != nil {
				t.Fatal(err)
			}
			gs, gn, err := o.Encode(pixels, pos, &got)
			if err != nil {
				t.Fatal(err)
			}
			if gn != wn {
				t.Fatalf("%d soft tokens, the Go tower gives %d", gn, wn)
			}
			var hid float64
			for l := range want.Hidden {
				hid = max(hid, scaledErr(got.Hidden[l], want.Hidden[l], len(want.Hidden[l])))
			}
			se := scaledErr(gs, ws, len(ws))
			t.Logf("ops vs Go: hidden states %.3g, soft tokens %.3g (scaled)", hid, se)
			if hid > 1e-5 || se > 1e-5 {
				t.Errorf("the ops path differs from the Go tower: hidden %.3g, soft %.3g (over 1e-5)", hid, se)
			}
		})
	}
}
