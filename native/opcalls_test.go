package native

import (
	"math"
	"testing"
)

// TestOpCalls: a stream counts each call into its backend's table under
// its operation, a composed layer step as one call, and nothing for a call
// with no work.
func TestOpCalls(t *testing.T) {
	be := Default()
	st, err := be.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	r := newRand(3)
	const n, d = 3, 64
	x, w, y := randVec(r, n*d, 1), randVec(r, d*d, 1), make([]float32, n*d)
	xt, wt, yt := be.hostTensor(x, n, d), be.hostTensor(w, d, d), be.hostTensor(y, n, d)
	nw := be.hostTensor(randVec(r, d, 1), 1, d)
	for _, tc := range []struct {
		name string
		run  func()
		want map[Op]int64
	}{
		{"two products", func() { st.Linear(yt, xt, wt); st.Linear(yt, xt, wt) }, map[Op]int64{OpLinear: 2}},
		{"an add and a scale", func() { st.Add(yt, xt, xt); st.Scale(yt, yt, 2) }, map[Op]int64{OpEW: 2}},
		{"no rows", func() { st.Linear(yt.Sub(0, 0, d), xt.Sub(0, 0, d), wt) }, map[Op]int64{}},
		{"norm_add_more", func() {
			st.NormAddMore(yt, xt, nw, xt, Tensor{}, d, 1e-6, 0, Tensor{}, Tensor{}, Tensor{})
		}, map[Op]int64{OpNormAddMore: 1}},
		// a hint: one call for up to VD_PREFETCH_MAX tensors, empty ones skipped
		{"prefetch, an empty tensor skipped", func() { st.Prefetch(wt, Tensor{}, nw, xt.Sub(0, 0, d)) }, map[Op]int64{OpPrefetch: 1}},
		{"prefetch of ten", func() { st.Prefetch(wt, wt, wt, wt, wt, wt, wt, wt, wt, nw) }, map[Op]int64{OpPrefetch: 2}},
		{"prefetch of nothing", func() { st.Prefetch(Tensor{}) }, map[Op]int64{}},
	} {
		before := st.OpCalls()
		tc.run()
		got := st.OpCalls().Sub(before)
		var want OpCalls
		for op, k := range tc.want {
			want[op] = k
		}
		if got != want {
			t.Errorf("%s: calls %v, want %v", tc.name, got, want)
		}
	}
	if err := st.Sync(); err != nil {
		t.Fatal(err)
	}
	if c := st.OpCalls(); c.Total() != 8 || c.String() != "linear 2, ew 2, norm_add_more 1, prefetch 3" {
		t.Errorf("in all: %d calls, %q", c.Total(), c.String())
	}
}

// TestApart: a stream told to run linears apart calls linear and ew for
// it, with the same bits; Apart() gives the backend's own back; an
// operation the Stream does not compose is refused.
func TestApart(t *testing.T) {
	be := Default()
	st, err := be.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	r := newRand(5)
	const n, d = 3, 64
	x, w, g := randVec(r, n*d, 1), randVec(r, d*d, 1), randVec(r, n*d, 1)
	xt, wt := be.hostTensor(x, n, d), be.hostTensor(w, d, d)
	run := func(apart bool) ([]float32, OpCalls) {
		if apart {
			st.Apart(OpLinears)
		} else {
			st.Apart()
		}
		y, m := make([]float32, n*d), append([]float32(nil), g...)
		before := st.OpCalls()
		st.Linears(xt, []LinearPart{{Y: be.hostTensor(y, n, d), W: wt, GeluMul: be.hostTensor(m, n, d)}})
		if err := st.Sync(); err != nil {
			t.Fatal(err)
		}
		return y, st.OpCalls().Sub(before)
	}
	yA, cA := run(true)
	yG, cG := run(false)
	if cA.String() != "linear 1, ew 1" || cG.String() != "linears 1" {
		t.Errorf("calls apart %q, grouped %q", cA, cG)
	}
	for i := range yG {
		if math.Float32bits(yA[i]) != math.Float32bits(yG[i]) {
			t.Fatalf("value %d: %v apart, %v grouped", i, yA[i], yG[i])
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("Apart(OpLinear): no refusal")
		}
	}()
	st.Apart(OpLinear)
}
