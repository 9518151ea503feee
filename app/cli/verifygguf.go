package cli

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"verdict/engine/gemma3n"
	"verdict/engine/models"
	"verdict/engine/session"
	"verdict/engine/weights"
)

// verify-gguf checks GGUF files against the checkpoint they were made from
// (the logits of one token sequence, both read as float32), and writes the
// text decoder of a model folder as the safetensors checkpoint llama.cpp's
// converter takes (build/gguf-check.sh runs both).
func verifyGGUFCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("verify-gguf", stderr)
	ref := fs.String("ref", "", "the Hugging Face checkpoint folder the GGUF files were converted from")
	write := fs.String("write-checkpoint", "", "write the text decoder of the -from folder here as model.safetensors and config.json, and stop")
	from := fs.String("from", "", "with -write-checkpoint or -write-gguf: a model folder (checkpoint or synthetic recipe), synthetic-deep (llama.cpp's fixed gemma3n shape, small), synthetic-wide (Gemma's vocabulary, rows of 256), synthetic-small (rows of 256, vocabulary 320) or synthetic-micro (hidden size 64)")
	dtype := fs.String("dtype", "f32", "with -write-checkpoint: f32 or bf16")
	writeGG := fs.String("write-gguf", "", "write the text decoder of -from (also synthetic-e2b or synthetic-e4b) as the gemma3n GGUF file llama.cpp's converter and quantiser make, here, and stop")
	ggType := fs.String("type", "f16", "with -write-gguf: f32, f16, bf16, q8_0 (as convert_hf_to_gguf.py's --outtype), q4_0 or q4_k (as llama-quantize makes them from the F16 file)")
	tokPath := fs.String("tokenizer", "", "with -write-gguf, for a model of Gemma's vocabulary: Gemma's tokenizer.json (default: found as for any model)")
	ids := fs.String("ids", "2,105,2364,107,6190,9999,1,262143", "comma-separated token ids to run")
	tol := fs.Float64("tol", -1, "fail a file whose max |logit error| is above this (default: 0 for all-F32 files, no limit otherwise)")
	device := addDeviceFlag(fs)
	checkWeights := fs.Bool("weights", false, "also compare every tensor with the reference's: F32 bit for bit, F16 and BF16 within their rounding, a quantisation's RMS error within 1.15 times that of rounding to its levels")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: verdict verify-gguf -ref DIR [-tol X] [-weights] FILE.gguf...\n       verdict verify-gguf -write-checkpoint DIR -from MODELDIR [-dtype f32|bf16]\n       verdict verify-gguf -write-gguf FILE.gguf -from MODELDIR [-type f32|f16|bf16|q8_0|q4_0|q4_k] [-tokenizer tokenizer.json]")
		fs.PrintDefaults()
	}
	if err := parse(fs, args); err != nil {
		return err
	}
	if *writeGG != "" {
		if *from == "" || fs.NArg() != 0 || *write != "" {
			return usageErr("-write-gguf needs -from, no -write-checkpoint and no files")
		}
		return writeGGUF(*from, *writeGG, *ggType, *tokPath, stdout)
	}
	if *write != "" {
		if *from == "" || fs.NArg() != 0 {
			return usageErr("-write-checkpoint needs -from and no files")
		}
		return writeCheckpoint(*from, *write, *dtype, stdout)
	}
	if *ref == "" || fs.NArg() == 0 {
		return usageErr("want -ref DIR and at least one GGUF file")
	}
	var seq []int32
	for _, s := range strings.Split(*ids, ",") {
		v, err := strconv.ParseInt(strings.TrimSpace(s), 10, 32)
		if err != nil {
			return usageErr("-ids: %v", err)
		}
		seq = append(seq, int32(v))
	}
	be, err := openDevice(device, stderr)
	if err != nil {
		return err
	}
	open := func(spec string) (*models.Model, error) {
		return models.OpenContext(ctx, spec, models.Options{Weights: session.WeightsF32, CacheDir: "off", Backend: be})
	}
	rm, err := open(*ref)
	if err != nil {
		return err
	}
	defer rm.Close()
	want, err := logitsOf(rm, seq)
	if err != nil {
		return err
	}
	var refStore weights.Store
	if *checkWeights {
		if refStore, err = weights.Open(*ref); err != nil {
			return err
		}
		defer refStore.Close()
	}
	failed := 0
	for _, path := range fs.Args() {
		// A file that cannot be read is reported and the others checked.
		bad := func(err error) {
			fmt.Fprintf(stdout, "%-40s ERROR %v\n", filepath.Base(path), err)
			failed++
		}
		g, err := weights.OpenGGUFFile(path)
		if err != nil {
			bad(err)
			continue
		}
		types, allF32 := g.TypeCounts(), true
		for _, t := range g.Tensors {
			allF32 = allF32 && t.Type == weights.GGMLF32
		}
		g.Close()
		m, err := open(path)
		if err != nil {
			bad(err)
			continue
		}
		got, err := logitsOf(m, seq)
		vocab := m.Cfg.VocabSize
		m.Close()
		if err != nil {
			bad(err)
			continue
		}
		if len(got) != len(want) {
			bad(fmt.Errorf("%d logits, the reference has %d (vocabulary %d)", len(got), len(want), vocab))
			continue
		}
		maxErr, maxRef, top := 0.0, 0.0, 0
		V := len(want) / len(seq)
		for i := range want {
			maxErr = max(maxErr, math.Abs(float64(got[i])-float64(want[i])))
			maxRef = max(maxRef, math.Abs(float64(want[i])))
		}
		for p := range seq {
			if argmax(want[p*V:(p+1)*V]) == argmax(got[p*V:(p+1)*V]) {
				top++
			}
		}
		limit := *tol
		if limit < 0 && allF32 {
			limit = 0
		}
		status := "PASS"
		if math.IsNaN(maxErr) || limit >= 0 && maxErr > limit {
			status, failed = "FAIL", failed+1
		}
		tolStr := "none"
		if limit >= 0 {
			tolStr = strconv.FormatFloat(limit, 'g', -1, 64)
		}
		fmt.Fprintf(stdout, "%-40s max_err=%-10.4g max_ref=%-8.4g top1=%d/%d tol=%-8s %s  [%s]\n", filepath.Base(path), maxErr, maxRef, top, len(seq), tolStr, status, types)
		if refStore != nil {
			line, ok, err := compareWeights(refStore, path)
			if err != nil {
				bad(err)
				continue
			}
			status := "PASS"
			if !ok {
				status, failed = "FAIL", failed+1
			}
			fmt.Fprintf(stdout, "%-40s weights %s  %s\n", "", status, line)
		}
	}
	if failed > 0 {
		return errChecksFailed
	}
	return nil
}

