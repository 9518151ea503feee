package gemma4

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// The Gemma 4 readers of untrusted files under fuzzing (build/fuzz.sh runs
// every target): on any input each returns an error or a result whose sizes
// are within the stated bounds; none panics, hangs or allocates beyond them.

// fixtureConfigs are the config.json files of the Gemma 4 fixtures, the
// seeds of the config fuzz targets.
func fixtureConfigs(f *testing.F) [][]byte {
	var out [][]byte
	for _, name := range []string{"gemma4-synthetic-tiny", "gemma4-synthetic-tiny-moe", "gemma4-synthetic-tiny-f64",
		"gemma4-synthetic-vision", "gemma4-synthetic-audio", "gemma4-synthetic-multimodal"} {
		data, err := os.ReadFile(filepath.Join(fixtureDir(f, name), "config.json"))
		if err != nil {
			f.Fatal(err)
		}
		out = append(out, data)
	}
	return out
}

// FuzzParseConfig: ParseConfig gives an error or a config whose every
// layer's sizes are within the Max* bounds (head widths even, KV heads
// dividing the heads, KV sources earlier layers of the same type, the PLE
// table under MaxFFN per token), parsed the same again.
func FuzzParseConfig(f *testing.F) {
	for _, c := range fixtureConfigs(f) {
		f.Add(c)
	}
	f.Add([]byte(`{"model_type":"gemma4_text","vocab_size":8,"hidden_size":4,"intermediate_size":8,"num_hidden_layers":2,"num_attention_heads":2,"num_key_value_heads":1,"head_dim":2,"global_head_dim":4,"sliding_window":4,"num_kv_shared_layers":1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig(data)
		if err != nil {
			return
		}
		if c.Vocab < 1 || c.Vocab > MaxVocab || c.Hidden < 1 || c.Hidden > MaxHidden || c.Layers < 1 || c.Layers > MaxLayers ||
			c.Heads < 1 || c.Heads > MaxHeads || len(c.LayerTypes) != c.Layers || c.Experts > MaxExperts || c.TopK > c.Experts ||
			c.MoEIntermediate > MaxFFN || c.SlidingWindow > MaxWindow || c.MaxPositions > MaxPositions ||
			int64(c.PerLayerInput)*int64(c.Layers) > MaxFFN || (c.PerLayerInput > 0 && c.VocabPerLayerInput < c.Vocab) ||
			c.VocabPerLayerInput > MaxVocab {
			t.Fatalf("accepted config out of bounds: %+v", c)
		}
		if !(c.Eps > 0 && c.Eps < 1) || c.SoftCap < 0 || math.IsInf(c.SoftCap, 0) {
			t.Fatalf("accepted eps %g / soft cap %g", c.Eps, c.SoftCap)
		}
		for l := range c.Layers {
			hd, kv, src := c.LayerHeadDim(l), c.LayerKVHeads(l), c.KVSource(l)
			if hd < 2 || hd > MaxHeadDim || hd%2 != 0 || kv < 1 || c.Heads%kv != 0 ||
				src < 0 || src > l || c.LayerTypes[src] != c.LayerTypes[l] || c.LayerIntermediate(l) > MaxFFN {
				t.Fatalf("layer %d: head dim %d, KV heads %d, KV source %d, intermediate %d", l, hd, kv, src, c.LayerIntermediate(l))
			}
		}
		if again, err := ParseConfig(data); err != nil || again.Layers != c.Layers || again.Vocab != c.Vocab {
			t.Fatalf("second parse differs: %v", err)
		}
	})
}

// FuzzParseVisionConfig: ParseVisionConfig gives an error or a config
// within maxTowerHidden, maxTowerLayers, MaxHeads, MaxHeadDim (a multiple
// of 4), maxPatchSize and maxTowerTable, heads a multiple of KV heads.
func FuzzParseVisionConfig(f *testing.F) {
	for _, c := range fixtureConfigs(f) {
		f.Add(c)
	}
	f.Add([]byte(`{"model_type":"gemma4_vision","patch_size":256,"pooling_kernel_size":64}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseVisionConfig(data)
		if err != nil {
			return
		}
		if c.Hidden < 1 || c.Hidden > maxTowerHidden || c.Intermediate > MaxFFN || c.Layers < 1 || c.Layers > maxTowerLayers ||
			c.Heads < 1 || c.Heads > MaxHeads || c.KVHeads < 1 || c.Heads%c.KVHeads != 0 || c.HeadDim < 4 || c.HeadDim > MaxHeadDim ||
			c.HeadDim%4 != 0 || c.PatchSize < 1 || c.PatchSize > maxPatchSize || c.PoolingKernel < 1 || c.PoolingKernel > 64 ||
			c.PositionEmbeddingSize < 1 || c.PositionEmbeddingSize > maxTowerTable || c.TextHidden < 0 || c.TextHidden > 4*maxTowerHidden ||
			!(c.Eps > 0 && c.Eps < 1) || !(c.RopeTheta > 1) || math.IsInf(c.RopeTheta, 0) {
			t.Fatalf("accepted vision config out of bounds: %+v", c)
		}
	})
}

