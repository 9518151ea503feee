// Package models opens the models Verdict runs: a Hugging Face Gemma 3n
// checkpoint folder, a synthetic-weight fixture folder, or the built-in model
// (the tiny synthetic Gemma 3n, random weights, generated in memory).
package models

import (
	"embed"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"verdict/engine/gemma3n"
	"verdict/engine/tokenizer"
	"verdict/engine/weights"
)

// Builtin is the name that selects the built-in model.
const Builtin = "builtin"

//go:embed builtin/config.json builtin/recipe.json builtin/buffers.safetensors
var builtinFS embed.FS

// Model is an opened model with its tokenizer.
type Model struct {
	*gemma3n.Model
	// Tok is nil when no tokenizer was found; TokErr then says why.
	Tok    *tokenizer.Tokenizer
	TokErr error
	// Name says what was opened; for the built-in model it says that its
	// weights are random.
	Name    string
	Builtin bool
	// Synthetic marks a full-size shape with random weights (synthetic-e2b, synthetic-e4b).
	Synthetic bool
	Path      string
	LoadTime  time.Duration

	store      weights.Store
	configJSON []byte
	towers     towers
}

// Tokenizer returns the model's tokenizer, or the error saying why there is none.
func (m *Model) Tokenizer() (*tokenizer.Tokenizer, error) {
	if m.Tok == nil {
		return nil, m.TokErr
	}
	return m.Tok, nil
}

// Close releases the model's memory-mapped files.
func (m *Model) Close() error { return m.store.Close() }

// Open opens the model named by spec: "builtin", a synthetic full-size
// shape ("synthetic-e2b", "synthetic-e4b"), or a folder.
func Open(spec string) (*Model, error) {
	start := time.Now()
	var (
		cfgJSON []byte
		st      weights.Store
		err     error
		m       = &Model{Path: spec}
	)
	if spec == Builtin || spec == "" {
		m.Builtin, m.Name, m.Path = true, "built-in tiny Gemma 3n (random weights)", ""
		cfgJSON, _ = builtinFS.ReadFile("builtin/config.json")
		recipe, _ := builtinFS.ReadFile("builtin/recipe.json")
		buffers, _ := builtinFS.ReadFile("builtin/buffers.safetensors")
		st, err = weights.NewRecipeStore(recipe, buffers)
	} else if c, recipe, ok := synthetic(spec); ok {
		m.Name, m.Path, m.Synthetic = spec+" (Gemma 3n shape, random weights)", "", true
		cfgJSON = c
		st, err = weights.NewRecipeStore(recipe, nil)
	} else {
		if cfgJSON, err = os.ReadFile(filepath.Join(spec, "config.json")); err != nil {
			return nil, fmt.Errorf("open model %s: %w", spec, err)
		}
		m.Name = filepath.Base(filepath.Clean(spec))
		st, err = weights.Open(spec)
	}
	if err != nil {
		return nil, fmt.Errorf("open model %s: %w", spec, err)
	}
	cfg, sp, err := gemma3n.ParseConfig(cfgJSON)
	if err == nil {
		m.Model, err = gemma3n.Load(st, cfg, sp)
	}
	if err == nil {
		m.Tok, m.TokErr = LoadTokenizer(m.Path)
	}
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("open model %s: %w", spec, err)
	}
	m.store, m.configJSON = st, cfgJSON
	m.LoadTime = time.Since(start)
	return m, nil
}

// TokenizerPaths lists where a model's tokenizer.json is looked for, in order:
// the model folder, $VERDICT_TOKENIZER, the user cache
// (…/verdict/tokenizer.json) and .cache/tokenizer/gemma3/tokenizer.json under
// the working directory.
func TokenizerPaths(modelDir string) []string {
	var ps []string
	if modelDir != "" {
		ps = append(ps, filepath.Join(modelDir, "tokenizer.json"))
	}
	if p := os.Getenv("VERDICT_TOKENIZER"); p != "" {
		ps = append(ps, p)
	}
	if d, err := os.UserCacheDir(); err == nil {
		ps = append(ps, filepath.Join(d, "verdict", "tokenizer.json"))
	}
	return append(ps, filepath.Join(".cache", "tokenizer", "gemma3", "tokenizer.json"))
}

// ErrNoTokenizer is returned when no tokenizer.json is found.
var ErrNoTokenizer = errors.New("no tokenizer.json found")

// LoadTokenizer loads the first tokenizer.json of TokenizerPaths(modelDir).
func LoadTokenizer(modelDir string) (*tokenizer.Tokenizer, error) {
	ps := TokenizerPaths(modelDir)
	for _, p := range ps {
		if _, err := os.Stat(p); err == nil {
			return tokenizer.Load(p)
		}
	}
	return nil, fmt.Errorf("%w (looked in %v; run build/fetch-tokenizer.sh or set VERDICT_TOKENIZER)", ErrNoTokenizer, ps)
}
