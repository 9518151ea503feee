package native

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// Naive float64 references for the convolution kernels.

func convRandVec(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.Float64()*2 - 1)
	}
	return v
}

func naiveGemm(x, w []float32, n, out, in int) []float64 {
	y := make([]float64, n*out)
	for t := range n {
		for o := range out {
			s := 0.0
			for i := range in {
				s += float64(x[t*in+i]) * float64(w[o*in+i])
			}
			y[t*out+o] = s
		}
	}
	return y
}

// naiveConv2D: x [h, w, cin], w [cout, cin, k, k], groups = cin when dw.
func naiveConv2D(x, w, bias []float32, cin, cout int, g ConvGeom, dw bool) []float64 {
	y := make([]float64, g.OH*g.OW*cout)
	for oy := range g.OH {
		for ox := range g.OW {
			for o := range cout {
				s := 0.0
				if bias != nil {
					s = float64(bias[o])
				}
				for ky := range g.K {
					for kx := range g.K {
						iy, ix := oy*g.Stride-g.PadT+ky, ox*g.Stride-g.PadL+kx
						if iy < 0 || iy >= g.H || ix < 0 || ix >= g.W {
							continue
						}
						if dw {
							s += float64(x[(iy*g.W+ix)*cin+o]) * float64(w[(o*g.K+ky)*g.K+kx])
							continue
						}
						for i := range cin {
							s += float64(x[(iy*g.W+ix)*cin+i]) * float64(w[((o*cin+i)*g.K+ky)*g.K+kx])
						}
					}
				}
				y[(oy*g.OW+ox)*cout+o] = s
			}
		}
	}
	return y
}

// convClose checks |got − want| <= atol + rtol·scale where scale is the
// largest |want| of the whole output (sums of mixed-sign terms).
func convClose(t *testing.T, name string, got []float32, want []float64, tol float64) {
	t.Helper()
	if len(got) < len(want) {
		t.Fatalf("%s: got %d values, want %d", name, len(got), len(want))
	}
	scale := 1.0
	for _, v := range want {
		scale = max(scale, math.Abs(v))
	}
	worst := 0.0
	for i, w := range want {
		d := math.Abs(float64(got[i]) - w)
		if math.IsNaN(float64(got[i])) || d > tol*scale {
			t.Fatalf("%s: [%d] = %g, want %g (tol %g)", name, i, got[i], w, tol*scale)
		}
		worst = max(worst, d)
	}
}

// convSets are the convolution kernel sets this CPU has (0 portable, 1
// AVX2+FMA, 2 AVX-512).
func convSets() []int {
	defer setConvSIMD(2)
	var sets []int
	for level := range 3 {
		if setConvSIMD(level) == level {
			sets = append(sets, level)
		}
	}
	return sets
}

// convBoth runs f with every kernel set the CPU has, then restores the best.
func convBoth(t *testing.T, f func(t *testing.T)) {
	defer setConvSIMD(2)
	for _, level := range convSets() {
		setConvSIMD(level)
		t.Run(fmt.Sprintf("simd=%d", level), f)
	}
}

func TestSameGeom(t *testing.T) {
	for _, c := range []struct {
		in, k, s           int
		out, padT, padLast int
	}{
		{768, 3, 2, 384, 0, 1}, // even input, k3 s2: (0, 1)
		{192, 5, 2, 96, 1, 2},  // even input, k5 s2: (1, 2)
		{48, 3, 2, 24, 0, 1},   // MQA k/v down-conv
		{24, 5, 1, 24, 2, 2},   // stride 1: symmetric k/2
		{24, 3, 1, 24, 1, 1},
		{7, 3, 2, 4, 1, 1}, // odd input
	} {
		g := SameGeom(c.in, c.in, c.k, c.s)
		last := (g.OH-1)*g.Stride + g.K - g.H - g.PadT
		if g.OH != c.out || g.OW != c.out || g.PadT != c.padT || g.PadL != c.padT || last != c.padLast {
			t.Errorf("SameGeom(%d, k%d, s%d) = %+v (pad after %d), want out %d pad (%d, %d)", c.in, c.k, c.s, g, last, c.out, c.padT, c.padLast)
		}
	}
}

