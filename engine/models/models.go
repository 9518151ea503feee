// Package models opens the models Verdict runs: a Hugging Face Gemma 3n
// checkpoint folder, a GGUF file (llama.cpp's gemma3n), a synthetic-weight
// fixture folder, or the built-in model
// (the tiny synthetic Gemma 3n, random weights, generated in memory); and a
// folder whose config.json says Gemma 4 (model_type gemma4, with its vision
// and audio towers, or gemma4_text, text only: engine/gemma4).
package models

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"verdict/engine/gemma3n"
	"verdict/engine/model"
	"verdict/engine/safefile"
	"verdict/engine/tokenizer"
	"verdict/engine/weights"
	"verdict/native"
)

// Builtin is the name that selects the built-in model.
const Builtin = "builtin"

//go:embed builtin/config.json builtin/recipe.json builtin/buffers.safetensors
var builtinFS embed.FS

// Model is an opened model with its tokenizer: the decoder behind the
// engine's interface (engine/model; a *gemma3n.Model or a Gemma 4
// decoder, FamilyOf tells which), the towers, and what it was opened from.
type Model struct {
	model.Model
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
	recipe     []byte       // synthetic shapes: their recipe
	gguf       string       // the GGUF file of a GGUF model
	towers     towers       // Gemma 3n's
	g4         *gemma4Media // Gemma 4's towers (nil for Gemma 3n)

	towerCacheBytes int64
	outOnce         sync.Once
	out             *outputCache

	idOnce sync.Once // ContentHash's
	idHash string
	idErr  error
}

// Tokenizer returns the model's tokenizer, or the error saying why there is none.
func (m *Model) Tokenizer() (*tokenizer.Tokenizer, error) {
	if m.Tok == nil {
		return nil, m.TokErr
	}
	return m.Tok, nil
}

// Close releases the model's memory-mapped files and packed weights, and
// the loaded towers' weights on the backend (before the files they may
// alias).
func (m *Model) Close() error {
	m.towers.close()
	if m.g4 != nil {
		m.g4.close()
	}
	var err error
	if m.Model != nil {
		err = m.Model.Close()
	}
	if e := m.store.Close(); err == nil {
		err = e
	}
	return err
}

// Options are OpenWith's settings.
type Options struct {
	// Weights: model.WeightsQ4 (packed 4-bit, the default) or
	// model.WeightsF32 (as stored, exact: the reference fixtures use it).
	Weights model.Weights
	// Group is the q4 group size (0: gemma3n.DefaultGroup).
	Group int
	// CacheDir holds packed weights between runs ("": CacheDirDefault();
	// "off": no cache).
	CacheDir string
	// Log, when set, hears about stale or corrupt cache files.
	Log func(string)
	// Progress, when set, hears the slow steps of a load (StagePacking,
	// StageChecking, then StageTokenizer): done of total units, 0 of 0
	// when unknown.
	Progress func(stage string, done, total int64)
	// TowerCacheBytes bounds the tower outputs the model keeps
	// (0: DefaultTowerCacheBytes).
	TowerCacheBytes int64
	// Backend runs the model (nil: native.Default()).
	Backend *native.Backend

	ctx context.Context // OpenContext's
}

// Stages Options.Progress hears: packing the weights (or checking the
// packed-weights cache), then reading the tokenizer, the last.
const (
	StagePacking   = gemma3n.StagePacking
	StageChecking  = gemma3n.StageChecking
	StageTokenizer = "reading the tokenizer"
)

// DefaultWeights is what Open uses: packed 4-bit weights.
const DefaultWeights = model.WeightsQ4

// CacheDirDefault is where packed weights are cached unless Options say
// otherwise: $VERDICT_PACKED_CACHE when set ("off" disables it), else
// os.UserCacheDir()/verdict/packed.
func CacheDirDefault() string {
	if d := os.Getenv("VERDICT_PACKED_CACHE"); d != "" {
		return d
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "off"
	}
	return filepath.Join(d, "verdict", "packed")
}

// Open opens the model named by spec with the default options: q4 weights,
// the default cache. Use OpenWith(spec, Options{Weights: model.WeightsF32})
// for the exact float32 path.
func Open(spec string) (*Model, error) { return OpenWith(spec, Options{}) }

// OpenContext is OpenWith stopped by ctx: packing weights checks it every
// few rows, and a stopped load returns ctx's error and leaves no cache file
// behind.
func OpenContext(ctx context.Context, spec string, opt Options) (*Model, error) {
	opt.ctx = ctx
	return OpenWith(spec, opt)
}

