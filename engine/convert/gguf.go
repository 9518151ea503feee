package convert

import (
	"fmt"
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

// FileTypes are the types WriteGGUF writes, sorted: f32, f16, bf16 and
// q8_0 as convert_hf_to_gguf.py's --outtype writes them, q4_0 and q4_k as
// llama-quantize makes them from the converter's F16 file.
func FileTypes() []string { return slices.Sorted(maps.Keys(ggufwrite.FileTypes)) }

// Written reports a GGUF file WriteGGUF wrote.
type Written struct {
	// Types counts the tensors of each ggml type, by the type's name.
	Types   map[string]int
	Tensors int
	Bytes   int64
	Seconds float64
	// Differences are where the model departs from what llama.cpp's
	// gemma3n code fixes (gguf.LlamaCppDifferences): llama.cpp will not run
	// it as written.
	Differences []string
}

// WriteGGUF writes the text decoder of from (a preset, a synthetic
// full-size shape or a model folder) as the gemma3n GGUF llama.cpp's
// converter (f32, f16, bf16, q8_0) or quantiser (q4_0, q4_k) would make of
// it, streamed to out (through out.partial, renamed when whole). A model of
// Gemma's vocabulary gets Gemma's tokenizer (tokPath, else found as for any
// model); a smaller one a byte vocabulary.
func WriteGGUF(from, out, typ, tokPath string) (Written, error) {
	if _, ok := ggufwrite.FileTypes[typ]; !ok {
		return Written{}, fmt.Errorf("type %q: want one of %s", typ, strings.Join(FileTypes(), ", "))
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
		return Written{}, fmt.Errorf("-from %s: not a preset (%s, %s) nor a model folder: %w", from, strings.Join(Presets(), ", "), models.SyntheticNames(), err)
	} else {
		dir = from
	}
	if recipe != nil {
		st, err = weights.NewRecipeStore(recipe, nil)
	} else {
		st, err = weights.Open(from)
	}
	if err != nil {
		return Written{}, err
	}
	defer st.Close()
	cfg, _, err := gemma3n.ParseConfig(js)
	if err != nil {
		return Written{}, err
	}
	var vocab ggufwrite.Vocab
	if cfg.VocabSize >= 262144 {
		tok, err := models.LoadTokenizer(dir)
		if tokPath != "" {
			tok, err = tokenizer.Load(tokPath)
		}
		if err != nil {
			return Written{}, fmt.Errorf("a model of Gemma's vocabulary needs Gemma's tokenizer.json (-tokenizer): %w", err)
		}
		vocab, err = ggufwrite.GemmaVocab(tok, cfg.VocabSize)
		if err != nil {
			return Written{}, err
		}
	} else if vocab, err = ggufwrite.ByteVocab(cfg.VocabSize, cfg.PAD, firstOr(cfg.EOS, 1), cfg.BOS); err != nil {
		return Written{}, err
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
		return Written{}, err
	}
	start := time.Now()
	tmp := out + ".partial"
	f, err := os.Create(tmp)
	if err != nil {
		return Written{}, err
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
		return Written{}, err
	}
	secs := time.Since(start).Seconds()
	counts := map[string]int{}
	for _, t := range ts {
		counts[t.Type.String()]++
	}
	return Written{Types: counts, Tensors: len(ts), Bytes: n, Seconds: secs, Differences: gguf.LlamaCppDifferences(cfg)}, nil
}

func firstOr(xs []int, def int) int {
	if len(xs) > 0 {
		return xs[0]
	}
	return def
}