func TestGemmPacked(t *testing.T) {
	convBoth(t, func(t *testing.T) {
		r := newRand(7)
		for _, c := range []struct{ n, out, in int }{
			{1, 1, 1}, {5, 17, 3}, {7, 16, 8}, {6, 32, 321}, {150, 33, 700}, {300, 64, 27}, {145, 100, 641},
		} {
			x, w := convRandVec(r, c.n*c.in), convRandVec(r, c.out*c.in)
			y := make([]float32, c.n*c.out)
			GemmPacked(y, x, PackMatrix(w, c.out, c.in), c.n)
			convClose(t, fmt.Sprintf("gemm %dx%dx%d", c.n, c.out, c.in), y, naiveGemm(x, w, c.n, c.out, c.in), 2e-6*math.Sqrt(float64(c.in)))
		}
	})
}

func TestConv2D(t *testing.T) {
	convBoth(t, func(t *testing.T) {
		r := newRand(8)
		for _, c := range []struct{ h, w, cin, cout, k, s int }{
			{9, 7, 3, 5, 3, 2}, {8, 8, 4, 16, 3, 1}, {13, 11, 2, 3, 5, 2}, {16, 16, 3, 64, 3, 2}, {12, 10, 16, 40, 3, 1},
		} {
			g := SameGeom(c.h, c.w, c.k, c.s)
			x := convRandVec(r, c.h*c.w*c.cin)
			w := convRandVec(r, c.cout*c.cin*c.k*c.k)
			bias := convRandVec(r, c.cout)
			y := make([]float32, g.OH*g.OW*c.cout)
			Conv2D(y, x, PackConv(w, c.cout, c.cin, c.k), bias, c.cin, g)
			convClose(t, fmt.Sprintf("conv %+v", c), y, naiveConv2D(x, w, bias, c.cin, c.cout, g, false), 1e-5)
			Conv2D(y, x, PackConv(w, c.cout, c.cin, c.k), nil, c.cin, g)
			convClose(t, fmt.Sprintf("conv nobias %+v", c), y, naiveConv2D(x, w, nil, c.cin, c.cout, g, false), 1e-5)
		}
	})
}

func TestDepthwiseConv2D(t *testing.T) {
	convBoth(t, func(t *testing.T) {
		r := newRand(9)
		for _, c := range []struct{ h, w, ch, k, s int }{
			{9, 9, 40, 3, 2}, {8, 6, 8, 5, 1}, {7, 7, 12, 5, 2}, {6, 6, 3, 3, 1}, {10, 12, 64, 5, 2}, {4, 4, 37, 5, 1},
		} {
			g := SameGeom(c.h, c.w, c.k, c.s)
			x := convRandVec(r, c.h*c.w*c.ch)
			w := convRandVec(r, c.ch*c.k*c.k)
			y := make([]float32, g.OH*g.OW*c.ch)
			DepthwiseConv2D(y, x, DepthwiseWeights(w, c.ch, c.k), c.ch, g)
			convClose(t, fmt.Sprintf("dw %+v", c), y, naiveConv2D(x, w, nil, c.ch, c.ch, g, true), 1e-6)
		}
	})
}

func TestAvgPoolUpsampleTranspose(t *testing.T) {
	r := newRand(10)
	h, w, c, k := 12, 9, 5, 3
	x := convRandVec(r, h*w*c)
	y := make([]float32, h/k*(w/k)*c)
	AvgPool2D(y, x, h, w, c, k)
	want := make([]float64, len(y))
	for oy := range h / k {
		for ox := range w / k {
			for ch := range c {
				s := 0.0
				for ky := range k {
					for kx := range k {
						s += float64(x[((oy*k+ky)*w+ox*k+kx)*c+ch])
					}
				}
				want[(oy*(w/k)+ox)*c+ch] = s / float64(k*k)
			}
		}
	}
	convClose(t, "avgpool", y, want, 1e-6)

	a, b := convRandVec(r, 6*4*3), convRandVec(r, 3*2*2)
	cat := make([]float32, 6*4*5)
	UpsampleConcat(cat, a, 3, b, 2, 6, 4, 3, 2)
	for p := range 24 {
		oy, ox := p/4, p%4
		for ch := range 5 {
			var v float32
			if ch < 3 {
				v = a[p*3+ch]
			} else {
				v = b[((oy/2)*2+ox/2)*2+ch-3]
			}
			if cat[p*5+ch] != v {
				t.Fatalf("UpsampleConcat[%d,%d] = %g, want %g", p, ch, cat[p*5+ch], v)
			}
		}
	}

	chw := convRandVec(r, 3*70)
	hwc := make([]float32, len(chw))
	CHWToHWC(hwc, chw, 3, 70)
	for p := range 70 {
		for ch := range 3 {
			if hwc[p*3+ch] != chw[ch*70+p] {
				t.Fatalf("CHWToHWC[%d,%d] wrong", p, ch)
			}
		}
	}
}

