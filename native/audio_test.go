package native

import (
	"math"
	"math/rand"
	"testing"
)

// Naive references of the audio kernels, one output element at a time.

func naiveAudioIm2Col(src []float32, tIn, fIn, c, tOut, fOut, kt, kf, st, sf, padT, padF int) []float32 {
	dst := make([]float32, tOut*fOut*kt*kf*c)
	for to := 0; to < tOut; to++ {
		for fo := 0; fo < fOut; fo++ {
			for i := 0; i < kt; i++ {
				for j := 0; j < kf; j++ {
					for ch := 0; ch < c; ch++ {
						ti, fi := to*st+i-padT, fo*sf+j-padF
						var v float32
						if ti >= 0 && ti < tIn && fi >= 0 && fi < fIn {
							v = src[(ti*fIn+fi)*c+ch]
						}
						dst[(to*fOut+fo)*kt*kf*c+(i*kf+j)*c+ch] = v
					}
				}
			}
		}
	}
	return dst
}

func naiveCumGroupNormReLU(x []float32, t, fc, c int, w []float32, eps float32) []float32 {
	y := make([]float32, len(x))
	var sum, sq float64
	for i := 0; i < t; i++ {
		for _, v := range x[i*fc : (i+1)*fc] {
			sum += float64(v)
		}
		n := float64((i + 1) * fc)
		mean := sum / n
		for _, v := range x[i*fc : (i+1)*fc] {
			sq += (float64(v) - mean) * (float64(v) - mean)
		}
		r := 1 / math.Sqrt(sq/n+float64(eps))
		for j := 0; j < fc; j++ {
			y[i*fc+j] = float32(math.Max(0, (float64(x[i*fc+j])-mean)*r*float64(w[j%c])))
		}
	}
	return y
}

func naiveLocalAttention(q, k, v, pos []float32, valid []bool, t, heads, d, past, future int, softcap float64) []float32 {
	out := make([]float32, t*heads*d)
	hd := heads * d
	dot := func(a, b []float32) float64 {
		var s float64
		for i := range a {
			s += float64(a[i]) * float64(b[i])
		}
		return s
	}
	for i := 0; i < t; i++ {
		for h := 0; h < heads; h++ {
			qi := q[i*hd+h*d : i*hd+h*d+d]
			var js []int
			var ls []float64
			mx := math.Inf(-1)
			for j := i - past; j <= i+future; j++ {
				if j < 0 || j >= t || !valid[j] {
					continue
				}
				f := past - (i - j)
				l := dot(qi, k[j*hd+h*d:j*hd+h*d+d]) + dot(qi, pos[f*hd+h*d:f*hd+h*d+d])
				l = softcap * math.Tanh(l/softcap)
				js, ls = append(js, j), append(ls, l)
				mx = math.Max(mx, l)
			}
			var sum float64
			for n := range ls {
				ls[n] = math.Exp(ls[n] - mx)
				sum += ls[n]
			}
			for c := 0; c < d; c++ {
				var s float64
				for n, j := range js {
					s += ls[n] / sum * float64(v[j*hd+h*d+c])
				}
				out[i*hd+h*d+c] = float32(s)
			}
		}
	}
	return out
}

func audioRand(r *rand.Rand, n int, scale float32) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = (r.Float32()*2 - 1) * scale
	}
	return x
}

func maxDiffAudio(a, b []float32) float64 {
	var m float64
	for i := range a {
		d := math.Abs(float64(a[i]) - float64(b[i]))
		if d > m || d != d {
			m = d
		}
	}
	return m
}

func TestAudioIm2Col(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	for _, c := range []struct{ tIn, fIn, ch, kt, kf, st, sf, padT, padF, padTB, padFR int }{
		{9, 16, 1, 3, 3, 2, 2, 0, 1, 2, 1},
		{7, 8, 5, 3, 3, 2, 2, 0, 1, 2, 1},
		{4, 4, 3, 2, 2, 1, 1, 1, 0, 0, 1},
	} {
		tOut := (c.tIn+c.padT+c.padTB-c.kt)/c.st + 1
		fOut := (c.fIn+c.padF+c.padFR-c.kf)/c.sf + 1
		src := audioRand(r, c.tIn*c.fIn*c.ch, 1)
		want := naiveAudioIm2Col(src, c.tIn, c.fIn, c.ch, tOut, fOut, c.kt, c.kf, c.st, c.sf, c.padT, c.padF)
		got := make([]float32, len(want))
		AudioIm2Col(got, src, c.tIn, c.fIn, c.ch, tOut, fOut, c.kt, c.kf, c.st, c.sf, c.padT, c.padF)
		if d := maxDiffAudio(got, want); d != 0 {
			t.Errorf("%+v: differs by %g", c, d)
		}
	}
}

func TestAudioCumGroupNormReLU(t *testing.T) {
	r := rand.New(rand.NewSource(2))
	for _, c := range []struct{ t, fc, c int }{{1, 8, 4}, {37, 64, 16}, {300, 1024, 32}} {
		x := audioRand(r, c.t*c.fc, 3)
		for i := range x {
			x[i] += 0.5 // a non-zero mean
		}
		w := audioRand(r, c.c, 1)
		want := naiveCumGroupNormReLU(x, c.t, c.fc, c.c, w, 1e-3)
		AudioCumGroupNormReLU(x, c.t, c.fc, c.c, w, 1e-3)
		if d := maxDiffAudio(x, want); d > 1e-5 {
			t.Errorf("%+v: differs by %g", c, d)
		}
	}
}

