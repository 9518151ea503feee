package gemma4

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// audioFeatureTol is the tolerance against Gemma4AudioFeatureExtractor.
// The features are log(mel + floor): a relative error ε in a mel energy is
// an absolute error ε in the feature. NumPy's float32 rfft rounds at every
// stage (each a relative 6e-8), ExtractAudioFeatures computes the FFT in
// float64 and rounds once, so the two differ by a few float32 epsilons:
// 2.4e-7 measured (1 ulp of values in [2, 4)). 1e-6 is 4× that; a wrong
// window, filter, floor or FFT size moves features by 1e-3 or more.
const audioFeatureTol = 1e-6

// featureErr compares ExtractAudioFeatures on clip b of the audio fixture
// with the extractor's batch output: the clip's own frames within the
// tolerance, the batch's further frames (padding of the longer clip)
// invalid and zero.
func featureErr(t *testing.T, fx *towerFixture, b int, cfg AudioFeatureConfig, wav []float32) (float64, error) {
	t.Helper()
	want, wmask := audioClip(t, fx, b)
	got, frames, mask, err := ExtractAudioFeatures(cfg, wav, cfg.SamplingRate)
	if err != nil {
		return 0, err
	}
	F := cfg.FeatureSize
	if frames > len(wmask) || F != len(want)/len(wmask) {
		return math.Inf(1), nil
	}
	worst := 0.0
	for i := range frames {
		if mask[i] != wmask[i] {
			return math.Inf(1), nil
		}
		e, _ := maxAbs(got[i*F:(i+1)*F], want[i*F:(i+1)*F])
		worst = max(worst, e)
	}
	for i := frames; i < len(wmask); i++ {
		if wmask[i] || slices.ContainsFunc(want[i*F:(i+1)*F], func(v float32) bool { return v != 0 }) {
			t.Fatalf("clip %d: batch frame %d past the clip's own %d is valid or not zero", b, i, frames)
		}
	}
	return worst, nil
}

