package native

import "testing"

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
	if c := st.OpCalls(); c.Total() != 5 || c.String() != "linear 2, ew 2, norm_add_more 1" {
		t.Errorf("in all: %d calls, %q", c.Total(), c.String())
	}
}
