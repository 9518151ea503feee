package native

import (
	"fmt"
	"math"
	"testing"
)

var q4Shapes = []struct{ n, rows, cols, group int }{
	{1, 1, 32, 32}, {1, 7, 64, 32}, {1, 70, 1024, 64}, {2, 33, 512, 128}, {3, 9, 2048, 32},
	{1, 5, 2560, 128}, {4, 48, 96, 32}, {5, 50, 1536, 64}, {7, 97, 2048, 64},
	{64, 130, 512, 32}, {65, 49, 2560, 128}, {130, 20, 1024, 256}, {3, 300, 64, 64},
	{12, 37, 512, 64}, {17, 21, 1024, 32}, {32, 40, 2048, 128}, {33, 11, 1536, 64}, {8, 9, 96, 32},
}

func randQ4(seed uint64, rows, cols, group int) (Matrix, []float32) {
	r := newRand(seed)
	w := randVec(r, rows*cols, 0.05)
	for i := range w { // an offset per row, as real weights have
		w[i] += float32(i/cols%7) * 0.01
	}
	return Quantize(NewF32(rows, cols, w), group), w
}

// TestQ4Linear: a q4 product is the float32 product of the dequantized
// weights, bit for bit, on every kernel set, for GEMV and GEMM shapes; and
// every kernel set gives the portable set's bits.
func TestQ4Linear(t *testing.T) {
	for _, s := range q4Shapes {
		m, _ := randQ4(uint64(s.rows*31+s.cols), s.rows, s.cols, s.group)
		f := m.Dequantize()
		x := randVec(newRand(uint64(s.n)), s.n*s.cols, 1)
		name := fmt.Sprintf("%dx%dx%d/g%d", s.n, s.rows, s.cols, s.group)
		var ref []float32
		for _, set := range simdSets() {
			useSIMD(set)
			got := make([]float32, s.n*s.rows)
			want := make([]float32, s.n*s.rows)
			for i := range got {
				got[i] = float32(math.NaN())
			}
			Linear(got, x, m, s.n)
			Linear(want, x, f, s.n)
			bitsEqual(t, name+"/"+simdNames[set]+" q4 vs f32", got, want)
			if ref == nil {
				ref = got
			} else {
				bitsEqual(t, name+"/"+simdNames[set]+" vs portable", got, ref)
			}
		}
		setSIMD(1)
		naive := make([]float32, s.n*s.rows)
		naiveLinear(naive, x, f, s.n)
		closeTo(t, name+" vs naive", ref, naive, 1e-4, abs(1e-4))
	}
}

// TestQ4Determinism: bit-identical for 1, 2 and 3 threads, and each token
// alone equals its row of an n-token product.
func TestQ4Determinism(t *testing.T) {
	defer SetThreads(0)
	simdLevels(t, func(t *testing.T) {
		for _, s := range []struct{ n, rows, cols, group int }{
			{5, 37, 96, 32}, {67, 101, 1280, 64}, {3, 200, 2048, 128}, {64, 256, 1024, 32}, {9, 64, 4096, 64},
			{21, 70, 512, 64}, {32, 33, 1024, 32},
		} {
			m, _ := randQ4(uint64(s.n+s.rows), s.rows, s.cols, s.group)
			x := randVec(newRand(uint64(s.cols)), s.n*s.cols, 1)
			SetThreads(1)
			ref := make([]float32, s.n*s.rows)
			Linear(ref, x, m, s.n)
			name := fmt.Sprintf("%dx%dx%d", s.n, s.rows, s.cols)
			for _, th := range []int{2, 3} {
				SetThreads(th)
				got := make([]float32, len(ref))
				Linear(got, x, m, s.n)
				bitsEqual(t, fmt.Sprintf("%s/threads=%d", name, th), got, ref)
			}
			for tk := 0; tk < s.n; tk++ {
				one := make([]float32, s.rows)
				Linear(one, x[tk*s.cols:(tk+1)*s.cols], m, 1)
				bitsEqual(t, fmt.Sprintf("%s/token %d alone", name, tk), one, ref[tk*s.rows:(tk+1)*s.rows])
			}
			for _, k := range []int{2, 3, 4} {
				if k > s.n {
					continue
				}
				part := make([]float32, k*s.rows)
				Linear(part, x[:k*s.cols], m, k)
				bitsEqual(t, fmt.Sprintf("%s/first %d tokens", name, k), part, ref[:k*s.rows])
			}
		}
	})
}

