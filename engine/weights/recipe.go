package weights

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"unsafe"

	"verdict/engine/safefile"
)

// recipeTensor is one generated tensor of a synthetic-weight recipe.
type recipeTensor struct {
	shape  []int
	numel  int
	seed   uint64
	offset float64
	scale  float64
}

// recipeStore generates the tensors of a synthetic fixture on demand and
// serves its persistent buffers from buffers.safetensors.
type recipeStore struct {
	tensors map[string]*recipeTensor
	buffers *stStore // nil when the fixture has none
	names   []string
	closed  atomic.Bool
}

// OpenRecipe opens a synthetic fixture folder: recipe.json, plus
// buffers.safetensors (memory-mapped) when present.
func OpenRecipe(dir string) (Store, error) {
	path := filepath.Join(dir, recipeFile)
	js, err := safefile.ReadFile(path, MaxJSONBytes)
	if err != nil {
		return nil, fmt.Errorf("weights: %w", err)
	}
	tensors, err := parseRecipe(js)
	if err != nil {
		return nil, fmt.Errorf("weights: %s: %w", path, err)
	}
	var buffers *stStore
	bpath := filepath.Join(dir, buffersFile)
	if _, err := os.Stat(bpath); err == nil {
		st, err := OpenSafetensors(bpath)
		if err != nil {
			return nil, err
		}
		buffers = st.(*stStore)
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("weights: %w", err)
	}
	return newRecipeStore(tensors, buffers)
}

// NewRecipeStore is OpenRecipe from bytes: the contents of recipe.json and
// of buffers.safetensors (nil or empty when there are none). The buffers are
// parsed in place and copied on access.
func NewRecipeStore(recipeJSON []byte, buffers []byte) (Store, error) {
	tensors, err := parseRecipe(recipeJSON)
	if err != nil {
		return nil, fmt.Errorf("weights: %s: %w", recipeFile, err)
	}
	var bs *stStore
	if len(buffers) > 0 {
		if bs, err = newMemStore(buffersFile, buffers); err != nil {
			return nil, err
		}
	}
	return newRecipeStore(tensors, bs)
}

func newRecipeStore(tensors map[string]*recipeTensor, buffers *stStore) (*recipeStore, error) {
	s := &recipeStore{tensors: tensors, buffers: buffers}
	nb := 0
	if buffers != nil {
		nb = len(buffers.names)
	}
	s.names = make([]string, 0, len(tensors)+nb)
	for name := range tensors {
		s.names = append(s.names, name)
	}
	if buffers != nil {
		for _, name := range buffers.names {
			if _, ok := tensors[name]; ok {
				buffers.Close()
				return nil, fmt.Errorf("weights: tensor %q is both in %s and in %s", name, recipeFile, buffersFile)
			}
			s.names = append(s.names, name)
		}
	}
	slices.Sort(s.names)
	return s, nil
}

// recipeEntryCost is the memory a recipe tensor takes beyond its name and
// shape: the tensor, its map slot and its place in the store's names.
var recipeEntryCost = heapSize(int(unsafe.Sizeof(recipeTensor{}))) + mapEntry(strHeader+ptrSize) + strHeader