// OpenWith opens the model named by spec: "builtin", a synthetic full-size
// shape ("synthetic-e2b", "synthetic-e4b"), a folder, a GGUF file (see
// GGUFPath), or a Hugging Face model id ("google/gemma-3n-E2B-it[@revision]")
// downloaded into the Hub cache (verdict pull).
func OpenWith(spec string, opt Options) (*Model, error) {
	start := time.Now()
	spec, repo, rerr := resolveRepo(spec)
	if rerr != nil {
		return nil, fmt.Errorf("open model %s: %w", spec, rerr)
	}
	if opt.Weights == "" {
		opt.Weights = DefaultWeights
	}
	if opt.CacheDir == "" {
		opt.CacheDir = CacheDirDefault()
	}
	if opt.CacheDir == "off" {
		opt.CacheDir = ""
	}
	var (
		cfgJSON []byte
		st      weights.Store
		err     error
		m       = &Model{Path: spec, towerCacheBytes: opt.TowerCacheBytes}
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
		m.recipe = recipe
		st, err = weights.NewRecipeStore(recipe, nil)
	} else if m.gguf, err = GGUFPath(spec); err != nil {
		return nil, fmt.Errorf("open model %s: %w", spec, err)
	} else if m.gguf != "" {
		m.Name = ggufName(m.gguf)
		st, cfgJSON, err = openGGUF(m.gguf)
	} else {
		if cfgJSON, err = safefile.ReadFile(filepath.Join(spec, "config.json"), MaxConfigBytes); err != nil {
			return nil, fmt.Errorf("open model %s: %w", spec, err)
		}
		m.Name = filepath.Base(filepath.Clean(spec))
		if repo != "" {
			m.Name = repo
		}
		st, err = weights.Open(spec)
	}
	if err != nil {
		return nil, fmt.Errorf("open model %s: %w", spec, err)
	}
	var dec *gemma3n.Model
	g4 := isGemma4(cfgJSON)
	var cfg gemma3n.Config
	var sp gemma3n.Special
	if g4 {
		m.Model, err = openGemma4(st, cfgJSON, opt, spec, m)
	} else {
		cfg, sp, err = gemma3n.ParseConfig(cfgJSON)
	}
	if err == nil && !g4 {
		lo := gemma3n.LoadOptions{Weights: opt.Weights, Group: opt.Group, Log: opt.Log, Context: opt.ctx, Progress: opt.Progress, Backend: opt.Backend}
		if opt.Weights == model.WeightsQ4 && opt.CacheDir != "" {
			lo.CacheDir, lo.CacheName = opt.CacheDir, cacheName(spec, m)
			lo.CacheKey, err = cacheKey(spec, m, cfgJSON)
		}
		if err == nil {
			if dec, err = gemma3n.LoadWith(st, cfg, sp, lo); err == nil {
				m.Model = dec
			}
		}
	}
	if err == nil && opt.ctx != nil {
		err = opt.ctx.Err()
	}
	if err == nil {
		if opt.Progress != nil {
			opt.Progress(StageTokenizer, 0, 0)
		}
		if m.gguf != "" {
			m.Tok, m.TokErr = LoadTokenizer(filepath.Dir(m.gguf))
			m.TokErr = ggufTokenizerHint(m.TokErr, m.gguf)
			if m.Tok != nil {
				if e := checkGGUFTokenizer(st, m.Tok, m.Model); e != nil {
					m.Tok, m.TokErr = nil, e
				}
			}
		} else {
			m.Tok, m.TokErr = LoadTokenizer(m.Path)
			if g4 && m.Tok != nil {
				if e := checkVocab(m.Tok, m.Config().Vocab); e != nil {
					m.Tok, m.TokErr = nil, e
				}
			}
		}
	}
	if err != nil {
		if m.Model != nil {
			m.Model.Close()
		}
		st.Close()
		return nil, fmt.Errorf("open model %s: %w", spec, err)
	}
	m.store, m.configJSON = st, cfgJSON
	if g4 {
		if m.gguf != "" { // the towers in an mmproj file beside it, if any
			m.g4, err = ggufTowers(m, st, cfgJSON)
		} else {
			m.g4, err = newGemma4Media(m.Name, spec, st, cfgJSON, m.Config().Hidden, m.Backend(), m.outputs)
		}
		if err != nil {
			m.Model.Close()
			st.Close()
			return nil, fmt.Errorf("open model %s: %w", spec, err)
		}
	}
	m.LoadTime = time.Since(start)
	return m, nil
}

