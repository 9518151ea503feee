package audio_test

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"verdict/engine/audio"
	"verdict/engine/weights"
)

// editedStore hides a tensor or reports a wrong shape for it.
type editedStore struct {
	weights.Store
	hide  string
	shape map[string][]int
	dtype map[string]string
}

func (s editedStore) Info(name string) ([]int, string, bool) {
	if name == s.hide {
		return nil, "", false
	}
	shape, dtype, ok := s.Store.Info(name)
	if alt, found := s.shape[name]; found && ok {
		shape = alt
	}
	if alt, found := s.dtype[name]; found && ok {
		dtype = alt
	}
	return shape, dtype, ok
}

func (s editedStore) Float32(name string) ([]float32, error) {
	if name == s.hide {
		return nil, weights.ErrNotFound
	}
	return s.Store.Float32(name)
}

func TestLoadErrors(t *testing.T) {
	dir := unpack(t, "gemma3n-synthetic-tiny")
	store, err := weights.OpenRecipe(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	cfg, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	const lin = "model.audio_tower.conformer.1.lconv1d.linear_end.weight"
	const pds = "model.audio_tower.conformer.0.attention.attn.per_dim_scale"
	const emb = "model.embed_audio.embedding.weight"
	cases := []struct {
		name     string
		store    weights.Store
		config   string
		want     string // substring of the error
		notFound bool
	}{
		{"missing linear", editedStore{Store: store, hide: lin}, string(cfg), lin, true},
		{"missing embedding", editedStore{Store: store, hide: emb}, string(cfg), emb, true},
		{"wrong shape", editedStore{Store: store, shape: map[string][]int{pds: {15}}}, string(cfg), "shape [15], want [16]", false},
		{"wrong conv shape", editedStore{Store: store, shape: map[string][]int{
			"model.audio_tower.subsample_conv_projection.conv_1.conv.weight": {8, 16, 3, 2}}}, string(cfg), "conv_1.conv.weight", false},
		{"integer weights", editedStore{Store: store, dtype: map[string]string{lin: "I32"}}, string(cfg), "tensor " + lin + " has element type I32", false},
		{"not json", store, "{", "config.json", false},
		{"no audio config", store, `{"model_type": "gemma3n_text"}`, "no audio_config", false},
		{"bad heads", store, `{"model_type": "gemma3n_audio", "hidden_size": 64, "conf_num_attention_heads": 5}`, "conf_num_attention_heads", false},
		{"bad feature size", store, `{"audio_config": {"input_feat_size": 80}}`, "input_feat_size", false},
		{"more layers than stored", store, strings.Replace(string(cfg), `"conf_num_hidden_layers": 2`, `"conf_num_hidden_layers": 3`, 1),
			"config conf_num_hidden_layers is 3 but the checkpoint has 2 conformer layers", false},
		{"a million layers", store, strings.Replace(string(cfg), `"conf_num_hidden_layers": 2`, `"conf_num_hidden_layers": 1000000`, 1),
			"conf_num_hidden_layers 1000000 is outside [0, 1024]", false},
		{"huge context", store, strings.Replace(string(cfg), `"conf_attention_context_left": 13`, `"conf_attention_context_left": 100000000`, 1),
			"conf_attention_context_left 100000000 is outside", false},
		{"no chunk", store, strings.Replace(string(cfg), `"conf_attention_chunk_size": 12`, `"conf_attention_chunk_size": 0`, 1),
			"conf_attention_chunk_size 0 is outside", false},
		{"negative eps", store, strings.Replace(string(cfg), `"sscp_conv_group_norm_eps": 0.001`, `"sscp_conv_group_norm_eps": -0.001`, 1),
			"sscp_conv_group_norm_eps must be positive, got -0.001", false},
		{"huge kernel", store, strings.Replace(string(cfg), `"conf_conv_kernel_size": 5`, `"conf_conv_kernel_size": 50000000`, 1),
			"conf_conv_kernel_size 50000000 is outside", false},
		{"kernel not the checkpoint's", store, strings.Replace(string(cfg), `"conf_conv_kernel_size": 5`, `"conf_conv_kernel_size": 7`, 1),
			"config conf_conv_kernel_size is 7 but the checkpoint's model.audio_tower.conformer.0.lconv1d.depthwise_conv1d.weight has 5", false},
		{"wider than the checkpoint", store, strings.Replace(string(cfg), `"hidden_size": 64,`, `"hidden_size": 128,`, 1),
			"config hidden_size is 128 but the checkpoint's model.embed_audio.hard_embedding_norm.weight has 64", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := audio.LoadTower(c.store, []byte(c.config))
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not mention %q", err, c.want)
			}
			if c.notFound != errors.Is(err, weights.ErrNotFound) {
				t.Errorf("errors.Is(err, ErrNotFound) = %v, want %v (%v)", !c.notFound, c.notFound, err)
			}
		})
	}
}