// TestQ4Quantize: the least-squares refit never makes the squared error
// worse than the min/max grid's, no weight is off by much more than a step,
// a constant group is exact, and the packing is the same on any thread
// count.
func TestQ4Quantize(t *testing.T) {
	defer SetThreads(0)
	for _, g := range []int{32, 64, 128} {
		rows, cols := 40, 512
		r := newRand(uint64(g))
		w := randVec(r, rows*cols, 0.02)
		for c := 0; c < g; c++ { // row 3's first group is constant
			w[3*cols+c] = 0.125
		}
		w[5*cols+7] = 0.3 // an outlier
		SetThreads(1)
		m := Quantize(NewF32(rows, cols, w), g)
		d := m.Dequantize().F32
		var sse, sseMinMax float64
		for row := 0; row < rows; row++ {
			for k := 0; k < cols/g; k++ {
				grp := w[row*cols+k*g : row*cols+(k+1)*g]
				mn, mx := grp[0], grp[0]
				for _, v := range grp {
					mn, mx = min(mn, v), max(mx, v)
				}
				step := (mx - mn) / 15
				s, o := m.Q4SO[(row*(cols/g)+k)*2], m.Q4SO[(row*(cols/g)+k)*2+1]
				for c, v := range grp {
					got := d[row*cols+k*g+c]
					// Least squares may clip a group's extremes a little.
					if e := math.Abs(float64(got - v)); e > float64(step)*1.5+1e-7 {
						t.Fatalf("g%d: w[%d,%d] = %v dequantizes to %v (scale %v, offset %v)", g, row, k*g+c, v, got, s, o)
					}
					sse += float64((got - v) * (got - v))
					if step > 0 {
						q := math.Round(float64((v - mn) / step))
						e := float64(mn) + q*float64(step) - float64(v)
						sseMinMax += e * e
					}
				}
			}
		}
		for c := 0; c < g; c++ {
			if d[3*cols+c] != 0.125 {
				t.Fatalf("g%d: constant group dequantizes to %v", g, d[3*cols+c])
			}
		}
		if sse > sseMinMax*1.0001 {
			t.Errorf("g%d: squared error %.4g exceeds the min/max grid's %.4g", g, sse, sseMinMax)
		}
		t.Logf("g%d: rms error %.4g (min/max grid %.4g)", g, math.Sqrt(sse/float64(len(w))), math.Sqrt(sseMinMax/float64(len(w))))
		for _, th := range []int{2, 3} {
			SetThreads(th)
			m2 := Quantize(NewF32(rows, cols, w), g)
			for i := range m.Q4 {
				if m.Q4[i] != m2.Q4[i] {
					t.Fatalf("g%d threads=%d: nibbles differ at %d", g, th, i)
				}
			}
			bitsEqual(t, fmt.Sprintf("g%d threads=%d scales", g, th), m2.Q4SO, m.Q4SO)
		}
	}
}

// TestQ4ReadRows: reading rows dequantizes exactly as fmaf(scale, q, offset).
func TestQ4ReadRows(t *testing.T) {
	m, _ := randQ4(5, 9, 256, 64)
	simdLevels(t, func(t *testing.T) {
		for _, row0 := range []int{0, 4, 8} {
			got := make([]float32, 256)
			m.ReadRows(got, row0)
			for c := range got {
				q := m.Q4[row0*128+c/32*16+c%16]
				if c%32 >= 16 {
					q >>= 4
				}
				q &= 15
				so := m.Q4SO[(row0*4+c/64)*2:]
				want := float32(math.FMA(float64(so[0]), float64(q), float64(so[1])))
				if d := math.Abs(float64(got[c] - want)); d > 1e-7*math.Abs(float64(want)) {
					t.Fatalf("row %d col %d = %v, want %v", row0, c, got[c], want)
				}
			}
		}
	})
}