// TestAudioFeaturesFixture holds ExtractAudioFeatures to the audio
// fixture's Gemma4AudioFeatureExtractor output (transformers 5.17, a batch
// of a 10200- and a 6000-sample clip), and requires each wrong setting to
// break it.
func TestAudioFeaturesFixture(t *testing.T) {
	fx := openTowerFixture(t, "gemma4-synthetic-audio")
	var meta struct {
		FE struct {
			Extractor json.RawMessage `json:"extractor"`
		} `json:"feature_extractor"`
		Tokens []int `json:"num_soft_tokens"`
	}
	if mj, err := os.ReadFile(filepath.Join(fx.dir, "meta.json")); err != nil || json.Unmarshal(mj, &meta) != nil {
		t.Fatalf("meta.json: %v", err)
	}
	// meta.json lists the extractor's attributes as it ran; they must parse
	// to the defaults.
	cfg, err := ParseAudioFeatureConfig(meta.FE.Extractor)
	if err != nil {
		t.Fatalf("the fixture's extractor settings: %v", err)
	}
	if def := DefaultAudioFeatureConfig(); !slices.Equal([]float64{cfg.MelFloor, cfg.MaxFrequency}, []float64{def.MelFloor, def.MaxFrequency}) ||
		cfg.FrameLength != def.FrameLength || cfg.HopLength != def.HopLength || cfg.FFTLength != def.FFTLength || cfg.FeatureSize != def.FeatureSize {
		t.Errorf("the fixture's settings parse to %+v, not the defaults", cfg)
	}
	wavs := [][]float32{fx.f32(t, "waveform0"), fx.f32(t, "waveform1")}
	for b, wav := range wavs {
		e, err := featureErr(t, fx, b, cfg, wav)
		t.Logf("clip %d (%d samples): max error %.3g (tolerance %g)", b, len(wav), e, audioFeatureTol)
		if err != nil || e > audioFeatureTol {
			t.Errorf("clip %d: error %.3g over %g (%v)", b, e, audioFeatureTol, err)
		}
		// The processor's soft-token count: two stride-2 halvings of the mask.
		_, _, mask, _ := ExtractAudioFeatures(cfg, wav, 16000)
		for range 2 {
			var half []bool
			for i := 0; i < len(mask); i += 2 {
				half = append(half, mask[i])
			}
			mask = half
		}
		if n := countTrue(mask); b < len(meta.Tokens) && n != meta.Tokens[b] {
			t.Errorf("clip %d: %d soft tokens from the mask, the tower kept %d", b, n, meta.Tokens[b])
		}
	}
	for _, c := range []struct {
		name string
		mod  func(*AudioFeatureConfig)
		wav  func([]float32) []float32
	}{
		{"mel_floor 1e-5", func(c *AudioFeatureConfig) { c.MelFloor = 1e-5 }, nil},
		{"pre-emphasis 0.97", func(c *AudioFeatureConfig) { c.Preemphasis = 0.97 }, nil},
		{"fft_overdrive", func(c *AudioFeatureConfig) { c.FFTLength = 1024 }, nil},
		{"min_frequency 125", func(c *AudioFeatureConfig) { c.MinFrequency = 125 }, nil},
		{"max_frequency 7600", func(c *AudioFeatureConfig) { c.MaxFrequency = 7600 }, nil},
		{"input × 1.001", func(c *AudioFeatureConfig) { c.InputScale = 1.001 }, nil},
		{"per-bin mean 1e-4", func(c *AudioFeatureConfig) { c.PerBinMean = slices.Repeat([]float64{1e-4}, 128) }, nil},
		{"hop 161", func(c *AudioFeatureConfig) { c.HopLength = 161 }, nil},
		{"one sample × 1.01", nil, func(w []float32) []float32 { w = slices.Clone(w); w[5000] *= 1.01; return w }},
	} {
		bad := false
		for b, wav := range wavs {
			c2 := cfg
			if c.mod != nil {
				c.mod(&c2)
			}
			if c.wav != nil {
				wav = c.wav(wav)
			}
			if e, err := featureErr(t, fx, b, c2, wav); err != nil || e > audioFeatureTol {
				bad = true
			}
		}
		if !bad {
			t.Errorf("%s: the features still match the extractor's", c.name)
		}
	}
}

func countTrue(m []bool) int {
	n := 0
	for _, v := range m {
		if v {
			n++
		}
	}
	return n
}

// tone is a sinusoid of n samples at f Hz (16 kHz), amplitude a.
func tone(n int, f, a float64) []float32 {
	w := make([]float32, n)
	for i := range w {
		w[i] = float32(a * math.Sin(2*math.Pi*f*float64(i)/16000))
	}
	return w
}

