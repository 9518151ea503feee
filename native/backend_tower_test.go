package native

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// TestBackendTowerOps: the built-in backend's vision-tower operations give
// the slice kernels' results bit for bit, on both kernel sets, over shapes
// that leave partial panels and odd padding.
func TestBackendTowerOps(t *testing.T) {
	be := Default()
	st, err := be.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	r := rand.New(rand.NewPCG(7, 8))
	ht := be.hostTensor
	convBoth(t, func(t *testing.T) {
		w := be.NewBound()
		defer w.Free()
		for _, c := range []struct{ h, wd, cin, cout, k, stride int }{
			{5, 7, 3, 17, 3, 2}, {8, 8, 16, 33, 1, 1}, {9, 6, 5, 8, 5, 1}, {4, 4, 2, 3, 3, 1},
		} {
			g := SameGeom(c.h, c.wd, c.k, c.stride)
			x := convRandVec(r, c.h*c.wd*c.cin)
			p := c.h * c.wd
			q := g.OH * g.OW

			// Pointwise (a 1×1 convolution) against GemmPacked.
			pm := PackMatrix(convRandVec(r, c.cout*c.cin), c.cout, c.cin)
			pt, err := w.Packed(pm)
			if err != nil {
				t.Fatal(err)
			}
			want, got := make([]float32, p*c.cout), make([]float32, p*c.cout)
			GemmPacked(want, x, pm, p)
			st.Pointwise(ht(got, p, c.cout), ht(x, p, c.cin), pt)
			bitsEqual(t, "Pointwise", got, want)

			// Conv2D with and without bias.
			cw := PackConv(convRandVec(r, c.cout*c.cin*c.k*c.k), c.cout, c.cin, c.k)
			ct, err := w.Packed(cw)
			if err != nil {
				t.Fatal(err)
			}
			bias := convRandVec(r, c.cout)
			for _, b := range [][]float32{nil, bias} {
				want, got := make([]float32, q*c.cout), make([]float32, q*c.cout)
				Conv2D(want, x, cw, b, c.cin, g)
				bt := Tensor{}
				if b != nil {
					bt = ht(b, 1, len(b))
				}
				st.Conv2D(ht(got, q, c.cout), ht(x, p, c.cin), ct, bt, g)
				bitsEqual(t, "Conv2D", got, want)
			}

			// Depthwise.
			dw := DepthwiseWeights(convRandVec(r, c.cin*c.k*c.k), c.cin, c.k)
			want, got = make([]float32, q*c.cin), make([]float32, q*c.cin)
			DepthwiseConv2D(want, x, dw, c.cin, g)
			st.DepthwiseConv2D(ht(got, q, c.cin), ht(x, p, c.cin), ht(dw, c.k*c.k, c.cin), g)
			bitsEqual(t, "DepthwiseConv2D", got, want)

			// NormAct: every combination of gamma, residual and GELU, in place
			// and not.
			nw, gm, res := convRandVec(r, c.cin), convRandVec(r, c.cin), convRandVec(r, p*c.cin)
			for _, gamma := range [][]float32{nil, gm} {
				for _, rs := range [][]float32{nil, res} {
					for _, gelu := range []bool{false, true} {
						want := make([]float32, len(x))
						RMSNormAct(want, x, nw, gamma, rs, c.cin, 1e-6, gelu)
						var gt, rt Tensor
						if gamma != nil {
							gt = ht(gamma, 1, c.cin)
						}
						if rs != nil {
							rt = ht(rs, p, c.cin)
						}
						got := append([]float32(nil), x...)
						st.NormAct(ht(got, p, c.cin), ht(got, p, c.cin), ht(nw, 1, c.cin), gt, rt, c.cin, 1e-6, gelu)
						bitsEqual(t, "NormAct", got, want)
					}
				}
			}

			// Transpose of x as [cin, h·w].
			want, got = make([]float32, len(x)), make([]float32, len(x))
			CHWToHWC(want, x, c.cin, p)
			st.Transpose(ht(got, p, c.cin), ht(x, c.cin, p))
			bitsEqual(t, "Transpose", got, want)
		}

		// Pooling, upsampling with concatenation.
		x := convRandVec(r, 8*12*5)
		want, got := make([]float32, 2*3*5), make([]float32, 2*3*5)
		AvgPool2D(want, x, 8, 12, 5, 4)
		st.AvgPool2D(ht(got, 6, 5), ht(x, 96, 5), 8, 12, 4)
		bitsEqual(t, "AvgPool2D", got, want)
		a, b := convRandVec(r, 8*12*3), convRandVec(r, 3*5*4)
		want, got = make([]float32, 8*12*7), make([]float32, 8*12*7)
		UpsampleConcat(want, a, 3, b, 4, 8, 12, 3, 5)
		st.UpsampleConcat(ht(got, 96, 7), ht(a, 96, 3), ht(b, 15, 4), 8, 12, 3, 5)
		bitsEqual(t, "UpsampleConcat", got, want)

		// Multi-query attention.
		for _, c := range []struct{ nq, heads, nk, d int }{{7, 3, 5, 16}, {33, 4, 9, 64}, {1, 1, 1, 8}} {
			q, k, v := convRandVec(r, c.nq*c.heads*c.d), convRandVec(r, c.nk*c.d), convRandVec(r, c.nk*c.d)
			want, got := make([]float32, len(q)), make([]float32, len(q))
			MQAttention(want, q, k, v, c.nq, c.heads, c.nk, c.d, 0.125)
			st.MQAttention(ht(got, c.nq, c.heads*c.d), ht(q, c.nq, c.heads*c.d), ht(k, c.nk, c.d), ht(v, c.nk, c.d), c.heads, 0.125)
			bitsEqual(t, "MQAttention", got, want)
		}
	})
	if err := st.Sync(); err != nil {
		t.Fatal(err)
	}
}