// TokenizerPaths lists where a model's tokenizer.json is looked for, in order:
// the model folder, $VERDICT_TOKENIZER, the user cache
// (…/verdict/tokenizer.json), beside the executable (tokenizer.json, and
// .cache/tokenizer/gemma3/tokenizer.json, where build/run.sh builds it in
// the repository), and .cache/tokenizer/gemma3/tokenizer.json under the
// working directory.
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
	repoCopy := filepath.Join(".cache", "tokenizer", "gemma3", "tokenizer.json")
	if exe, err := os.Executable(); err == nil {
		if real, err := filepath.EvalSymlinks(exe); err == nil {
			exe = real
		}
		d := filepath.Dir(exe)
		ps = append(ps, filepath.Join(d, "tokenizer.json"), filepath.Join(d, repoCopy))
	}
	return append(ps, repoCopy)
}

// MaxConfigBytes bounds a model's config.json.
const MaxConfigBytes = 4 << 20

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

// cacheName is the readable prefix of a model's packed-weights cache file.
func cacheName(spec string, m *Model) string {
	if m.Builtin {
		return "builtin"
	}
	if m.Synthetic {
		return spec
	}
	if m.gguf != "" {
		return ggufName(m.gguf)
	}
	return filepath.Base(filepath.Clean(spec))
}

// cacheKey identifies a checkpoint for the packed-weights cache: a
// synthetic shape by its config and recipe, a folder by its absolute path,
// the name, size and modification time of every file the weights and
// configuration come from, and a hash of their content (see fingerprint):
// weights rewritten with the same size and time get another key.
func cacheKey(spec string, m *Model, cfgJSON []byte) (string, error) {
	h := sha256.New()
	if m.Builtin || m.Synthetic {
		h.Write(cfgJSON)
		h.Write([]byte{0})
		if m.Builtin {
			r, _ := builtinFS.ReadFile("builtin/recipe.json")
			b, _ := builtinFS.ReadFile("builtin/buffers.safetensors")
			h.Write(r)
			h.Write(b)
		} else {
			h.Write(m.recipe)
		}
		return "recipe:" + hex.EncodeToString(h.Sum(nil)), nil
	}
	if m.gguf != "" {
		return ggufCacheKey(m.gguf)
	}
	dir, err := filepath.Abs(spec)
	if err != nil {
		return "", err
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	fmt.Fprintf(h, "%s\x00", dir)
	for _, e := range ents {
		n := e.Name()
		if !strings.HasSuffix(n, ".safetensors") && !strings.HasSuffix(n, ".json") {
			continue
		}
		fi, err := os.Stat(filepath.Join(dir, n))
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s %d %d\x00", n, fi.Size(), fi.ModTime().UnixNano())
		if err := fingerprint(h, filepath.Join(dir, n), fi.Size()); err != nil {
			return "", err
		}
	}
	return "files:" + hex.EncodeToString(h.Sum(nil)), nil
}

// Fingerprint bounds: files up to wholeHashMax bytes are hashed whole;
// larger ones by their safetensors header and fingerprintSamples evenly
// spaced runs of sampleBytes.
const (
	wholeHashMax       = 64 << 20
	fingerprintSamples = 256
	sampleBytes        = 64 << 10
	maxHeaderBytes     = 100 << 20
)

// fingerprint adds the content of the file at path (size bytes) to h: all
// of it when small, else its safetensors header (every tensor's name,
// dtype, shape and offsets) and 16 MiB of its data in evenly spaced
// samples, which a load reads in a moment and any retrained or converted
// checkpoint changes.
func fingerprint(h hash.Hash, path string, size int64) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if size <= wholeHashMax {
		_, err := io.Copy(h, io.LimitReader(f, size))
		return err
	}
	var n [8]byte
	if _, err := f.ReadAt(n[:], 0); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	hl := int64(binary.LittleEndian.Uint64(n[:]))
	if strings.HasSuffix(path, ".safetensors") && (hl < 0 || hl > maxHeaderBytes || 8+hl > size) {
		return fmt.Errorf("%s: safetensors header of %d bytes in a file of %d", path, hl, size)
	}
	start := int64(0)
	if strings.HasSuffix(path, ".safetensors") {
		if _, err := io.Copy(h, io.NewSectionReader(f, 0, 8+hl)); err != nil {
			return err
		}
		start = 8 + hl
	}
	buf := make([]byte, sampleBytes)
	span := size - start
	for i := int64(0); i < fingerprintSamples; i++ {
		off := start + span*i/fingerprintSamples
		k, err := f.ReadAt(buf[:min(int64(len(buf)), size-off)], off)
		if err != nil && err != io.EOF {
			return err
		}
		h.Write(buf[:k])
	}
	return nil
}