// TestAudioFeaturesHand checks cases worked out by hand at the default
// settings: frame counts and masks, silence, the empty first filter, a
// tone's peak filter and the magnitude (not power) spectrum.
func TestAudioFeaturesHand(t *testing.T) {
	cfg := DefaultAudioFeatureConfig()
	floor := float32(math.Log(1e-3))
	// Frames: the clip is padded to a multiple of 128 (L), 160 zeros go in
	// front, frames of 321 every 160: (L+160-321)/160+1. Frame t is valid
	// iff t·160+160 < n.
	for _, c := range []struct {
		n, frames int
		valid     []bool
	}{
		{161, 1, []bool{true}},        // L 256: (256-161)/160+1 = 1; 160 < 161
		{300, 2, []bool{true, false}}, // L 384: 223/160+1 = 2; 320 ≮ 300
		{320, 2, []bool{true, false}}, // the same: frame 1 ends on the 321st sample of 320
		{16000, 99, nil},              // L 16000: 15839/160+1 = 99, all valid (98·160+160 < 16000)
		{6000, 37, nil},               // L 6016: 5855/160+1 = 37, all valid
		{480000, 2999, nil},           // L 480000: 479839/160+1 = 2999
		{1000, 6, nil},                // L 1024: 863/160+1 = 6; 5·160+160 < 1000
		{1100, 7, []bool{true, true, true, true, true, true, false}}, // L 1152: 991/160+1 = 7; 6·160+160 ≮ 1100
	} {
		feat, frames, mask, err := ExtractAudioFeatures(cfg, make([]float32, c.n), 16000)
		if err != nil || frames != c.frames || len(feat) != frames*128 || len(mask) != frames {
			t.Errorf("%d samples: %d frames (%d values), %v; want %d", c.n, frames, len(feat), err, c.frames)
			continue
		}
		for i, ok := range mask {
			want := c.valid == nil || c.valid[i]
			if ok != want {
				t.Errorf("%d samples: frame %d valid %v, want %v", c.n, i, ok, want)
			}
			for k, v := range feat[i*128 : (i+1)*128] {
				// Silence: every valid feature is log(0 + 1e-3), invalid ones 0.
				if want && v != floor || !want && v != 0 {
					t.Fatalf("%d samples of silence: frame %d bin %d = %g (valid %v), want %g", c.n, i, k, v, want, floor)
				}
			}
		}
	}
	// Filter 0 spans 0..27.9 Hz (centres at 0, 13.8, 27.9 Hz): the bins
	// are at 0 and 31.25 Hz, so it is empty and its feature is the floor
	// whatever the input.
	loud, _, _, err := ExtractAudioFeatures(cfg, tone(8000, 20, 0.9), 16000)
	if err != nil || loud[25*128] != floor {
		t.Errorf("a 20 Hz tone: filter 0 = %g (%v), want the floor %g", loud[25*128], err, floor)
	}
	// A tone at the centre of filter i peaks there: the centres are
	// 700·(10^(m/2595) − 1) at m = (i+1)·mel(8000)/129 (mel(f) = 2595·log10(1 + f/700)).
	melMax := 2595 * math.Log10(1+8000.0/700)
	for _, i := range []int{40, 60, 80, 110, 126} {
		f := 700 * (math.Pow(10, float64(i+1)*melMax/129/2595) - 1)
		feat, _, _, err := ExtractAudioFeatures(cfg, tone(8000, f, 0.5), 16000)
		if err != nil {
			t.Fatal(err)
		}
		row := feat[25*128 : 26*128]
		if peak := slices.Index(row, slices.Max(row)); peak != i {
			t.Errorf("a %.1f Hz tone (filter %d's centre) peaks in filter %d", f, i, peak)
		}
	}
	// Doubling the amplitude adds log 2 where the energy is far above the
	// floor (log 4 if the spectrum were a power spectrum).
	f := 700 * (math.Pow(10, 81*melMax/129/2595) - 1)
	a, _, _, _ := ExtractAudioFeatures(cfg, tone(8000, f, 0.25), 16000)
	b, _, _, _ := ExtractAudioFeatures(cfg, tone(8000, f, 0.5), 16000)
	if d := float64(b[25*128+80] - a[25*128+80]); math.Abs(d-math.Ln2) > 1e-3 {
		t.Errorf("doubling the amplitude moved filter 80 by %.5f, want log 2 = %.5f", d, math.Ln2)
	}
}