func naiveMQA(q, k, v []float32, nq, heads, nk, d int, scale float64) []float64 {
	out := make([]float64, nq*heads*d)
	s := make([]float64, nk)
	for r := range nq * heads {
		m := math.Inf(-1)
		for j := range nk {
			dot := 0.0
			for i := range d {
				dot += float64(q[r*d+i]) * float64(k[j*d+i])
			}
			s[j] = dot * scale
			m = max(m, s[j])
		}
		sum := 0.0
		for j := range nk {
			s[j] = math.Exp(s[j] - m)
			sum += s[j]
		}
		for j := range nk {
			for i := range d {
				out[r*d+i] += s[j] / sum * float64(v[j*d+i])
			}
		}
	}
	return out
}

func TestMQAttention(t *testing.T) {
	convBoth(t, func(t *testing.T) {
		r := newRand(11)
		for _, c := range []struct{ nq, heads, nk, d int }{
			{1, 1, 1, 1}, {37, 3, 29, 20}, {64, 12, 16, 64}, {20, 4, 100, 96}, {9, 2, 7, 5},
		} {
			q := convRandVec(r, c.nq*c.heads*c.d)
			k := convRandVec(r, c.nk*c.d)
			v := convRandVec(r, c.nk*c.d)
			for i := range q {
				q[i] *= 3 // peaked softmax too
			}
			scale := 1 / math.Sqrt(float64(c.d))
			out := make([]float32, len(q))
			MQAttention(out, q, k, v, c.nq, c.heads, c.nk, c.d, float32(scale))
			convClose(t, fmt.Sprintf("mqa %+v", c), out, naiveMQA(q, k, v, c.nq, c.heads, c.nk, c.d, scale), 2e-6)
		}
	})
}

func TestRMSNormAct(t *testing.T) {
	convBoth(t, func(t *testing.T) {
		r := newRand(13)
		for _, c := range []int{1, 7, 64, 200} {
			rows := 37
			x, w, g, res := convRandVec(r, rows*c), convRandVec(r, c), convRandVec(r, c), convRandVec(r, rows*c)
			for i := range x {
				x[i] *= 4
			}
			for _, gelu := range []bool{false, true} {
				for _, withRes := range []bool{false, true} {
					want := make([]float64, rows*c)
					for row := range rows {
						ss := 0.0
						for i := range c {
							ss += float64(x[row*c+i]) * float64(x[row*c+i])
						}
						inv := 1 / math.Sqrt(ss/float64(c)+1e-6)
						for i := range c {
							v := float64(x[row*c+i]) * inv * float64(w[i])
							if gelu {
								v = 0.5 * v * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(v+0.044715*v*v*v)))
							}
							v *= float64(g[i])
							if withRes {
								v += float64(res[row*c+i])
							}
							want[row*c+i] = v
						}
					}
					y := make([]float32, rows*c)
					var rr []float32
					if withRes {
						rr = res
					}
					RMSNormAct(y, x, w, g, rr, c, 1e-6, gelu)
					convClose(t, fmt.Sprintf("c=%d gelu=%v res=%v", c, gelu, withRes), y, want, 2e-6)
				}
			}
		}
		// In place, no gamma.
		x := convRandVec(r, 3*16)
		want := make([]float32, len(x))
		RMSNormAct(want, x, make16(1), nil, nil, 16, 1e-6, false)
		RMSNormAct(x, x, make16(1), nil, nil, 16, 1e-6, false)
		bitsEqual(t, "in place", x, want)
	})
}

