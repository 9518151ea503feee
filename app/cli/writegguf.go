package cli

import (
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"verdict/engine/gemma3n"
	"verdict/engine/gemma3n/gguf"
	"verdict/engine/models"
	"verdict/engine/tokenizer"
	"verdict/engine/weights"
	"verdict/engine/weights/ggufwrite"
)

// writeGGUF writes the text decoder of from (a -from preset, a synthetic
// full-size shape or a model folder) as the gemma3n GGUF llama.cpp's
// converter (f32, f16, bf16, q8_0) or quantiser (q4_0, q4_k) would make of
// it, streamed to out. A model of Gemma's vocabulary gets Gemma's tokenizer
// (tokPath, else found as for any model); a smaller one a byte vocabulary.
func writeGGUF(from, out, typ, tokPath string, stdout io.Writer) error {
	if _, ok := ggufwrite.FileTypes[typ]; !ok {
		return usageErr("-type %q: want one of %s", typ, strings.Join(slices.Sorted(maps.Keys(ggufwrite.FileTypes)), ", "))
	}
	var (
		js, recipe []byte
		st         weights.Store
		err        error
		dir        string
	)
	if m, ok := synthModels[from]; ok {
		js, recipe = m.files()
	} else if c, r, ok := models.Synthetic(from); ok {
		js, recipe = c, r
	} else if js, err = os.ReadFile(filepath.Join(from, "config.json")); err != nil {
		return fmt.Errorf("-from %s: not a preset (%s, %s) nor a model folder: %w", from, strings.Join(slices.Sorted(maps.Keys(synthModels)), ", "), models.SyntheticNames(), err)
	} else {
		dir = from
	}
	if recipe != nil {
		st, err = weights.NewRecipeStore(recipe, nil)
	} else {
		st, err = weights.Open(from)
	}
	if err != nil {
		return err
	}
	defer st.Close()
	cfg, _, err := gemma3n.ParseConfig(js)
	if err != nil {
		return err
	}
	var vocab ggufwrite.Vocab
	if cfg.VocabSize >= 262144 {
		tok, err := models.LoadTokenizer(dir)
		if tokPath != "" {
			tok, err = tokenizer.Load(tokPath)
		}
		if err != nil {
			return fmt.Errorf("a model of Gemma's vocabulary needs Gemma's tokenizer.json (-tokenizer): %w", err)
		}
		vocab, err = ggufwrite.GemmaVocab(tok, cfg.VocabSize)
		if err != nil {
			return err
		}
	} else if vocab, err = ggufwrite.ByteVocab(cfg.VocabSize, cfg.PAD, firstOr(cfg.EOS, 1), cfg.BOS); err != nil {
		return err
	}
	prefix := "model.language_model."
	if _, _, ok := st.Info(prefix + "embed_tokens.weight"); !ok {
		prefix = "model."
	}
	name := from
	if dir != "" {
		name = filepath.Base(filepath.Clean(dir))
	}
	kvs, ts, err := gguf.LlamaCpp(st, prefix, js, gguf.LlamaCppOptions{Type: typ, Name: name, Vocab: vocab})
	if err != nil {
		return err
	}
	start := time.Now()
	tmp := out + ".partial"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	n, err := ggufwrite.WriteStream(f, kvs, ts)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, out)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	secs := time.Since(start).Seconds()
	counts := map[string]int{}
	for _, t := range ts {
		counts[t.Type.String()]++
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%s×%d", k, counts[k]))
	}
	fmt.Fprintf(stdout, "wrote %s: %d tensors [%s], %d bytes in %.1fs (%.0f MB/s)\n", out, len(ts), strings.Join(parts, ", "), n, secs, float64(n)/1e6/max(secs, 1e-9))
	for _, d := range gguf.LlamaCppDifferences(cfg) {
		fmt.Fprintf(stdout, "note: llama.cpp will not run this model as written: %s\n", d)
	}
	return nil
}

func firstOr(xs []int, def int) int {
	if len(xs) > 0 {
		return xs[0]
	}
	return def
}
