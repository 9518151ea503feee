package gemma4

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/bits"
	"slices"
)

// Gemma 4's audio feature extractor: transformers 5.17's
// Gemma4AudioFeatureExtractor (feature_extraction_gemma4.py) for a batch of
// one clip. The clip is zero-padded to a multiple of 128 samples,
// frame_length/2 zeros are put before it ("semicausal" padding), and frames
// of frame_length samples every hop_length are windowed (periodic Hann),
// transformed (|rfft| of fft_length), projected on an HTK mel filter bank
// without normalisation and logged: log(mel + mel_floor). A frame is valid
// iff its last sample is a real one; invalid frames are zero. Unlike Gemma
// 3n's extractor (engine/audio) there is no pre-emphasis by default, the
// floor is added rather than a maximum, and the FFT is not doubled.

// AudioFeatureConfig is the extractor's settings: the "feature_extractor"
// block of a Gemma 4 processor_config.json (ParseAudioFeatureConfig), or
// DefaultAudioFeatureConfig. ExtractAudioFeatures checks every field.
type AudioFeatureConfig struct {
	FeatureSize    int       // mel bins per frame (feature_size): 128
	SamplingRate   int       // the one rate accepted, Hz (sampling_rate): 16000
	FrameLength    int       // samples per frame, round(rate·frame_length_ms/1000): 320
	HopLength      int       // samples between frames, round(rate·hop_length_ms/1000): 160
	FFTLength      int       // 2^ceil(log2 FrameLength), doubled by fft_overdrive: 512
	MinFrequency   float64   // the mel filter bank's range, Hz (min_frequency): 0
	MaxFrequency   float64   // (max_frequency): 8000
	MelFloor       float64   // added to the mel energies before the log (mel_floor): 1e-3
	Preemphasis    float64   // pre-emphasis coefficient, 0 for none (preemphasis): 0
	PreemphasisHTK bool      // the HTK flavour of pre-emphasis (preemphasis_htk_flavor): true
	InputScale     float64   // factor on the samples (input_scale_factor): 1
	PaddingValue   float64   // value of the padding samples (padding_value): 0
	PerBinMean     []float64 // nil, or FeatureSize values subtracted from the log-mel (per_bin_mean)
	PerBinStddev   []float64 // nil, or FeatureSize values dividing it (per_bin_stddev)
	// MaxSamples and PadToMultiple are the extractor's call arguments
	// max_length and pad_to_multiple_of (not in its config): 480000 and 128.
	MaxSamples, PadToMultiple int
}

// DefaultAudioFeatureConfig is Gemma4AudioFeatureExtractor() (the released
// checkpoints' settings).
func DefaultAudioFeatureConfig() AudioFeatureConfig {
	return AudioFeatureConfig{
		FeatureSize: 128, SamplingRate: 16000, FrameLength: 320, HopLength: 160, FFTLength: 512,
		MinFrequency: 0, MaxFrequency: 8000, MelFloor: 1e-3, PreemphasisHTK: true, InputScale: 1,
		MaxSamples: 480000, PadToMultiple: 128,
	}
}

// Bounds on the extractor's settings (the released values are far inside).
const (
	maxFeatureSize     = 1024
	maxAudioFrameLen   = 1 << 15
	maxAudioSamples    = 1 << 26
	maxAudioFeatureOut = 1 << 24 // frames × bins of the longest clip
)

// frameCount is the number of frames of a clip padded to padded samples.
func (c AudioFeatureConfig) frameCount(padded int) int {
	n := padded + c.FrameLength/2 - (c.FrameLength + 1)
	if n < 0 {
		return 0
	}
	return n/c.HopLength + 1
}

// sampleLimit is the longest clip: MaxSamples rounded up to PadToMultiple,
// where the extractor truncates.
func (c AudioFeatureConfig) sampleLimit() int {
	return (c.MaxSamples + c.PadToMultiple - 1) / c.PadToMultiple * c.PadToMultiple
}

// MinSamples is the shortest clip with a valid frame (the first frame's last
// sample must be a real one): FrameLength − FrameLength/2 + 1, 161 at the
// defaults.
func (c AudioFeatureConfig) MinSamples() int { return c.FrameLength - c.FrameLength/2 + 1 }

