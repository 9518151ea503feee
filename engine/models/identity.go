package models

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"verdict/engine/model"
)

// Identity is what a model's results are attributed to (a result log's
// header records it): its name, a hash of its content, and how its weights
// are kept.
type Identity struct {
	Name string
	// Hash is ContentHash's.
	Hash    string
	Weights model.Weights // q4 or f32
	Group   int           // the q4 group size (0 for f32)
}

// Identity returns the model's identity; the content hash is computed on
// the first call and kept.
func (m *Model) Identity() (Identity, error) {
	h, err := m.ContentHash()
	if err != nil {
		return Identity{}, err
	}
	w := m.Weights()
	if w == "" {
		w = model.WeightsF32
	}
	return Identity{Name: m.Name, Hash: h, Weights: w, Group: m.Group()}, nil
}

// ContentHash identifies the model by its content alone, not by where it
// is or when its files were written, so the same checkpoint gives the same
// hash on every machine: a built-in or synthetic shape by its config and
// recipe, a folder by the name, size and fingerprint (see fingerprint: a
// small file whole, a large one by its header and 16 MiB of samples) of
// each .safetensors and .json file, a GGUF file by its size and
// fingerprint; then the vocabulary of the tokenizer the model runs with
// (found apart from the weights for all but a folder that holds one). It
// reads what a load reads for the packed-weights cache key, once: the
// result is kept.
func (m *Model) ContentHash() (string, error) {
	m.idOnce.Do(func() { m.idHash, m.idErr = contentHash(m) })
	return m.idHash, m.idErr
}

func contentHash(m *Model) (string, error) {
	h := sha256.New()
	switch {
	case m.Builtin || m.Synthetic:
		k, err := cacheKey("", m, m.configJSON)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s\x00", k)
	case m.gguf != "":
		if err := hashFile(h, m.gguf, "gguf"); err != nil {
			return "", err
		}
		if m.g4 != nil && m.g4.mmproj != "" { // its towers' file
			if err := hashFile(h, m.g4.mmproj, "mmproj"); err != nil {
				return "", err
			}
		}
	default:
		ents, err := os.ReadDir(m.Path)
		if err != nil {
			return "", err
		}
		var names []string
		for _, e := range ents {
			if n := e.Name(); strings.HasSuffix(n, ".safetensors") || strings.HasSuffix(n, ".json") {
				names = append(names, n)
			}
		}
		sort.Strings(names)
		for _, n := range names {
			if err := hashFile(h, filepath.Join(m.Path, n), n); err != nil {
				return "", err
			}
		}
	}
	if m.Tok != nil {
		fmt.Fprintf(h, "tokenizer %d\x00", m.Tok.VocabSize())
		for id := 0; id < m.Tok.VocabSize(); id++ {
			h.Write([]byte(m.Tok.TokenText(int32(id))))
			h.Write([]byte{0})
		}
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// hashFile adds the file at path, under name, to h: its size and
// fingerprint.
func hashFile(h hash.Hash, path, name string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	fmt.Fprintf(h, "%s %d\x00", name, fi.Size())
	return fingerprint(h, path, fi.Size())
}