func BenchmarkQ4Linear(b *testing.B) {
	for _, g := range []int{32, 64, 128} {
		for _, s := range []struct{ rows, cols, n int }{
			{2048, 2048, 1}, {8192, 2048, 1}, {2048, 8192, 1}, {2048, 2048, 64}, {8192, 2048, 64}, {2048, 8192, 512},
		} {
			b.Run(fmt.Sprintf("q4g%d/%dx%d/n=%d", g, s.rows, s.cols, s.n), func(b *testing.B) {
				m, _ := randQ4(1, s.rows, s.cols, g)
				x := randVec(newRand(2), s.n*s.cols, 1)
				y := make([]float32, s.n*s.rows)
				b.SetBytes(m.Bytes())
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					Linear(y, x, m, s.n)
				}
				b.ReportMetric(2*float64(s.n*s.rows*s.cols)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// sparseInputs: a gate output g (with a few rows' survivors), x, and q4
// up and downᵀ matrices.
func sparseInputs(n, inter, d, group int) (g, x []float32, up, downT Matrix) {
	r := newRand(uint64(n*inter + d))
	g = randVec(r, n*inter, 1)
	x = randVec(r, n*d, 1)
	up, _ = randQ4(uint64(inter), inter, d, group)
	downT, _ = randQ4(uint64(inter+1), inter, d, group)
	return
}

// TestSparseMLPQ4: the survivors' h values are the dense kernels' (up by
// Linear, SparseGeluMul) bit for bit; y is the sum over them; each token
// alone, any thread count and any kernel set give the same bits.
func TestSparseMLPQ4(t *testing.T) {
	defer SetThreads(0)
	const z = 1.6448536
	for _, s := range []struct{ n, inter, d, group int }{{1, 256, 64, 32}, {5, 1024, 128, 64}, {33, 512, 96, 32}, {3, 2048, 256, 128}} {
		g, x, up, downT := sparseInputs(s.n, s.inter, s.d, s.group)
		name := fmt.Sprintf("%dx%dx%d", s.n, s.inter, s.d)
		// The dense reference.
		u := make([]float32, s.n*s.inter)
		Linear(u, x, up, s.n)
		hd := append([]float32(nil), g...)
		SparseGeluMul(hd, u, s.inter, z)
		dT := downT.Dequantize().F32
		run := func(n int, gi, xi []float32) ([]float32, []float32, []int32) {
			y := make([]float32, n*s.d)
			h := make([]float32, n*s.inter)
			idx := make([]int32, n*s.inter)
			SparseMLPQ4(y, append([]float32(nil), gi...), h, idx, xi, up, downT, n, z)
			return y, h, idx
		}
		var ref []float32
		for _, set := range simdSets() {
			useSIMD(set)
			for _, th := range []int{1, 3} {
				SetThreads(th)
				y, h, idx := run(s.n, g, x)
				if ref == nil {
					ref = y
					// Survivors: h as the dense kernel; y their sum.
					for tk := 0; tk < s.n; tk++ {
						k := 0
						want := make([]float64, s.d)
						for i := 0; i < s.inter; i++ {
							v := hd[tk*s.inter+i]
							if v == 0 && g[tk*s.inter+i] <= 0 {
								continue
							}
							if k >= s.inter || int(idx[tk*s.inter+k]) != i {
								if v == 0 {
									continue // gelu(x)·u == 0 without surviving: tiny x
								}
								t.Fatalf("%s token %d: survivor %d missing", name, tk, i)
							}
							if math.Float32bits(h[tk*s.inter+k]) != math.Float32bits(v) {
								t.Fatalf("%s token %d row %d: h %v, dense %v", name, tk, i, h[tk*s.inter+k], v)
							}
							for c := 0; c < s.d; c++ {
								want[c] += float64(v) * float64(dT[i*s.d+c])
							}
							k++
						}
						for c := 0; c < s.d; c++ {
							if d := math.Abs(float64(y[tk*s.d+c]) - want[c]); d > 1e-4*(1+math.Abs(want[c])) {
								t.Fatalf("%s token %d col %d: %v, want %v", name, tk, c, y[tk*s.d+c], want[c])
							}
						}
					}
					continue
				}
				bitsEqual(t, fmt.Sprintf("%s/%s/threads=%d", name, simdNames[set], th), y, ref)
			}
		}
		setSIMD(1)
		SetThreads(0)
		for tk := 0; tk < s.n; tk++ {
			y, _, _ := run(1, g[tk*s.inter:(tk+1)*s.inter], x[tk*s.d:(tk+1)*s.d])
			bitsEqual(t, fmt.Sprintf("%s/token %d alone", name, tk), y, ref[tk*s.d:(tk+1)*s.d])
		}
	}
}