func nextPow2(n int) int { return 1 << bits.Len(uint(n-1)) }

func (c AudioFeatureConfig) check() error {
	fail := func(format string, a ...any) error {
		return fmt.Errorf("gemma4: audio features: "+format, a...)
	}
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	switch {
	case c.FeatureSize < 1 || c.FeatureSize > maxFeatureSize:
		return fail("feature_size %d, want 1..%d", c.FeatureSize, maxFeatureSize)
	case c.SamplingRate < 1000 || c.SamplingRate > 384000:
		return fail("sampling_rate %d, want 1000..384000", c.SamplingRate)
	case c.FrameLength < 2 || c.FrameLength > maxAudioFrameLen:
		return fail("frame length %d samples, want 2..%d", c.FrameLength, maxAudioFrameLen)
	case c.HopLength < 1 || c.HopLength > maxAudioFrameLen:
		return fail("hop length %d samples, want 1..%d", c.HopLength, maxAudioFrameLen)
	case c.FFTLength != nextPow2(c.FrameLength) && c.FFTLength != 2*nextPow2(c.FrameLength):
		return fail("fft_length %d, want %d (2^ceil(log2 %d)) or %d with fft_overdrive", c.FFTLength, nextPow2(c.FrameLength), c.FrameLength, 2*nextPow2(c.FrameLength))
	case !finite(c.MinFrequency) || !finite(c.MaxFrequency) || c.MinFrequency < 0 || c.MaxFrequency < c.MinFrequency+1 || c.MaxFrequency > 1e6:
		return fail("mel filter bank range min_frequency %g .. max_frequency %g Hz, want 0 <= min, min+1 <= max <= 1e6", c.MinFrequency, c.MaxFrequency)
	case !finite(c.MelFloor) || c.MelFloor <= 0:
		return fail("mel_floor %g, want > 0", c.MelFloor)
	case !finite(c.Preemphasis) || c.Preemphasis < 0 || c.Preemphasis >= 1:
		return fail("preemphasis %g, want 0 <= p < 1", c.Preemphasis)
	case !finite(c.InputScale) || c.InputScale == 0 || math.Abs(c.InputScale) > 1e6:
		return fail("input_scale_factor %g, want a nonzero factor within 1e6", c.InputScale)
	case !finite(c.PaddingValue) || math.Abs(c.PaddingValue) > 1e6:
		return fail("padding_value %g, want |v| <= 1e6", c.PaddingValue)
	case c.MaxSamples < 1 || c.MaxSamples > maxAudioSamples:
		return fail("max length %d samples, want 1..%d", c.MaxSamples, maxAudioSamples)
	case c.PadToMultiple < 1 || c.PadToMultiple > 1<<16:
		return fail("pad_to_multiple_of %d, want 1..%d", c.PadToMultiple, 1<<16)
	}
	for _, b := range []struct {
		name string
		v    []float64
	}{{"per_bin_mean", c.PerBinMean}, {"per_bin_stddev", c.PerBinStddev}} {
		if b.v == nil {
			continue
		}
		if len(b.v) != c.FeatureSize {
			return fail("%s has %d values, want feature_size %d", b.name, len(b.v), c.FeatureSize)
		}
		for i, x := range b.v {
			if !finite(x) || b.name == "per_bin_stddev" && x == 0 {
				return fail("%s[%d] = %g", b.name, i, x)
			}
		}
	}
	if n := c.frameCount(c.sampleLimit()) * c.FeatureSize; n > maxAudioFeatureOut {
		return fail("the longest clip would give %d features (hop %d, %d bins), over %d", n, c.HopLength, c.FeatureSize, maxAudioFeatureOut)
	}
	return nil
}

