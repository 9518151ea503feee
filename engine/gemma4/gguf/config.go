package gguf

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	"verdict/engine/gemma4"
	"verdict/engine/weights"
)

// Arch is the general.architecture of the files this package reads.
const Arch = "gemma4"

// meta reads a GGUF's gemma4.* metadata; every error names the key.
type meta struct{ g *weights.GGUF }

func (m meta) key(k string) string { return Arch + "." + k }

// int reads a required integer scalar in [lo, hi].
func (m meta) int(k string, lo, hi int) (int, error) {
	key := m.key(k)
	v, ok := m.g.KV[key]
	if !ok {
		return 0, fmt.Errorf("missing metadata %s", key)
	}
	return intValue(key, v, lo, hi)
}

// optInt reads an optional integer scalar in [lo, hi] (def when absent).
func (m meta) optInt(k string, def, lo, hi int) (int, error) {
	if _, ok := m.g.KV[m.key(k)]; !ok {
		return def, nil
	}
	return m.int(k, lo, hi)
}

func intValue(key string, v weights.GGUFValue, lo, hi int) (int, error) {
	i, ok := v.Int()
	if !ok {
		return 0, fmt.Errorf("metadata %s is a %s, want an integer", key, typeName(v))
	}
	if i < int64(lo) || i > int64(hi) {
		return 0, fmt.Errorf("metadata %s is %d, outside %d to %d", key, i, lo, hi)
	}
	return int(i), nil
}

// perLayer reads an integer that is a scalar (every layer) or an array of
// one value a layer, each in [lo, hi].
func (m meta) perLayer(k string, layers, lo, hi int) ([]int, error) {
	key := m.key(k)
	v, ok := m.g.KV[key]
	if !ok {
		return nil, fmt.Errorf("missing metadata %s", key)
	}
	out := make([]int, layers)
	if v.Type != weights.GGUFArray {
		x, err := intValue(key, v, lo, hi)
		if err != nil {
			return nil, err
		}
		for i := range out {
			out[i] = x
		}
		return out, nil
	}
	if v.Len() != layers {
		return nil, fmt.Errorf("metadata %s has %d values, want one per layer (%d)", key, v.Len(), layers)
	}
	xs, ok := v.Ints()
	if !ok {
		return nil, fmt.Errorf("metadata %s is an array of %s, want integers", key, v.Elem)
	}
	for i, x := range xs {
		if x < int64(lo) || x > int64(hi) {
			return nil, fmt.Errorf("metadata %s[%d] is %d, outside %d to %d", key, i, x, lo, hi)
		}
		out[i] = int(x)
	}
	return out, nil
}

// float reads a float scalar in [lo, hi] (required unless def is not NaN).
func (m meta) float(k string, def, lo, hi float64) (float64, error) {
	key := m.key(k)
	v, ok := m.g.KV[key]
	if !ok {
		if math.IsNaN(def) {
			return 0, fmt.Errorf("missing metadata %s", key)
		}
		return def, nil
	}
	x, ok := v.Float()
	if !ok || v.Type == weights.GGUFArray {
		return 0, fmt.Errorf("metadata %s is a %s, want a number", key, typeName(v))
	}
	if !(x >= lo && x <= hi) {
		return 0, fmt.Errorf("metadata %s is %v, outside %v to %v", key, x, lo, hi)
	}
	return float32Decimal(x), nil
}

func typeName(v weights.GGUFValue) string {
	if v.Type == weights.GGUFArray {
		return "array of " + v.Elem.String()
	}
	return v.Type.String()
}

// float32Decimal is the shortest decimal that rounds to the same float32 as
// x: GGUF stores float32 metadata (1e-6 is 9.99999997e-07), a Hugging Face
// config the decimal it came from.
func float32Decimal(x float64) float64 {
	d, _ := strconv.ParseFloat(strconv.FormatFloat(float64(float32(x)), 'g', -1, 32), 64)
	return d
}

