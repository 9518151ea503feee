package native

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
)

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)) }

func randVec(r *rand.Rand, n int, scale float32) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64()) * scale
	}
	return v
}

// toBF16 rounds to the nearest bfloat16 (ties to even).
func toBF16(f float32) uint16 {
	b := math.Float32bits(f)
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

func randMatrix(r *rand.Rand, dt DType, rows, cols int) Matrix {
	f := randVec(r, rows*cols, 0.5)
	if dt == F32 {
		return NewF32(rows, cols, f)
	}
	b := make([]uint16, len(f))
	for i, v := range f {
		b[i] = toBF16(v)
	}
	return NewBF16(rows, cols, b)
}

func (m Matrix) at(r, c int) float32 {
	if m.DType == F32 {
		return m.F32[r*m.Cols+c]
	}
	return math.Float32frombits(uint32(m.BF16[r*m.Cols+c]) << 16)
}

// simdSets lists the C kernel sets this machine has (0 portable, 1 AVX2,
// 2 NEON, 3 AVX-512).
func simdSets() []int {
	defer setSIMD(1)
	var sets []int
	for s := 0; s <= 3; s++ {
		if useSIMD(s) {
			sets = append(sets, s)
		}
	}
	return sets
}

// simdLevels runs f once per C kernel set this machine has, restoring the
// best one afterwards.
func simdLevels(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	defer setSIMD(1)
	for _, s := range simdSets() {
		useSIMD(s)
		t.Run(simdNames[s], f)
	}
}

// closeTo fails at the first i where |got−want| > rtol·|want| + atol(i)
// (NaN and ±Inf must match exactly).
func closeTo(t *testing.T, name string, got, want []float32, rtol float64, atol func(i int) float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: length %d, want %d", name, len(got), len(want))
	}
	for i := range got {
		g, w := float64(got[i]), float64(want[i])
		if math.IsNaN(w) || math.IsInf(w, 0) {
			if !(math.IsNaN(g) && math.IsNaN(w)) && g != w {
				t.Fatalf("%s[%d] = %v, want %v", name, i, g, w)
			}
			continue
		}
		lim := rtol * math.Abs(w)
		if atol != nil {
			lim += atol(i)
		}
		if d := math.Abs(g - w); d > lim || math.IsNaN(g) {
			t.Fatalf("%s[%d] = %v, want %v (|diff| %.3g > %.3g)", name, i, g, w, d, lim)
		}
	}
}

func abs(v float64) func(int) float64 { return func(int) float64 { return v } }

func bitsEqual(t *testing.T, name string, got, want []float32) {
	t.Helper()
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s[%d] = %v (%#x), want %v (%#x): not bit-identical", name, i,
				got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
		}
	}
}

// exact and exactAbs are the tolerance of ops doing the reference's float32
// operations in its order: zero on amd64; elsewhere Go may fuse a*b+c.
func exact() float64 {
	if runtime.GOARCH == "amd64" {
		return 0
	}
	return 1e-6
}

func exactAbs() func(int) float64 {
	if runtime.GOARCH == "amd64" {
		return nil
	}
	return abs(1e-6)
}

var linearShapes = []struct{ n, rows, cols int }{
	{1, 1, 1}, {1, 7, 3}, {1, 13, 17}, {1, 9, 8}, {1, 64, 2048}, {1, 70, 1029},
	{2, 31, 100}, {3, 33, 101}, {4, 48, 512}, {5, 50, 513}, {7, 97, 1031},
	{1, 5, 0}, {6, 4, 4}, {64, 130, 520}, {65, 49, 1100}, {9, 300, 8}, {130, 20, 2051},
}

func TestLinear(t *testing.T) {
	simdLevels(t, func(t *testing.T) {
		for _, dt := range []DType{F32, BF16} {
			for _, s := range linearShapes {
				r := newRand(uint64(s.n*1000003 + s.rows*1009 + s.cols))
				w := randMatrix(r, dt, s.rows, s.cols)
				x := randVec(r, s.n*s.cols, 1)
				got := make([]float32, s.n*s.rows)
				want := make([]float32, s.n*s.rows)
				for i := range got {
					got[i] = float32(math.NaN())
				}
				Linear(got, x, w, s.n)
				naiveLinear(want, x, w, s.n)
				// Rounding error of a float32 dot product: a few ulps of Σ|x·w|.
				mag := make([]float64, len(want))
				for tk := 0; tk < s.n; tk++ {
					for rw := 0; rw < s.rows; rw++ {
						var m float64
						for c := 0; c < s.cols; c++ {
							m += math.Abs(float64(x[tk*s.cols+c]) * float64(w.at(rw, c)))
						}
						mag[tk*s.rows+rw] = m
					}
				}
				name := fmt.Sprintf("%v/%dx%dx%d", dt, s.n, s.rows, s.cols)
				closeTo(t, name, got, want, 0, func(i int) float64 { return 2e-6*mag[i] + 1e-30 })
			}
		}
	})
}