// FuzzParseAudioConfig: ParseAudioConfig gives an error or a config within
// maxTowerHidden (even, a multiple of the heads), maxTowerLayers, MaxHeads,
// chunk and context at most 4096, conv channels at most 4096.
func FuzzParseAudioConfig(f *testing.F) {
	for _, c := range fixtureConfigs(f) {
		f.Add(c)
	}
	f.Add([]byte(`{"model_type":"gemma4_audio","hidden_size":6,"num_attention_heads":3,"subsampling_conv_channels":[4,1]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseAudioConfig(data)
		if err != nil {
			return
		}
		if c.Hidden < 2 || c.Hidden > maxTowerHidden || c.Hidden%2 != 0 || c.Heads < 1 || c.Heads > MaxHeads || c.Hidden%c.Heads != 0 ||
			c.Layers < 1 || c.Layers > maxTowerLayers || c.ChunkSize < 1 || c.ChunkSize > 1<<12 || c.ContextLeft < 1 ||
			c.ContextLeft > 1<<12 || c.ContextRight < 0 || c.ContextRight > 1<<12 || c.ConvChannels[0] < 4 || c.ConvChannels[0] > 1<<12 ||
			c.ConvChannels[1] < 1 || c.ConvChannels[1] > 1<<12 || c.ConvKernel < 1 || c.ConvKernel > 1024 ||
			c.OutputDims < 1 || c.OutputDims > 4*maxTowerHidden || c.TextHidden < 0 || c.TextHidden > 4*maxTowerHidden {
			t.Fatalf("accepted audio config out of bounds: %+v", c)
		}
	})
}

// FuzzParseMediaTokens: ParseMediaTokens gives an error or ids within
// [0, text_config.vocab_size) with vocab_size at most MaxVocab, the image,
// video and audio placeholders distinct.
func FuzzParseMediaTokens(f *testing.F) {
	for _, c := range fixtureConfigs(f) {
		f.Add(c)
	}
	f.Add([]byte(`{"model_type":"gemma4","text_config":{"vocab_size":10},"boi_token_id":0,"eoi_token_id":1,"image_token_id":2,"video_token_id":3,"boa_token_id":4,"eoa_token_index":5,"audio_token_id":6}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseMediaTokens(data)
		if err != nil {
			return
		}
		for _, id := range []int{m.BOI, m.EOI, m.Image, m.Video, m.BOA, m.EOA, m.Audio} {
			if id < 0 || id >= MaxVocab {
				t.Fatalf("accepted media id %d (vocab at most %d): %+v", id, MaxVocab, m)
			}
		}
		if m.Image == m.Audio || m.Image == m.Video || m.Audio == m.Video {
			t.Fatalf("accepted placeholders that coincide: %+v", m)
		}
	})
}

