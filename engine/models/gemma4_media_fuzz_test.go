package models

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"verdict/engine/gemma4"
)

// FuzzReadProcessor: readProcessor on any processor_config.json and
// preprocessor_config.json beside a checkpoint gives an error naming the
// file, or settings the towers can use: a max_soft_tokens the image
// processor takes (or one its TargetSize refuses by name) and feature
// settings ExtractAudioFeatures takes (a clip of MinSamples samples at
// their rate is accepted; checked when FeatureSize·FFTLength is at most
// 2^16). Each input writes and reads files, 0.4–1 ms here under load:
// fuzz.sh: at most 20000x.
func FuzzReadProcessor(f *testing.F) {
	// The audio and vision fixtures' processor settings (their meta.json).
	f.Add([]byte(`{"feature_extractor":{"feature_size":128,"sampling_rate":16000,"frame_length":320,"hop_length":160,"fft_length":512,"preemphasis":0.0,"mel_floor":0.001,"dither":0.0,"input_scale_factor":1.0,"fft_overdrive":false},"image_processor":{"patch_size":4,"max_soft_tokens":70,"pooling_kernel_size":3}}`), []byte(nil), true, false)
	f.Add([]byte(nil), []byte(`{"image_seq_length":280,"feature_size":128}`), false, true)
	f.Add([]byte(`{"max_soft_tokens":140}`), []byte(`{"max_soft_tokens":560}`), true, true)
	f.Add([]byte(`{"image_processor":{},"feature_extractor":{"feature_size":4,"sampling_rate":1000,"frame_length_ms":8,"hop_length_ms":4}}`), []byte(`{"image_seq_length":1120}`), true, true)
	f.Add([]byte(`{"feature_extractor":null}`), []byte(nil), true, false)
	// One folder, its files rewritten or removed for each input (a worker
	// runs one input at a time): a TempDir per input doubled the cost.
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, proc, preproc []byte, hasProc, hasPreproc bool) {
		for _, file := range []struct {
			name string
			has  bool
			data []byte
		}{{"processor_config.json", hasProc, proc}, {"preprocessor_config.json", hasPreproc, preproc}} {
			path := filepath.Join(dir, file.name)
			if !file.has {
				if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
					t.Fatal(err)
				}
			} else if err := os.WriteFile(path, file.data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		settings, err := readProcessor(dir)
		soft, feat := settings.softTokens, settings.feat
		if err != nil {
			if !strings.Contains(err.Error(), "processor_config.json") {
				t.Fatalf("error names no file: %v", err)
			}
			return
		}
		p := gemma4.ImageProcessorConfig{PatchSize: 16, MaxSoftTokens: soft, PoolingKernel: 3}
		if _, _, err := p.TargetSize(100, 100); err != nil && !strings.Contains(err.Error(), "max_soft_tokens") {
			t.Fatalf("max_soft_tokens %d: %v", soft, err)
		} else if err == nil && !slices.Contains([]int{70, 140, 280, 560, 1120}, soft) {
			t.Fatalf("max_soft_tokens %d taken", soft)
		}
		if feat.FeatureSize*feat.FFTLength > 1<<16 {
			return
		}
		if _, _, _, err := gemma4.ExtractAudioFeatures(feat, make([]float32, feat.MinSamples()), feat.SamplingRate); err != nil {
			t.Fatalf("settings read but refused by the extractor: %v", err)
		}
	})
}
