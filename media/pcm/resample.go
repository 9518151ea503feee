package pcm

import (
	"fmt"
	"math"
)

// Resampler design: a Kaiser-windowed sinc low-pass evaluated as a polyphase
// filter. The cutoff sits below the Nyquist frequency of the lower of the two
// rates, so content that would alias (above 8 kHz when going to 16 kHz) is
// removed before decimation.
const (
	// rolloff places the cutoff at this fraction of the lower Nyquist
	// frequency: at 16 kHz the -6 dB point is 7.36 kHz.
	rolloff = 0.92
	// zeroCrossings is the number of sinc zero crossings on each side of the
	// kernel; with kaiserBeta it sets the transition width (≈ 0.14 × cutoff)
	// and the stopband (≈ -90 dB).
	zeroCrossings = 40
	kaiserBeta    = 9.0
	// maxPhases bounds the polyphase table: ratios with more phases (unusual
	// rates such as 44 056 Hz) round the position to the nearest of maxPhases
	// phases, a timing error of at most 1/8192 sample.
	maxPhases = 4096
)

// Resample returns the clip at rate Hz (band-limited: a windowed-sinc
// polyphase filter with an anti-aliasing cutoff at 0.92 × the lower Nyquist
// frequency). The output has ceil(len × rate / c.Rate) samples.
func (c Clip) Resample(rate int) (Clip, error) {
	if c.Rate <= 0 || rate <= 0 {
		return Clip{}, fmt.Errorf("pcm: resample %d Hz to %d Hz: rates must be positive", c.Rate, rate)
	}
	if c.Rate == rate {
		return Clip{Samples: append([]float32(nil), c.Samples...), Rate: rate}, nil
	}
	g := gcd(c.Rate, rate)
	up, down := rate/g, c.Rate/g // output n sits at input position n*down/up
	f := newFilter(c.Rate, rate, up)
	n := int((int64(len(c.Samples))*int64(up) + int64(down) - 1) / int64(down))
	out := make([]float32, n)
	x := c.Samples
	taps := f.taps
	for i := range out {
		pos := int64(i) * int64(down)
		base := int(pos / int64(up))
		frac := int(pos % int64(up))
		phase := frac
		if f.phases != up {
			phase = int((int64(frac)*int64(f.phases) + int64(up)/2) / int64(up))
			if phase == f.phases {
				phase, base = 0, base+1
			}
		}
		coef := f.table[phase*taps : (phase+1)*taps]
		start := base - f.half + 1
		lo, hi := 0, taps
		if start < 0 {
			lo = -start
		}
		if start+hi > len(x) {
			hi = len(x) - start
		}
		var acc float64
		for j := lo; j < hi; j++ {
			acc += float64(coef[j]) * float64(x[start+j])
		}
		out[i] = float32(acc)
	}
	return Clip{Samples: out, Rate: rate}, nil
}

// filter is a polyphase table: phases rows of taps coefficients; row p holds
// h(p/phases + half - 1 - j) for j in [0, taps).
type filter struct {
	phases, taps, half int
	table              []float32
}

func newFilter(inRate, outRate, up int) filter {
	ratio := math.Min(1, float64(outRate)/float64(inRate))
	fc := 0.5 * rolloff * ratio // cutoff in cycles per input sample
	halfWidth := zeroCrossings / (2 * fc)
	half := int(math.Ceil(halfWidth))
	taps := 2 * half
	phases := min(up, maxPhases)
	table := make([]float32, phases*taps)
	i0b := besselI0(kaiserBeta)
	for p := range phases {
		frac := float64(p) / float64(phases)
		row := table[p*taps : (p+1)*taps]
		var sum float64
		vals := make([]float64, taps)
		for j := range row {
			x := frac + float64(half-1-j) // distance from the output position, in input samples
			if math.Abs(x) >= halfWidth {
				continue
			}
			r := x / halfWidth
			w := besselI0(kaiserBeta*math.Sqrt(1-r*r)) / i0b
			v := 2 * fc * sinc(2*fc*x) * w
			vals[j] = v
			sum += v
		}
		// Unit DC gain for every phase, so a constant stays constant.
		for j := range row {
			row[j] = float32(vals[j] / sum)
		}
	}
	return filter{phases: phases, taps: taps, half: half, table: table}
}

func sinc(x float64) float64 {
	if x == 0 {
		return 1
	}
	return math.Sin(math.Pi*x) / (math.Pi * x)
}

// besselI0 is the modified Bessel function of the first kind, order 0.
func besselI0(x float64) float64 {
	sum, term := 1.0, 1.0
	q := x * x / 4
	for k := 1; k < 200; k++ {
		term *= q / float64(k*k)
		sum += term
		if term < sum*1e-17 {
			break
		}
	}
	return sum
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
