package native

import (
	"fmt"
	"testing"
)

// GELU products of a part of TestLinears.
const (
	noGelu   = iota
	geluMul  // Y = gelu(Y)·GeluMul
	geluInto // GeluMul = gelu(GeluMul)·Y
)

// linearsRun runs one Linears call on be over x [n, d] and the matrices
// ms (each part's GELU product by gm as gelu[i] says), or, alone, each
// part's Linear then GeluMul, and returns every part's output (then the
// GeluMul of each geluInto part) and the stream's op calls.
func linearsRun(t *testing.T, be *Backend, xs []float32, n, d int, ms []Matrix, gelu []int, gm [][]float32, alone bool) ([][]float32, OpCalls) {
	t.Helper()
	st, err := be.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	e := &opsEnv{t: t, be: be, st: st, w: be.NewBound(), out: map[string][]float32{}}
	defer e.free()
	x := e.f32(xs, n, d)
	parts := make([]LinearPart, len(ms))
	for i, m := range ms {
		parts[i] = LinearPart{Y: e.alloc(F32, n, m.Rows), W: e.mat(m), GeluInto: gelu[i] == geluInto}
		if gelu[i] != noGelu {
			parts[i].GeluMul = e.f32(gm[i], n, m.Rows)
		}
	}
	if alone {
		for _, p := range parts {
			st.Linear(p.Y, x, p.W)
			switch {
			case p.GeluInto:
				st.GeluMul(p.GeluMul, p.GeluMul, p.Y)
			case !p.GeluMul.Nil():
				st.GeluMul(p.Y, p.Y, p.GeluMul)
			}
		}
	} else {
		st.Linears(x, parts)
	}
	var ys [][]float32
	for i, p := range parts {
		e.keep(fmt.Sprint(i), p.Y)
		ys = append(ys, e.out[fmt.Sprint(i)])
	}
	for i, p := range parts {
		if p.GeluInto {
			e.keep(fmt.Sprint("into ", i), p.GeluMul)
			ys = append(ys, e.out[fmt.Sprint("into ", i)])
		}
	}
	return ys, st.OpCalls()
}

// TestLinears: the products of one x in one call give each product's
// bits alone (with its GELU product when asked), at E2B's layer shapes
// scaled down (q, k, v, Laurel's left; the per-layer gate with GELU; the
// MLP's up product into its gate) and others, 1 to 8 tokens, q4 and f32,
// on the CPU backend (one call) and through a backend without the entry
// (the operations one by one).
func TestLinears(t *testing.T) {
	partial := openPartial(t)
	r := newRand(25)
	for _, tc := range []struct {
		name  string
		d     int
		rows  []int
		gelu  []int
		dtype DType
	}{
		{"q k v laurel", 256, []int{256, 64, 64, 8}, []int{noGelu, noGelu, noGelu, noGelu}, Q4},
		{"q laurel (KV-shared layer)", 256, []int{256, 8}, []int{noGelu, noGelu}, Q4},
		{"per-layer gate with GELU", 256, []int{32}, []int{geluMul}, Q4},
		{"up into the gate", 256, []int{512}, []int{geluInto}, Q4},
		{"mixed GELU", 128, []int{40, 7, 64}, []int{geluMul, noGelu, geluInto}, Q4},
		{"f32", 96, []int{33, 16, 8}, []int{noGelu, geluMul, geluInto}, F32},
	} {
		var ms []Matrix
		for _, rows := range tc.rows {
			m := randMatrix(r, F32, rows, tc.d)
			if tc.dtype == Q4 {
				m = Quantize(m, 64)
			}
			ms = append(ms, m)
		}
		for n := 1; n <= 8; n++ {
			xs := randVec(r, n*tc.d, 2)
			gm := make([][]float32, len(ms))
			for i, m := range ms {
				gm[i] = randVec(r, n*m.Rows, 1)
			}
			want, _ := linearsRun(t, Default(), xs, n, tc.d, ms, tc.gelu, gm, true)
			got, calls := linearsRun(t, Default(), xs, n, tc.d, ms, tc.gelu, gm, false)
			if calls.Total() != 1 || calls[OpLinears] != 1 {
				t.Errorf("%s n=%d: calls %v, want linears 1", tc.name, n, calls)
			}
			viaPartial, _ := linearsRun(t, partial, xs, n, tc.d, ms, tc.gelu, gm, false)
			if len(got) != len(want) || len(viaPartial) != len(want) {
				t.Fatalf("%s n=%d: %d, %d and %d outputs", tc.name, n, len(got), len(viaPartial), len(want))
			}
			for i := range want {
				nm := fmt.Sprintf("%s n=%d output %d", tc.name, n, i)
				bitsEqual(t, nm, got[i], want[i])
				bitsEqual(t, nm+" (backend without linears)", viaPartial[i], want[i])
			}
		}
	}
}

