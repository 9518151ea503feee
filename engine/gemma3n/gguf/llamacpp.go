package gguf

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"

	"verdict/engine/gemma3n"
	"verdict/engine/weights"
	"verdict/engine/weights/ggufwrite"
)

// LlamaCppOptions choose what LlamaCpp writes.
type LlamaCppOptions struct {
	Type  string // a ggufwrite.FileTypes key
	Name  string // general.name
	Vocab ggufwrite.Vocab
}

// hfOrder lists a Gemma 3n text decoder's tensors by Hugging Face name
// (without prefix), sorted as the converter meets them in a checkpoint
// written in name order.
func hfOrder(cfg gemma3n.Config) []string {
	names := []string{"embed_tokens.weight", "embed_tokens_per_layer.weight", "per_layer_model_projection.weight",
		"per_layer_projection_norm.weight", "norm.weight", "altup_projections.2.weight", "altup_unembed_projections.2.weight"}
	for i := 0; i < cfg.NumLayers; i++ {
		for _, p := range blockNames {
			names = append(names, fmt.Sprintf("layers.%d.%s", i, p[0]))
		}
	}
	slices.Sort(names)
	return names
}

// ggufName maps a Hugging Face name (without prefix) to the converter's.
func ggufName(hf string) string {
	if g, ok := globalNames[hf]; ok {
		return g
	}
	switch hf {
	case "altup_projections.2.weight":
		return "altup_proj.weight"
	case "altup_unembed_projections.2.weight":
		return "altup_unembd_proj.weight"
	}
	var i int
	var rest string
	if n, _ := fmt.Sscanf(hf, "layers.%d.", &i); n == 1 {
		rest = strings.TrimPrefix(hf, fmt.Sprintf("layers.%d.", i))
		for _, p := range blockNames {
			if p[0] == rest {
				return fmt.Sprintf("blk.%d.%s", i, p[1])
			}
		}
	}
	return ""
}

// tensorType is the type llama.cpp's tools give a tensor of that GGUF name
// and dims (ggml order) in a file of type ft.
func tensorType(ft, name string, dims []int) weights.GGMLType {
	// convert_hf_to_gguf.py: 1-D tensors, norms and AltUp's coefficient
	// matrices stay F32; the rest take the --outtype (F16 for the file a
	// quantisation starts from), Q8_0 falling back to F16 on rows that are
	// not whole blocks.
	if len(dims) <= 1 || strings.HasSuffix(name, "_norm.weight") ||
		strings.HasSuffix(name, "altup_correct_coef.weight") || strings.HasSuffix(name, "altup_predict_coef.weight") {
		return weights.GGMLF32
	}
	base := map[string]weights.GGMLType{"f32": weights.GGMLF32, "bf16": weights.GGMLBF16, "q8_0": weights.GGMLQ8_0}[ft]
	if ft == "f16" || ft == "q4_0" || ft == "q4_k" {
		base = weights.GGMLF16
	}
	if base == weights.GGMLQ8_0 && dims[0]%32 != 0 {
		base = weights.GGMLF16
	}
	if ft != "q4_0" && ft != "q4_k" {
		return base
	}
	// llama-quantize: AltUp, Laurel and the per-layer model projection are
	// not quantised; the token embeddings (tied to the output) take Q6_K.
	if strings.Contains(name, "altup") || strings.Contains(name, "laurel") || strings.Contains(name, "per_layer_model_proj") {
		return base
	}
	want, block := weights.GGMLQ4_0, 32
	if ft == "q4_k" {
		want, block = weights.GGMLQ4_K, 256
	}
	if name == "token_embd.weight" || name == "per_layer_token_embd.weight" {
		want, block = weights.GGMLQ6_K, 256
	}
	switch {
	case dims[0]%block == 0:
		return want
	case dims[0]%32 == 0:
		return weights.GGMLQ8_0
	}
	return weights.GGMLF16
}