func make16(v float32) []float32 {
	w := make([]float32, 16)
	for i := range w {
		w[i] = v
	}
	return w
}

// TestConvThreadInvariance: results are bit-identical for any thread count.
func TestConvThreadInvariance(t *testing.T) {
	defer SetThreads(0)
	r := newRand(12)
	x, w := convRandVec(r, 300*200), convRandVec(r, 100*200)
	p := PackMatrix(w, 100, 200)
	g := SameGeom(20, 15, 3, 2)
	img, cw := convRandVec(r, 20*15*8), PackConv(convRandVec(r, 24*8*9), 24, 8, 3)
	q, kv := convRandVec(r, 50*4*16), convRandVec(r, 30*16)
	run := func() [][]float32 {
		y := make([]float32, 300*100)
		GemmPacked(y, x, p, 300)
		c := make([]float32, g.OH*g.OW*24)
		Conv2D(c, img, cw, nil, 8, g)
		a := make([]float32, len(q))
		MQAttention(a, q, kv, kv, 50, 4, 30, 16, 0.25)
		return [][]float32{y, c, a}
	}
	SetThreads(1)
	one := run()
	SetThreads(0)
	for i, got := range run() {
		for j := range got {
			if math.Float32bits(got[j]) != math.Float32bits(one[i][j]) {
				t.Fatalf("output %d differs at %d between 1 and %d threads", i, j, Threads())
			}
		}
	}
}

// TestConvSetsAgree: the matrix products (plain A in place or packed, the
// im2col view, several K blocks, partial micro-tiles) give the same bits in
// every kernel set, at one thread and at all.
func TestConvSetsAgree(t *testing.T) {
	defer SetThreads(0)
	sets := convSets()
	if len(sets) < 2 {
		t.Skip("one kernel set on this CPU")
	}
	defer setConvSIMD(2)
	r := newRand(14)
	type gemmCase struct{ n, out, in int }
	gemms := []gemmCase{{1, 1, 1}, {13, 17, 5}, {25, 33, 320}, {30, 100, 700}, {145, 48, 64}, {150, 160, 641}, {7, 272, 9}, {300, 129, 33}}
	type convCase struct{ h, w, cin, cout, k, s int }
	convs := []convCase{{9, 7, 3, 5, 3, 2}, {13, 11, 16, 40, 3, 1}, {16, 16, 40, 33, 3, 2}}
	var gx, gw [][]float32
	for _, c := range gemms {
		gx, gw = append(gx, convRandVec(r, c.n*c.in)), append(gw, convRandVec(r, c.out*c.in))
	}
	var cx, cw [][]float32
	for _, c := range convs {
		cx, cw = append(cx, convRandVec(r, c.h*c.w*c.cin)), append(cw, convRandVec(r, c.cout*c.cin*c.k*c.k))
	}
	run := func() [][]float32 {
		var outs [][]float32
		for i, c := range gemms {
			y := make([]float32, c.n*c.out)
			GemmPacked(y, gx[i], PackMatrix(gw[i], c.out, c.in), c.n)
			outs = append(outs, y)
		}
		for i, c := range convs {
			g := SameGeom(c.h, c.w, c.k, c.s)
			y := make([]float32, g.OH*g.OW*c.cout)
			Conv2D(y, cx[i], PackConv(cw[i], c.cout, c.cin, c.k), nil, c.cin, g)
			outs = append(outs, y)
		}
		return outs
	}
	setConvSIMD(sets[0])
	SetThreads(1)
	want := run()
	for _, level := range sets {
		for _, threads := range []int{1, 0} {
			setConvSIMD(level)
			SetThreads(threads)
			for i, got := range run() {
				for j := range got {
					if math.Float32bits(got[j]) != math.Float32bits(want[i][j]) {
						t.Fatalf("set %d, %d threads: product %d differs at %d: %g, set %d's %g", level, Threads(), i, j, got[j], sets[0], want[i][j])
					}
				}
			}
		}
	}
}

