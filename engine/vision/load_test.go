package vision

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"verdict/engine/weights"
)

// editedStore is a Store with some tensors hidden, reshaped or added (by
// Info; data is never read because LoadTower checks every name and shape
// first).
type editedStore struct {
	weights.Store
	hide  map[string]bool
	shape map[string][]int
	dtype map[string]string
}

func (s editedStore) Info(name string) ([]int, string, bool) {
	if s.hide[name] {
		return nil, "", false
	}
	if sh, ok := s.shape[name]; ok {
		return sh, "F32", true
	}
	if dt, ok := s.dtype[name]; ok {
		sh, _, _ := s.Store.Info(name)
		return sh, dt, true
	}
	return s.Store.Info(name)
}

func (s editedStore) Float32(name string) ([]float32, error) {
	if s.hide[name] || s.shape[name] != nil || s.dtype[name] != "" {
		panic("vision: read an edited tensor " + name)
	}
	return s.Store.Float32(name)
}

func TestLoadTowerErrors(t *testing.T) {
	dir := tinyDir(t)
	store, err := weights.OpenRecipe(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	cfg := readFile(t, filepath.Join(dir, "config.json"))
	tp, ep := TowerPrefix, EmbedderPrefix
	for _, c := range []struct {
		name    string
		hide    []string
		shape   map[string][]int
		dtype   map[string]string
		missing bool   // errors.Is(err, ErrMissing)
		want    string // in the error
	}{
		{name: "stem bias", hide: []string{tp + "conv_stem.conv.bias"}, missing: true, want: "conv_stem.conv.bias"},
		{name: "er norm", hide: []string{tp + "blocks.0.2.bn2.weight"}, missing: true, want: "blocks.0.2.bn2.weight"},
		{name: "uir dw_start", hide: []string{tp + "blocks.2.3.dw_start.conv.weight"}, missing: true, want: "blocks.2.3.dw_start.conv.weight"},
		{name: "mqa key down-conv", hide: []string{tp + "blocks.2.9.attn.key.down_conv.weight"}, missing: true, want: "attn.key.down_conv"},
		{name: "layer scale", hide: []string{tp + "blocks.3.38.layer_scale.gamma"}, missing: true, want: "blocks.3.38.layer_scale.gamma"},
		{name: "msfa norm", hide: []string{tp + "msfa.norm.weight"}, missing: true, want: "msfa.norm.weight"},
		{name: "embedder projection", hide: []string{ep + "embedding_projection.weight"}, missing: true, want: "embedding_projection"},
		{name: "embedder table", hide: []string{ep + "embedding.weight"}, missing: true, want: "embed_vision.embedding.weight"},
		{name: "stem kernel", shape: map[string][]int{tp + "conv_stem.conv.weight": {64, 3, 5, 5}}, want: "conv_stem.conv.weight has shape [64 3 5 5]"},
		{name: "uir expansion", shape: map[string][]int{tp + "blocks.1.2.pw_exp.conv.weight": {768, 256, 1, 1}}, want: "blocks.1.2.pw_exp.conv.weight"},
		{name: "mqa heads", shape: map[string][]int{tp + "blocks.3.1.attn.query.proj.weight": {1024, 1280, 1, 1}}, want: "blocks.3.1.attn.query.proj.weight"},
		{name: "depthwise kernel", shape: map[string][]int{tp + "blocks.1.0.dw_mid.conv.weight": {768, 1, 3, 3}}, want: "dw_mid.conv.weight"},
		{name: "msfa width", shape: map[string][]int{tp + "msfa.ffn.pw_exp.conv.weight": {3840, 1280, 1, 1}}, want: "msfa.ffn.pw_exp"},
		{name: "projection width", shape: map[string][]int{ep + "embedding_projection.weight": {64, 1024}}, want: "embedding_projection.weight"},
		{name: "hard table rows", shape: map[string][]int{ep + "embedding.weight": {100, 2048}}, want: "config vision_config.vocab_size is 128 but the checkpoint's model.embed_vision.embedding.weight has 100 rows"},
		{name: "text width", shape: map[string][]int{ep + "embedding_projection.weight": {32, 2048}}, want: "config text_config.hidden_size is 64 but the checkpoint's model.embed_vision.embedding_projection.weight has 32 rows"},
		{name: "integer weights", dtype: map[string]string{tp + "blocks.3.38.pw_proj.conv.weight": "I64"}, want: "tensor " + tp + "blocks.3.38.pw_proj.conv.weight has element type I64"},
		{name: "extra block", shape: map[string][]int{tp + "blocks.3.39.layer_scale.gamma": {1280}}, want: "more blocks in stage 3"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := editedStore{Store: store, hide: map[string]bool{}, shape: c.shape, dtype: c.dtype}
			for _, n := range c.hide {
				s.hide[n] = true
			}
			_, err := LoadTower(s, cfg)
			if err == nil {
				t.Fatal("no error")
			}
			if errors.Is(err, ErrMissing) != c.missing || errors.Is(err, weights.ErrNotFound) != c.missing || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q (missing: %v), want one naming %q (missing: %v)", err, errors.Is(err, ErrMissing), c.want, c.missing)
			}
		})
	}
}

