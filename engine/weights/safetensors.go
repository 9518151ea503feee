package weights

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
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
// data offsets inside the file and data sizes matching shape and dtype.
// Tensors of safetensors dtypes other than F32, BF16 and F16 (F64, I64, U8,
// ...) are listed and sized, but reading them gives an error; an unknown
// dtype string makes the file fail to open.
func OpenSafetensors(paths ...string) (Store, error) {
	if len(paths) == 0 {
		return nil, errors.New("weights: OpenSafetensors: no files")
	}
	s := &stStore{tensors: map[string]*stTensor{}}
	for _, p := range paths {
		f, err := mapSafetensors(p)
		if err != nil {
			s.Close()
			return nil, err
		}
		s.files = append(s.files, f)
		if err := s.add(f); err != nil {
			s.Close()
			return nil, err
		}
	}
	s.finish()
	return s, nil
}

// newMemStore serves safetensors bytes held in memory (never zero-copy).
func newMemStore(path string, data []byte) (*stStore, error) {
	f := &stFile{path: path, data: data}
	s := &stStore{tensors: map[string]*stTensor{}, files: []*stFile{f}}
	if err := s.add(f); err != nil {
		return nil, err
	}
	s.finish()
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

// add parses f's header and adds its tensors.
func (s *stStore) add(f *stFile) error {
	ts, err := parseSafetensors(f)
	if err != nil {
		return err
	}
	for name, t := range ts {
		if old, ok := s.tensors[name]; ok {
			return fmt.Errorf("weights: tensor %q is in both %s and %s", name, old.file.path, f.path)
		}
		s.tensors[name] = t
	}
	return nil
}

func (s *stStore) finish() {
	s.names = make([]string, 0, len(s.tensors))
	for name := range s.tensors {
		s.names = append(s.names, name)
	}
	slices.Sort(s.names)
}

// parseSafetensors validates f's header and returns its tensors.
func parseSafetensors(f *stFile) (map[string]*stTensor, error) {
	data := f.data
	if len(data) < 8 {
		return nil, fmt.Errorf("weights: %s: file is %d bytes, too short for a safetensors header", f.path, len(data))
	}
	n := binary.LittleEndian.Uint64(data)
	if n > uint64(len(data)-8) {
		return nil, fmt.Errorf("weights: %s: header length %d exceeds the %d-byte file (truncated or not safetensors)", f.path, n, len(data))
	}
	if n > maxHeader {
		return nil, fmt.Errorf("weights: %s: header length %d over the %d-byte limit", f.path, n, maxHeader)
	}
	hdr := data[8 : 8+n]
	body := data[8+n:]
	var entries map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(hdr))
	if err := dec.Decode(&entries); err != nil {
		return nil, fmt.Errorf("weights: %s: bad header: %w", f.path, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("weights: %s: bad header: data after the JSON object", f.path)
	}
	if entries == nil {
		return nil, fmt.Errorf("weights: %s: bad header: not a JSON object", f.path)
	}
	out := make(map[string]*stTensor, len(entries))
	spans := make([]span, 0, len(entries))
	for name, raw := range entries {
		if name == "__metadata__" {
			continue
		}
		var e struct {
			Dtype       string  `json:"dtype"`
			Shape       []int   `json:"shape"`
			DataOffsets []int64 `json:"data_offsets"`
		}
		if err := json.Unmarshal(raw, &e); err != nil {
			return nil, fmt.Errorf("weights: %s: tensor %q: bad header entry: %w", f.path, name, err)
		}
		if e.Shape == nil {
			return nil, fmt.Errorf("weights: %s: tensor %q: no shape", f.path, name)
		}
		if len(e.DataOffsets) != 2 {
			return nil, fmt.Errorf("weights: %s: tensor %q: data_offsets %v is not [begin, end]", f.path, name, e.DataOffsets)
		}
		size, ok := dtypeSize[e.Dtype]
		if !ok {
			return nil, fmt.Errorf("weights: %s: tensor %q: unknown dtype %q", f.path, name, e.Dtype)
		}
		count, err := numel(e.Shape)
		if err != nil {
			return nil, fmt.Errorf("weights: %s: tensor %q: %w", f.path, name, err)
		}
		b, end := e.DataOffsets[0], e.DataOffsets[1]
		if b < 0 || end < b {
			return nil, fmt.Errorf("weights: %s: tensor %q: bad data_offsets [%d, %d]", f.path, name, b, end)
		}
		if end > int64(len(body)) {
			return nil, fmt.Errorf("weights: %s: tensor %q: data [%d, %d) beyond the %d-byte data section (file truncated?)", f.path, name, b, end, len(body))
		}
		if want := int64(count) * int64(size); end-b != want {
			return nil, fmt.Errorf("weights: %s: tensor %q: %d data bytes, want %d for %s %v", f.path, name, end-b, want, e.Dtype, e.Shape)
		}
		out[name] = &stTensor{file: f, dtype: e.Dtype, shape: e.Shape, numel: count, raw: body[b:end:end]}
		spans = append(spans, span{name, b, end})
	}
	if err := checkOverlap(spans); err != nil {
		return nil, fmt.Errorf("weights: %s: %w", f.path, err)
	}
	return out, nil
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
			return fmt.Errorf("tensors %q [%d, %d) and %q [%d, %d) overlap in the data section", last.name, last.begin, last.end, s.name, s.begin, s.end)
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
