package audio

import (
	"math"
	"math/bits"
	"runtime"
	"sync"
)

// Constants of Gemma3nAudioFeatureExtractor with its default settings.
const (
	SampleRate  = 16000  // input sample rate, Hz
	NumMelBins  = 128    // features per frame
	MaxSamples  = 480000 // longer clips are truncated (30 s)
	HopLength   = 160    // samples between frames (10 ms)
	FrameLength = 512    // samples per analysis frame (32 ms)

	padMultiple = 128               // clips are zero-padded to a multiple of this
	fftLength   = 2 * FrameLength   // fft_overdrive doubles the FFT size
	numBins     = fftLength/2 + 1   // 513 rfft bins
	preemph     = float32(0.97)     // HTK pre-emphasis coefficient
	melFloor    = 1e-5              // floor before the log
	minFreq     = 125.0             // mel filter bank range, Hz
	maxFreq     = 7600.0            //
	unfoldSize  = FrameLength + 1   // raw samples per frame (one of lookahead)
	halfFFT     = fftLength / 2     // index of the Nyquist bin; size of the packed complex FFT
	logHalfFFT  = 9                 // log2(halfFFT)
	preemphHead = float32(1 - 0.97) // first sample's factor, as numpy rounds it
	twoPi       = 2 * math.Pi       //
	melHigh     = 2595.0            // HTK mel scale constants
	melBreak    = 700.0             //
	framesGrain = 32                // frames per goroutine task
)

// NumFrames is the number of feature frames Features gives for a clip of n
// samples: the clip is truncated to MaxSamples, padded up to a multiple of
// 128, and cut into 513-sample windows every 160 samples.
func NumFrames(n int) int {
	n = min(n, MaxSamples)
	if n <= 0 {
		return 0
	}
	padded := (n + padMultiple - 1) / padMultiple * padMultiple
	if padded < unfoldSize {
		return 0
	}
	return (padded-unfoldSize)/HopLength + 1
}

// Features computes the log-mel spectrogram of a mono 16 kHz clip exactly as
// transformers' Gemma3nAudioFeatureExtractor does for a batch of one (default
// settings): truncate to 30 s, zero-pad to a multiple of 128 samples, frames
// of 513 samples with hop 160, HTK pre-emphasis (0.97), periodic Hann window
// of 512, |rfft| with n = 1024, 128 HTK mel filters over 125–7600 Hz without
// normalisation, natural log with floor 1e-5. As with NumPy on float32
// input, pre-emphasis and window are float32, the spectrum is rounded to
// complex64 and its magnitude to float32, the mel product and the log are
// float64, and the result is float32. It matches transformers 5.17 (NumPy
// 2.5) to about 1e-6.
//
// feats is [T, 128] row-major with T = NumFrames(len(samples)); mask[t]
// reports whether frame t starts on a real sample (HF's input_features_mask;
// true = valid). Clips too short for one frame give T = 0.
func Features(samples []float32) (feats []float32, mask []bool) {
	n := min(len(samples), MaxSamples)
	T := NumFrames(n)
	feats = make([]float32, T*NumMelBins)
	mask = make([]bool, T)
	if T == 0 {
		return feats, mask
	}
	fb := tables()
	padded := (n + padMultiple - 1) / padMultiple * padMultiple
	sig := make([]float32, padded)
	copy(sig, samples[:n])
	for t := range mask {
		mask[t] = t*HopLength < n
	}
	tasks := (T + framesGrain - 1) / framesGrain
	workers := min(runtime.GOMAXPROCS(0), tasks)
	var next int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var s frameScratch
			for {
				mu.Lock()
				task := next
				next++
				mu.Unlock()
				if task >= tasks {
					return
				}
				for t := task * framesGrain; t < min(T, (task+1)*framesGrain); t++ {
					fb.frame(feats[t*NumMelBins:(t+1)*NumMelBins], sig[t*HopLength:t*HopLength+unfoldSize], &s)
				}
			}
		}()
	}
	wg.Wait()
	return feats, mask
}

