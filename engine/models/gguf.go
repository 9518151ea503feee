package models

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"verdict/engine/gemma3n"
	gemma4gguf "verdict/engine/gemma4/gguf"
	"verdict/engine/model"
	"verdict/engine/tokenizer"
	"verdict/engine/weights"
)

// GGUF models: a .gguf file (llama.cpp's gemma3n or gemma4 architecture,
// as Ollama and LM Studio keep models), or a folder holding one and no
// safetensors checkpoint. The weights are read through weights' GGUFStore
// (gemma3n: dequantised, then packed to q4 at load and cached like any
// checkpoint) or engine/gemma4/gguf's Store (gemma4: dequantised, then
// opened as any Gemma 4 checkpoint, openGemma4), the configuration comes
// from the file's metadata. The file's own vocabulary
// is not read: the tokenizer is a tokenizer.json beside it or found as for
// any model (TokenizerPaths).

// GGUFPath returns the GGUF file spec names: spec itself when it is a GGUF
// file, the folder's one .gguf when spec is a folder without a safetensors
// checkpoint or recipe, else "".
func GGUFPath(spec string) (string, error) {
	fi, err := os.Stat(spec)
	if err != nil {
		return "", nil // the caller reports the path
	}
	if !fi.IsDir() {
		if weights.IsGGUF(spec) {
			return spec, nil
		}
		return "", fmt.Errorf("%s is a file but not a GGUF file: give a model folder or a .gguf file", spec)
	}
	for _, n := range []string{"model.safetensors", "model.safetensors.index.json", "recipe.json"} {
		if _, err := os.Stat(filepath.Join(spec, n)); err == nil {
			return "", nil
		}
	}
	return weights.FindGGUF(spec)
}

// openGGUF opens a GGUF model's store and its config.json: a gemma4 file's
// through engine/gemma4/gguf (its config.json says gemma4_text), any other
// through weights.NewGGUFStore (gemma3n, or an error naming the
// architecture).
func openGGUF(path string) (weights.Store, []byte, error) {
	g, err := weights.OpenGGUFFile(path)
	if err != nil {
		return nil, nil, err
	}
	if g.Arch() == gemma4gguf.Arch {
		s, err := gemma4gguf.New(g)
		if err != nil {
			g.Close()
			return nil, nil, err
		}
		return s, s.ConfigJSON(), nil
	}
	s, err := weights.NewGGUFStore(g)
	if err != nil {
		g.Close()
		return nil, nil, err
	}
	return s, s.ConfigJSON(), nil
}

// ggufTokenizerHint wraps a missing-tokenizer error of a GGUF model.
func ggufTokenizerHint(err error, path string) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w; a GGUF's own vocabulary is not read: put the model's tokenizer.json beside %s", err, filepath.Base(path))
}

// ggufCacheKey identifies a GGUF file for the packed-weights cache: its
// absolute path, size, modification time and content fingerprint.
func ggufCacheKey(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s %d %d\x00", abs, fi.Size(), fi.ModTime().UnixNano())
	if err := fingerprint(h, abs, fi.Size()); err != nil {
		return "", err
	}
	return "gguf:" + hex.EncodeToString(h.Sum(nil)), nil
}

// ggufName is a GGUF model's display name: the file name without .gguf.
func ggufName(path string) string {
	b := filepath.Base(path)
	return strings.TrimSuffix(b, filepath.Ext(b))
}

// checkGGUFTokenizer holds the tokenizer found for a GGUF model m to the
// file's vocabulary (checkGGUFVocab): a Gemma 3n file's below its per-layer
// vocabulary, a Gemma 4 file's below the model's, which a Gemma 4 tokenizer
// may not outgrow (checkVocab).
func checkGGUFTokenizer(st weights.Store, tok *tokenizer.Tokenizer, m model.Model) error {
	if d, ok := m.(*gemma3n.Model); ok {
		return checkGGUFVocab(st, tok, d.Cfg.VocabSizePerLayer)
	}
	if err := checkVocab(tok, m.Config().Vocab); err != nil {
		return err
	}
	return checkGGUFVocab(st, tok, m.Config().Vocab)
}

// checkGGUFVocab holds the tokenizer found for a GGUF model to the file's
// own vocabulary: the first 300 ids and a sample of the rest below both
// vocabularies' ends (and below limit, where the converter's padding
// entries start) must be the same tokens, else the tokenizer belongs to
// another model.
func checkGGUFVocab(st weights.Store, tok *tokenizer.Tokenizer, limit int) error {
	var tokens []string
	var path string
	switch g := st.(type) {
	case *weights.GGUFStore:
		tokens, path = g.Tokens(), g.G.Path
	case *gemma4gguf.Store:
		tokens, path = g.Tokens(), g.Path()
	default:
		return nil
	}
	n := min(len(tokens), tok.VocabSize(), limit)
	for id := 0; id < n; id += max(1, min(id/300, n/509)) { // the first 300 (special and byte tokens), then a sample
		if got := tok.TokenText(int32(id)); got != tokens[id] {
			return fmt.Errorf("the tokenizer.json found does not match %s's vocabulary: token %d is %q there, %q in the GGUF (put the model's own tokenizer.json beside it)", filepath.Base(path), id, got, tokens[id])
		}
	}
	return nil
}