// LlamaCpp lays out the text decoder of store (Hugging Face names under
// prefix, config.json cfgJSON) as llama.cpp's converter, and for Q4_0 and
// Q4_K llama-quantize, write a gemma3n GGUF: the metadata in their order
// and the tensors in the converter's, each read from store a chunk of rows
// at a time (the per-layer embedding table padded with zero rows to the
// vocabulary, AltUp's three projections stacked). Pass the result to
// WriteStream.
func LlamaCpp(store weights.Store, prefix string, cfgJSON []byte, opt LlamaCppOptions) ([]ggufwrite.KV, []ggufwrite.Source, error) {
	ftype, ok := ggufwrite.FileTypes[opt.Type]
	if !ok {
		return nil, nil, fmt.Errorf("ggufwrite: file type %q: want one of f32, f16, bf16, q8_0, q4_0, q4_k", opt.Type)
	}
	cfg, _, err := gemma3n.ParseConfig(cfgJSON)
	if err != nil {
		return nil, nil, err
	}
	V := cfg.VocabSize
	if len(opt.Vocab.Tokens) != V || len(opt.Vocab.Scores) != V || len(opt.Vocab.Types) != V {
		return nil, nil, fmt.Errorf("ggufwrite: the vocabulary has %d tokens, %d scores and %d types; the model's is %d", len(opt.Vocab.Tokens), len(opt.Vocab.Scores), len(opt.Vocab.Types), V)
	}
	seen := make(map[string]int, V)
	for id, t := range opt.Vocab.Tokens {
		if other, dup := seen[t]; dup {
			return nil, nil, fmt.Errorf("ggufwrite: tokens %d and %d are both %q (llama.cpp needs distinct texts)", other, id, t)
		}
		seen[t] = id
	}

	var ts []ggufwrite.Source
	var params int64
	for _, hf := range hfOrder(cfg) {
		name := ggufName(hf)
		src, shape, err := rowSource(store, prefix, hf, cfg)
		if err != nil {
			if kv := strings.Contains(hf, "self_attn.k_") || strings.Contains(hf, "self_attn.v_"); kv && err == errAbsent {
				continue // a shared layer's unused k and v may be left out
			}
			return nil, nil, err
		}
		dims := slices.Clone(shape)
		slices.Reverse(dims)
		n := int64(1)
		for _, d := range dims {
			n *= int64(d)
		}
		params += n
		ts = append(ts, ggufwrite.Source{Name: name, Dims: dims, Type: tensorType(opt.Type, name, dims), Rows: src})
	}

	ff := make([]int32, cfg.NumLayers)
	for i, n := range cfg.IntermediateSize {
		ff[i] = int32(n)
	}
	var ffKV any = ff
	if !ffPerLayer(cfgJSON) && len(ff) > 0 {
		ffKV = uint32(ff[0])
	}
	pattern := make([]bool, cfg.NumLayers)
	for i, t := range cfg.LayerTypes {
		pattern[i] = t == "sliding_attention"
	}
	sparsity := make([]float32, cfg.NumLayers)
	for i := range sparsity {
		p := 0.0
		if i < len(cfg.ActivationSparsity) {
			p = cfg.ActivationSparsity[i]
		}
		// torch.distributions.Normal(0, 1).icdf(p) in float32,
		// erfinv(2p−1)·√2 (−∞ for 0)
		p32 := float32(p)
		sparsity[i] = float32(math.Erfinv(float64(2*p32-1))) * float32(math.Sqrt2)
	}
	eos := 1
	if len(cfg.EOS) > 0 {
		eos = cfg.EOS[0]
	}
	quantized := opt.Type == "q4_0" || opt.Type == "q4_k"
	kvs := []ggufwrite.KV{
		{Key: "general.architecture", Value: "gemma3n"},
		{Key: "general.type", Value: "model"},
		{Key: "general.name", Value: opt.Name},
		{Key: "general.size_label", Value: ggufwrite.SizeLabel(params)},
		{Key: "gemma3n.block_count", Value: uint32(cfg.NumLayers)},
		{Key: "gemma3n.context_length", Value: uint32(cfg.MaxPositionEmbeddings)},
		{Key: "gemma3n.embedding_length", Value: uint32(cfg.HiddenSize)},
		{Key: "gemma3n.feed_forward_length", Value: ffKV},
		{Key: "gemma3n.attention.head_count", Value: uint32(cfg.NumHeads)},
		{Key: "gemma3n.attention.head_count_kv", Value: uint32(cfg.NumKVHeads)},
		{Key: "gemma3n.rope.freq_base", Value: float32(cfg.RopeTheta["full_attention"])},
		{Key: "gemma3n.rope.freq_base_swa", Value: float32(cfg.RopeTheta["sliding_attention"])},
		{Key: "gemma3n.attention.layer_norm_rms_epsilon", Value: float32(cfg.RMSNormEps)},
		{Key: "gemma3n.attention.key_length", Value: uint32(cfg.HeadDim)},
		{Key: "gemma3n.attention.value_length", Value: uint32(cfg.HeadDim)},
	}
	if !quantized {
		kvs = append(kvs, ggufwrite.KV{Key: "general.file_type", Value: ftype})
	}
	kvs = append(kvs,
		ggufwrite.KV{Key: "gemma3n.final_logit_softcapping", Value: float32(cfg.FinalLogitSoftcap)},
		ggufwrite.KV{Key: "gemma3n.attention.sliding_window", Value: uint32(cfg.SlidingWindow)},
		ggufwrite.KV{Key: "gemma3n.altup.active_idx", Value: uint32(cfg.AltUpActiveIdx)},
		ggufwrite.KV{Key: "gemma3n.altup.num_inputs", Value: uint32(cfg.AltUpNumInputs)},
		ggufwrite.KV{Key: "gemma3n.embedding_length_per_layer_input", Value: uint32(cfg.PerLayerSize)},
		ggufwrite.KV{Key: "gemma3n.attention.shared_kv_layers", Value: uint32(cfg.NumKVSharedLayers)},
		ggufwrite.KV{Key: "gemma3n.activation_sparsity_scale", Value: sparsity},
		ggufwrite.KV{Key: "gemma3n.attention.sliding_window_pattern", Value: pattern},
	)
	if !quantized {
		kvs = append(kvs, ggufwrite.KV{Key: "general.quantization_version", Value: uint32(2)})
	}
	kvs = append(kvs,
		ggufwrite.KV{Key: "tokenizer.ggml.model", Value: "llama"},
		ggufwrite.KV{Key: "tokenizer.ggml.pre", Value: "default"},
		ggufwrite.KV{Key: "tokenizer.ggml.tokens", Value: opt.Vocab.Tokens},
		ggufwrite.KV{Key: "tokenizer.ggml.scores", Value: opt.Vocab.Scores},
		ggufwrite.KV{Key: "tokenizer.ggml.token_type", Value: opt.Vocab.Types},
		ggufwrite.KV{Key: "tokenizer.ggml.bos_token_id", Value: uint32(cfg.BOS)},
		ggufwrite.KV{Key: "tokenizer.ggml.eos_token_id", Value: uint32(eos)},
	)
	if opt.Vocab.UNK >= 0 {
		kvs = append(kvs, ggufwrite.KV{Key: "tokenizer.ggml.unknown_token_id", Value: uint32(opt.Vocab.UNK)})
	}
	kvs = append(kvs, ggufwrite.KV{Key: "tokenizer.ggml.padding_token_id", Value: uint32(cfg.PAD)})
	if opt.Vocab.AddBOS != nil {
		kvs = append(kvs, ggufwrite.KV{Key: "tokenizer.ggml.add_bos_token", Value: *opt.Vocab.AddBOS})
	}
	if opt.Vocab.AddEOS != nil {
		kvs = append(kvs, ggufwrite.KV{Key: "tokenizer.ggml.add_eos_token", Value: *opt.Vocab.AddEOS})
	}
	kvs = append(kvs, ggufwrite.KV{Key: "tokenizer.ggml.add_space_prefix", Value: false})
	if quantized { // llama-quantize writes these two last
		kvs = append(kvs, ggufwrite.KV{Key: "general.quantization_version", Value: uint32(2)}, ggufwrite.KV{Key: "general.file_type", Value: ftype})
	}
	return kvs, ts, nil
}