// FuzzParseAudioFeatureConfig: ParseAudioFeatureConfig gives an error or
// settings that ExtractAudioFeatures takes (check passes: the longest
// clip's features at most maxAudioFeatureOut values).
func FuzzParseAudioFeatureConfig(f *testing.F) {
	f.Add([]byte(`{"feature_extractor":{"feature_size":128,"sampling_rate":16000,"frame_length":320,"hop_length":160,"fft_length":512,"preemphasis":0.0,"mel_floor":0.001,"dither":0.0,"input_scale_factor":1.0,"fft_overdrive":false}}`))
	f.Add([]byte(`{"feature_extractor_type":"Gemma4AudioFeatureExtractor","feature_size":4,"sampling_rate":1000,"frame_length_ms":8,"hop_length_ms":4,"per_bin_mean":[[[0,1,2,3]]],"per_bin_stddev":[1,2,3,4],"padding_side":"right"}`))
	f.Add([]byte(`{"image_processor":{"max_soft_tokens":280},"feature_extractor":{"fft_overdrive":true,"max_frequency":4000,"preemphasis":0.97}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseAudioFeatureConfig(data)
		if err != nil {
			return
		}
		if err := c.check(); err != nil {
			t.Fatalf("accepted settings ExtractAudioFeatures refuses: %v", err)
		}
		if n := c.frameCount(c.sampleLimit()) * c.FeatureSize; n > maxAudioFeatureOut {
			t.Fatalf("longest clip gives %d features, over %d", n, maxAudioFeatureOut)
		}
	})
}

// maxProcessorFuzzPixels bounds the images FuzzPreprocess resizes (the
// target size is checked for every size).
const maxProcessorFuzzPixels = 1 << 14

// FuzzPreprocess: TargetSize, on any sides and settings, gives an error or
// sides that are positive multiples of pooling·patch within the patch
// budget, and the padded patches of a config it accepts hold at most
// maxProcessorPixels pixels (checked before Preprocess allocates them);
// Preprocess and PatchifyImage on small images give exactly MaxPatches
// patches and the soft-token count of the target size.
func FuzzPreprocess(f *testing.F) {
	f.Add(uint32(50), uint32(70), uint16(16), uint16(280), uint8(3), byte(7))      // released settings
	f.Add(uint32(48), uint32(630), uint16(4), uint16(70), uint8(3), byte(1))       // the vision fixture's processor
	f.Add(uint32(1000), uint32(37), uint16(4), uint16(70), uint8(3), byte(0))      // a target that is not its own target
	f.Add(uint32(65536), uint32(1), uint16(256), uint16(1120), uint8(64), byte(9)) // largest settings the vision config allows
	f.Fuzz(func(t *testing.T, h, w uint32, patch, soft uint16, pool uint8, seed byte) {
		p := ImageProcessorConfig{PatchSize: int(patch), MaxSoftTokens: int(soft), PoolingKernel: int(pool)}
		height, width := int(h), int(w)
		th, tw, err := p.TargetSize(height, width)
		if err != nil {
			return
		}
		side := p.PoolingKernel * p.PatchSize
		budget := p.MaxPatches() * p.PatchSize * p.PatchSize
		if p.MaxPatches()*p.PatchSize*p.PatchSize > maxProcessorPixels {
			t.Fatalf("%+v accepted: its padded patches hold %d pixels, over %d", p, budget, maxProcessorPixels)
		}
		if th < side || tw < side || th%side != 0 || tw%side != 0 || th*tw > budget {
			t.Fatalf("%dx%d -> %dx%d (side %d, budget %d pixels)", height, width, th, tw, side, budget)
		}
		if height*width > maxProcessorFuzzPixels || th*tw > maxProcessorFuzzPixels {
			return
		}
		rgb := make([]uint8, height*width*3)
		for i := range rgb {
			rgb[i] = uint8(i*31) ^ seed
		}
		px, pos, n, err := p.Preprocess(rgb, height, width)
		if err != nil {
			t.Fatalf("Preprocess %dx%d with %+v: %v", height, width, p, err)
		}
		want := th / p.PatchSize * (tw / p.PatchSize) / (p.PoolingKernel * p.PoolingKernel)
		if len(pos) != p.MaxPatches() || len(px) != p.MaxPatches()*p.PatchSize*p.PatchSize*3 || n != want {
			t.Fatalf("%d patches, %d values, %d soft tokens; want %d, %d, %d", len(pos), len(px), n, p.MaxPatches(), p.MaxPatches()*p.PatchSize*p.PatchSize*3, want)
		}
		if _, _, _, err := p.PatchifyImage(rgb[:len(rgb)-1], height, width); err == nil {
			t.Fatal("PatchifyImage took a short buffer")
		}
	})
}

// FuzzExtractAudioFeatures: on short clips (fuzzed samples, lengths and
// settings near the released ones) ExtractAudioFeatures gives an error or
// frameCount(padded clip) frames of FeatureSize finite values each, the
// mask's valid frames first.
func FuzzExtractAudioFeatures(f *testing.F) {
	f.Add(make([]byte, 4*400), uint16(128), uint16(320), uint16(160), false, uint16(128), float32(0))
	f.Add([]byte{0, 0, 0x80, 0x7f, 1, 2, 3, 4}, uint16(4), uint16(2), uint16(1), true, uint16(1), float32(0.97))
	f.Add(make([]byte, 4*161), uint16(8), uint16(32), uint16(7), true, uint16(3), float32(0.5))
	f.Fuzz(func(t *testing.T, raw []byte, bins, frame, hop uint16, overdrive bool, mult uint16, pre float32) {
		if len(raw) > 1<<14 {
			return
		}
		c := DefaultAudioFeatureConfig()
		c.FeatureSize, c.FrameLength, c.HopLength, c.PadToMultiple = int(bins), int(frame), int(hop), int(mult)
		c.FFTLength = nextPow2(max(c.FrameLength, 1))
		if overdrive {
			c.FFTLength *= 2
		}
		c.Preemphasis = float64(pre)
		samples := make([]float32, len(raw)/4)
		for i := range samples {
			samples[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
		feats, frames, mask, err := ExtractAudioFeatures(c, samples, c.SamplingRate)
		if err != nil {
			return
		}
		padded := (len(samples) + c.PadToMultiple - 1) / c.PadToMultiple * c.PadToMultiple
		if frames != c.frameCount(padded) || len(feats) != frames*c.FeatureSize || len(mask) != frames || frames == 0 || !mask[0] {
			t.Fatalf("%d samples: %d frames (want %d), %d values, %d mask", len(samples), frames, c.frameCount(padded), len(feats), len(mask))
		}
		for i, v := range feats {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				t.Fatalf("feature %d is %g", i, v)
			}
		}
		for i := 1; i < frames; i++ {
			if mask[i] && !mask[i-1] {
				t.Fatalf("mask %v: a valid frame after an invalid one", mask)
			}
		}
	})
}