func TestParseConfig(t *testing.T) {
	dir := tinyDir(t)
	full := readFile(t, filepath.Join(dir, "config.json"))
	c, err := ParseConfig(full)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Config{Architecture: Architecture, HiddenSize: 2048, RMSNormEps: 1e-6, VocabOffset: 262144, VocabSize: 128, TextHidden: 64, SoftTokens: 256}); c != want {
		t.Errorf("ParseConfig = %+v, want %+v", c, want)
	}
	bare := `{"model_type": "gemma3n_vision", "architecture": "mobilenetv5_300m_enc", "hidden_size": 2048, "rms_norm_eps": 1e-6, "vocab_offset": 262144, "vocab_size": 128}`
	if c, err := ParseConfig([]byte(bare)); err != nil || c.TextHidden != 0 || c.VocabOffset != 262144 {
		t.Errorf("bare vision config: %+v, %v", c, err)
	}
	for _, bad := range []struct{ name, json, want string }{
		{"not json", `{`, "config.json"},
		{"text only", `{"model_type": "gemma3n_text", "hidden_size": 2048}`, "no vision_config"},
		{"architecture", `{"vision_config": {"architecture": "mobilenetv5_base"}}`, "not supported"},
		{"hidden", `{"vision_config": {"hidden_size": 1024}}`, "hidden_size 1024"},
		{"tokens", `{"vision_config": {}, "vision_soft_tokens_per_image": 64}`, "256"},
		{"eps", `{"vision_config": {"rms_norm_eps": 0}}`, "rms_norm_eps"},
		{"vocab", `{"vision_config": {"vocab_size": 0}}`, "hard-token"},
		{"huge vocab", `{"vision_config": {"vocab_size": 1073741824}}`, "vocab_size 1073741824"},
		{"negative offset", `{"vision_config": {"vocab_offset": -5}}`, "vocab_offset -5"},
		{"negative eps", `{"vision_config": {"rms_norm_eps": -1e-6}}`, "rms_norm_eps must be positive, got -1e-06"},
		{"huge text width", `{"vision_config": {}, "text_config": {"hidden_size": 1048576}}`, "text_config.hidden_size 1048576"},
	} {
		if _, err := ParseConfig([]byte(bad.json)); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: error %v, want one containing %q", bad.name, err, bad.want)
		}
	}
	if _, err := LoadTower(nil, []byte(`{}`)); err == nil {
		t.Error("LoadTower accepted a config without vision_config")
	}
}

func TestArchitecture(t *testing.T) {
	st := stages()
	var counts []int
	kinds := map[blockKind]int{}
	for _, s := range st {
		counts = append(counts, len(s))
		for _, b := range s {
			kinds[b.kind]++
		}
	}
	if !slices.Equal(counts, []int{3, 5, 37, 39}) {
		t.Errorf("blocks per stage %v, want [3 5 37 39]", counts)
	}
	if kinds[kindER] != 3 || kinds[kindUIR] != 48 || kinds[kindMQA] != 33 {
		t.Errorf("block kinds %v, want 3 er, 48 uir, 33 mqa", kinds)
	}
	if b := st[2][9]; b.kind != kindMQA || b.heads != 12 || b.dim != 64 || b.kvStride != 2 || b.k != 3 {
		t.Errorf("blocks.2.9 = %+v", b)
	}
	if b := st[3][1]; b.kind != kindMQA || b.heads != 16 || b.dim != 96 || b.kvStride != 1 {
		t.Errorf("blocks.3.1 = %+v", b)
	}
	if b := st[1][0]; b.kind != kindUIR || b.start != 3 || b.k != 5 || b.stride != 2 || b.exp != 6 || b.out != 256 {
		t.Errorf("blocks.1.0 = %+v", b)
	}
	for _, bad := range []string{"xx_r1", "uir_q3", "uir_kx", "er_k"} {
		if _, _, err := parseBlock(bad); err == nil {
			t.Errorf("parseBlock(%q): no error", bad)
		}
	}
}
