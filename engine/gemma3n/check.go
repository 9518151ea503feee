package gemma3n

import (
	"fmt"
	"strconv"
	"strings"

	"verdict/engine/weights"
)

// checkCheckpoint holds the config's sizes to the checkpoint's tensor
// shapes (read from the headers, nothing loaded), so that a config asking
// for more layers or wider matrices than the files hold fails with the
// field and both values before anything is sized by it.
func checkCheckpoint(store weights.Store, prefix string, cfg Config) error {
	mismatch := func(field string, cfgVal int, tensor string, got int) error {
		return fmt.Errorf("gemma3n: config %s is %d but the checkpoint's %s%s says %d", field, cfgVal, prefix, tensor, got)
	}
	shape := func(name string, dims int) ([]int, error) {
		s, _, ok := store.Info(prefix + name)
		if !ok {
			return nil, fmt.Errorf("gemma3n: missing tensor %s%s", prefix, name)
		}
		if len(s) != dims {
			return nil, fmt.Errorf("gemma3n: tensor %s%s has shape %v, want %d dimensions", prefix, name, s, dims)
		}
		return s, nil
	}
	if n := countLayers(store, prefix); n != cfg.NumLayers {
		return fmt.Errorf("gemma3n: config num_hidden_layers is %d but the checkpoint has %d layers (%slayers.N)", cfg.NumLayers, n, prefix)
	}
	e, err := shape("embed_tokens.weight", 2)
	if err != nil {
		return err
	}
	if e[0] != cfg.VocabSize {
		return mismatch("vocab_size", cfg.VocabSize, "embed_tokens.weight rows", e[0])
	}
	if e[1] != cfg.HiddenSize {
		return mismatch("hidden_size", cfg.HiddenSize, "embed_tokens.weight columns", e[1])
	}
	n, err := shape("per_layer_projection_norm.weight", 1)
	if err != nil {
		return err
	}
	if n[0] != cfg.PerLayerSize {
		return mismatch("hidden_size_per_layer_input", cfg.PerLayerSize, "per_layer_projection_norm.weight size", n[0])
	}
	p, err := shape("embed_tokens_per_layer.weight", 2)
	if err != nil {
		return err
	}
	if p[0] != cfg.VocabSizePerLayer {
		return mismatch("vocab_size_per_layer_input", cfg.VocabSizePerLayer, "embed_tokens_per_layer.weight rows", p[0])
	}
	hd, err := shape("layers.0.self_attn.q_norm.weight", 1)
	if err != nil {
		return err
	}
	if hd[0] != cfg.HeadDim {
		return mismatch("head_dim", cfg.HeadDim, "layers.0.self_attn.q_norm.weight size", hd[0])
	}
	q, err := shape("layers.0.self_attn.q_proj.weight", 2)
	if err != nil {
		return err
	}
	if q[0] != cfg.NumHeads*cfg.HeadDim {
		return mismatch("num_attention_heads", cfg.NumHeads, "layers.0.self_attn.q_proj.weight rows / head_dim", q[0]/cfg.HeadDim)
	}
	k, err := shape("layers.0.self_attn.k_proj.weight", 2)
	if err != nil {
		return err
	}
	if k[0] != cfg.NumKVHeads*cfg.HeadDim {
		return mismatch("num_key_value_heads", cfg.NumKVHeads, "layers.0.self_attn.k_proj.weight rows / head_dim", k[0]/cfg.HeadDim)
	}
	r, err := shape("layers.0.laurel.linear_left.weight", 2)
	if err != nil {
		return err
	}
	if r[0] != cfg.LaurelRank {
		return mismatch("laurel_rank", cfg.LaurelRank, "layers.0.laurel.linear_left.weight rows", r[0])
	}
	for i := 0; i < cfg.NumLayers; i++ {
		name := fmt.Sprintf("layers.%d.mlp.gate_proj.weight", i)
		g, err := shape(name, 2)
		if err != nil {
			return err
		}
		if g[0] != cfg.IntermediateSize[i] {
			return mismatch(fmt.Sprintf("intermediate_size[%d]", i), cfg.IntermediateSize[i], name+" rows", g[0])
		}
	}
	return nil
}

// countLayers is one more than the largest N of the store's
// prefix+"layers.N." tensors (0 when there are none).
func countLayers(store weights.Store, prefix string) int {
	n := 0
	for _, name := range store.Names() {
		rest, ok := strings.CutPrefix(name, prefix+"layers.")
		if !ok {
			continue
		}
		num, _, ok := strings.Cut(rest, ".")
		if !ok {
			continue
		}
		if i, err := strconv.Atoi(num); err == nil && i >= 0 && i+1 > n {
			n = i + 1
		}
	}
	return n
}