func TestUseErrors(t *testing.T) {
	tw, _ := loadFixtureTower(t, "gemma3n-synthetic-tiny")
	if _, _, err := tw.Encode(nil, nil); !errors.Is(err, audio.ErrNoAudio) {
		t.Errorf("Encode of no frames: %v, want ErrNoAudio", err)
	}
	if _, _, err := tw.Encode(make([]float32, 127), []bool{true}); err == nil {
		t.Error("Encode of 127 values for one frame: no error")
	}
	if _, err := tw.Embed(make([]float32, 65)); err == nil {
		t.Error("Embed of 65 values: no error")
	}
	for _, id := range []int32{0, 262271, 262400, -1} {
		if _, err := tw.HardEmbed(id); err == nil {
			t.Errorf("HardEmbed(%d): no error", id)
		}
	}
	for _, id := range []int32{262272, 262273, 262399} {
		if e, err := tw.HardEmbed(id); err != nil || len(e) != tw.TextHidden() {
			t.Errorf("HardEmbed(%d): %d values, %v", id, len(e), err)
		}
	}
}

// TestMask: frames marked padded give zero rows and a false mask, with the
// mask subsampled as transformers does (frame i of the conformer reads mask
// entry 4i, then every 4th is kept).
func TestMask(t *testing.T) {
	tw, _ := loadFixtureTower(t, "gemma3n-synthetic-tiny")
	feats, mask := audio.Features(make([]float32, 512))
	if len(mask) != 0 || len(feats) != 0 {
		t.Fatalf("512 samples gave %d frames, want 0", len(mask))
	}
	samples := make([]float32, 3*audio.SampleRate)
	for i := range samples {
		samples[i] = float32(i%97)/97 - 0.5
	}
	feats, mask = audio.Features(samples)
	full, fullMask, err := tw.Encode(feats, mask)
	if err != nil {
		t.Fatal(err)
	}
	// Pretend the last 100 frames are batch padding.
	cut := len(mask) - 100
	padded := append([]bool(nil), mask...)
	for i := cut; i < len(padded); i++ {
		padded[i] = false
	}
	out, outMask, err := tw.Encode(feats, padded)
	if err != nil {
		t.Fatal(err)
	}
	D := tw.Cfg.HiddenSize
	for n := range outMask {
		want := 16*n < cut
		if outMask[n] != want || !fullMask[n] {
			t.Fatalf("row %d: mask %v (unpadded %v), want %v", n, outMask[n], fullMask[n], want)
		}
		if !want && maxAbs(out[n*D:(n+1)*D]) != 0 {
			t.Errorf("padded row %d is not zero", n)
		}
		// Rows well before the padding do not see it (causal attention,
		// causal convolutions, cumulative norms).
		if 16*n < cut && maxAbsDiff(out[n*D:(n+1)*D], full[n*D:(n+1)*D]) != 0 {
			t.Errorf("row %d changed when later frames were padded", n)
		}
	}
}