// quantLevels is the spacing of a ggml type's levels for values of largest
// magnitude amax, as llama.cpp's quantisers lay them out: Q8_0 ±127 steps
// of amax/127, Q4_0 ±8 of amax/8, Q6_K ±32 of amax/32, Q4_K and Q5_K 15
// and 31 steps over a block's range (at most 2·amax). Rounding values spread
// evenly to the nearest level leaves an RMS error of step/√12.
var quantLevels = map[weights.GGMLType]float64{
	weights.GGMLQ8_0: 1.0 / 127, weights.GGMLQ4_0: 1.0 / 8, weights.GGMLQ6_K: 1.0 / 32,
	weights.GGMLQ4_K: 2.0 / 15, weights.GGMLQ5_K: 2.0 / 31,
}

// compareWeights reads every tensor of the GGUF file and the reference's
// tensor of the same name; it summarises, per type, the largest ratio of RMS
// error to the rounding bound (quantisations) or the count of exact tensors
// (F32), and reports whether all are within: F32 bit for bit, F16 and BF16
// within half a unit in the last place, quantisations within 1.15 times the
// bound. Rows past the reference's (the converter's zero padding of the
// per-layer table) must be zero.
func compareWeights(ref weights.Store, path string) (string, bool, error) {
	gs, err := weights.OpenGGUF(path)
	if err != nil {
		return "", false, err
	}
	defer gs.Close()
	worst := map[string]float64{}
	exact := map[string]int{}
	var off []string
	for _, name := range gs.Names() {
		_, dt, _ := gs.Info(name)
		if _, _, ok := ref.Info(name); !ok {
			off = append(off, name+" (not in the reference)")
			continue
		}
		x, err := ref.Float32(name)
		if err != nil {
			return "", false, err
		}
		y, err := gs.Float32(name)
		if err != nil {
			return "", false, err
		}
		if len(y) < len(x) {
			off = append(off, fmt.Sprintf("%s (%d values, the reference %d)", name, len(y), len(x)))
			continue
		}
		for _, v := range y[len(x):] {
			if v != 0 {
				off = append(off, name+" (its rows past the reference's are not zero)")
				break
			}
		}
		y = y[:len(x)]
		var se, amax float64
		elementsOK := true
		for i, w := range x {
			e := math.Abs(float64(y[i]) - float64(w))
			se += e * e
			amax = max(amax, math.Abs(float64(w)))
			switch dt {
			case "F32":
				elementsOK = elementsOK && y[i] == w
			case "F16":
				elementsOK = elementsOK && e <= math.Abs(float64(w))*0x1p-11+0x1p-25
			case "BF16":
				elementsOK = elementsOK && e <= math.Abs(float64(w))*0x1p-8
			}
		}
		if !elementsOK {
			off = append(off, fmt.Sprintf("%s (%s values off by more than its rounding)", name, dt))
			continue
		}
		var typ weights.GGMLType
		for t := range quantLevels {
			if t.String() == dt {
				typ = t
			}
		}
		step, quant := quantLevels[typ]
		if !quant {
			exact[dt]++
			continue
		}
		r := 0.0
		if amax > 0 {
			r = math.Sqrt(se/float64(len(x))) / (step * amax / math.Sqrt(12))
		}
		worst[dt] = max(worst[dt], r)
		if r > 1.15 {
			off = append(off, fmt.Sprintf("%s (%s: RMS error %.3g times the rounding bound)", name, dt, r))
		}
	}
	var parts []string
	for _, dt := range slices.Sorted(maps.Keys(worst)) {
		parts = append(parts, fmt.Sprintf("%s %.3g", dt, worst[dt]))
	}
	for _, dt := range slices.Sorted(maps.Keys(exact)) {
		how := "within rounding"
		if dt == "F32" {
			how = "exact"
		}
		parts = append(parts, fmt.Sprintf("%s ×%d %s", dt, exact[dt], how))
	}
	line := "largest RMS error / rounding bound: " + strings.Join(parts, ", ")
	if len(off) > 0 {
		line += "; off: " + strings.Join(off, "; ")
	}
	return line, len(off) == 0, nil
}