// ParseAudioFeatureConfig reads the extractor's settings from a Gemma 4
// processor_config.json / preprocessor_config.json (its "feature_extractor"
// block) or from a bare feature-extractor JSON object. Absent fields keep
// the defaults. As in transformers, the frame and hop lengths come from
// sampling_rate and frame_length_ms / hop_length_ms; the stored
// frame_length, hop_length and fft_length must agree with them. Every field
// is checked and named in errors; a field the extractor does not have, a
// dither (random noise, not reproducible) and left padding are refused.
func ParseAudioFeatureConfig(data []byte) (AudioFeatureConfig, error) {
	fail := func(format string, a ...any) (AudioFeatureConfig, error) {
		return AudioFeatureConfig{}, fmt.Errorf("gemma4: audio feature config: "+format, a...)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return fail("%v", err)
	}
	fields := top
	if raw, ok := top["feature_extractor"]; ok {
		fields = nil
		if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
			return fail("feature_extractor is not an object")
		}
	}
	c := DefaultAudioFeatureConfig()
	frameMS, hopMS, overdrive := 20.0, 10.0, false
	var storedFrame, storedHop, storedFFT *int
	isNull := func(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }
	num := func(key string, raw json.RawMessage) (float64, error) {
		var v float64
		if err := json.Unmarshal(raw, &v); err != nil || isNull(raw) {
			return 0, fmt.Errorf("gemma4: audio feature config: %s: want a number, got %s", key, bytes.TrimSpace(raw))
		}
		return v, nil
	}
	integer := func(key string, raw json.RawMessage) (int, error) {
		v, err := num(key, raw)
		if err == nil && (v != math.Trunc(v) || math.Abs(v) > 1<<40) {
			err = fmt.Errorf("gemma4: audio feature config: %s: want an integer, got %s", key, bytes.TrimSpace(raw))
		}
		return int(v), err
	}
	boolean := func(key string, raw json.RawMessage) (bool, error) {
		var v bool
		if err := json.Unmarshal(raw, &v); err != nil || isNull(raw) {
			return false, fmt.Errorf("gemma4: audio feature config: %s: want true or false, got %s", key, bytes.TrimSpace(raw))
		}
		return v, nil
	}
	// A list of numbers, or nested lists (to_json_string writes the stored
	// [1, 1, bins] array), flattened as NumPy's reshape reads them.
	floats := func(key string, raw json.RawMessage) ([]float64, error) {
		var v any
		if err := json.Unmarshal(raw, &v); err != nil || v == nil {
			return nil, err
		}
		out := []float64{}
		var walk func(any) bool
		walk = func(x any) bool {
			switch x := x.(type) {
			case float64:
				out = append(out, x)
				return true
			case []any:
				for _, e := range x {
					if !walk(e) {
						return false
					}
				}
				return true
			}
			return false
		}
		if _, ok := v.([]any); !ok || !walk(v) {
			return nil, fmt.Errorf("gemma4: audio feature config: %s: want null or a list of numbers", key)
		}
		return out, nil
	}
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	slices.Sort(keys) // the first bad field named is the same every time
	for _, key := range keys {
		raw := fields[key]
		var err error
		switch key {
		case "feature_extractor_type":
			var s string
			if json.Unmarshal(raw, &s) != nil || s != "Gemma4AudioFeatureExtractor" {
				return fail("feature_extractor_type %s, want \"Gemma4AudioFeatureExtractor\"", bytes.TrimSpace(raw))
			}
		case "processor_class":
			var s string
			if json.Unmarshal(raw, &s) != nil {
				return fail("processor_class: want a string")
			}
		case "padding_side":
			var s string
			if json.Unmarshal(raw, &s) != nil || s != "right" {
				return fail("padding_side %s: only \"right\" is supported", bytes.TrimSpace(raw))
			}
		case "return_attention_mask":
			_, err = boolean(key, raw) // the call always asks for the mask
		case "feature_size":
			c.FeatureSize, err = integer(key, raw)
		case "sampling_rate":
			c.SamplingRate, err = integer(key, raw)
		case "frame_length_ms":
			frameMS, err = num(key, raw)
		case "hop_length_ms":
			hopMS, err = num(key, raw)
		case "frame_length":
			storedFrame = new(int)
			*storedFrame, err = integer(key, raw)
		case "hop_length":
			storedHop = new(int)
			*storedHop, err = integer(key, raw)
		case "fft_length":
			storedFFT = new(int)
			*storedFFT, err = integer(key, raw)
		case "fft_overdrive":
			overdrive, err = boolean(key, raw)
		case "min_frequency":
			c.MinFrequency, err = num(key, raw)
		case "max_frequency":
			c.MaxFrequency, err = num(key, raw)
		case "mel_floor":
			c.MelFloor, err = num(key, raw)
		case "preemphasis":
			c.Preemphasis, err = num(key, raw)
		case "preemphasis_htk_flavor":
			c.PreemphasisHTK, err = boolean(key, raw)
		case "input_scale_factor":
			c.InputScale, err = num(key, raw)
		case "padding_value":
			c.PaddingValue, err = num(key, raw)
		case "dither":
			var d float64
			if d, err = num(key, raw); err == nil && d != 0 {
				return fail("dither %g: random noise cannot be reproduced; only 0 is supported", d)
			}
		case "per_bin_mean":
			c.PerBinMean, err = floats(key, raw)
		case "per_bin_stddev":
			c.PerBinStddev, err = floats(key, raw)
		default:
			return fail("unknown field %q (not a Gemma4AudioFeatureExtractor setting)", key)
		}
		if err != nil {
			return AudioFeatureConfig{}, err
		}
	}
	for _, ms := range []struct {
		name string
		v    float64
	}{{"frame_length_ms", frameMS}, {"hop_length_ms", hopMS}} {
		if !(ms.v > 0 && ms.v <= 10000) {
			return fail("%s %g, want 0 < ms <= 10000", ms.name, ms.v)
		}
	}
	if c.SamplingRate < 1000 || c.SamplingRate > 384000 {
		return fail("sampling_rate %d, want 1000..384000", c.SamplingRate)
	}
	// int(round(sampling_rate * ms / 1000.0)), Python's round half to even.
	c.FrameLength = int(math.RoundToEven(float64(c.SamplingRate) * frameMS / 1000))
	c.HopLength = int(math.RoundToEven(float64(c.SamplingRate) * hopMS / 1000))
	if c.FrameLength < 2 || c.FrameLength > maxAudioFrameLen {
		return fail("frame_length_ms %g at %d Hz gives %d samples, want 2..%d", frameMS, c.SamplingRate, c.FrameLength, maxAudioFrameLen)
	}
	c.FFTLength = nextPow2(c.FrameLength)
	if overdrive {
		c.FFTLength *= 2
	}
	for _, s := range []struct {
		name       string
		got        *int
		want       int
		derivation string
	}{
		{"frame_length", storedFrame, c.FrameLength, fmt.Sprintf("frame_length_ms %g at %d Hz", frameMS, c.SamplingRate)},
		{"hop_length", storedHop, c.HopLength, fmt.Sprintf("hop_length_ms %g at %d Hz", hopMS, c.SamplingRate)},
		{"fft_length", storedFFT, c.FFTLength, fmt.Sprintf("frame length %d, fft_overdrive %v", c.FrameLength, overdrive)},
	} {
		if s.got != nil && *s.got != s.want {
			return fail("%s %d disagrees with %s, which give %d (transformers uses the latter)", s.name, *s.got, s.derivation, s.want)
		}
	}
	if err := c.check(); err != nil {
		return AudioFeatureConfig{}, err
	}
	return c, nil
}

