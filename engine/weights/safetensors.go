package weights

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"unsafe"

	"verdict/engine/safefile"
)

// maxHeader bounds the JSON header, as the reference safetensors reader does.
const maxHeader = 100 << 20

// stFile is one safetensors file, mapped or held in memory.
type stFile struct {
	path   string
	data   []byte // the whole file
	mapped bool   // data is a read-only mapping, released by unmap
}

// stTensor is one tensor of a safetensors file.
type stTensor struct {
	name  string
	file  *stFile
	dtype string
	shape []int
	numel int
	raw   []byte // the tensor's bytes inside file.data
}

// stStore serves the tensors of one or more safetensors files.
type stStore struct {
	mu      sync.RWMutex
	closed  bool
	files   []*stFile
	tensors map[string]*stTensor
	names   []string
}

// OpenSafetensors memory-maps one or more .safetensors files and serves
// their tensors together; a name held by two files is an error. The header
// of every file is validated when it opens: header length, JSON, shapes,
// data offsets inside the file and data sizes matching shape and dtype; what
// the headers take parsed is held to HeaderBudget, all files together.
// Tensors of safetensors dtypes other than F32, BF16 and F16 (F64, I64, U8,
// ...) are listed and sized, but reading them gives an error; an unknown
// dtype string makes the file fail to open.
func OpenSafetensors(paths ...string) (Store, error) {
	s, err := openSafetensors(newBudget("safetensors", HeaderBudget), paths...)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// openSafetensors is OpenSafetensors within the memory budget mem.
func openSafetensors(mem *memBudget, paths ...string) (*stStore, error) {
	if len(paths) == 0 {
		return nil, errors.New("weights: OpenSafetensors: no files")
	}
	mem.format = "safetensors"
	s := &stStore{}
	var parts [][]*stTensor
	for _, p := range paths {
		f, err := mapSafetensors(p)
		if err != nil {
			s.Close()
			return nil, err
		}
		s.files = append(s.files, f)
		ts, err := parseSafetensors(f, mem)
		if err != nil {
			s.Close()
			return nil, err
		}
		parts = append(parts, ts)
	}
	if err := s.index(parts); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// newMemStore serves safetensors bytes held in memory (never zero-copy).
func newMemStore(path string, data []byte) (*stStore, error) {
	f := &stFile{path: path, data: data}
	ts, err := parseSafetensors(f, newBudget("safetensors", HeaderBudget))
	if err != nil {
		return nil, err
	}
	s := &stStore{files: []*stFile{f}}
	if err := s.index([][]*stTensor{ts}); err != nil {
		return nil, err
	}
	return s, nil
}

func mapSafetensors(path string) (*stFile, error) {
	fh, fi, err := safefile.Open(path) // only a regular file is mapped
	if err != nil {
		return nil, fmt.Errorf("weights: %w", err)
	}
	defer fh.Close()
	size := fi.Size()
	if size < 8 {
		return nil, fmt.Errorf("weights: %s: file is %d bytes, too short for a safetensors header", path, size)
	}
	if size > math.MaxInt {
		return nil, fmt.Errorf("weights: %s: file of %d bytes too large to map", path, size)
	}
	data, mapped, err := mapFile(fh, int(size))
	if err != nil {
		return nil, fmt.Errorf("weights: %s: mmap: %w", path, err)
	}
	return &stFile{path: path, data: data, mapped: mapped}, nil
}

// index serves the tensors of every file's parsed header (their costs
// charged already), refusing a name held by two files.
func (s *stStore) index(parts [][]*stTensor) error {
	n := 0
	for _, ts := range parts {
		n += len(ts)
	}
	s.tensors = make(map[string]*stTensor, n)
	s.names = make([]string, 0, n)
	for _, ts := range parts {
		for _, t := range ts {
			if old, ok := s.tensors[t.name]; ok {
				return fmt.Errorf("weights: tensor %s is in both %s and %s", quoted(t.name), old.file.path, t.file.path)
			}
			s.tensors[t.name] = t
			s.names = append(s.names, t.name)
		}
	}
	slices.Sort(s.names)
	return nil
}

// Bounds on a safetensors header's entries.
const (
	maxTensorName = 1 << 16 // bytes of a tensor name (as encoded)
	maxDtypeName  = 16      // bytes of a dtype
	maxShape      = 64      // dimensions of a shape
)

// stEntryCost is the memory a tensor entry takes beyond its name and shape:
// the tensor, its place in the file's list, its span in the overlap check,
// its slot in the store's map and its place in the store's names.
var stEntryCost = heapSize(int(unsafe.Sizeof(stTensor{}))) + ptrSize + int(unsafe.Sizeof(span{})) + mapEntry(strHeader+ptrSize) + strHeader

// parseSafetensors validates f's header and returns its tensors, sorted by
// name, charging what they take to mem before allocating it.
func parseSafetensors(f *stFile, mem *memBudget) ([]*stTensor, error) {
	fail := func(format string, a ...any) error {
		return fmt.Errorf("weights: %s: "+format, append([]any{f.path}, a...)...)
	}
	data := f.data
	if len(data) < 8 {
		return nil, fail("file is %d bytes, too short for a safetensors header", len(data))
	}
	n := binary.LittleEndian.Uint64(data)
	if n > uint64(len(data)-8) {
		return nil, fail("header length %d exceeds the %d-byte file (truncated or not safetensors)", n, len(data))
	}
	if n > maxHeader {
		return nil, fail("header length %d over the %d-byte limit", n, maxHeader)
	}
	hdr := data[8 : 8+n]
	body := data[8+n:]
	if err := checkJSON(hdr); err != nil {
		return nil, fail("bad header: %w", err)
	}
	count, err := jsonCount(hdr, '{')
	if err != nil {
		return nil, fail("bad header: %w", err)
	}
	if err := mem.take(int64(heapSize(count*stEntryCost)), "tensor entries", ""); err != nil {
		return nil, fail("%w", err)
	}
	out := make([]*stTensor, 0, count)
	spans := make([]span, 0, count)
	err = jsonMembers(hdr, func(key, val []byte) error {
		if err := mem.take(int64(heapSize(len(key))), "tensor name", ""); err != nil {
			return err
		}
		name, err := jsonString(key, maxTensorName, "tensor name")
		if err != nil || name == "__metadata__" {
			return err
		}
		t, sp, err := parseEntry(name, val, int64(len(body)), mem)
		if err != nil {
			return err
		}
		t.file, t.raw = f, body[sp.begin:sp.end:sp.end]
		out = append(out, t)
		spans = append(spans, sp)
		return nil
	})
	if err != nil {
		return nil, fail("%w", err)
	}
	slices.SortFunc(out, func(a, b *stTensor) int { return strings.Compare(a.name, b.name) })
	for i := 1; i < len(out); i++ {
		if out[i].name == out[i-1].name {
			return nil, fail("tensor %s appears twice in the header", quoted(out[i].name))
		}
	}
	if err := checkOverlap(spans); err != nil {
		return nil, fail("%w", err)
	}
	return out, nil
}

// parseEntry reads the header entry of tensor name and checks it against a
// data section of size bytes, charging its shape to mem.
func parseEntry(name string, entry []byte, size int64, mem *memBudget) (*stTensor, span, error) {
	fail := func(format string, a ...any) (*stTensor, span, error) {
		return nil, span{}, fmt.Errorf("tensor %s: "+format, append([]any{quoted(name)}, a...)...)
	}
	var (
		dtype    string
		shape    []int
		offsets  []int64
		hasShape bool
	)
	err := jsonMembers(entry, func(key, v []byte) error {
		var err error
		switch string(key) {
		case `"dtype"`:
			dtype, err = jsonString(v, maxDtypeName, "dtype")
			if k, ok := knownDtype(dtype); ok {
				dtype = k // the table's string, not one allocated per tensor
			}
		case `"shape"`:
			if hasShape = string(v) != "null"; hasShape {
				if n, cerr := jsonCount(v, '['); cerr == nil {
					if err = mem.take(int64(heapSize(min(n, maxShape)*intSize)), "tensor", name); err != nil {
						return err
					}
				}
				shape, err = jsonInts[int](v, maxShape, "shape")
			}
		case `"data_offsets"`:
			if n, cerr := jsonCount(v, '['); cerr != nil || n != 2 {
				return fmt.Errorf("data_offsets %s is not [begin, end]", excerpt(v))
			}
			offsets, err = jsonInts[int64](v, 2, "data_offsets")
		}
		return err
	})
	switch {
	case err != nil:
		var be *BudgetError
		if errors.As(err, &be) {
			return nil, span{}, err
		}
		return fail("bad header entry: %w", err)
	case !hasShape:
		return fail("no shape")
	case offsets == nil:
		return fail("data_offsets missing, want [begin, end]")
	}
	size1, ok := dtypeSize[dtype]
	if !ok {
		return fail("unknown dtype %q", dtype)
	}
	count, err := numel(shape)
	if err != nil {
		return fail("%w", err)
	}
	b, end := offsets[0], offsets[1]
	if b < 0 || end < b {
		return fail("bad data_offsets [%d, %d]", b, end)
	}
	if end > size {
		return fail("data [%d, %d) beyond the %d-byte data section (file truncated?)", b, end, size)
	}
	if want := int64(count) * int64(size1); end-b != want {
		return fail("%d data bytes, want %d for %s %v", end-b, want, dtype, shape)
	}
	return &stTensor{name: name, dtype: dtype, shape: shape, numel: count}, span{name, b, end}, nil
}

// knownDtype returns the dtypeSize key equal to dtype.
func knownDtype(dtype string) (string, bool) {
	for k := range dtypeSize {
		if k == dtype {
			return k, true
		}
	}
	return "", false
}

// span is one tensor's data_offsets.
type span struct {
	name       string
	begin, end int64
}

// checkOverlap refuses two tensors whose data share bytes (empty tensors
// share none).
func checkOverlap(spans []span) error {
	slices.SortFunc(spans, func(a, b span) int {
		if a.begin != b.begin {
			return cmp.Compare(a.begin, b.begin)
		}
		return cmp.Compare(a.end, b.end)
	})
	var last *span
	for i := range spans {
		s := &spans[i]
		if s.begin == s.end {
			continue
		}
		if last != nil && s.begin < last.end {
			return fmt.Errorf("tensors %s [%d, %d) and %s [%d, %d) overlap in the data section", quoted(last.name), last.begin, last.end, quoted(s.name), s.begin, s.end)
		}
		last = s
	}
	return nil
}

// Info implements Store.
func (s *stStore) Info(name string) ([]int, string, bool) {
	t, ok := s.tensors[name]
	if !ok {
		return nil, "", false
	}
	return copyShape(t.shape), t.dtype, true
}

// Names implements Store.
func (s *stStore) Names() []string {
	return slices.Clone(s.names)
}

// lookup returns a readable tensor; the caller holds s.mu.RLock.
func (s *stStore) lookup(name string) (*stTensor, error) {
	if s.closed {
		return nil, errClosed
	}
	t, ok := s.tensors[name]
	if !ok {
		return nil, fmt.Errorf("weights: %s: %w", name, ErrNotFound)
	}
	if !readable(t.dtype) {
		return nil, fmt.Errorf("weights: %s: %s: dtype %s cannot be read as float32", t.file.path, name, t.dtype)
	}
	return t, nil
}

// Float32 implements Store. F32 data of a mapped file is returned zero-copy
// when it is 4-byte aligned on a little-endian host; anything else is a copy.
func (s *stStore) Float32(name string) ([]float32, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	t, err := s.lookup(name)
	if err != nil {
		return nil, err
	}
	if t.numel == 0 {
		return []float32{}, nil
	}
	if t.dtype == "F32" && t.file.mapped && littleEndian && aligned(t.raw, 4) {
		return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(t.raw))), t.numel), nil
	}
	out := make([]float32, t.numel)
	decode(out, t.dtype, t.raw)
	return out, nil
}

