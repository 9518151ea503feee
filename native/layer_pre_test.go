package native

import (
	"math"
	"testing"
)

// preRun runs one layer step with its pre part from seed's data on be:
// fused, the step's one call; apart, the operation the pre part stands
// for, then the step without it. It returns every tensor the calls write,
// by name, and the stream's op calls.
func preRun(t *testing.T, be *Backend, kind string, n, d int, seed uint64, fused bool) (map[string][]float32, OpCalls) {
	t.Helper()
	st, err := be.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	e := &opsEnv{t: t, be: be, st: st, w: be.NewBound(), out: map[string][]float32{}}
	defer e.free()
	r := newRand(seed)
	vec := func(rows, cols int, scale float32) Tensor { return e.f32(randVec(r, rows*cols, scale), rows, cols) }
	const eps = 1e-6
	switch kind {
	case "laurel", "laurel no bw": // the attention's norm-add with Laurel's first
		y, x, w, a, b := e.alloc(F32, n, d), vec(n, d, 2), vec(1, d, 1), vec(n, d, 2), vec(n, d, 1)
		bw, ba, f, fw := vec(1, d, 1), vec(n, d, 2), e.alloc(F32, n, d), vec(1, d, 1)
		if kind == "laurel no bw" {
			bw = Tensor{}
		}
		c := float32(1 / math.Sqrt2)
		if fused {
			st.NormAddMoreB(y, x, w, a, b, bw, ba, d, eps, c, Tensor{}, f, fw)
		} else {
			st.NormAdd(b, b, bw, ba, Tensor{}, d, eps, 0)
			st.NormAddMore(y, x, w, a, b, d, eps, c, Tensor{}, f, fw)
		}
		for nm, v := range map[string]Tensor{"y": y, "x": x, "b": b, "f": f} {
			e.keep(nm, v)
		}
	case "per-layer input": // the previous layer's, to streams 1..3, in the predict step
		H, pre, preW := vec(4*n, d, 2), vec(n, d, 2), vec(1, d, 1)
		a := &AltUpStep{
			Y: e.alloc(F32, n, 4), F: e.alloc(F32, n, d), NormW: vec(1, d, 1),
			W: e.mat(NewF32(4, d, randVec(r, 4*d, 0.2))), CW: e.mat(NewF32(16, 4, randVec(r, 64, 1))),
			CY: e.alloc(F32, n, 16), H: H, Pred: e.alloc(F32, 4*n, d), Out: e.alloc(F32, n, d), OutW: vec(1, d, 1),
			Eps: eps, Scale: 1 / float32(d), Add: 1, N: n, Dim: d,
		}
		a.X = H.Slice(0, n)
		if fused {
			a.Pre, a.PreW = pre, preW
		} else {
			h1 := H.Slice(n, 2*n)
			st.NormAddMore(h1, pre, preW, h1, Tensor{}, d, eps, 0, H.Slice(2*n, 4*n), Tensor{}, Tensor{})
		}
		st.AltUpPredictStep(a)
		for nm, v := range map[string]Tensor{"streams": H, "pre": pre, "router": a.Y, "coefficients": a.CY, "prediction": a.Pred, "out": a.Out} {
			e.keep(nm, v)
		}
	default:
		t.Fatalf("no kind %q", kind)
	}
	return e.out, st.OpCalls()
}

// TestPreParts: a layer step with its pre part (Laurel's norm-add in the
// attention's norm_add_more; the previous layer's per-layer input in
// altup_predict_step) gives the bits of the operations apart, in one call
// on the CPU backend and through a backend without the steps (the
// Stream's operations one by one).
func TestPreParts(t *testing.T) {
	partial := openPartial(t)
	for _, tc := range []struct {
		kind string
		op   Op
	}{
		{"laurel", OpNormAddMore},
		{"laurel no bw", OpNormAddMore},
		{"per-layer input", OpAltUpPredictStep},
	} {
		for _, n := range []int{1, 2, 5} {
			for _, d := range []int{64, 200} {
				seed := uint64(1000*n + d)
				want, _ := preRun(t, Default(), tc.kind, n, d, seed, false)
				got, calls := preRun(t, Default(), tc.kind, n, d, seed, true)
				if calls.Total() != 1 || calls[tc.op] != 1 {
					t.Errorf("%s n=%d d=%d: calls %v, want %v 1", tc.kind, n, d, calls, tc.op)
				}
				viaPartial, _ := preRun(t, partial, tc.kind, n, d, seed, true)
				for nm, w := range want {
					bitsEqual(t, tc.kind+" "+nm, got[nm], w)
					bitsEqual(t, tc.kind+" "+nm+" (backend without the steps)", viaPartial[nm], w)
				}
			}
		}
	}
}