// TestBackendTowerPanics: misshapen tower operations panic naming the
// operation, before reaching the backend.
func TestBackendTowerPanics(t *testing.T) {
	be := Default()
	st, err := be.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	w := be.NewBound()
	defer w.Free()
	ht := be.hostTensor
	pm, err := w.Packed(PackMatrix(make([]float32, 12), 4, 3))
	if err != nil {
		t.Fatal(err)
	}
	cw, err := w.Packed(PackConv(make([]float32, 4*3*9), 4, 3, 3))
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]float32, 4096)
	g := SameGeom(4, 4, 3, 1)
	for name, f := range map[string]func(){
		"Stream.Pointwise":       func() { st.Pointwise(ht(buf, 2, 4), ht(buf, 2, 2), pm) },
		"Stream.Conv2D":          func() { st.Conv2D(ht(buf, 16, 4), ht(buf, 16, 2), cw, Tensor{}, g) },
		"Stream.DepthwiseConv2D": func() { st.DepthwiseConv2D(ht(buf, 15, 3), ht(buf, 16, 3), ht(buf, 9, 3), g) },
		"Stream.NormAct":         func() { st.NormAct(ht(buf, 2, 3), ht(buf, 2, 3), ht(buf, 1, 2), Tensor{}, Tensor{}, 3, 1e-6, false) },
		"Stream.AvgPool2D":       func() { st.AvgPool2D(ht(buf, 4, 1), ht(buf, 16, 1), 4, 4, 3) },
		"Stream.UpsampleConcat":  func() { st.UpsampleConcat(ht(buf, 16, 3), ht(buf, 16, 1), ht(buf, 4, 1), 4, 4, 2, 2) },
		"Stream.Transpose":       func() { st.Transpose(ht(buf, 3, 3), ht(buf, 2, 3)) },
		"Stream.MQAttention":     func() { st.MQAttention(ht(buf, 2, 8), ht(buf, 2, 8), ht(buf, 3, 4), ht(buf, 2, 4), 3, 1) },
		"Bound.Packed":           func() { _, err := w.Packed(Packed{}); panic(err) },
	} {
		func() {
			defer func() {
				msg := ""
				switch e := recover().(type) {
				case string:
					msg = e
				case error:
					msg = e.Error()
				}
				if !strings.Contains(msg, name) {
					t.Errorf("%s: panic %q does not name it", name, msg)
				}
			}()
			f()
		}()
	}
}