// ExtractAudioFeatures is the extractor's output for one clip of mono
// samples at sampleRate Hz: features [frames, FeatureSize] row-major
// (float32, zero on invalid frames) and mask[t], whether frame t is valid
// (input_features_mask). It is the extractor's arithmetic: float32 samples,
// padding, pre-emphasis and window as NumPy computes them on float32; the
// FFT in float64, rounded to complex64 and its magnitude to float32 (NumPy's
// float32 rfft, to within its rounding); the mel product, the log and the
// per-bin normalisation in float64, rounded to float32 once.
//
// Refused, each with an error naming the problem: a rate other than
// cfg.SamplingRate (there is no resampling), an empty clip or one too short
// for a valid frame (cfg.MinSamples), a clip longer than cfg.MaxSamples
// (transformers truncates it silently; split it, or pass
// samples[:cfg.MaxSamples] for its result), non-finite samples, and samples
// so large that a feature overflows. Memory: the padded clip and the
// features.
func ExtractAudioFeatures(cfg AudioFeatureConfig, samples []float32, sampleRate int) (features []float32, frames int, mask []bool, err error) {
	fail := func(format string, a ...any) ([]float32, int, []bool, error) {
		return nil, 0, nil, fmt.Errorf("gemma4: audio features: "+format, a...)
	}
	if err := cfg.check(); err != nil {
		return nil, 0, nil, err
	}
	if sampleRate != cfg.SamplingRate {
		return fail("sample rate %d Hz, the extractor takes %d Hz (resample first)", sampleRate, cfg.SamplingRate)
	}
	n := len(samples)
	switch {
	case n == 0:
		return fail("empty clip")
	case n < cfg.MinSamples():
		return fail("clip of %d samples is too short: a valid frame needs at least %d samples at %d Hz", n, cfg.MinSamples(), cfg.SamplingRate)
	case n > cfg.sampleLimit():
		return fail("clip of %d samples (%.1f s) is longer than the extractor's %d (%.1f s), where transformers truncates: split it", n, float64(n)/float64(cfg.SamplingRate), cfg.sampleLimit(), float64(cfg.sampleLimit())/float64(cfg.SamplingRate))
	}
	for i, v := range samples {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return fail("sample %d is %g", i, v)
		}
	}
	fl, hop, left := cfg.FrameLength, cfg.HopLength, cfg.FrameLength/2
	padded := (n + cfg.PadToMultiple - 1) / cfg.PadToMultiple * cfg.PadToMultiple
	// The waveform after padding to the multiple (padding_value), the input
	// scale (float32 times float32(scale), as NumPy scales a float32 array by
	// a Python float) and the semicausal left padding.
	x := make([]float32, left+padded)
	copy(x[left:], samples)
	for i := left + n; i < len(x); i++ {
		x[i] = float32(cfg.PaddingValue)
	}
	if cfg.InputScale != 1 {
		s := float32(cfg.InputScale)
		for i := left; i < len(x); i++ {
			x[i] *= s
		}
	}
	frames = cfg.frameCount(padded)
	fb := newMelBank(cfg)
	fft := newRealFFT(cfg.FFTLength)
	window := hannWindow(fl)
	features = make([]float32, frames*cfg.FeatureSize)
	mask = make([]bool, frames)
	f := make([]float32, fl)
	mag := make([]float64, cfg.FFTLength/2+1)
	p := float32(cfg.Preemphasis)
	pHead := float32(1 - cfg.Preemphasis)
	for t := range frames {
		// The last sample of the frame's fl+1 is real iff t·hop + fl − left < n.
		mask[t] = t*hop+fl-left < n
		if !mask[t] {
			continue // invalid frames are zeroed (speech * mask)
		}
		s := x[t*hop : t*hop+fl+1]
		switch {
		case cfg.Preemphasis > 0 && cfg.PreemphasisHTK:
			f[0] = s[0] * pHead
			for j := 1; j < fl; j++ {
				f[j] = s[j] - float32(p*s[j-1])
			}
		case cfg.Preemphasis > 0:
			for j := range fl {
				f[j] = s[j+1] - float32(p*s[j])
			}
		default:
			copy(f, s[:fl])
		}
		for j := range f {
			f[j] = float32(f[j] * window[j])
		}
		fft.magnitudes(f, mag)
		row := features[t*cfg.FeatureSize : (t+1)*cfg.FeatureSize]
		for i := range row {
			var e float64
			for k, w := range fb.w[i] {
				e += mag[fb.lo[i]+k] * w
			}
			v := math.Log(e + cfg.MelFloor)
			if cfg.PerBinMean != nil {
				v -= cfg.PerBinMean[i]
			}
			if cfg.PerBinStddev != nil {
				v /= cfg.PerBinStddev[i]
			}
			row[i] = float32(v)
			if math.IsInf(float64(row[i]), 0) || math.IsNaN(float64(row[i])) {
				return fail("frame %d, bin %d is %g: the samples are too large for float32 features", t, i, row[i])
			}
		}
	}
	return features, frames, mask, nil
}