func logitsOf(m *models.Model, ids []int32) ([]float32, error) {
	h, err := m.Forward(nil, ids, nil)
	if err != nil {
		return nil, err
	}
	return m.Logits(h, len(ids))
}

func argmax(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}

// writeCheckpoint writes the text decoder of the model folder from as a
// Gemma3nForConditionalGeneration checkpoint without towers
// (model.language_model.* names, no buffers: what save_pretrained writes)
// in dir.
func writeCheckpoint(from, dir, dtype string, stdout io.Writer) error {
	if dtype != "f32" && dtype != "bf16" {
		return usageErr("-dtype %q: want f32 or bf16", dtype)
	}
	var (
		js  []byte
		st  weights.Store
		err error
	)
	if m, ok := synthModels[from]; ok {
		var recipe []byte
		js, recipe = m.files()
		st, err = weights.NewRecipeStore(recipe, nil)
	} else if js, err = os.ReadFile(filepath.Join(from, "config.json")); err == nil {
		st, err = weights.Open(from)
	}
	if err != nil {
		return err
	}
	defer st.Close()
	var top map[string]json.RawMessage
	if err := json.Unmarshal(js, &top); err != nil {
		return fmt.Errorf("%s/config.json: %w", from, err)
	}
	cfg, _, err := gemma3n.ParseConfig(js)
	if err != nil {
		return err
	}
	// Gemma3nForConditionalGeneration: the form Google publishes, which
	// every llama.cpp version with gemma3n converts.
	out := map[string]any{}
	if _, ok := top["text_config"]; ok {
		if err := json.Unmarshal(js, &out); err != nil {
			return err
		}
	} else {
		text := map[string]any{}
		if err := json.Unmarshal(js, &text); err != nil {
			return err
		}
		out["text_config"] = text
	}
	if tc, ok := out["text_config"].(map[string]any); ok {
		// transformers 4.x names too, which older converters read
		tc["rope_theta"] = cfg.RopeTheta["full_attention"]
		tc["rope_local_base_freq"] = cfg.RopeTheta["sliding_attention"]
	}
	out["model_type"] = "gemma3n"
	out["architectures"] = []string{"Gemma3nForConditionalGeneration"}
	out["torch_dtype"] = map[string]string{"f32": "float32", "bf16": "bfloat16"}[dtype]
	prefix := "model.language_model."
	if _, _, ok := st.Info(prefix + "embed_tokens.weight"); !ok {
		prefix = "model."
	}
	var names []string
	for _, n := range st.Names() {
		rest, ok := strings.CutPrefix(n, prefix)
		if !ok || strings.Contains(rest, "rotary_emb.") || strings.HasSuffix(rest, "embed_scale") ||
			strings.HasSuffix(rest, "_input_scale") || strings.HasSuffix(rest, "projection_scale") {
			continue // buffers: a checkpoint does not hold them
		}
		names = append(names, n)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	hdr := map[string]any{"__metadata__": map[string]string{"format": "pt"}}
	size := map[string]int{"f32": 4, "bf16": 2}[dtype]
	off := 0
	for _, n := range names {
		shape, _, _ := st.Info(n)
		cnt := 1
		for _, d := range shape {
			cnt *= d
		}
		hdr["model.language_model."+strings.TrimPrefix(n, prefix)] = map[string]any{"dtype": strings.ToUpper(dtype), "shape": shape, "data_offsets": []int{off, off + cnt*size}}
		off += cnt * size
	}
	hj, err := json.Marshal(hdr)
	if err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	binary.Write(w, binary.LittleEndian, uint64(len(hj)))
	w.Write(hj)
	var buf []byte
	for _, n := range names { // in the order of the offsets
		x, err := st.Float32(n)
		if err != nil {
			f.Close()
			return err
		}
		buf = buf[:0]
		for _, v := range x {
			b := math.Float32bits(v)
			if dtype == "bf16" { // round to nearest even, as PyTorch does
				buf = binary.LittleEndian.AppendUint16(buf, uint16((b+0x7fff+(b>>16&1))>>16))
			} else {
				buf = binary.LittleEndian.AppendUint32(buf, b)
			}
		}
		w.Write(buf)
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	cj, _ := json.MarshalIndent(out, "", " ")
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cj, 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s: %d tensors, %d bytes of %s\n", dir, len(names), off, dtype)
	return nil
}

// synthModel is the shape of a synthetic Gemma 3n text decoder written by
// -write-checkpoint: vocabulary (and per-layer vocabulary), hidden size,
// per-layer input size, layers, MLP width, heads, KV heads, head size,
// Laurel rank, the layer types and how many trailing layers share KV.
type synthModel struct {
	V, VP, D, P, L, I, H, KV, HD, R int
	types                           []string
	shared                          int
	sparsity                        []float64
}

// synthModels are the -from presets.
var synthModels = map[string]synthModel{
	// synthetic-deep: small, but of the shape llama.cpp's gemma3n code
	// fixes (gguf.LlamaCppDifferences): Laurel rank 64, per-layer
	// input 256, a full-attention layer every fifth, KV shared from layer
	// 20 (21 layers), sparsity on layers 0-9; a 35 MB float32 checkpoint.
	"synthetic-deep": deepModel(),
	// synthetic-wide: Gemma's vocabulary, rows of 256 in most matrices (so
	// that llama-quantize applies Q4_K and Q6_K to them, which it cannot on
	// the tiny fixture's rows of 64).
	"synthetic-wide": {V: 262400, VP: 262144, D: 256, P: 64, L: 4, I: 512, H: 2, KV: 1, HD: 128, R: 8,
		types:  []string{"sliding_attention", "sliding_attention", "sliding_attention", "full_attention"},
		shared: 1, sparsity: []float64{0.95, 0, 0, 0}},
	// synthetic-small: every quantisable matrix has rows of 256 (as in E2B,
	// so llama-quantize's k-quant mixes apply with no fallback), a small
	// vocabulary with a per-layer vocabulary below it (the converter pads
	// that table with zero rows, as for Gemma's 262,144 of 262,400), KV
	// sharing and activation sparsity: an 11 MB float32 checkpoint.
	"synthetic-small": {V: 320, VP: 256, D: 256, P: 256, L: 3, I: 256, H: 1, KV: 1, HD: 256, R: 8,
		types:  []string{"sliding_attention", "full_attention", "sliding_attention"},
		shared: 1, sparsity: []float64{0.95, 0, 0}},
	// synthetic-micro: hidden size 64 (rows of 256 only in the attention
	// output, MLP down, per-layer projection and per-layer embedding
	// matrices), two layers sharing KV: GGUF files of a few hundred kB.
	"synthetic-micro": {V: 320, VP: 256, D: 64, P: 256, L: 2, I: 256, H: 1, KV: 1, HD: 256, R: 4,
		types:  []string{"sliding_attention", "sliding_attention"},
		shared: 1, sparsity: []float64{0.95, 0}},
}

func deepModel() synthModel {
	m := synthModel{V: 320, VP: 256, D: 128, P: 256, L: 21, I: 256, H: 2, KV: 1, HD: 128, R: 64, shared: 1}
	for i := range m.L {
		m.types = append(m.types, map[bool]string{true: "full_attention", false: "sliding_attention"}[i%5 == 4])
		m.sparsity = append(m.sparsity, map[bool]float64{true: 0.95, false: 0}[i < 10])
	}
	return m
}

// config.json and recipe.json of the synthetic model m.
func (m synthModel) files() (cfgJSON, recipe []byte) {
	V, VP, D, P, L, I, H, KV, HD, R := m.V, m.VP, m.D, m.P, m.L, m.I, m.H, m.KV, m.HD, m.R
	text := map[string]any{
		"model_type": "gemma3n_text", "vocab_size": V, "vocab_size_per_layer_input": VP, "hidden_size": D,
		"hidden_size_per_layer_input": P, "intermediate_size": I, "num_hidden_layers": L,
		"num_attention_heads": H, "num_key_value_heads": KV, "head_dim": HD, "num_kv_shared_layers": m.shared,
		"layer_types": m.types, "activation_sparsity_pattern": m.sparsity, "sliding_window": 16, "rms_norm_eps": 1e-6,
		"final_logit_softcapping": 30.0, "laurel_rank": R, "altup_num_inputs": 4, "altup_active_idx": 0,
		"altup_coef_clip": 120.0, "altup_correct_scale": true, "hidden_activation": "gelu_pytorch_tanh",
		"max_position_embeddings": 4096, "bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0,
		"rope_parameters": map[string]any{
			"full_attention":    map[string]any{"rope_theta": 1e6, "rope_type": "default"},
			"sliding_attention": map[string]any{"rope_theta": 1e4, "rope_type": "default"},
		},
	}
	cfgJSON, _ = json.Marshal(map[string]any{"model_type": "gemma3n", "text_config": text})
	var ts []map[string]any
	add := func(name string, norm bool, shape ...int) {
		scale, offset := 0.28/math.Sqrt(float64(shape[len(shape)-1])), 0.0
		if norm {
			scale, offset = 0.1, 1
		}
		ts = append(ts, map[string]any{"name": "model.language_model." + name, "shape": shape,
			"seed": fmt.Sprintf("%016x", 0x9e3779b97f4a7c15*uint64(len(ts)+1)), "offset": offset, "scale": scale})
	}
	add("embed_tokens.weight", false, V, D)
	add("embed_tokens_per_layer.weight", false, VP, L*P)
	add("per_layer_model_projection.weight", false, L*P, D)
	add("per_layer_projection_norm.weight", true, P)
	add("norm.weight", true, D)
	for i := 0; i < 3; i++ {
		add(fmt.Sprintf("altup_projections.%d.weight", i), false, D, D)
		add(fmt.Sprintf("altup_unembed_projections.%d.weight", i), false, D, D)
	}
	for i := 0; i < L; i++ {
		n := func(s string) string { return fmt.Sprintf("layers.%d.%s", i, s) }
		add(n("self_attn.q_proj.weight"), false, H*HD, D)
		add(n("self_attn.k_proj.weight"), false, KV*HD, D)
		add(n("self_attn.v_proj.weight"), false, KV*HD, D)
		add(n("self_attn.o_proj.weight"), false, D, H*HD)
		add(n("self_attn.q_norm.weight"), true, HD)
		add(n("self_attn.k_norm.weight"), true, HD)
		for _, s := range []string{"input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm", "altup.router_norm", "laurel.post_laurel_norm", "post_per_layer_input_norm"} {
			add(n(s+".weight"), true, D)
		}
		add(n("mlp.gate_proj.weight"), false, I, D)
		add(n("mlp.up_proj.weight"), false, I, D)
		add(n("mlp.down_proj.weight"), false, D, I)
		add(n("altup.correct_output_scale"), false, D)
		add(n("altup.correction_coefs.weight"), false, 4, 4)
		add(n("altup.prediction_coefs.weight"), false, 16, 4)
		add(n("altup.modality_router.weight"), false, 4, D)
		add(n("laurel.linear_left.weight"), false, R, D)
		add(n("laurel.linear_right.weight"), false, D, R)
		add(n("per_layer_input_gate.weight"), false, P, D)
		add(n("per_layer_projection.weight"), false, D, P)
	}
	recipe, _ = json.Marshal(map[string]any{"tensors": ts})
	return cfgJSON, recipe
}