// TestBackendAudioOps: the built-in backend's audio-tower operations give
// the slice kernels' results bit for bit, on both attention kernel sets.
func TestBackendAudioOps(t *testing.T) {
	be := Default()
	st, err := be.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	r := rand.New(rand.NewPCG(9, 10))
	ht := be.hostTensor
	defer setAudioSIMD(1)
	for _, level := range []int{0, 1} {
		setAudioSIMD(level)

		// Im2Col with padding and strides, then the cumulative group norm.
		tIn, fIn, c, kt, kf, sT, sF := 11, 9, 3, 3, 3, 2, 2
		tOut, fOut := (tIn+1-kt)/sT+1, (fIn+2-kf)/sF+1
		x := convRandVec(r, tIn*fIn*c)
		want, got := make([]float32, tOut*fOut*kt*kf*c), make([]float32, tOut*fOut*kt*kf*c)
		AudioIm2Col(want, x, tIn, fIn, c, tOut, fOut, kt, kf, sT, sF, 0, 1)
		st.Im2Col(ht(got, tOut*fOut, kt*kf*c), ht(x, tIn*fIn, c), tIn, fIn, tOut, fOut, kt, kf, sT, sF, 0, 1)
		bitsEqual(t, "Im2Col", got, want)
		nw := convRandVec(r, 4)
		y := convRandVec(r, 7*12)
		wantN := append([]float32(nil), y...)
		AudioCumGroupNormReLU(wantN, 7, 12, 4, nw, 1e-3)
		st.CumGroupNormReLU(ht(y, 7, 12), ht(nw, 1, 4), 1e-3)
		bitsEqual(t, "CumGroupNormReLU", y, wantN)

		// Local attention with some frames masked.
		T, heads, d, past, future := 23, 2, 8, 5, 2
		q, k, v := convRandVec(r, T*heads*d), convRandVec(r, T*heads*d), convRandVec(r, T*heads*d)
		pos := convRandVec(r, (past+future+1)*heads*d)
		valid, vi := make([]bool, T), make([]int32, T)
		for i := range valid {
			valid[i] = i%7 != 3 && i < 20
			if valid[i] {
				vi[i] = 1
			}
		}
		want, got = make([]float32, T*heads*d), make([]float32, T*heads*d)
		AudioLocalAttention(want, q, k, v, pos, valid, T, heads, d, past, future, 50)
		m := ht(q, T, heads*d)
		st.LocalAttention(ht(got, T, heads*d), m, ht(k, T, heads*d), ht(v, T, heads*d), ht(pos, past+future+1, heads*d),
			be.hostI32(vi), heads, past, future, 50)
		bitsEqual(t, "LocalAttention", got, want)

		// The light convolution's pieces.
		D, K := 6, 5
		xc, wc := convRandVec(r, T*D), convRandVec(r, D*K)
		want, got = make([]float32, T*D), make([]float32, T*D)
		AudioDepthwiseConvCausal(want, xc, wc, T, D, K)
		st.DepthwiseConvCausal(ht(got, T, D), ht(xc, T, D), ht(wc, D, K))
		bitsEqual(t, "DepthwiseConvCausal", got, want)
		xg := convRandVec(r, T*2*D)
		AudioGLU(want, xg, T, D)
		st.GLU(ht(got, T, D), ht(xg, T, 2*D))
		bitsEqual(t, "GLU", got, want)
		xs := convRandVec(r, T*D)
		for i := range xs {
			xs[i] *= 30
		}
		copy(want, xs)
		AudioSiLU(want)
		st.SiLU(ht(got, T, D), ht(xs, T, D))
		bitsEqual(t, "SiLU", got, want)
		copy(want, xs)
		AudioClip(want, 10)
		st.Clip(ht(got, T, D), ht(xs, T, D), 10)
		bitsEqual(t, "Clip", got, want)
		st.Clip(ht(xs, T, D), ht(xs, T, D), 10) // in place
		bitsEqual(t, "Clip in place", xs, want)
	}
	if err := st.Sync(); err != nil {
		t.Fatal(err)
	}
}