// parseRecipe reads recipe.json: {"tensors": [{name, shape, seed, offset,
// scale}]}, where it lies and within HeaderBudget (charged before it is
// allocated).
func parseRecipe(js []byte) (map[string]*recipeTensor, error) {
	if err := checkJSON(js); err != nil {
		return nil, err
	}
	var list []byte
	if err := jsonMembers(js, func(key, val []byte) error {
		if string(key) == `"tensors"` && string(val) != "null" {
			list = val
		}
		return nil
	}); err != nil {
		return nil, err
	}
	if list == nil {
		return nil, errors.New("no tensors list")
	}
	n, err := jsonCount(list, '[')
	if err != nil {
		return nil, fmt.Errorf("tensors: %w", err)
	}
	mem := newBudget("recipe", HeaderBudget)
	if err := mem.take(int64(heapSize(n*recipeEntryCost)), "tensors", ""); err != nil {
		return nil, err
	}
	out := make(map[string]*recipeTensor, n)
	i := 0
	err = jsonElements(list, func(entry []byte) error {
		defer func() { i++ }()
		t, name, err := parseRecipeEntry(entry, mem)
		switch {
		case err != nil && name == "":
			return fmt.Errorf("tensor #%d: %w", i, err)
		case err != nil:
			return fmt.Errorf("tensor %s: %w", quoted(name), err)
		case name == "":
			return fmt.Errorf("tensor #%d has no name", i)
		}
		if _, dup := out[name]; dup {
			return fmt.Errorf("tensor %s listed twice", quoted(name))
		}
		out[name] = t
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// parseRecipeEntry reads one tensor of a recipe, charging its name and
// shape to mem.
func parseRecipeEntry(entry []byte, mem *memBudget) (t *recipeTensor, name string, err error) {
	var (
		shape          []int
		seed           string
		offset, scale  float64
		hasOff, hasScl bool
	)
	err = jsonMembers(entry, func(key, v []byte) error {
		var err error
		switch string(key) {
		case `"name"`:
			if err = mem.take(int64(heapSize(len(v))), "tensor name", ""); err == nil {
				name, err = jsonString(v, maxTensorName, "name")
			}
		case `"shape"`:
			if string(v) == "null" {
				return nil
			}
			if n, cerr := jsonCount(v, '['); cerr == nil {
				if err = mem.take(int64(heapSize(min(n, maxShape)*intSize)), "tensor", name); err != nil {
					return err
				}
			}
			shape, err = jsonInts[int](v, maxShape, "shape")
		case `"seed"`:
			seed, err = jsonString(v, 32, "seed")
		case `"offset"`:
			if hasOff = string(v) != "null"; hasOff {
				offset, err = jsonNumber(v, "offset")
			}
		case `"scale"`:
			if hasScl = string(v) != "null"; hasScl {
				scale, err = jsonNumber(v, "scale")
			}
		}
		return err
	})
	if err != nil || name == "" {
		return nil, name, err
	}
	if shape == nil || !hasOff || !hasScl || seed == "" {
		return nil, name, errors.New("needs shape, seed, offset and scale")
	}
	s, err := strconv.ParseUint(strings.TrimPrefix(seed, "0x"), 16, 64)
	if err != nil {
		return nil, name, fmt.Errorf("bad seed %q: %w", seed, err)
	}
	n, err := numel(shape)
	if err != nil {
		return nil, name, err
	}
	return &recipeTensor{shape: shape, numel: n, seed: s, offset: offset, scale: scale}, name, nil
}

// Info implements Store; generated tensors are F32.
func (s *recipeStore) Info(name string) ([]int, string, bool) {
	if t, ok := s.tensors[name]; ok {
		return copyShape(t.shape), "F32", true
	}
	if s.buffers != nil {
		return s.buffers.Info(name)
	}
	return nil, "", false
}

// Names implements Store.
func (s *recipeStore) Names() []string {
	return slices.Clone(s.names)
}

func (s *recipeStore) lookup(name string) (*recipeTensor, error) {
	if s.closed.Load() {
		return nil, errClosed
	}
	if t, ok := s.tensors[name]; ok {
		return t, nil
	}
	if s.buffers != nil {
		return nil, nil // the caller asks the buffers
	}
	return nil, fmt.Errorf("weights: %s: %w", name, ErrNotFound)
}

// Float32 implements Store: a generated tensor is made afresh on each call
// (in parallel for big tensors), nothing is cached.
func (s *recipeStore) Float32(name string) ([]float32, error) {
	t, err := s.lookup(name)
	if err != nil {
		return nil, err
	}
	if t == nil {
		return s.buffers.Float32(name)
	}
	out := make([]float32, t.numel)
	t.generate(out, 0)
	return out, nil
}

// BF16 implements Store; generated tensors are F32, so this is an error
// for them.
func (s *recipeStore) BF16(name string) ([]uint16, error) {
	t, err := s.lookup(name)
	if err != nil {
		return nil, err
	}
	if t == nil {
		return s.buffers.BF16(name)
	}
	return nil, fmt.Errorf("weights: %s: dtype is F32 (generated), not BF16", name)
}

// Rows implements Store, generating only the requested rows.
func (s *recipeStore) Rows(name string, row0 int, dst []float32) error {
	t, err := s.lookup(name)
	if err != nil {
		return err
	}
	if t == nil {
		return s.buffers.Rows(name, row0, dst)
	}
	lo, _, err := rowSpan(name, t.shape, row0, len(dst))
	if err != nil {
		return err
	}
	t.generate(dst, lo)
	return nil
}

// Close implements Store.
func (s *recipeStore) Close() error {
	if s.closed.Swap(true) || s.buffers == nil {
		return nil
	}
	return s.buffers.Close()
}

// generate writes elements [i0, i0+len(dst)) of t into dst.
func (t *recipeTensor) generate(dst []float32, i0 int) {
	if len(dst) < 2*parallelGrain { // one row: no closure to allocate
		Generate(dst, t.seed, t.offset, t.scale, uint64(i0))
		return
	}
	parallelFor(len(dst), func(lo, hi int) {
		Generate(dst[lo:hi], t.seed, t.offset, t.scale, uint64(i0+lo))
	})
}

// Splitmix64 constants of the recipe.
const (
	golden = 0x9E3779B97F4A7C15
	mix1   = 0xBF58476D1CE4E5B9
	mix2   = 0x94D049BB133111EB
)

// Generate writes elements [i0, i0+len(dst)) of the synthetic tensor with
// the given resolved seed, offset and scale (the fixtures' splitmix64
// recipe) into dst:
//
//	z = seed + (i+1)*0x9E3779B97F4A7C15; splitmix64 finaliser on z
//	u = float64(z>>40)/2^24*2 - 1;  w[i] = float32(offset + scale*u)
func Generate(dst []float32, seed uint64, offset, scale float64, i0 uint64) {
	z := seed + (i0+1)*golden
	for k := range dst {
		x := z
		x = (x ^ x>>30) * mix1
		x = (x ^ x>>27) * mix2
		x ^= x >> 31
		// (x>>40)/2^24*2 - 1, exactly; x>>40 < 2^24 fits an int64.
		u := float64(int64(x>>40))*(1.0/(1<<23)) - 1
		// The explicit conversion forbids fusing into an FMA, which would
		// round differently from the reference.
		dst[k] = float32(offset + float64(scale*u))
		z += golden
	}
}
