package native

import (
	"slices"
	"testing"
)

// TestRepOps: AddRep and MulRep apply b to every run of its length, as
// Add and Mul row by row do, bit for bit; a b whose length does not divide
// y's is refused.
func TestRepOps(t *testing.T) {
	be := Default()
	st, err := be.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	r := newRand(5)
	const rows, d = 7, 96
	a, b := randVec(r, rows*d, 1), randVec(r, d, 1)
	for _, tc := range []struct {
		name string
		rep  func(y, a, b Tensor)
		one  func(y, a, b Tensor)
	}{{"AddRep", st.AddRep, st.Add}, {"MulRep", st.MulRep, st.Mul}} {
		got, want := make([]float32, rows*d), make([]float32, rows*d)
		tc.rep(be.hostTensor(got, rows, d), be.hostTensor(a, rows, d), be.hostTensor(b, 1, d))
		for i := 0; i < rows; i++ {
			tc.one(be.hostTensor(want[i*d:(i+1)*d], 1, d), be.hostTensor(a[i*d:(i+1)*d], 1, d), be.hostTensor(b, 1, d))
		}
		if err := st.Sync(); err != nil {
			t.Fatal(err)
		}
		bitsEqual(t, tc.name, got, want)
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s with b of 5 over 96 columns did not panic", tc.name)
				}
			}()
			tc.rep(be.hostTensor(got, rows, d), be.hostTensor(a, rows, d), be.hostTensor(b[:5], 1, 5))
		}()
	}
}

// TestNormRoPE: the fused operation gives RMSNorm, RoPE and Scatter's
// bits, rotated or not, scattered or not.
func TestNormRoPE(t *testing.T) {
	be := Default()
	st, err := be.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	r := newRand(9)
	const n, heads, hd = 5, 2, 16
	x0, w := randVec(r, n*heads*hd, 1), randVec(r, hd, 1)
	inv := make([]float32, hd/2)
	for i := range inv {
		inv[i] = float32(1 / (1 + float64(i)))
	}
	pos, slots := []int32{0, 3, 9, 1000, 7}, []int32{6, 0, 2, 9, 4}
	for _, rot := range []bool{true, false} {
		for _, scat := range []bool{true, false} {
			got, want := slices.Clone(x0), slices.Clone(x0)
			gp, wp := make([]float32, 10*heads*hd), make([]float32, 10*heads*hd)
			f := be.hostTensor(inv, 1, hd/2)
			if !rot {
				f = Tensor{}
			}
			to, idx := Tensor{}, Tensor{}
			if scat {
				to, idx = be.hostTensor(gp, 10, heads*hd), be.hostI32(slots)
			}
			st.NormRoPE(be.hostTensor(got, n, heads*hd), be.hostTensor(w, 1, hd), 1e-6, be.hostI32(pos), heads, hd, f, to, idx)
			wt := be.hostTensor(want, n, heads*hd)
			st.RMSNorm(wt, wt, be.hostTensor(w, 1, hd), hd, 1e-6)
			if rot {
				st.RoPE(wt, be.hostI32(pos), heads, hd, f)
			}
			if scat {
				st.Scatter(be.hostTensor(wp, 10, heads*hd), wt, be.hostI32(slots))
			}
			if err := st.Sync(); err != nil {
				t.Fatal(err)
			}
			bitsEqual(t, "NormRoPE x", got, want)
			bitsEqual(t, "NormRoPE pool", gp, wp)
		}
	}
}

// TestRouterCoef: the fused router and coefficients give Router, Linear
// and AddConst's bits, with and without the added constant.
func TestRouterCoef(t *testing.T) {
	be := Default()
	st, err := be.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	r := newRand(13)
	const n, d, no, nc = 3, 256, 4, 16
	x, nw, w, cw := randVec(r, n*d, 1), randVec(r, d, 1), randVec(r, no*d, 0.1), randVec(r, nc*no, 1)
	for _, plus := range []bool{false, true} {
		f := make([]float32, n*d)
		y1, c1 := make([]float32, n*no), make([]float32, n*nc)
		y2, c2 := make([]float32, n*no), make([]float32, n*nc)
		st.RouterCoef(be.hostTensor(y1, n, no), be.hostTensor(f, n, d), be.hostTensor(x, n, d), be.hostTensor(nw, 1, d),
			be.hostTensor(w, no, d), d, 1e-6, 1.0/d, be.hostTensor(cw, nc, no), be.hostTensor(c1, n, nc), 1, plus)
		st.Router(be.hostTensor(y2, n, no), be.hostTensor(f, n, d), be.hostTensor(x, n, d), be.hostTensor(nw, 1, d),
			be.hostTensor(w, no, d), d, 1e-6, 1.0/d)
		st.Linear(be.hostTensor(c2, n, nc), be.hostTensor(y2, n, no), be.hostTensor(cw, nc, no))
		if plus {
			st.AddConst(be.hostTensor(c2, n, nc), be.hostTensor(c2, n, nc), 1)
		}
		if err := st.Sync(); err != nil {
			t.Fatal(err)
		}
		bitsEqual(t, "RouterCoef router", y1, y2)
		bitsEqual(t, "RouterCoef coefficients", c1, c2)
	}
}