func TestAudioLocalAttention(t *testing.T) {
	r := rand.New(rand.NewSource(3))
	defer setAudioSIMD(1)
	for _, simd := range []int{0, 1} {
		setAudioSIMD(simd)
		for _, c := range []struct{ t, heads, d, past, future int }{
			{1, 1, 8, 12, 0}, {30, 2, 20, 12, 0}, {50, 3, 64, 5, 2}, {138, 8, 192, 12, 0},
		} {
			n := c.t * c.heads * c.d
			q, k, v := audioRand(r, n, 1), audioRand(r, n, 1), audioRand(r, n, 1)
			pos := audioRand(r, (c.past+c.future+1)*c.heads*c.d, 1)
			valid := make([]bool, c.t)
			for i := range valid {
				valid[i] = i < c.t*4/5 || i%3 == 0
			}
			want := naiveLocalAttention(q, k, v, pos, valid, c.t, c.heads, c.d, c.past, c.future, 5)
			got := make([]float32, n)
			AudioLocalAttention(got, q, k, v, pos, valid, c.t, c.heads, c.d, c.past, c.future, 5)
			if d := maxDiffAudio(got, want); d > 2e-5 {
				t.Errorf("simd %d %+v: differs by %g", simd, c, d)
			}
		}
	}
	// A query that sees no valid key gets zeros.
	q := []float32{1, 2}
	got := []float32{7, 7}
	AudioLocalAttention(got, q, q, q, []float32{0, 0}, []bool{false}, 1, 1, 2, 0, 0, 50)
	if got[0] != 0 || got[1] != 0 {
		t.Errorf("all keys masked: got %v, want zeros", got)
	}
}

func TestAudioElementwise(t *testing.T) {
	r := rand.New(rand.NewSource(4))
	x := audioRand(r, 50000, 12)
	x[0], x[1], x[2] = -100, 100, 0
	got := append([]float32(nil), x...)
	AudioSiLU(got)
	for i, v := range x {
		want := float64(v) / (1 + math.Exp(-float64(v)))
		if d := math.Abs(float64(got[i]) - want); d > 1e-6*math.Max(1, math.Abs(want)) {
			t.Fatalf("silu(%g) = %g, want %g", v, got[i], want)
		}
	}
	rows, d := 7, 33
	gx := audioRand(r, rows*2*d, 8)
	gy := make([]float32, rows*d)
	AudioGLU(gy, gx, rows, d)
	for row := 0; row < rows; row++ {
		for i := 0; i < d; i++ {
			a, b := float64(gx[row*2*d+i]), float64(gx[row*2*d+d+i])
			want := a / (1 + math.Exp(-b))
			if e := math.Abs(float64(gy[row*d+i]) - want); e > 1e-6*math.Max(1, math.Abs(want)) {
				t.Fatalf("glu row %d col %d = %g, want %g", row, i, gy[row*d+i], want)
			}
		}
	}
	c := append([]float32(nil), x...)
	AudioClip(c, 5)
	for i, v := range x {
		if want := float32(math.Max(-5, math.Min(5, float64(v)))); c[i] != want {
			t.Fatalf("clip(%g) = %g, want %g", v, c[i], want)
		}
	}
	// Depthwise causal convolution.
	T, D, K := 9, 6, 5
	cx, cw := audioRand(r, T*D, 1), audioRand(r, D*K, 1)
	cy := make([]float32, T*D)
	AudioDepthwiseConvCausal(cy, cx, cw, T, D, K)
	for i := 0; i < T; i++ {
		for ch := 0; ch < D; ch++ {
			var s float64
			for j := 0; j < K; j++ {
				if src := i - (K - 1) + j; src >= 0 {
					s += float64(cw[ch*K+j]) * float64(cx[src*D+ch])
				}
			}
			if e := math.Abs(float64(cy[i*D+ch]) - s); e > 1e-6 {
				t.Fatalf("dwconv [%d,%d] = %g, want %g", i, ch, cy[i*D+ch], s)
			}
		}
	}
}

// TestAudioThreads: results do not depend on the thread count.
func TestAudioThreads(t *testing.T) {
	r := rand.New(rand.NewSource(5))
	T, H, D := 100, 4, 48
	n := T * H * D
	q, k, v := audioRand(r, n, 1), audioRand(r, n, 1), audioRand(r, n, 1)
	pos := audioRand(r, 13*H*D, 1)
	valid := make([]bool, T)
	for i := range valid {
		valid[i] = true
	}
	x := audioRand(r, 200*256, 2)
	w := audioRand(r, 8, 1)
	run := func() ([]float32, []float32) {
		a := make([]float32, n)
		AudioLocalAttention(a, q, k, v, pos, valid, T, H, D, 12, 0, 50)
		g := append([]float32(nil), x...)
		AudioCumGroupNormReLU(g, 200, 256, 8, w, 1e-3)
		return a, g
	}
	old := Threads()
	defer SetThreads(old)
	SetThreads(1)
	a1, g1 := run()
	SetThreads(4)
	a4, g4 := run()
	if maxDiffAudio(a1, a4) != 0 || maxDiffAudio(g1, g4) != 0 {
		t.Error("results depend on the thread count")
	}
}