// TestAudioFeaturesRefuses: bad rates and lengths, non-finite and huge
// samples, bad settings; each error names the problem.
func TestAudioFeaturesRefuses(t *testing.T) {
	cfg := DefaultAudioFeatureConfig()
	nan := tone(1000, 440, 0.5)
	nan[7] = float32(math.NaN())
	inf := tone(1000, 440, 0.5)
	inf[999] = float32(math.Inf(-1))
	huge := tone(1000, 440, 3e38)
	badCfg := cfg
	badCfg.HopLength = 0
	fftCfg := cfg
	fftCfg.FFTLength = 500
	meanCfg := cfg
	meanCfg.PerBinMean = []float64{1}
	for _, c := range []struct {
		name    string
		cfg     AudioFeatureConfig
		samples []float32
		rate    int
		want    string
	}{
		{"44.1 kHz", cfg, tone(1000, 440, 0.5), 44100, "sample rate 44100 Hz, the extractor takes 16000"},
		{"rate 0", cfg, tone(1000, 440, 0.5), 0, "sample rate 0"},
		{"empty", cfg, nil, 16000, "empty clip"},
		{"160 samples", cfg, make([]float32, 160), 16000, "at least 161 samples"},
		{"30 s + 1", cfg, make([]float32, 480001), 16000, "longer than the extractor's 480000"},
		{"NaN", cfg, nan, 16000, "sample 7 is NaN"},
		{"-Inf", cfg, inf, 16000, "sample 999 is -Inf"},
		{"3e38", cfg, huge, 16000, "too large"},
		{"hop 0", badCfg, tone(1000, 440, 0.5), 16000, "hop length 0"},
		{"fft 500", fftCfg, tone(1000, 440, 0.5), 16000, "fft_length 500"},
		{"per-bin mean of 1", meanCfg, tone(1000, 440, 0.5), 16000, "per_bin_mean has 1 values"},
		{"zero config", AudioFeatureConfig{}, tone(1000, 440, 0.5), 16000, "feature_size 0"},
	} {
		if _, _, _, err := ExtractAudioFeatures(c.cfg, c.samples, c.rate); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want one containing %q", c.name, err, c.want)
		}
	}
}

// released is the feature_extractor block of a Gemma 4 processor_config.json
// as transformers 5.17 writes Gemma4AudioFeatureExtractor() (to_dict: the
// derived lengths, no window or filters).
const released = `{
  "dither": 0.0, "feature_extractor_type": "Gemma4AudioFeatureExtractor", "feature_size": 128,
  "fft_length": 512, "fft_overdrive": false, "frame_length": 320, "hop_length": 160,
  "input_scale_factor": 1.0, "max_frequency": 8000.0, "mel_floor": 0.001, "min_frequency": 0.0,
  "padding_side": "right", "padding_value": 0.0, "per_bin_mean": null, "per_bin_stddev": null,
  "preemphasis": 0.0, "preemphasis_htk_flavor": true, "return_attention_mask": true, "sampling_rate": 16000
}`

