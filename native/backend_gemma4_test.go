//go:build linux || darwin

package native

import (
	"math"
	"testing"
)

// clampRef is Go's min(max(v, lo), hi), element by element.
func clampRef(x []float32, lo, hi float32) []float32 {
	y := make([]float32, len(x))
	for i, v := range x {
		y[i] = min(max(v, lo), hi)
	}
	return y
}

// TestClamp: Stream.Clamp on the CPU backend and through the fallback of
// a backend without it (the partial table: gather alone) gives Go's
// min(max(x, lo), hi) bit for bit: NaN kept, infinities clamped, lo above
// hi giving hi, in place and not.
func TestClamp(t *testing.T) {
	r := newRand(7)
	x := randVec(r, 3*37, 4)
	x[0], x[1], x[2], x[3] = float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 0
	inf := float32(math.Inf(1))
	pb := openPartial(t)
	if pb.Supports(OpClamp) || !Default().Supports(OpClamp) {
		t.Fatalf("Supports(clamp): partial %v, cpu %v", pb.Supports(OpClamp), Default().Supports(OpClamp))
	}
	for _, be := range []*Backend{Default(), pb} {
		for _, tc := range []struct{ lo, hi float32 }{{-1.5, 2.25}, {0, inf}, {-inf, inf}, {3, -3}, {-0.5, -0.5}} {
			for _, inplace := range []bool{false, true} {
				want := clampRef(x, tc.lo, tc.hi)
				st, err := be.NewStream()
				if err != nil {
					t.Fatal(err)
				}
				e := &opsEnv{t: t, be: be, st: st, w: be.NewBound(), out: map[string][]float32{}}
				in := e.f32(x, 3, 37)
				out := in
				if !inplace {
					out = e.alloc(F32, 3, 37)
				}
				e.st.Clamp(out, in, tc.lo, tc.hi)
				got := make([]float32, len(x))
				e.st.Download(got, out)
				if err := e.st.Sync(); err != nil {
					t.Fatal(err)
				}
				e.free()
				for i := range want {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) && !(got[i] != got[i] && want[i] != want[i]) {
						t.Fatalf("%s [%g, %g] in place %v: [%d] = %v, want %v", be.Name(), tc.lo, tc.hi, inplace, i, got[i], want[i])
					}
				}
			}
		}
	}
	if pb.Fallbacks().Ops == 0 {
		t.Error("the partial backend ran clamp without a fallback")
	}
	// The check can fail: a wrong bound is seen.
	if g, w := clampRef(x, -1, 2), clampRef(x, -1, 2.5); math.Float32bits(g[5]) == math.Float32bits(w[5]) && g[1] == w[1] {
		t.Error("the reference does not tell hi 2 from 2.5")
	}
}