func TestConvPanics(t *testing.T) {
	for name, f := range map[string]func(){
		"gemm x short":  func() { GemmPacked(make([]float32, 4), make([]float32, 3), PackMatrix(make([]float32, 4), 2, 2), 2) },
		"gemm unpacked": func() { GemmPacked(make([]float32, 4), make([]float32, 4), Packed{}, 2) },
		"conv cin": func() {
			Conv2D(make([]float32, 64), make([]float32, 64), PackConv(make([]float32, 27), 1, 3, 3), nil, 2, SameGeom(4, 4, 3, 1))
		},
		"dw y short": func() {
			DepthwiseConv2D(make([]float32, 3), make([]float32, 16), make([]float32, 9), 1, SameGeom(4, 4, 3, 1))
		},
		"pool shape": func() { AvgPool2D(make([]float32, 4), make([]float32, 16), 4, 4, 1, 3) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}

// Benchmarks at the vision tower's shapes (GFLOP/s counts 2 flops per
// multiply-add).

func BenchmarkGemmPacked(b *testing.B) {
	for _, s := range []struct{ n, out, in int }{
		{2304, 2560, 640}, {2304, 640, 2560}, {576, 2560, 1280}, {2304, 3840, 1920}, {36864, 128, 512},
	} {
		b.Run(fmt.Sprintf("%dx%dx%d", s.n, s.out, s.in), func(b *testing.B) {
			r := newRand(1)
			x, w := convRandVec(r, s.n*s.in), PackMatrix(convRandVec(r, s.out*s.in), s.out, s.in)
			y := make([]float32, s.n*s.out)
			for b.Loop() {
				GemmPacked(y, x, w, s.n)
			}
			b.ReportMetric(2*float64(s.n*s.out*s.in)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

func BenchmarkConv2D(b *testing.B) {
	for _, s := range []struct{ h, cin, cout, k, st int }{{384, 64, 256, 3, 2}, {192, 128, 512, 3, 1}, {768, 3, 64, 3, 2}} {
		b.Run(fmt.Sprintf("%d_%dto%d_s%d", s.h, s.cin, s.cout, s.st), func(b *testing.B) {
			r := newRand(2)
			g := SameGeom(s.h, s.h, s.k, s.st)
			x, w := convRandVec(r, s.h*s.h*s.cin), PackConv(convRandVec(r, s.cout*s.cin*s.k*s.k), s.cout, s.cin, s.k)
			y := make([]float32, g.OH*g.OW*s.cout)
			for b.Loop() {
				Conv2D(y, x, w, nil, s.cin, g)
			}
			b.ReportMetric(2*float64(g.OH*g.OW*s.cout*s.cin*s.k*s.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

func BenchmarkDepthwiseConv2D(b *testing.B) {
	for _, s := range []struct{ h, c, k, st int }{{192, 768, 5, 2}, {48, 640, 5, 1}, {48, 640, 3, 2}} {
		b.Run(fmt.Sprintf("%d_c%d_k%d_s%d", s.h, s.c, s.k, s.st), func(b *testing.B) {
			r := newRand(3)
			g := SameGeom(s.h, s.h, s.k, s.st)
			x, w := convRandVec(r, s.h*s.h*s.c), convRandVec(r, s.k*s.k*s.c)
			y := make([]float32, g.OH*g.OW*s.c)
			for b.Loop() {
				DepthwiseConv2D(y, x, w, s.c, g)
			}
		})
	}
}

func BenchmarkMQAttention(b *testing.B) {
	for _, s := range []struct{ nq, heads, nk, d int }{{2304, 12, 576, 64}, {576, 16, 576, 96}} {
		b.Run(fmt.Sprintf("q%d_h%d_k%d_d%d", s.nq, s.heads, s.nk, s.d), func(b *testing.B) {
			r := newRand(4)
			q, k, v := convRandVec(r, s.nq*s.heads*s.d), convRandVec(r, s.nk*s.d), convRandVec(r, s.nk*s.d)
			out := make([]float32, len(q))
			for b.Loop() {
				MQAttention(out, q, k, v, s.nq, s.heads, s.nk, s.d, 0.125)
			}
			b.ReportMetric(4*float64(s.nq*s.heads*s.nk*s.d)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}
