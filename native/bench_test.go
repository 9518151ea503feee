package native

import (
	"flag"
	"fmt"
	"os"
	"testing"
)

var benchThreads = flag.Int("threads", 0, "kernel threads for benchmarks (0: one per core)")

func TestMain(m *testing.M) {
	flag.Parse()
	if *benchThreads > 0 {
		SetThreads(*benchThreads)
	}
	os.Exit(m.Run())
}

// Weight bytes stream through the machine per call: b.SetBytes reports them
// as MB/s; GFLOP/s counts 2 flops per multiply-add.

func benchLinear(b *testing.B, dt DType, rows, cols, n int, naive bool) {
	r := newRand(1)
	w := randMatrix(r, dt, rows, cols)
	x := randVec(r, n*cols, 1)
	y := make([]float32, n*rows)
	es := 4
	if dt == BF16 {
		es = 2
	}
	b.SetBytes(int64(rows * cols * es))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if naive {
			naiveLinear(y, x, w, n)
		} else {
			Linear(y, x, w, n)
		}
	}
	b.ReportMetric(2*float64(n*rows*cols)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

func BenchmarkLinear(b *testing.B) {
	for _, dt := range []DType{F32, BF16} {
		for _, s := range []struct{ rows, cols, n int }{
			{2048, 2048, 1}, {8192, 2048, 1}, {2048, 8192, 1}, {2048, 2048, 64}, {8192, 2048, 64},
			{2048, 2048, 2}, {2048, 2048, 4}, {2048, 2048, 5}, {2048, 2048, 8},
		} {
			b.Run(fmt.Sprintf("%v/%dx%d/n=%d", dt, s.rows, s.cols, s.n), func(b *testing.B) {
				benchLinear(b, dt, s.rows, s.cols, s.n, false)
			})
		}
	}
}

// BenchmarkLinearNaive is the pure-Go reference, for the speedup.
func BenchmarkLinearNaive(b *testing.B) {
	for _, dt := range []DType{F32, BF16} {
		for _, s := range []struct{ rows, cols, n int }{{2048, 2048, 1}, {2048, 2048, 64}} {
			b.Run(fmt.Sprintf("%v/%dx%d/n=%d", dt, s.rows, s.cols, s.n), func(b *testing.B) {
				benchLinear(b, dt, s.rows, s.cols, s.n, true)
			})
		}
	}
}

func BenchmarkAttention(b *testing.B) {
	for _, c := range []struct {
		name           string
		nq, nk, window int
	}{
		{"decode/nk=4096", 1, 4096, 0},
		{"decode/nk=4096/window=512", 1, 4096, 512},
		{"prefill/n=512", 512, 512, 0},
	} {
		b.Run(c.name, func(b *testing.B) {
			const hq, hkv, d = 8, 2, 256
			r := newRand(2)
			q := randVec(r, c.nq*hq*d, 1)
			k := randVec(r, c.nk*hkv*d, 1)
			v := randVec(r, c.nk*hkv*d, 1)
			out := make([]float32, len(q))
			pos := make([]int32, c.nq)
			var pairs float64 // (query, key) pairs attended
			for i := range pos {
				pos[i] = int32(c.nk - c.nq + i)
				lo := 0
				if c.window > 0 && int(pos[i])-c.window+1 > 0 {
					lo = int(pos[i]) - c.window + 1
				}
				pairs += float64(int(pos[i]) - lo + 1)
			}
			p := AttnParams{NQ: c.nq, NK: c.nk, HeadsQ: hq, HeadsKV: hkv, HeadDim: d,
				QPos: pos, Window: c.window, Scale: 0.0625}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				Attention(out, q, k, v, p)
			}
			b.ReportMetric(4*pairs*hq*d*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

func BenchmarkRowOps(b *testing.B) {
	const n, d, ff = 64, 2048, 8192
	r := newRand(3)
	x := randVec(r, n*d, 1)
	w := randVec(r, d, 1)
	g := randVec(r, n*ff, 1)
	u := randVec(r, n*ff, 1)
	b.Run("RMSNorm/64x2048", func(b *testing.B) {
		b.SetBytes(int64(8 * n * d))
		for i := 0; i < b.N; i++ {
			RMSNorm(x, x, w, d, 1e-6)
		}
	})
	b.Run("GeluMul/64x8192", func(b *testing.B) {
		b.SetBytes(int64(12 * n * ff))
		for i := 0; i < b.N; i++ {
			copy(g, u)
			GeluMul(g, u)
		}
	})
	b.Run("LogSumExp/262144", func(b *testing.B) {
		v := randVec(r, 262144, 3)
		out := make([]float32, 1)
		b.SetBytes(4 * 262144)
		for i := 0; i < b.N; i++ {
			LogSumExp(out, v, len(v))
		}
	})
}