// TestLinearDeterminism: bit-identical results for 1, 2 and 3 threads, and
// n rows at once equal n single-row calls.
func TestLinearDeterminism(t *testing.T) {
	defer SetThreads(0)
	simdLevels(t, func(t *testing.T) {
		for _, dt := range []DType{F32, BF16} {
			for _, s := range []struct{ n, rows, cols int }{
				{5, 37, 77}, {67, 101, 1300}, {130, 96, 515}, {3, 200, 2048}, {64, 256, 1024},
			} {
				r := newRand(uint64(s.n + s.rows + s.cols))
				w := randMatrix(r, dt, s.rows, s.cols)
				x := randVec(r, s.n*s.cols, 1)
				SetThreads(1)
				ref := make([]float32, s.n*s.rows)
				Linear(ref, x, w, s.n)
				name := fmt.Sprintf("%v/%dx%dx%d", dt, s.n, s.rows, s.cols)
				for _, th := range []int{2, 3} {
					SetThreads(th)
					got := make([]float32, len(ref))
					Linear(got, x, w, s.n)
					bitsEqual(t, fmt.Sprintf("%s/threads=%d", name, th), got, ref)
				}
				for tk := 0; tk < s.n; tk++ {
					one := make([]float32, s.rows)
					Linear(one, x[tk*s.cols:(tk+1)*s.cols], w, 1)
					bitsEqual(t, fmt.Sprintf("%s/row %d alone", name, tk), one, ref[tk*s.rows:(tk+1)*s.rows])
				}
			}
		}
	})
}