func TestParseAudioFeatureConfig(t *testing.T) {
	def := DefaultAudioFeatureConfig()
	for _, doc := range []string{
		released,
		`{"processor_class": "Gemma4Processor", "image_seq_length": 280, "feature_extractor": ` + released + `}`,
		`{}`,
	} {
		c, err := ParseAudioFeatureConfig([]byte(doc))
		if err != nil || !equalAudioConfig(c, def) {
			t.Errorf("%.60s…: %+v, %v; want the defaults", doc, c, err)
		}
	}
	// to_json_string writes the per-bin arrays as stored, [1, 1, bins].
	nested := `{"per_bin_mean": [[[` + strings.TrimSuffix(strings.Repeat("0.5, ", 128), ", ") + `]]]}`
	if c, err := ParseAudioFeatureConfig([]byte(nested)); err != nil || len(c.PerBinMean) != 128 || c.PerBinMean[127] != 0.5 {
		t.Errorf("a [1, 1, 128] per_bin_mean: %v", err)
	}
	// Settings that change the arithmetic: lengths follow the rate and the
	// milliseconds (Python's round: 22050·10/1000 = 220.5 -> 220).
	for _, c := range []struct {
		doc                 string
		frame, hop, fft     int
		htk, pre, overdrive bool
	}{
		{`{"sampling_rate": 8000}`, 160, 80, 256, true, false, false},
		{`{"sampling_rate": 22050}`, 441, 220, 512, true, false, false},
		{`{"sampling_rate": 16000, "frame_length_ms": 32, "fft_overdrive": true, "fft_length": 1024}`, 512, 160, 1024, true, false, true},
		{`{"preemphasis": 0.97, "preemphasis_htk_flavor": false}`, 320, 160, 512, false, true, false},
	} {
		got, err := ParseAudioFeatureConfig([]byte(c.doc))
		if err != nil || got.FrameLength != c.frame || got.HopLength != c.hop || got.FFTLength != c.fft || got.PreemphasisHTK != c.htk || (got.Preemphasis > 0) != c.pre {
			t.Errorf("%s: frame %d hop %d fft %d htk %v pre %g, %v", c.doc, got.FrameLength, got.HopLength, got.FFTLength, got.PreemphasisHTK, got.Preemphasis, err)
		}
	}
	for _, c := range []struct{ doc, want string }{
		{`[1]`, "cannot unmarshal"},
		{`{"feature_extractor": 3}`, "feature_extractor is not an object"},
		{`{"feature_extractor_type": "Gemma3nAudioFeatureExtractor"}`, "feature_extractor_type"},
		{`{"fft_overdrive_x": true}`, `unknown field "fft_overdrive_x"`},
		{`{"dither": 0.0001}`, "dither"},
		{`{"frame_length": 400}`, "frame_length 400 disagrees with frame_length_ms 20 at 16000 Hz"},
		{`{"sampling_rate": 8000, "frame_length": 320}`, "frame_length 320 disagrees"},
		{`{"fft_length": 1024}`, "fft_length 1024 disagrees"},
		{`{"hop_length": 128}`, "hop_length 128 disagrees"},
		{`{"sampling_rate": 16000.5}`, "sampling_rate: want an integer"},
		{`{"sampling_rate": 100}`, "sampling_rate 100"},
		{`{"feature_size": 0}`, "feature_size 0"},
		{`{"feature_size": 100000}`, "feature_size 100000"},
		{`{"mel_floor": 0}`, "mel_floor 0"},
		{`{"mel_floor": "big"}`, "mel_floor: want a number"},
		{`{"preemphasis": null}`, "preemphasis: want a number"},
		{`{"preemphasis": 1.5}`, "preemphasis 1.5"},
		{`{"preemphasis_htk_flavor": 1}`, "preemphasis_htk_flavor: want true or false"},
		{`{"min_frequency": 9000}`, "min_frequency 9000"},
		{`{"per_bin_mean": [1, 2]}`, "per_bin_mean has 2 values"},
		{`{"per_bin_mean": []}`, "per_bin_mean has 0 values"},
		{`{"per_bin_mean": [[1, "a"]]}`, "per_bin_mean: want null or a list"},
		{`{"per_bin_stddev": [[` + strings.Repeat("1, ", 127) + `0]]}`, "per_bin_stddev[127] = 0"},
		{`{"per_bin_stddev": "x"}`, "per_bin_stddev: want null or a list"},
		{`{"padding_side": "left"}`, "padding_side"},
		{`{"frame_length_ms": -1}`, "frame_length_ms -1"},
		{`{"hop_length_ms": 0.001}`, "hop length 0 samples"},
		{`{"frame_length_ms": 0.01}`, "frame_length_ms 0.01 at 16000 Hz gives 0 samples"},
		{`{"input_scale_factor": 0}`, "input_scale_factor 0"},
	} {
		if _, err := ParseAudioFeatureConfig([]byte(c.doc)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want one containing %q", c.doc, err, c.want)
		}
	}
}

func equalAudioConfig(a, b AudioFeatureConfig) bool {
	return slices.Equal(a.PerBinMean, b.PerBinMean) && slices.Equal(a.PerBinStddev, b.PerBinStddev) &&
		a.FeatureSize == b.FeatureSize && a.SamplingRate == b.SamplingRate && a.FrameLength == b.FrameLength &&
		a.HopLength == b.HopLength && a.FFTLength == b.FFTLength && a.MinFrequency == b.MinFrequency &&
		a.MaxFrequency == b.MaxFrequency && a.MelFloor == b.MelFloor && a.Preemphasis == b.Preemphasis &&
		a.PreemphasisHTK == b.PreemphasisHTK && a.InputScale == b.InputScale && a.PaddingValue == b.PaddingValue &&
		a.MaxSamples == b.MaxSamples && a.PadToMultiple == b.PadToMultiple
}