// featureTables holds the constant window, FFT twiddles and mel filters.
type featureTables struct {
	window [FrameLength]float32
	// tw[k] = exp(-2πi k/halfFFT) for the packed complex FFT of size 512.
	twRe, twIm [halfFFT / 2]float64
	// split[k] = exp(-2πi k/fftLength) for unpacking the real spectrum.
	splitRe, splitIm [halfFFT]float64
	rev              [halfFFT]uint16
	// Mel filter i covers bins lo[i] <= k < lo[i]+len(w[i]) with weights w[i].
	lo [NumMelBins]int
	w  [NumMelBins][]float64
}

type frameScratch struct {
	re, im [halfFFT]float64
}

var (
	tablesOnce sync.Once
	tablesVal  *featureTables
)

func tables() *featureTables {
	tablesOnce.Do(func() { tablesVal = newTables() })
	return tablesVal
}

func newTables() *featureTables {
	t := &featureTables{}
	// Periodic Hann as numpy evaluates it for a float32 arange, every step in
	// float32: 0.5*(1 - cos(2π·n/512)). numpy's float32 cos (SIMD, within one
	// ulp) differs from the correctly rounded cos at a few points, and near
	// the window's ends one ulp of cos is 1e-4 of the window value, enough
	// to move quiet frames' log-mel by 2e-4; those points take numpy's value.
	for i := range t.window {
		arg := float32(float32(twoPi)*float32(i)) / FrameLength
		c := float32(math.Cos(float64(arg)))
		t.window[i] = 0.5 * (1 - c)
		if v, ok := numpyHann[i]; ok {
			t.window[i] = v
		}
	}
	for k := range t.twRe {
		s, c := math.Sincos(-twoPi * float64(k) / halfFFT)
		t.twRe[k], t.twIm[k] = c, s
	}
	for k := range t.splitRe {
		s, c := math.Sincos(-twoPi * float64(k) / fftLength)
		t.splitRe[k], t.splitIm[k] = c, s
	}
	for i := range t.rev {
		t.rev[i] = uint16(bits.Reverse16(uint16(i)) >> (16 - logHalfFFT))
	}
	// HTK mel filter bank (create_fb_matrix with norm=None): 130 points
	// linearly spaced in mel (numpy linspace), back to Hz.
	hz2mel := func(f float64) float64 { return melHigh * math.Log10(1+f/melBreak) }
	mMin, mMax := hz2mel(minFreq), hz2mel(maxFreq)
	const npts = NumMelBins + 2
	step := (mMax - mMin) / (npts - 1)
	var fpts [npts]float64
	for i := range fpts {
		m := float64(i)*step + mMin
		if i == npts-1 {
			m = mMax
		}
		fpts[i] = melBreak * (math.Pow(10, m/melHigh) - 1)
	}
	var v [numBins]float64
	for i := 0; i < NumMelBins; i++ {
		lo, hi := 0, 0
		for k := range v {
			f := float64(k) * (SampleRate / float64(fftLength))
			down := (f - fpts[i]) / (fpts[i+1] - fpts[i])
			up := (fpts[i+2] - f) / (fpts[i+2] - fpts[i+1])
			v[k] = math.Max(0, math.Min(down, up))
			if v[k] > 0 {
				if hi == 0 {
					lo = k
				}
				hi = k + 1
			}
		}
		t.lo[i], t.w[i] = lo, append([]float64(nil), v[lo:hi]...)
	}
	return t
}