// shape returns a tensor's shape (PyTorch order), ok false when absent.
func shape(g *weights.GGUF, name string) ([]int, bool) {
	t, ok := g.Tensor(name)
	if !ok {
		return nil, false
	}
	return t.Shape(), true
}

// ConfigJSON rebuilds the Hugging Face config.json (model_type gemma4_text)
// of a gemma4 GGUF from its metadata and the presence and rows of a few
// tensors, inverting what convert_hf_to_gguf.py writes (docs/gemma4.md,
// "GGUF"). Every key is checked (type, range, one value a layer where an
// array); what the metadata cannot say in a Hugging Face config (a layer
// type's head counts differing without attention_k_eq_v, partial rotation
// on sliding layers, RoPE scaling) is refused. The result is checked once
// more by gemma4.ParseConfig.
func ConfigJSON(g *weights.GGUF) ([]byte, error) {
	if a := g.Arch(); a != Arch {
		if a == "" {
			return nil, fmt.Errorf("no general.architecture: not a llama.cpp model file")
		}
		return nil, fmt.Errorf("general.architecture is %q, not %q", a, Arch)
	}
	m := meta{g}
	L, err := m.int("block_count", 1, gemma4.MaxLayers)
	if err != nil {
		return nil, err
	}
	cfg := map[string]any{
		"model_type":          "gemma4_text",
		"architectures":       []string{"Gemma4ForCausalLM"},
		"num_hidden_layers":   L,
		"hidden_activation":   "gelu_pytorch_tanh",
		"tie_word_embeddings": true,
		"attention_bias":      false,
	}
	ints := []struct {
		key, field string
		lo, hi     int
	}{
		{"embedding_length", "hidden_size", 1, gemma4.MaxHidden},
		{"context_length", "max_position_embeddings", 1, math.MaxInt32},
		{"attention.sliding_window", "sliding_window", 1, gemma4.MaxWindow},
		{"attention.key_length", "global_head_dim", 2, gemma4.MaxHeadDim},
		{"attention.key_length_swa", "head_dim", 2, gemma4.MaxHeadDim},
		{"embedding_length_per_layer_input", "hidden_size_per_layer_input", 0, gemma4.MaxHidden},
	}
	for _, f := range ints {
		v, err := m.int(f.key, f.lo, f.hi)
		if err != nil {
			return nil, err
		}
		cfg[f.field] = v
	}
	D := cfg["hidden_size"].(int)
	dFull, dSWA := cfg["global_head_dim"].(int), cfg["head_dim"].(int)
	for _, p := range [][2]string{{"attention.value_length", "attention.key_length"}, {"attention.value_length_swa", "attention.key_length_swa"}} {
		want := dFull
		if p[1] == "attention.key_length_swa" {
			want = dSWA
		}
		if v, err := m.optInt(p[0], want, 1, gemma4.MaxHeadDim); err != nil {
			return nil, err
		} else if v != want {
			return nil, fmt.Errorf("metadata %s is %d, %s is %d: Gemma 4 has values as wide as keys", m.key(p[0]), v, m.key(p[1]), want)
		}
	}
	for _, p := range [][2]string{{"rope.dimension_count", "attention.key_length"}, {"rope.dimension_count_swa", "attention.key_length_swa"}} {
		want := dFull
		if p[1] == "attention.key_length_swa" {
			want = dSWA
		}
		if v, err := m.optInt(p[0], want, 1, gemma4.MaxHeadDim); err != nil {
			return nil, err
		} else if v != want {
			return nil, fmt.Errorf("metadata %s is %d, not %s (%d): partial rotation is read from %s on full layers only", m.key(p[0]), v, m.key(p[1]), want, RopeFreqs)
		}
	}
	if eps, err := m.float("attention.layer_norm_rms_epsilon", math.NaN(), 1e-12, 1); err != nil {
		return nil, err
	} else {
		cfg["rms_norm_eps"] = eps
	}
	if c, err := m.float("final_logit_softcapping", 0, 0, 1e6); err != nil {
		return nil, err
	} else if c > 0 {
		cfg["final_logit_softcapping"] = c
	}

	// Layer types: the sliding-window pattern, one bool a layer.
	pat, ok := g.KV[m.key("attention.sliding_window_pattern")]
	if !ok {
		return nil, fmt.Errorf("missing metadata %s", m.key("attention.sliding_window_pattern"))
	}
	if pat.Type != weights.GGUFArray || pat.Elem != weights.GGUFBool || pat.Len() != L {
		return nil, fmt.Errorf("metadata %s is a %s of %d, want an array of one bool a layer (%d)", m.key("attention.sliding_window_pattern"), typeName(pat), pat.Len(), L)
	}
	swaInts, _ := pat.Ints()
	swa := make([]bool, L)
	types := make([]string, L)
	for i, x := range swaInts {
		swa[i] = x != 0
		types[i] = "full_attention"
		if swa[i] {
			types[i] = "sliding_attention"
		}
	}
	cfg["layer_types"] = types
	shared, err := m.optInt("attention.shared_kv_layers", 0, 0, L-1)
	if err != nil {
		return nil, err
	}
	cfg["num_kv_shared_layers"] = shared
	first := L - shared

	// Heads: one count for every layer; KV heads per layer type.
	heads, err := m.perLayer("attention.head_count", L, 1, gemma4.MaxHeads)
	if err != nil {
		return nil, err
	}
	for i, h := range heads {
		if h != heads[0] {
			return nil, fmt.Errorf("metadata %s: layer %d has %d heads, layer 0 %d (Gemma 4 has one count)", m.key("attention.head_count"), i, h, heads[0])
		}
	}
	cfg["num_attention_heads"] = heads[0]
	kvHeads, err := m.perLayer("attention.head_count_kv", L, 1, gemma4.MaxHeads)
	if err != nil {
		return nil, err
	}
	kvOf := [2]int{-1, -1} // sliding, full
	for i, n := range kvHeads {
		t := 1
		if swa[i] {
			t = 0
		}
		if kvOf[t] >= 0 && kvOf[t] != n {
			return nil, fmt.Errorf("metadata %s: layer %d has %d KV heads, another %s layer %d", m.key("attention.head_count_kv"), i, n, types[i], kvOf[t])
		}
		kvOf[t] = n
	}
	if kvOf[0] < 0 {
		kvOf[0] = kvOf[1]
	}
	cfg["num_key_value_heads"] = kvOf[0]

	// V = K on full layers: their v projection is left out.
	kEqV, decided := false, false
	for i := 0; i < first; i++ {
		_, hasV := g.Tensor(fmt.Sprintf("blk.%d.attn_v.weight", i))
		if swa[i] {
			if !hasV {
				return nil, fmt.Errorf("missing tensor blk.%d.attn_v.weight (a sliding layer with keys of its own)", i)
			}
			continue
		}
		if decided && kEqV == hasV {
			return nil, fmt.Errorf("tensor blk.%d.attn_v.weight is %s, unlike an earlier full layer's (attention_k_eq_v is one setting)", i, map[bool]string{true: "present", false: "absent"}[hasV])
		}
		kEqV, decided = !hasV, true
	}
	cfg["attention_k_eq_v"] = kEqV
	if kvOf[1] >= 0 && kvOf[1] != kvOf[0] {
		if !kEqV {
			return nil, fmt.Errorf("metadata %s: full layers have %d KV heads, sliding ones %d, and the full layers have their own attn_v (a Hugging Face config gives full layers their own count only with attention_k_eq_v)", m.key("attention.head_count_kv"), kvOf[1], kvOf[0])
		}
	}
	if kEqV {
		cfg["num_global_key_value_heads"] = kvOf[1]
	}

	// The MLP: one width, or per layer with the KV-shared layers' doubled.
	ff, err := m.perLayer("feed_forward_length", L, 1, gemma4.MaxFFN)
	if err != nil {
		return nil, err
	}
	double := shared > 0 && ff[L-1] == 2*ff[0]
	for i, n := range ff {
		want := ff[0]
		if double && i >= first {
			want = 2 * ff[0]
		}
		if n != want {
			return nil, fmt.Errorf("metadata %s: layer %d is %d wide, want %d (one width, doubled on the KV-shared layers when use_double_wide_mlp)", m.key("feed_forward_length"), i, n, want)
		}
	}
	cfg["intermediate_size"] = ff[0]
	cfg["use_double_wide_mlp"] = double

	// RoPE: the theta of each layer type; the full layers' partial
	// rotation from rope_freqs; no scaling.
	theta, err := m.float("rope.freq_base", math.NaN(), 1, 1e12)
	if err != nil {
		return nil, err
	}
	thetaSWA, err := m.float("rope.freq_base_swa", theta, 1, 1e12) // llama.cpp: the full layers' when absent
	if err != nil {
		return nil, err
	}
	if v, ok := g.KV[m.key("rope.scaling.type")]; ok {
		if s, _ := v.Str(); s != "none" {
			return nil, fmt.Errorf("metadata %s is %q: RoPE scaling is not part of Gemma 4", m.key("rope.scaling.type"), s)
		}
	}
	if f, err := m.float("rope.scaling.factor", 1, 0, 1e6); err != nil {
		return nil, err
	} else if f != 1 && f != 0 {
		return nil, fmt.Errorf("metadata %s is %v: RoPE scaling is not part of Gemma 4", m.key("rope.scaling.factor"), f)
	}
	factor, err := partialRotary(g, dFull)
	if err != nil {
		return nil, err
	}
	cfg["rope_parameters"] = map[string]any{
		"full_attention":    map[string]any{"rope_type": "proportional", "rope_theta": theta, "partial_rotary_factor": factor},
		"sliding_attention": map[string]any{"rope_type": "default", "rope_theta": thetaSWA},
	}

	// The vocabularies: the rows of the embedding tables.
	emb, ok := shape(g, "token_embd.weight")
	if !ok {
		return nil, fmt.Errorf("missing tensor token_embd.weight")
	}
	if len(emb) != 2 || emb[1] != D {
		return nil, fmt.Errorf("tensor token_embd.weight has shape %v, want [vocab, %d] (%s)", emb, D, m.key("embedding_length"))
	}
	if emb[0] < 1 || emb[0] > gemma4.MaxVocab {
		return nil, fmt.Errorf("tensor token_embd.weight has %d rows, outside 1 to %d", emb[0], gemma4.MaxVocab)
	}
	V := emb[0]
	cfg["vocab_size"] = V
	if v, ok := g.KV["tokenizer.ggml.tokens"]; ok && v.Len() != V {
		return nil, fmt.Errorf("metadata tokenizer.ggml.tokens has %d tokens, token_embd.weight %d rows", v.Len(), V)
	}
	cfg["vocab_size_per_layer_input"] = V
	// A GGUF does not say whether images attend both ways within their
	// block (use_bidirectional_attention "vision": the 26B-A4B and 31B,
	// which have no per-layer inputs; null for the E2B and E4B, which
	// have): the rebuilt config infers it from the per-layer inputs, as
	// gemma4.TemplateOf infers the chat template. llama.cpp decodes every
	// Gemma 4 image non-causally.
	if cfg["hidden_size_per_layer_input"].(int) == 0 {
		cfg["use_bidirectional_attention"] = "vision"
	}
	if P := cfg["hidden_size_per_layer_input"].(int); P > 0 {
		pl, ok := shape(g, "per_layer_token_embd.weight")
		if !ok {
			return nil, fmt.Errorf("missing tensor per_layer_token_embd.weight (%s is %d)", m.key("embedding_length_per_layer_input"), P)
		}
		if len(pl) != 2 || pl[0] < 1 || pl[0] > gemma4.MaxVocab {
			return nil, fmt.Errorf("tensor per_layer_token_embd.weight has shape %v, want [rows, %d]", pl, L*P)
		}
		cfg["vocab_size_per_layer_input"] = pl[0]
	}
	for _, t := range []struct {
		key string
		def int
	}{{"bos", 2}, {"eos", 1}, {"padding", 0}} {
		key := "tokenizer.ggml." + t.key + "_token_id"
		id := t.def
		if v, ok := g.KV[key]; ok {
			if id, err = intValue(key, v, 0, V-1); err != nil {
				return nil, err
			}
		}
		cfg[map[string]string{"bos": "bos_token_id", "eos": "eos_token_id", "padding": "pad_token_id"}[t.key]] = id
	}

	// The mixture of experts: in every layer or none.
	moe := 0
	for i := 0; i < L; i++ {
		if _, ok := g.Tensor(fmt.Sprintf("blk.%d.ffn_gate_inp.weight", i)); ok {
			moe++
		}
	}
	switch {
	case moe == L:
		E, err := m.int("expert_count", 1, gemma4.MaxExperts)
		if err != nil {
			return nil, err
		}
		K, err := m.int("expert_used_count", 1, E)
		if err != nil {
			return nil, err
		}
		Ie, err := m.int("expert_feed_forward_length", 1, gemma4.MaxFFN)
		if err != nil {
			return nil, err
		}
		cfg["enable_moe_block"], cfg["num_experts"], cfg["top_k_experts"], cfg["moe_intermediate_size"] = true, E, K, Ie
	case moe == 0:
		if v, ok := g.KV[m.key("expert_count")]; ok {
			if n, _ := v.Int(); n != 0 {
				return nil, fmt.Errorf("metadata %s is %s but no block has ffn_gate_inp.weight", m.key("expert_count"), strconv.FormatInt(n, 10))
			}
		}
		cfg["enable_moe_block"] = false
	default:
		return nil, fmt.Errorf("%d of %d blocks have ffn_gate_inp.weight: Gemma 4 has experts in every layer or none", moe, L)
	}
	js, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	if _, err := gemma4.ParseConfig(js); err != nil {
		return nil, fmt.Errorf("the config rebuilt from the metadata: %w", err)
	}
	return js, nil
}