// TestAudioFeatureGoldens holds ExtractAudioFeatures to
// Gemma4AudioFeatureExtractor on every recorded clip of
// testdata/gemma4-preprocess.tar.gz: lengths at 16 kHz, other rates,
// pre-emphasis, fft_overdrive, per-bin normalisation, padding, the 30 s
// limit. The extractor is built from the arguments the script gave it; the
// config it saves must parse to the same, except where it cannot say what
// it was built from (frame_length_ms / hop_length_ms not the defaults).
func TestAudioFeatureGoldens(t *testing.T) {
	g := openPreprocessGoldens(t)
	for _, c := range g.meta.Audio {
		cfg, err := ParseAudioFeatureConfig(c.Kwargs)
		if err != nil {
			t.Errorf("%s: the extractor's arguments: %v", c.Name, err)
			continue
		}
		saved, err := ParseAudioFeatureConfig(c.Config)
		if ms := strings.Contains(string(c.Kwargs), "_length_ms"); ms != (err != nil) || err == nil && !equalAudioConfig(saved, cfg) {
			t.Errorf("%s: the saved config parses to %+v, %v; the arguments to %+v", c.Name, saved, err, cfg)
		}
		var wav []float32
		if r, ok := g.exp[c.Tensor+"_wave"]; ok {
			wav = r.f
		} else { // the 30 s clip's rule
			wav = make([]float32, c.Samples)
			for i := range wav {
				wav[i] = float32(float64((i*7919)%2001-1000) / 1000)
			}
		}
		feat, frames, mask, err := ExtractAudioFeatures(cfg, wav, c.Rate)
		if err != nil || frames != c.Frames {
			t.Errorf("%s: %d frames (extractor %d), %v", c.Name, frames, c.Frames, err)
			continue
		}
		wm := g.exp[c.Tensor+"_mask"].i
		for i := range mask {
			if i >= len(wm) || mask[i] != (wm[i] != 0) {
				t.Fatalf("%s: frame %d valid %v, the extractor's mask differs", c.Name, i, mask[i])
			}
		}
		F := cfg.FeatureSize
		worst := 0.0
		for _, part := range []struct {
			name  string
			first int
		}{{"_features", 0}, {"_features_head", 0}, {"_features_tail", frames - 4}} {
			r, ok := g.exp[c.Tensor+part.name]
			if !ok {
				continue
			}
			e, err := maxAbs(feat[part.first*F:part.first*F+len(r.f)], r.f)
			if err != nil {
				t.Fatalf("%s%s: %v", c.Name, part.name, err)
			}
			worst = max(worst, e)
		}
		t.Logf("%s: %d samples at %d Hz, %d frames: max error %.3g", c.Name, c.Samples, c.Rate, frames, worst)
		if worst > audioFeatureTol {
			t.Errorf("%s: error %.3g over %g", c.Name, worst, audioFeatureTol)
		}
	}
}

// TestMelBankKeepsSpans: each filter keeps its nonzero span only, the spans
// at most two per bin (the triangles overlap pairwise), at the largest
// settings check allows (feature_size 1024, fft_length 65536: rows of the
// full width kept 268 MB).
func TestMelBankKeepsSpans(t *testing.T) {
	c := DefaultAudioFeatureConfig()
	c.FeatureSize, c.FrameLength, c.FFTLength = maxFeatureSize, maxAudioFrameLen, 2*maxAudioFrameLen
	if err := c.check(); err != nil {
		t.Fatal(err)
	}
	b := newMelBank(c)
	nb := c.FFTLength/2 + 1
	kept, capacity := 0, 0
	for i, w := range b.w {
		kept, capacity = kept+len(w), capacity+cap(w)
		for k, v := range w {
			if !(v >= 0 && v <= 1) || (k == 0 || k == len(w)-1) && v == 0 {
				t.Fatalf("filter %d, weight %d of its span: %g", i, k, v)
			}
		}
	}
	// capacity: the allocator's size classes round each span up.
	if kept > 2*nb || capacity > 2*kept {
		t.Errorf("%d weights (capacity %d) kept for %d filters over %d bins, want at most %d", kept, capacity, c.FeatureSize, nb, 2*nb)
	}
}
