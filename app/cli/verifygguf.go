package cli

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"verdict/engine/gemma3n"
	"verdict/engine/models"
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
	from := fs.String("from", "", "with -write-checkpoint: a model folder (checkpoint or synthetic recipe)")
	dtype := fs.String("dtype", "f32", "with -write-checkpoint: f32 or bf16")
	ids := fs.String("ids", "2,105,2364,107,6190,9999,1,262143", "comma-separated token ids to run")
	tol := fs.Float64("tol", -1, "fail a file whose max |logit error| is above this (default: 0 for all-F32 files, no limit otherwise)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: verdict verify-gguf -ref DIR [-tol X] FILE.gguf...\n       verdict verify-gguf -write-checkpoint DIR -from MODELDIR [-dtype f32|bf16]")
		fs.PrintDefaults()
	}
	if err := parse(fs, args); err != nil {
		return err
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
	open := func(spec string) (*models.Model, error) {
		return models.OpenContext(ctx, spec, models.Options{Weights: gemma3n.WeightsF32, CacheDir: "off"})
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
	failed := 0
	for _, path := range fs.Args() {
		g, err := weights.OpenGGUFFile(path)
		if err != nil {
			return err
		}
		types, allF32 := g.TypeCounts(), true
		for _, t := range g.Tensors {
			allF32 = allF32 && t.Type == weights.GGMLF32
		}
		g.Close()
		m, err := open(path)
		if err != nil {
			return err
		}
		got, err := logitsOf(m, seq)
		m.Close()
		if err != nil {
			return err
		}
		if len(got) != len(want) {
			return fmt.Errorf("%s: %d logits, the reference has %d (vocabulary %d)", path, len(got), len(want), m.Cfg.VocabSize)
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
	}
	if failed > 0 {
		return errChecksFailed
	}
	return nil
}

func logitsOf(m *models.Model, ids []int32) ([]float32, error) {
	h, err := m.Forward(m.NewCache(), ids, nil)
	if err != nil {
		return nil, err
	}
	return m.Logits(h, len(ids)), nil
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
// Gemma3nForCausalLM checkpoint (model.* names, no buffers: what
// save_pretrained writes) in dir.
func writeCheckpoint(from, dir, dtype string, stdout io.Writer) error {
	if dtype != "f32" && dtype != "bf16" {
		return usageErr("-dtype %q: want f32 or bf16", dtype)
	}
	js, err := os.ReadFile(filepath.Join(from, "config.json"))
	if err != nil {
		return err
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(js, &top); err != nil {
		return fmt.Errorf("%s/config.json: %w", from, err)
	}
	text := map[string]any{}
	src := js
	if tc, ok := top["text_config"]; ok {
		src = tc
	}
	if err := json.Unmarshal(src, &text); err != nil {
		return err
	}
	if _, _, err := gemma3n.ParseConfig(js); err != nil {
		return err
	}
	text["model_type"] = "gemma3n_text"
	text["architectures"] = []string{"Gemma3nForCausalLM"}
	text["torch_dtype"] = map[string]string{"f32": "float32", "bf16": "bfloat16"}[dtype]
	st, err := weights.Open(from)
	if err != nil {
		return err
	}
	defer st.Close()
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
		hdr["model."+strings.TrimPrefix(n, prefix)] = map[string]any{"dtype": strings.ToUpper(dtype), "shape": shape, "data_offsets": []int{off, off + cnt*size}}
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
	cj, _ := json.MarshalIndent(text, "", " ")
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cj, 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s: %d tensors, %d bytes of %s\n", dir, len(names), off, dtype)
	return nil
}