// TestBuffers: the constants the tower computes match transformers' buffers.
func TestBuffers(t *testing.T) {
	tw, dir := loadFixtureTower(t, "gemma3n-synthetic-tiny")
	store, err := weights.OpenRecipe(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	q, err := store.Float32("model.audio_tower.conformer.0.attention.attn.q_scale")
	if err != nil {
		t.Fatal(err)
	}
	if got := tw.QScale(0); got != q[0] {
		t.Errorf("q_scale %v, transformers %v", got, q[0])
	}
	inv, err := store.Float32("model.audio_tower.conformer.0.attention.attn.relative_position_embedding.inv_timescales")
	if err != nil {
		t.Fatal(err)
	}
	if d := maxAbsDiff(audio.InvTimescales(len(inv)), inv); d > 1e-7 {
		t.Errorf("inv_timescales differ by %g", d)
	}
	// The full-size tower's q_scale (head_dim 192) is 0.1041175…
	cfg := audio.DefaultConfig()
	if cfg.HeadDim() != 192 || cfg.NumTokens(2997) != 188 || cfg.NumTokens(497) != 32 || cfg.NumTokens(97) != 7 {
		t.Errorf("default config: head dim %d, tokens for 30/5/1 s: %d %d %d", cfg.HeadDim(),
			cfg.NumTokens(2997), cfg.NumTokens(497), cfg.NumTokens(97))
	}
	if audio.NumFrames(30*audio.SampleRate) != 2997 || audio.NumFrames(60*audio.SampleRate) != 2997 ||
		audio.NumFrames(audio.SampleRate) != 97 || audio.NumFrames(512) != 0 {
		t.Error("NumFrames disagrees with the spec's table")
	}
}

// bf16Store serves every 2-D weight rounded to bfloat16, as BF16 (asBF16) or
// as F32 holding the same values.
type bf16Store struct {
	weights.Store
	asBF16 bool
}

func (s bf16Store) twoD(name string) bool {
	shape, _, ok := s.Store.Info(name)
	return ok && len(shape) == 2
}

func (s bf16Store) Info(name string) ([]int, string, bool) {
	shape, dtype, ok := s.Store.Info(name)
	if ok && s.asBF16 && len(shape) == 2 {
		dtype = "BF16"
	}
	return shape, dtype, ok
}

func (s bf16Store) bits(name string) ([]uint16, error) {
	v, err := s.Store.Float32(name)
	if err != nil {
		return nil, err
	}
	b := make([]uint16, len(v))
	for i, x := range v {
		b[i] = uint16(math.Float32bits(x) >> 16)
	}
	return b, nil
}

func (s bf16Store) BF16(name string) ([]uint16, error) {
	if !s.asBF16 || !s.twoD(name) {
		return nil, errors.New("not bf16")
	}
	return s.bits(name)
}

func (s bf16Store) Float32(name string) ([]float32, error) {
	if !s.twoD(name) {
		return s.Store.Float32(name)
	}
	b, err := s.bits(name)
	if err != nil {
		return nil, err
	}
	v := make([]float32, len(b))
	for i, x := range b {
		v[i] = math.Float32frombits(uint32(x) << 16)
	}
	return v, nil
}

// TestBF16Weights: bf16 linear weights are used as bf16 and give what the
// same values in float32 give.
func TestBF16Weights(t *testing.T) {
	dir := unpack(t, "gemma3n-synthetic-tiny")
	store, err := weights.OpenRecipe(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	cfg, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	samples := readF32(t, filepath.Join(dir, "audio_waveform.f32"))
	var out [2][]float32
	for i, asBF16 := range []bool{false, true} {
		tw, err := audio.LoadTower(bf16Store{store, asBF16}, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if out[i], err = tw.SoftTokens(samples); err != nil {
			t.Fatal(err)
		}
	}
	if d := maxAbsDiff(out[0], out[1]); d > 1e-5 {
		t.Errorf("bf16 weights differ from the same values in f32 by %g", d)
	}
}
