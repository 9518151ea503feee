// Package weights gives the tensors of Gemma 3n checkpoints by their Hugging
// Face names. Four kinds of source are served through one Store interface:
// memory-mapped safetensors files (OpenSafetensors), Hugging Face checkpoint
// folders with one file or an index and shards (OpenCheckpoint), the
// synthetic-weight fixtures whose tensors are generated on demand from a
// splitmix64 recipe (OpenRecipe, NewRecipeStore), and llama.cpp's GGUF files
// of the gemma3n architecture, dequantised on read (OpenGGUF).
//
// Names are returned exactly as stored (model.language_model.* in a
// conditional-generation checkpoint, model.* in a causal-LM one); mapping
// prefixes is the model layer's job.
//
// Stores are safe for concurrent use. Slices returned zero-copy alias
// read-only mapped memory: never write to them, and do not use them after
// Close.
package weights

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Store gives the tensors of one checkpoint by their Hugging Face names.
type Store interface {
	// Info reports a tensor's shape and element type ("F32", "BF16", "F16");
	// ok=false when absent.
	Info(name string) (shape []int, dtype string, ok bool)
	// Names lists every tensor, sorted.
	Names() []string
	// Float32 returns the whole tensor as float32 (converting bf16/f16;
	// zero-copy for f32 when the mmap is aligned, else a copy). The error
	// names the tensor when absent.
	Float32(name string) ([]float32, error)
	// BF16 returns the raw bf16 bits zero-copy from the mapped file; error
	// when the tensor is not BF16.
	BF16(name string) ([]uint16, error)
	// Rows writes rows [row0, row0+len(dst)/cols) of a tensor with at least
	// two dimensions (cols is the product of all but the first) as float32
	// into dst, reading only those rows.
	Rows(name string, row0 int, dst []float32) error
	// Close releases the store; its mapped memory is unmapped.
	Close() error
}

// ErrNotFound is wrapped by errors for tensors a store does not hold.
var ErrNotFound = errors.New("tensor not found")

// errClosed is returned by data accessors after Close.
var errClosed = errors.New("weights: store is closed")

// File names looked for in a model folder.
const (
	singleFile  = "model.safetensors"
	indexFile   = "model.safetensors.index.json"
	recipeFile  = "recipe.json"
	buffersFile = "buffers.safetensors"
)

// Open picks OpenCheckpoint or OpenRecipe from what the folder holds: a
// folder with model.safetensors or model.safetensors.index.json is a
// checkpoint, else one with recipe.json is a synthetic fixture. A .tar.gz
// path is not handled here.
func Open(dir string) (Store, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("weights: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("weights: %s: not a directory", dir)
	}
	for _, name := range []string{indexFile, singleFile} {
		if exists(filepath.Join(dir, name)) {
			return OpenCheckpoint(dir)
		}
	}
	if exists(filepath.Join(dir, recipeFile)) {
		return OpenRecipe(dir)
	}
	return nil, fmt.Errorf("weights: %s: no %s, %s or %s", dir, singleFile, indexFile, recipeFile)
}

// MaxJSONBytes bounds a checkpoint's index and a recipe.
const MaxJSONBytes = 64 << 20

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// numel returns the element count of shape, rejecting negative dimensions
// and counts that overflow.
func numel(shape []int) (int, error) {
	n := 1
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("negative dimension in shape %v", shape)
		}
		if d != 0 && n > (1<<53)/d {
			return 0, fmt.Errorf("shape %v too large", shape)
		}
		n *= d
	}
	return n, nil
}

// rowSpan validates a Rows request against shape and returns the flat
// element range [lo, hi) it covers.
func rowSpan(name string, shape []int, row0, n int) (lo, hi int, err error) {
	if len(shape) < 2 {
		return 0, 0, fmt.Errorf("weights: %s: Rows needs a tensor of 2 or more dimensions, shape is %v", name, shape)
	}
	cols := 1
	for _, d := range shape[1:] {
		cols *= d
	}
	if cols == 0 {
		if n != 0 {
			return 0, 0, fmt.Errorf("weights: %s: Rows of a tensor with empty rows, shape %v", name, shape)
		}
		return 0, 0, nil
	}
	if n%cols != 0 {
		return 0, 0, fmt.Errorf("weights: %s: Rows: len(dst)=%d is not a multiple of the row length %d", name, n, cols)
	}
	rows := n / cols
	if row0 < 0 || row0 > shape[0] || rows > shape[0]-row0 {
		return 0, 0, fmt.Errorf("weights: %s: Rows [%d, %d) out of range [0, %d)", name, row0, row0+rows, shape[0])
	}
	return row0 * cols, (row0 + rows) * cols, nil
}

func copyShape(s []int) []int {
	return append([]int{}, s...)
}

// littleEndian reports whether the host stores integers little-endian, the
// byte order of safetensors data; zero-copy views need it.
var littleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// parallelGrain is the element count below which work stays on one goroutine.
const parallelGrain = 1 << 16

// parallelFor calls fn on disjoint chunks covering [0, n), spread over
// GOMAXPROCS goroutines when n is large. Each index is handled exactly once,
// so index-based work gives the same result for any thread count.
func parallelFor(n int, fn func(lo, hi int)) {
	workers := runtime.GOMAXPROCS(0)
	if n < 2*parallelGrain || workers == 1 {
		fn(0, n)
		return
	}
	chunk := max(parallelGrain, n/(workers*8))
	nchunks := (n + chunk - 1) / chunk
	workers = min(workers, nchunks)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				c := int(next.Add(1) - 1)
				if c >= nchunks {
					return
				}
				lo := c * chunk
				fn(lo, min(lo+chunk, n))
			}
		})
	}
	wg.Wait()
}