// TestLinearsOrder: a part whose GeluMul is an earlier part's Y (an MLP's
// gate, then its up product into it) and a part with its own input X (a
// layer's output product with Laurel's right matrix) give the operations'
// bits one by one in part order, on the CPU backend (one call) and
// through a backend without the entry.
func TestLinearsOrder(t *testing.T) {
	partial := openPartial(t)
	r := newRand(26)
	const d, dx = 256, 64
	gate, up := Quantize(randMatrix(r, F32, 512, d), 64), Quantize(randMatrix(r, F32, 512, d), 64)
	o, lr := Quantize(randMatrix(r, F32, 96, d), 64), Quantize(randMatrix(r, F32, 96, dx), 64)
	for n := 1; n <= 8; n++ {
		xs, ls := randVec(r, n*d, 2), randVec(r, n*dx, 2)
		run := func(be *Backend, alone bool) ([][]float32, OpCalls) {
			st, err := be.NewStream()
			if err != nil {
				t.Fatal(err)
			}
			e := &opsEnv{t: t, be: be, st: st, w: be.NewBound(), out: map[string][]float32{}}
			defer e.free()
			x, l := e.f32(xs, n, d), e.f32(ls, n, dx)
			g, u := e.alloc(F32, n, 512), e.alloc(F32, n, 512)
			yo, yl := e.alloc(F32, n, 96), e.alloc(F32, n, 96)
			wg, wu, wo, wl := e.mat(gate), e.mat(up), e.mat(o), e.mat(lr)
			if alone {
				st.Linear(g, x, wg)
				st.Linear(u, x, wu)
				st.GeluMul(g, g, u)
				st.Linear(yo, x, wo)
				st.Linear(yl, l, wl)
			} else {
				st.Linears(x, []LinearPart{{Y: g, W: wg}, {Y: u, W: wu, GeluMul: g, GeluInto: true}})
				st.Linears(x, []LinearPart{{Y: yo, W: wo}, {Y: yl, W: wl, X: l}})
			}
			var ys [][]float32
			for i, y := range []Tensor{g, u, yo, yl} {
				e.keep(fmt.Sprint(i), y)
				ys = append(ys, e.out[fmt.Sprint(i)])
			}
			return ys, st.OpCalls()
		}
		want, _ := run(Default(), true)
		got, calls := run(Default(), false)
		if calls.Total() != 2 || calls[OpLinears] != 2 {
			t.Errorf("n=%d: calls %v, want linears 2", n, calls)
		}
		viaPartial, _ := run(partial, false)
		for i, nm := range []string{"gelu(gate)·up", "up", "output", "laurel right (its own x)"} {
			bitsEqual(t, fmt.Sprintf("n=%d %s", n, nm), got[i], want[i])
			bitsEqual(t, fmt.Sprintf("n=%d %s (backend without linears)", n, nm), viaPartial[i], want[i])
		}
	}
}

// TestLinearsRefuses: a misused call panics before any work.
func TestLinearsRefuses(t *testing.T) {
	be := Default()
	st, err := be.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	x := be.hostTensor(make([]float32, 2*64), 2, 64)
	w := be.hostTensor(make([]float32, 8*64), 8, 64)
	y := be.hostTensor(make([]float32, 2*8), 2, 8)
	for _, tc := range []struct {
		name  string
		parts []LinearPart
	}{
		{"five parts", []LinearPart{{Y: y, W: w}, {Y: y, W: w}, {Y: y, W: w}, {Y: y, W: w}, {Y: y, W: w}}},
		{"y of other rows", []LinearPart{{Y: be.hostTensor(make([]float32, 8), 1, 8), W: w}}},
		{"w of other columns", []LinearPart{{Y: y, W: be.hostTensor(make([]float32, 8*32), 8, 32)}}},
		{"short GELU factor", []LinearPart{{Y: y, W: w, GeluMul: be.hostTensor(make([]float32, 15), 1, 15)}}},
		{"GeluInto without a factor", []LinearPart{{Y: y, W: w, GeluInto: true}}},
		{"GeluInto a longer factor", []LinearPart{{Y: y, W: w, GeluMul: be.hostTensor(make([]float32, 17), 1, 17), GeluInto: true}}},
		{"an X of other rows", []LinearPart{{Y: y, W: w, X: be.hostTensor(make([]float32, 64), 1, 64)}}},
		{"an X of w's other columns", []LinearPart{{Y: y, W: w, X: be.hostTensor(make([]float32, 2*32), 2, 32)}}},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", tc.name)
				}
			}()
			st.Linears(x, tc.parts)
		}()
	}
}