// ffPerLayer reports whether config.json gives intermediate_size per
// layer (the converter then writes an array).
func ffPerLayer(cfgJSON []byte) bool {
	var c struct {
		Text *struct {
			I json.RawMessage `json:"intermediate_size"`
		} `json:"text_config"`
		I json.RawMessage `json:"intermediate_size"`
	}
	if json.Unmarshal(cfgJSON, &c) != nil {
		return true
	}
	raw := c.I
	if c.Text != nil {
		raw = c.Text.I
	}
	return strings.HasPrefix(strings.TrimSpace(string(raw)), "[")
}

var errAbsent = fmt.Errorf("ggufwrite: tensor absent")

// rowSource gives a tensor's rows from store, and its shape (outermost
// first) as the converter writes it: the per-layer embedding table padded
// with zero rows to the vocabulary, AltUp's three projections (asked for by
// their last, .2.) stacked.
func rowSource(store weights.Store, prefix, hf string, cfg gemma3n.Config) (func(int, []float32) error, []int, error) {
	info := func(n string) ([]int, error) {
		shape, _, ok := store.Info(prefix + n)
		if !ok {
			return nil, errAbsent
		}
		return shape, nil
	}
	if base, ok := strings.CutSuffix(hf, ".2.weight"); ok && strings.HasPrefix(hf, "altup_") {
		var shapes [3][]int
		for i := range 3 {
			s, err := info(fmt.Sprintf("%s.%d.weight", base, i))
			if err != nil {
				return nil, nil, fmt.Errorf("ggufwrite: missing %s%s.%d.weight", prefix, base, i)
			}
			if len(s) != 2 || (i > 0 && !slices.Equal(s, shapes[0])) {
				return nil, nil, fmt.Errorf("ggufwrite: %s%s.%d.weight has shape %v", prefix, base, i, s)
			}
			shapes[i] = s
		}
		rows := shapes[0][0]
		return func(r0 int, dst []float32) error {
			cols := shapes[0][1]
			for len(dst) > 0 {
				m, r := r0/rows, r0%rows
				n := min(len(dst)/cols, rows-r)
				if err := store.Rows(fmt.Sprintf("%s%s.%d.weight", prefix, base, m), r, dst[:n*cols]); err != nil {
					return err
				}
				dst, r0 = dst[n*cols:], r0+n
			}
			return nil
		}, []int{3, shapes[0][0], shapes[0][1]}, nil
	}
	shape, err := info(hf)
	if err != nil {
		return nil, nil, err
	}
	name := prefix + hf
	if len(shape) == 1 {
		return func(r0 int, dst []float32) error {
			x, err := store.Float32(name)
			if err != nil {
				return err
			}
			if r0 != 0 || len(dst) != len(x) {
				return fmt.Errorf("ggufwrite: %s: %d values asked of %d", name, len(dst), len(x))
			}
			copy(dst, x)
			return nil
		}, shape, nil
	}
	if len(shape) != 2 {
		return nil, nil, fmt.Errorf("ggufwrite: %s has shape %v (want 1 or 2 dimensions)", name, shape)
	}
	rows, cols := shape[0], shape[1]
	out := slices.Clone(shape)
	if hf == "embed_tokens_per_layer.weight" && rows < cfg.VocabSize {
		out[0] = cfg.VocabSize
	}
	return func(r0 int, dst []float32) error {
		n := len(dst) / cols
		have := max(0, min(n, rows-r0))
		if have > 0 {
			if err := store.Rows(name, r0, dst[:have*cols]); err != nil {
				return err
			}
		}
		clear(dst[have*cols:]) // the zero rows past the table
		return nil
	}, out, nil
}