// hannWindow is window_function(n) as float32: NumPy's hanning(n+1)
// without its last point, 0.5 + 0.5·cos(π·(2j − n)/n) in float64.
func hannWindow(n int) []float32 {
	w := make([]float32, n)
	for j := range w {
		w[j] = float32(0.5 + 0.5*math.Cos(math.Pi*float64(2*j-n)/float64(n)))
	}
	return w
}

// melBank is the filter bank, sparse: filter i weighs bins lo[i]... by w[i].
type melBank struct {
	lo []int
	w  [][]float64
}

// newMelBank is transformers' mel_filter_bank(fft_length/2+1 bins,
// feature_size filters, min..max Hz, sampling_rate, norm None, "htk"):
// filter centres evenly spaced in HTK mel (NumPy's linspace: i·step + start,
// the last one exactly the end), the bins at linspace(0, rate//2), and
// triangles max(0, min(down, up)).
func newMelBank(c AudioFeatureConfig) melBank {
	hz2mel := func(f float64) float64 { return 2595 * math.Log10(1+f/700) }
	mel2hz := func(m float64) float64 { return 700 * (math.Pow(10, m/2595) - 1) }
	nf := c.FeatureSize + 2
	lo, hi := hz2mel(c.MinFrequency), hz2mel(c.MaxFrequency)
	step := (hi - lo) / float64(nf-1)
	centre := make([]float64, nf)
	for i := range centre {
		m := float64(i)*step + lo
		if i == nf-1 {
			m = hi
		}
		centre[i] = mel2hz(m)
	}
	nb := c.FFTLength/2 + 1
	binStep := float64(c.SamplingRate/2) / float64(nb-1)
	bin := make([]float64, nb)
	for k := range bin {
		bin[k] = float64(k) * binStep
	}
	bin[nb-1] = float64(c.SamplingRate / 2)
	b := melBank{lo: make([]int, c.FeatureSize), w: make([][]float64, c.FeatureSize)}
	// One scratch row; each filter keeps a copy of its nonzero span only
	// (a bin lies in at most two triangles), not a row of nb (feature_size
	// 1024 with fft_length 65536 kept 268 MB of mostly zeros).
	ws := make([]float64, nb)
	for i := range c.FeatureSize {
		first, last := -1, -1
		for k, f := range bin {
			down := (f - centre[i]) / (centre[i+1] - centre[i])
			up := (centre[i+2] - f) / (centre[i+2] - centre[i+1])
			ws[k] = 0
			if v := max(0, min(down, up)); v > 0 {
				ws[k] = v
				if first < 0 {
					first = k
				}
				last = k
			}
		}
		if first >= 0 {
			b.lo[i], b.w[i] = first, slices.Clone(ws[first:last+1])
		}
	}
	return b
}