func TestLinearConcurrent(t *testing.T) {
	r := newRand(7)
	w := randMatrix(r, BF16, 300, 700)
	x := randVec(r, 9*700, 1)
	ref := make([]float32, 9*300)
	Linear(ref, x, w, 9)
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got := make([]float32, len(ref))
			for i := 0; i < 50; i++ {
				Linear(got, x, w, 9)
				for j := range got {
					if got[j] != ref[j] {
						t.Errorf("concurrent Linear differs at %d", j)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
}

type attnCase struct {
	name                       string
	nq, nk, hq, hkv, d, window int
	qpos                       []int32
}

func attnCases() []attnCase {
	seq := func(from, n int) []int32 {
		p := make([]int32, n)
		for i := range p {
			p[i] = int32(from + i)
		}
		return p
	}
	return []attnCase{
		{"prefill", 9, 9, 4, 2, 16, 0, seq(0, 9)},
		{"prefill-gqa4", 33, 33, 8, 2, 64, 0, seq(0, 33)},
		{"prefill-window", 40, 40, 8, 2, 32, 7, seq(0, 40)},
		{"chunk", 5, 21, 6, 2, 24, 0, seq(16, 5)},
		{"chunk-window", 6, 50, 3, 1, 40, 10, seq(44, 6)},
		{"decode", 1, 37, 8, 2, 256, 0, []int32{36}},
		{"decode-window", 1, 600, 8, 2, 256, 512, []int32{599}},
		{"decode-mha", 1, 13, 4, 4, 20, 0, []int32{12}},
		{"odd-dim", 7, 7, 2, 1, 13, 0, seq(0, 7)},
		{"tiny-dim", 3, 5, 5, 5, 3, 2, seq(2, 3)},
		{"group8", 4, 30, 8, 1, 48, 0, seq(26, 4)},
		{"past-end", 2, 10, 2, 1, 8, 4, []int32{20, 9}}, // first row sees no key
		{"big", 70, 70, 8, 2, 256, 0, seq(0, 70)},
	}
}

func attnInputs(c attnCase) (q, k, v []float32, p AttnParams) {
	r := newRand(uint64(c.nq*31 + c.nk*7 + c.d))
	q = randVec(r, c.nq*c.hq*c.d, 1)
	k = randVec(r, c.nk*c.hkv*c.d, 1)
	v = randVec(r, c.nk*c.hkv*c.d, 1)
	p = AttnParams{NQ: c.nq, NK: c.nk, HeadsQ: c.hq, HeadsKV: c.hkv, HeadDim: c.d,
		QPos: c.qpos, Window: c.window, Scale: 1 / float32(math.Sqrt(float64(c.d)))}
	return
}

func TestAttention(t *testing.T) {
	simdLevels(t, func(t *testing.T) {
		for _, c := range attnCases() {
			q, k, v, p := attnInputs(c)
			got := make([]float32, len(q))
			want := make([]float32, len(q))
			for i := range got {
				got[i] = float32(math.NaN())
			}
			Attention(got, q, k, v, p)
			naiveAttention(want, q, k, v, p)
			closeTo(t, c.name, got, want, 1e-5, abs(2e-6))
		}
	})
}

func TestAttentionDeterminism(t *testing.T) {
	defer SetThreads(0)
	simdLevels(t, func(t *testing.T) {
		for _, c := range attnCases() {
			q, k, v, p := attnInputs(c)
			SetThreads(1)
			ref := make([]float32, len(q))
			Attention(ref, q, k, v, p)
			for _, th := range []int{2, 3} {
				SetThreads(th)
				got := make([]float32, len(q))
				Attention(got, q, k, v, p)
				bitsEqual(t, fmt.Sprintf("%s/threads=%d", c.name, th), got, ref)
			}
			// Each query row alone gives the same bits.
			row := c.hq * c.d
			for i := 0; i < c.nq; i++ {
				one := make([]float32, row)
				p1 := p
				p1.NQ, p1.QPos = 1, p.QPos[i:i+1]
				Attention(one, q[i*row:(i+1)*row], k, v, p1)
				bitsEqual(t, fmt.Sprintf("%s/row %d alone", c.name, i), one, ref[i*row:(i+1)*row])
			}
		}
	})
}

// rowSizes are row widths and counts for the row ops: odd widths, one row,
// and enough rows to run on several threads.
var rowSizes = []struct{ rows, dim int }{
	{1, 1}, {1, 7}, {3, 8}, {2, 13}, {5, 2048}, {1, 2049}, {40, 1000}, {70, 2051},
}

func TestRowOps(t *testing.T) {
	simdLevels(t, func(t *testing.T) {
		for _, s := range rowSizes {
			r := newRand(uint64(s.rows*977 + s.dim))
			n := s.rows * s.dim
			x := randVec(r, n, 2)
			w := randVec(r, s.dim, 1)
			name := fmt.Sprintf("%dx%d", s.rows, s.dim)

			for _, wt := range [][]float32{w, nil} {
				got, want := make([]float32, n), make([]float32, n)
				RMSNorm(got, x, wt, s.dim, 1e-6)
				naiveRMSNorm(want, x, wt, s.dim, 1e-6)
				closeTo(t, "RMSNorm/"+name, got, want, 2e-6, abs(1e-7))
				got = append([]float32(nil), x...) // in place
				RMSNorm(got, got, wt, s.dim, 1e-6)
				closeTo(t, "RMSNorm-inplace/"+name, got, want, 2e-6, abs(1e-7))
			}

			for _, floor := range []float32{0, 1e5} {
				got, want := make([]float32, s.rows), make([]float32, s.rows)
				RowRMS(got, x, s.dim, floor)
				naiveRowRMS(want, x, s.dim, floor)
				closeTo(t, "RowRMS/"+name, got, want, 2e-6, nil)
			}

			sc := randVec(r, s.rows, 1)
			got, want := append([]float32(nil), x...), append([]float32(nil), x...)
			ScaleRows(got, sc, s.dim)
			naiveScaleRows(want, sc, s.dim)
			closeTo(t, "ScaleRows/"+name, got, want, exact(), exactAbs())

			got, want = append([]float32(nil), x...), append([]float32(nil), x...)
			MulRows(got, w)
			naiveMulRows(want, w)
			closeTo(t, "MulRows/"+name, got, want, exact(), exactAbs())

			u := randVec(r, n, 1)
			for _, z := range []float32{0, 1.6448536, -0.5} {
				got, want = append([]float32(nil), x...), append([]float32(nil), x...)
				SparseGeluMul(got, u, s.dim, z)
				naiveSparseGeluMul(want, u, s.dim, z)
				closeTo(t, fmt.Sprintf("SparseGeluMul(z=%v)/%s", z, name), got, want, 1e-5,
					func(i int) float64 { return 1e-6 * (1 + math.Abs(float64(x[i]))) })
			}

			for _, scale := range []float32{1, 30} {
				xs := append([]float32(nil), x...)
				Scale(xs, scale)
				got, want = make([]float32, s.rows), make([]float32, s.rows)
				LogSumExp(got, xs, s.dim)
				naiveLogSumExp(want, xs, s.dim)
				closeTo(t, "LogSumExp/"+name, got, want, 1e-6, abs(1e-6))
			}

			gi, wi := make([]int32, s.rows), make([]int32, s.rows)
			xi := append([]float32(nil), x...)
			for i := range xi { // ties
				xi[i] = float32(math.Round(float64(xi[i]) * 2))
			}
			for _, xx := range [][]float32{x, xi} {
				Argmax(gi, xx, s.dim)
				naiveArgmax(wi, xx, s.dim)
				for i := range gi {
					if gi[i] != wi[i] {
						t.Fatalf("Argmax/%s[%d] = %d, want %d", name, i, gi[i], wi[i])
					}
				}
			}
		}
	})
}

func TestArgmaxSpecial(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	negz := float32(math.Copysign(0, -1))
	rows := [][]float32{
		{negz, 0, -1},
		{-1, negz, 0, 0},
		{nan, 1, 2, 3, 4, 5, 6, 7, 8, 9},
		{1, 2, nan, 3, 1, 2, 3, 3, 3, 0, 0},
		{-inf, -inf, -inf},
		{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, inf},
		{5, 5, 5, 5, 5, 5, 5, 5, 5},
		{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 19},
	}
	simdLevels(t, func(t *testing.T) {
		for _, row := range rows {
			g, w := make([]int32, 1), make([]int32, 1)
			Argmax(g, row, len(row))
			naiveArgmax(w, row, len(row))
			if g[0] != w[0] {
				t.Errorf("Argmax(%v) = %d, want %d", row, g[0], w[0])
			}
		}
	})
}

func TestRoPE(t *testing.T) {
	simdLevels(t, func(t *testing.T) {
		for _, s := range []struct{ n, heads, hd int }{
			{1, 1, 2}, {1, 8, 256}, {3, 2, 10}, {5, 3, 38}, {40, 8, 64}, {70, 8, 256},
		} {
			r := newRand(uint64(s.n*13 + s.heads + s.hd))
			x := randVec(r, s.n*s.heads*s.hd, 1)
			pos := make([]int32, s.n)
			for i := range pos {
				pos[i] = int32(r.IntN(40000))
			}
			inv := make([]float32, s.hd/2)
			for i := range inv {
				inv[i] = float32(1 / math.Pow(10000, float64(2*i)/float64(s.hd)))
			}
			got, want := append([]float32(nil), x...), append([]float32(nil), x...)
			RoPE(got, pos, s.heads, s.hd, inv)
			naiveRoPE(want, pos, s.heads, s.hd, inv)
			closeTo(t, fmt.Sprintf("RoPE/%dx%dx%d", s.n, s.heads, s.hd), got, want, 1e-6, abs(1e-7))
		}
	})
}

var ewSizes = []int{1, 3, 8, 15, 100, 4097, 70001}

func TestElementwise(t *testing.T) {
	simdLevels(t, func(t *testing.T) {
		for _, n := range ewSizes {
			r := newRand(uint64(n))
			a := randVec(r, n, 3)
			b := randVec(r, n, 1)
			for i := range b {
				if b[i] == 0 {
					b[i] = 1
				}
			}
			fin := func(i int) float64 { return 1e-6 * (1 + math.Abs(float64(a[i]))) }
			type unary struct {
				name  string
				c, g  func([]float32)
				rtol  float64
				atolf func(int) float64
			}
			for _, u := range []unary{
				{"GeluTanh", GeluTanh, naiveGeluTanh, 2e-6, fin},
				{"Tanh", Tanh, naiveTanh, 2e-6, abs(1e-30)},
				{"Softcap", func(x []float32) { Softcap(x, 30) }, func(x []float32) { naiveSoftcap(x, 30) }, 2e-6, abs(1e-30)},
				{"Softcap2", func(x []float32) { Softcap(x, 0.5) }, func(x []float32) { naiveSoftcap(x, 0.5) }, 2e-6, abs(1e-30)},
				{"Scale", func(x []float32) { Scale(x, 0.37) }, func(x []float32) { naiveScale(x, 0.37) }, exact(), exactAbs()},
				{"AddConst", func(x []float32) { AddConst(x, 1.5) }, func(x []float32) { naiveAddConst(x, 1.5) }, exact(), exactAbs()},
				{"GeluMul", func(x []float32) { GeluMul(x, b) }, func(x []float32) { naiveGeluMul(x, b) }, 2e-6, fin},
				{"AddScaled", func(x []float32) { AddScaled(x, b, 0.7) }, func(x []float32) { naiveAddScaled(x, b, 0.7) }, exact(), exactAbs()},
			} {
				got, want := append([]float32(nil), a...), append([]float32(nil), a...)
				u.c(got)
				u.g(want)
				closeTo(t, fmt.Sprintf("%s/%d", u.name, n), got, want, u.rtol, u.atolf)
			}
			type binary struct {
				name string
				c, g func(y, a, b []float32)
			}
			for _, op := range []binary{{"Add", Add, naiveAdd}, {"Mul", Mul, naiveMul}, {"Div", Div, naiveDiv}} {
				got, want := make([]float32, n), make([]float32, n)
				op.c(got, a, b)
				op.g(want, a, b)
				closeTo(t, op.name+"/"+fmt.Sprint(n), got, want, exact(), exactAbs())
				got = append([]float32(nil), a...) // y aliases a
				op.c(got, got, b)
				closeTo(t, op.name+"-alias/"+fmt.Sprint(n), got, want, exact(), exactAbs())
			}
			bf := make([]uint16, n)
			for i := range bf {
				bf[i] = toBF16(a[i])
			}
			got, want := make([]float32, n), make([]float32, n)
			BF16ToF32(got, bf)
			naiveBF16ToF32(want, bf)
			bitsEqual(t, "BF16ToF32", got, want)
		}
	})
}

func TestAltUp(t *testing.T) {
	simdLevels(t, func(t *testing.T) {
		for _, s := range []struct{ n, d int }{{1, 1}, {1, 2048}, {3, 13}, {9, 100}, {40, 2048}} {
			r := newRand(uint64(s.n*7 + s.d))
			h := randVec(r, 4*s.n*s.d, 1)
			coef := randVec(r, 16*s.n, 0.3)
			got, want := make([]float32, len(h)), make([]float32, len(h))
			AltUpPredict(got, h, coef, s.n, s.d)
			naiveAltUpPredict(want, h, coef, s.n, s.d)
			name := fmt.Sprintf("%dx%d", s.n, s.d)
			closeTo(t, "AltUpPredict/"+name, got, want, exact(), exactAbs())

			act := randVec(r, s.n*s.d, 1)
			c := randVec(r, 4*s.n, 0.5)
			got2, want2 := make([]float32, len(h)), make([]float32, len(h))
			AltUpCorrect(got2, got, act, c, s.n, s.d)
			naiveAltUpCorrect(want2, want, act, c, s.n, s.d)
			closeTo(t, "AltUpCorrect/"+name, got2, want2, exact(), exactAbs())
			AltUpCorrect(got, got, act, c, s.n, s.d) // out aliases pred
			closeTo(t, "AltUpCorrect-alias/"+name, got, want2, exact(), exactAbs())
		}
	})
}

// TestExpTanhAccuracy sweeps the vectorised exp and tanh against float64.
func TestExpTanhAccuracy(t *testing.T) {
	const n = 1 << 20
	x := make([]float32, n)
	check := func(name string, lo, hi float64, c func([]float32), ref func(float64) float64, maxRel float64) {
		for i := range x {
			x[i] = float32(lo + (hi-lo)*float64(i)/(n-1))
		}
		y := append([]float32(nil), x...)
		c(y)
		worst := 0.0
		for i, v := range x {
			want := ref(float64(v))
			got := float64(y[i])
			if want == 0 || math.Abs(want) < 1.2e-38 { // subnormal: one step of 2^-149
				if math.Abs(got-want) > 1.5e-45 {
					t.Fatalf("%s(%v) = %v, want %v", name, v, got, want)
				}
				continue
			}
			if rel := math.Abs(got-want) / math.Abs(want); rel > worst {
				worst = rel
				if rel > maxRel {
					t.Fatalf("%s(%v) = %v, want %v (rel %.3g)", name, v, got, want, rel)
				}
			}
		}
		t.Logf("%s on [%v, %v]: max rel error %.3g (%.2f ulp of 2^-24)", name, lo, hi, worst, worst/math.Pow(2, -24))
	}
	simdLevels(t, func(t *testing.T) {
		check("exp", -87, 88.7, expInPlace, math.Exp, 2.5e-7)
		check("exp", -104, -87, expInPlace, math.Exp, 2.5e-7)
		check("exp", -1, 1, expInPlace, math.Exp, 2.5e-7)
		check("tanh", -10, 10, Tanh, math.Tanh, 2.5e-7)
		check("tanh", -0.7, 0.7, Tanh, math.Tanh, 2.5e-7)
		check("tanh", -1e-3, 1e-3, Tanh, math.Tanh, 2.5e-7)
		sp := []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 100, -200}
		e := append([]float32(nil), sp...)
		expInPlace(e)
		th := append([]float32(nil), sp...)
		Tanh(th)
		for i, v := range sp {
			we, wt := float32(math.Exp(float64(v))), float32(math.Tanh(float64(v)))
			if !(e[i] == we || e[i] != e[i] && we != we) {
				t.Errorf("exp(%v) = %v, want %v", v, e[i], we)
			}
			if !(th[i] == wt && math.Signbit(float64(th[i])) == math.Signbit(float64(wt)) || th[i] != th[i] && wt != wt) {
				t.Errorf("tanh(%v) = %v, want %v", v, th[i], wt)
			}
		}
	})
}

// TestPortableMatchesSIMD: the portable kernels compute the SIMD kernels'
// arithmetic lane for lane, so results are bit-identical.
func TestPortableMatchesSIMD(t *testing.T) {
	if setSIMD(1) == 0 {
		t.Skip("no SIMD kernel set on this machine")
	}
	r := newRand(99)
	run := func(f func() []float32) {
		t.Helper()
		defer setSIMD(1)
		setSIMD(0)
		a := f()
		for _, s := range simdSets()[1:] {
			useSIMD(s)
			b := f()
			bitsEqual(t, "portable vs "+simdNames[s], a, b)
		}
	}
	for _, dt := range []DType{F32, BF16} {
		w := randMatrix(r, dt, 77, 1301)
		x := randVec(r, 66*1301, 1)
		run(func() []float32 { y := make([]float32, 66*77); Linear(y, x, w, 66); return y })
	}
	for _, c := range attnCases() {
		q, k, v, p := attnInputs(c)
		run(func() []float32 { o := make([]float32, len(q)); Attention(o, q, k, v, p); return o })
	}
	x := randVec(r, 5*1003, 3)
	u := randVec(r, 5*1003, 1)
	w := randVec(r, 1003, 1)
	cp := func() []float32 { return append([]float32(nil), x...) }
	run(func() []float32 { y := cp(); GeluTanh(y); return y })
	run(func() []float32 { y := cp(); GeluMul(y, u); return y })
	run(func() []float32 { y := cp(); Tanh(y); return y })
	run(func() []float32 { y := cp(); Softcap(y, 2); return y })
	run(func() []float32 { y := cp(); expInPlace(y); return y })
	run(func() []float32 { y := cp(); SparseGeluMul(y, u, 1003, 0.7); return y })
	run(func() []float32 { y := cp(); RMSNorm(y, y, w, 1003, 1e-6); return y })
	run(func() []float32 { y := make([]float32, 5); RowRMS(y, x, 1003, 0); return y })
	run(func() []float32 { y := make([]float32, 5); LogSumExp(y, x, 1003); return y })
	run(func() []float32 {
		y := cp()
		inv := []float32{1, 0.5, 0.25, 0.125, 0.01, 1e-3, 1e-4, 1e-5, 1e-6, 3}
		RoPE(y[:5*20], []int32{0, 1, 1000, 77, 40000}, 1, 20, inv)
		return y
	})
}

// TestThreads checks SetThreads and Threads.
func TestThreads(t *testing.T) {
	defer SetThreads(0)
	for _, n := range []int{1, 3, 2} {
		SetThreads(n)
		if got := Threads(); got != n {
			t.Errorf("Threads() = %d after SetThreads(%d)", got, n)
		}
	}
	SetThreads(0)
	if got := Threads(); got != runtime.NumCPU() {
		t.Errorf("Threads() = %d after SetThreads(0), want %d", got, runtime.NumCPU())
	}
}