// LlamaCppDifferences lists where a model departs from what llama.cpp's
// gemma3n code fixes rather than reads (src/models/gemma3n.cpp and
// llama-hparams.h at b85833e9): Laurel rank 64, per-layer input 256, four
// AltUp inputs with the first active, a full-attention layer every fifth
// (the sliding pattern in the file is not read), KV shared from layer 20
// on, and activation sparsity 0.95 on exactly the first 10 layers. Empty
// means llama.cpp runs the model as written (E2B and E4B do).
func LlamaCppDifferences(cfg gemma3n.Config) []string {
	var d []string
	if cfg.LaurelRank != 64 {
		d = append(d, fmt.Sprintf("Laurel rank %d (llama.cpp's is 64: it refuses the file)", cfg.LaurelRank))
	}
	if cfg.PerLayerSize != 256 {
		d = append(d, fmt.Sprintf("per-layer input %d (llama.cpp's is 256: it refuses the file)", cfg.PerLayerSize))
	}
	if cfg.AltUpNumInputs != 4 || cfg.AltUpActiveIdx != 0 {
		d = append(d, fmt.Sprintf("AltUp inputs %d, active %d (llama.cpp's are 4 and 0)", cfg.AltUpNumInputs, cfg.AltUpActiveIdx))
	}
	for i, t := range cfg.LayerTypes {
		if want := map[bool]string{true: "sliding_attention", false: "full_attention"}[i%5 < 4]; t != want {
			d = append(d, fmt.Sprintf("layer %d is %s (llama.cpp makes every fifth layer full attention, the others sliding)", i, t))
			break
		}
	}
	first := cfg.NumLayers - cfg.NumKVSharedLayers
	if cfg.NumKVSharedLayers == 0 {
		first = cfg.NumLayers
	}
	if first != 20 && !(first == cfg.NumLayers && cfg.NumLayers <= 20) {
		d = append(d, fmt.Sprintf("KV shared from layer %d (llama.cpp shares it from layer 20 on)", first))
	}
	for i := range cfg.NumLayers {
		p := 0.0
		if i < len(cfg.ActivationSparsity) {
			p = cfg.ActivationSparsity[i]
		}
		if want := map[bool]float64{true: 0.95, false: 0}[i < 10]; p != want {
			d = append(d, fmt.Sprintf("layer %d has activation sparsity %g (llama.cpp applies 0.95 to layers 0-9 and none after)", i, p))
			break
		}
	}
	return d
}