// partialRotary reads rope_freqs.weight, the converter's frequency factors
// for the full layers (d/2 of them: 1 for each rotated pair, then 1e30 for
// each pair left unrotated), as Hugging Face's partial_rotary_factor.
func partialRotary(g *weights.GGUF, d int) (float64, error) {
	t, ok := g.Tensor(RopeFreqs)
	if !ok {
		return 0, fmt.Errorf("missing tensor %s (the full layers' RoPE frequency factors)", RopeFreqs)
	}
	if len(t.Dims) != 1 || t.Dims[0] != d/2 {
		return 0, fmt.Errorf("tensor %s has dimensions %v, want [%d] (half of %s)", RopeFreqs, t.Dims, d/2, Arch+".attention.key_length")
	}
	f := make([]float32, d/2)
	if err := weights.DequantizeGGML(t.Type, f, t.Data()); err != nil {
		return 0, fmt.Errorf("tensor %s: %w", RopeFreqs, err)
	}
	n := 0
	for n < len(f) && f[n] == 1 {
		n++
	}
	for i := n; i < len(f); i++ {
		if !(f[i] >= 1e20) { // 1e30, or +Inf where a 16-bit type holds it
			return 0, fmt.Errorf("tensor %s[%d] is %v: want 1 (rotated) for the first pairs, then 1e30 (not rotated)", RopeFreqs, i, f[i])
		}
	}
	// floor(factor·d/2) must give n back (gemma4's rope table).
	factor := float64(2*n) / float64(d)
	for math.Floor(factor*float64(d)/2) < float64(n) {
		factor = math.Nextafter(factor, 2)
	}
	return factor, nil
}