// BF16 implements Store. The bits are zero-copy from a mapped file when
// 2-byte aligned on a little-endian host, else a copy.
func (s *stStore) BF16(name string) ([]uint16, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	t, err := s.lookup(name)
	if err != nil {
		return nil, err
	}
	if t.dtype != "BF16" {
		return nil, fmt.Errorf("weights: %s: %s: dtype is %s, not BF16", t.file.path, name, t.dtype)
	}
	if t.numel == 0 {
		return []uint16{}, nil
	}
	if t.file.mapped && littleEndian && aligned(t.raw, 2) {
		return unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(t.raw))), t.numel), nil
	}
	out := make([]uint16, t.numel)
	for i := range out {
		out[i] = binary.LittleEndian.Uint16(t.raw[2*i:])
	}
	return out, nil
}

// Rows implements Store.
func (s *stStore) Rows(name string, row0 int, dst []float32) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	t, err := s.lookup(name)
	if err != nil {
		return err
	}
	lo, hi, err := rowSpan(name, t.shape, row0, len(dst))
	if err != nil {
		return err
	}
	size := dtypeSize[t.dtype]
	decode(dst, t.dtype, t.raw[lo*size:hi*size])
	return nil
}

// Close implements Store: it unmaps every file. Slices returned zero-copy
// must not be used afterwards.
func (s *stStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	var first error
	for _, f := range s.files {
		if f.mapped {
			if err := unmap(f.data); err != nil && first == nil {
				first = fmt.Errorf("weights: %s: munmap: %w", f.path, err)
			}
		}
		f.data = nil
	}
	return first
}
