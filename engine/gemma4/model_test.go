package gemma4

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"verdict/engine/weights"
)

// renamed is a weights.Store that shows another store's tensors under other
// names (to[name] = the name in the inner store; "" hides a tensor).
type renamed struct {
	weights.Store
	to map[string]string
}

func (r renamed) inner(name string) string {
	if n, ok := r.to[name]; ok {
		return n
	}
	for k, v := range r.to { // prefix rules, keyed "prefix*"
		if strings.HasSuffix(k, "*") && strings.HasPrefix(name, k[:len(k)-1]) {
			return v[:len(v)-1] + name[len(k)-1:]
		}
	}
	return name
}

func (r renamed) Info(name string) ([]int, string, bool) {
	n := r.inner(name)
	if n == "" {
		return nil, "", false
	}
	return r.Store.Info(n)
}

func (r renamed) Float32(name string) ([]float32, error) {
	n := r.inner(name)
	if n == "" {
		return nil, weights.ErrNotFound
	}
	return r.Store.Float32(n)
}

// TestLoad: the multimodal prefix, ignored extra tensors, and refusals that
// name the tensor.
func TestLoad(t *testing.T) {
	fx := loadFixture(t, "gemma4-synthetic-tiny")
	ref, err := fx.model(t).Forward(fx.Meta.IDs, nil, nil)
	if err != nil {
		t.Fatal(err)
	}

	// model.language_model.X (Gemma4ForConditionalGeneration), with the
	// KV-shared layer 4 holding k/v tensors HF ignores.
	st := renamed{fx.store, map[string]string{
		"model.embed_tokens.weight":                             "",
		"model.language_model.*":                                "model.*",
		"model.language_model.layers.4.self_attn.k_proj.weight": "model.layers.3.self_attn.k_proj.weight",
	}}
	m, err := Load(fx.Cfg, st)
	if err != nil {
		t.Fatal(err)
	}
	got, err := m.Forward(fx.Meta.IDs, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, ref) {
		t.Error("model.language_model. names give other logits")
	}

	for _, tc := range []struct {
		what string
		st   weights.Store
		cfg  func(c *Config)
		want string
	}{
		{"no embedding", renamed{fx.store, map[string]string{"model.embed_tokens.weight": ""}}, nil, "embed_tokens"},
		{"no v_proj on layer 1", renamed{fx.store, map[string]string{"model.layers.1.self_attn.v_proj.weight": ""}}, nil, "model.layers.1.self_attn.v_proj.weight"},
		{"no layer_scalar", renamed{fx.store, map[string]string{"model.layers.5.layer_scalar": ""}}, nil, "model.layers.5.layer_scalar"},
		{"narrower MLP in the config", fx.store, func(c *Config) { c.Intermediate = 64 }, "model.layers.0.mlp.gate_proj.weight: shape [128 64]"},
		{"no double-wide MLP in the config", fx.store, func(c *Config) { c.DoubleWideMLP = false }, "model.layers.4.mlp.gate_proj.weight: shape [256 64]"},
		{"PLE width", fx.store, func(c *Config) { c.PerLayerInput = 8 }, "model.embed_tokens_per_layer.weight"},
	} {
		cfg := *fx.Cfg
		if tc.cfg != nil {
			tc.cfg(&cfg)
		}
		_, err := Load(&cfg, tc.st)
		switch {
		case err == nil:
			t.Errorf("%s: loaded", tc.what)
		case !strings.Contains(err.Error(), tc.want):
			t.Errorf("%s: %v, want it to name %q", tc.what, err, tc.want)
		default:
			t.Logf("%s: %v", tc.what, err)
		}
		if err != nil && tc.cfg == nil && !errors.Is(err, weights.ErrNotFound) {
			t.Errorf("%s: %v does not wrap weights.ErrNotFound", tc.what, err)
		}
	}
}

// TestForwardRefuses: bad token ids and empty input, and a cache keeps working
// after a refusal.
func TestForwardRefuses(t *testing.T) {
	fx := loadFixture(t, "gemma4-synthetic-tiny")
	m := fx.model(t)
	cache := m.NewCache()
	for _, ids := range [][]int{nil, {2, 512}, {-1}} {
		if _, err := m.Forward(ids, cache, nil); err == nil {
			t.Errorf("Forward(%v) accepted", ids)
		}
	}
	if cache.Len() != 0 {
		t.Fatalf("refused calls left %d positions in the cache", cache.Len())
	}
	ref, err := m.Forward(fx.Meta.IDs, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := m.Forward(fx.Meta.IDs, cache, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, ref) || cache.Len() != len(fx.Meta.IDs) {
		t.Errorf("after refusals the cache gives other logits (len %d)", cache.Len())
	}
}