// frame computes one row of features from the 513 raw samples s.
func (fb *featureTables) frame(out []float32, s []float32, sc *frameScratch) {
	// Pre-emphasis and window in float32, as numpy does for float32 input:
	// p[0] = s[0]*0.03, p[n] = s[n] - 0.97*s[n-1]. The explicit conversions
	// keep each product rounded (no fused multiply-add).
	var p [FrameLength]float32
	p[0] = float32(s[0]*preemphHead) * fb.window[0]
	for n := 1; n < FrameLength; n++ {
		p[n] = float32(s[n]-float32(preemph*s[n-1])) * fb.window[n]
	}
	// rfft(p, n=1024) in float64 through a 512-point complex FFT of
	// z[m] = p[2m] + i·p[2m+1] (p is zero beyond 512 samples). NumPy's rfft of
	// float32 input gives the float64 result rounded to complex64 (checked
	// against NumPy 2.5), and np.abs takes its float32 magnitude.
	re, im := &sc.re, &sc.im
	for m := 0; m < halfFFT; m++ {
		r := fb.rev[m]
		if 2*m < FrameLength {
			re[r], im[r] = float64(p[2*m]), float64(p[2*m+1])
		} else {
			re[r], im[r] = 0, 0
		}
	}
	for size := 2; size <= halfFFT; size <<= 1 {
		half := size >> 1
		stride := halfFFT / size
		for start := 0; start < halfFFT; start += size {
			for j := 0; j < half; j++ {
				wr, wi := fb.twRe[j*stride], fb.twIm[j*stride]
				a, b := start+j, start+j+half
				xr := re[b]*wr - im[b]*wi
				xi := re[b]*wi + im[b]*wr
				re[b], im[b] = re[a]-xr, im[a]-xi
				re[a], im[a] = re[a]+xr, im[a]+xi
			}
		}
	}
	// X[k] = E[k] + W^k·O[k] with E = (Z[k] + conj Z[N-k])/2 and
	// O = (Z[k] - conj Z[N-k])/(2i), W = exp(-2πi/1024).
	var mag [numBins]float64
	mag[0] = magnitude32(re[0]+im[0], 0)
	mag[halfFFT] = magnitude32(re[0]-im[0], 0)
	for k := 1; k < halfFFT; k++ {
		zr, zi := re[k], im[k]
		cr, ci := re[halfFFT-k], -im[halfFFT-k]
		er, ei := 0.5*(zr+cr), 0.5*(zi+ci)
		or, oi := 0.5*(zi-ci), -0.5*(zr-cr)
		wr, wi := fb.splitRe[k], fb.splitIm[k]
		mag[k] = magnitude32(er+or*wr-oi*wi, ei+or*wi+oi*wr)
	}
	for i := range out {
		lo, w := fb.lo[i], fb.w[i]
		var acc float64
		for j, v := range w {
			acc += mag[lo+j] * v
		}
		out[i] = float32(math.Log(math.Max(acc, melFloor)))
	}
}

// magnitude32 rounds a complex spectrum value to complex64 and returns its
// magnitude rounded to float32 (hypotf), as float64.
func magnitude32(re, im float64) float64 {
	r, i := float64(float32(re)), float64(float32(im))
	return float64(float32(math.Sqrt(r*r + i*i)))
}

// numpyHann holds the window values of transformers 5.17's
// Gemma3nAudioFeatureExtractor (NumPy 2.5, x86-64) where they differ from
// the formula with a correctly rounded cos. TestFeatures checks the whole
// window against NumPy's.
var numpyHann = map[int]float32{
	3: 0.0003387928, 35: 0.045415998, 37: 0.050662786, 58: 0.12139556, 71: 0.17808425,
	76: 0.20215037, 79: 0.21713412, 85: 0.24823081, 86: 0.25355092, 96: 0.30865827,
	118: 0.4387947, 152: 0.6451423, 156: 0.66844493, 167: 0.7302694, 178: 0.78790414,
	187: 0.83120793, 196: 0.8704756, 308: 0.9016038, 314: 0.8786044, 317: 0.86632717,
	319: 0.8578654, 332: 0.79784966, 339: 0.7622947, 343: 0.7410919, 350: 0.70262057,
	360: 0.6451423, 415: 0.31434137, 416: 0.3086582, 418: 0.29737926, 419: 0.29178512,
	420: 0.28622234, 429: 0.23770511, 443: 0.16879207, 453: 0.12543178, 458: 0.105826706,
	462: 0.091207474, 479: 0.040443063,
}
