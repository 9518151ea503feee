package audio_test

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"testing"

	"verdict/engine/audio"
)

// TestFeatures compares Features with transformers' Gemma3nAudioFeatureExtractor
// on two real speech clips and the tiny fixture's synthetic waveform.
func TestFeatures(t *testing.T) {
	pre := unpack(t, "gemma3n-audio-preprocess")
	tiny := unpack(t, "gemma3n-synthetic-tiny")
	exp := readSafetensors(t, filepath.Join(tiny, "expected.safetensors"))
	tinyMask := make([]int8, len(exp["audio_input_features_mask"].data))
	for i, v := range exp["audio_input_features_mask"].data {
		tinyMask[i] = int8(v)
	}
	cases := []struct {
		name    string
		samples func() []float32
		feats   func() []float32
		mask    func() []int8
	}{
		{"speech16k",
			func() []float32 { return readWAV(t, filepath.Join(pre, "speech16k.wav")) },
			func() []float32 { return readF32(t, filepath.Join(pre, "speech16k.features.f32")) },
			func() []int8 { return readI8(t, filepath.Join(pre, "speech16k.mask.i8")) }},
		{"speech2",
			func() []float32 { return readWAV(t, filepath.Join(pre, "speech2.wav")) },
			func() []float32 { return readF32(t, filepath.Join(pre, "speech2.features.f32")) },
			func() []int8 { return readI8(t, filepath.Join(pre, "speech2.mask.i8")) }},
		{"tiny-waveform",
			func() []float32 { return readF32(t, filepath.Join(tiny, "audio_waveform.f32")) },
			func() []float32 { return exp["audio_input_features"].data },
			func() []int8 { return tinyMask }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			samples, want, wantMask := c.samples(), c.feats(), c.mask()
			got, mask := audio.Features(samples)
			if len(mask) != len(wantMask) || len(got) != len(want) {
				t.Fatalf("got %d frames (%d values), want %d (%d)", len(mask), len(got), len(wantMask), len(want))
			}
			if n := audio.NumFrames(len(samples)); n != len(mask) {
				t.Errorf("NumFrames = %d, Features gave %d", n, len(mask))
			}
			for i := range mask {
				if mask[i] != (wantMask[i] != 0) {
					t.Fatalf("mask[%d] = %v, want %d", i, mask[i], wantMask[i])
				}
			}
			d := maxAbsDiff(got, want)
			t.Logf("%d frames: max |diff| %.3g (max |feature| %.3g)", len(mask), d, maxAbs(want))
			if d > 1e-4 {
				t.Errorf("features differ by %g > 1e-4", d)
			}
		})
	}
}

// TestFeatureTables checks the window and the mel filter bank against the
// extractor's own arrays.
func TestFeatureTables(t *testing.T) {
	pre := unpack(t, "gemma3n-audio-preprocess")
	want := readF32(t, filepath.Join(pre, "fe_window.f32"))
	got := audio.HannWindow()
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("window[%d] = %v, want %v", i, got[i], want[i])
		}
	}
	b, err := os.ReadFile(filepath.Join(pre, "fe_mel_filters.f64"))
	if err != nil {
		t.Fatal(err)
	}
	mel := audio.MelFilters()
	if len(b) != 8*len(mel) {
		t.Fatalf("mel filters: %d bytes, want %d", len(b), 8*len(mel))
	}
	var worst float64
	for i := range mel {
		w := math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
		worst = math.Max(worst, math.Abs(w-mel[i]))
	}
	t.Logf("mel filters: max |diff| %.3g", worst)
	if worst > 1e-12 {
		t.Errorf("mel filters differ by %g", worst)
	}
}

func readI8(t testing.TB, path string) []int8 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]int8, len(b))
	for i, v := range b {
		out[i] = int8(v)
	}
	return out
}