// realFFT is an n-point FFT (n a power of two) of real input in float64.
type realFFT struct {
	n        int
	rev      []int
	cos, sin []float64 // exp(−2πik/n) for k < n/2
	re, im   []float64
}

func newRealFFT(n int) *realFFT {
	f := &realFFT{n: n, rev: make([]int, n), cos: make([]float64, n/2), sin: make([]float64, n/2),
		re: make([]float64, n), im: make([]float64, n)}
	shift := bits.UintSize - bits.Len(uint(n-1))
	for i := range f.rev {
		if n > 1 {
			f.rev[i] = int(bits.Reverse(uint(i)) >> shift)
		}
	}
	for k := range f.cos {
		f.sin[k], f.cos[k] = math.Sincos(-2 * math.Pi * float64(k) / float64(n))
	}
	return f
}

// magnitudes sets mag[k] = |rfft(x, n)[k]| for k <= n/2 (x zero-padded to
// n), each value rounded to complex64 and the magnitude to float32 as
// NumPy's float32 rfft and abs give them.
func (f *realFFT) magnitudes(x []float32, mag []float64) {
	re, im := f.re, f.im
	for i := range re {
		re[i], im[i] = 0, 0
	}
	for i, v := range x {
		re[f.rev[i]] = float64(v)
	}
	for size := 2; size <= f.n; size <<= 1 {
		half, stride := size/2, f.n/size
		for start := 0; start < f.n; start += size {
			for j := range half {
				wr, wi := f.cos[j*stride], f.sin[j*stride]
				a, b := start+j, start+j+half
				xr := re[b]*wr - im[b]*wi
				xi := re[b]*wi + im[b]*wr
				re[b], im[b] = re[a]-xr, im[a]-xi
				re[a], im[a] = re[a]+xr, im[a]+xi
			}
		}
	}
	for k := range mag {
		r, i := float64(float32(re[k])), float64(float32(im[k]))
		mag[k] = float64(float32(math.Sqrt(r*r + i*i)))
	}
}
