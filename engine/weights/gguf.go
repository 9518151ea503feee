package weights

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"unsafe"

	"verdict/engine/safefile"
)

// GGUF files (llama.cpp's format, used by Ollama and LM Studio): a header
// (magic "GGUF", version 2 or 3, tensor and key-value counts), the metadata
// key-value pairs, the tensor infos (name, dimensions innermost first, ggml
// type, offset), padding to the alignment (general.alignment, default 32)
// and the tensor data. Everything is little-endian.
//
// ParseGGUF validates all of it before anything is sized by it: every count
// and length is held to the bytes left in the file, and what the parsed
// metadata and tensor infos take in memory to HeaderBudget, charged before
// it is allocated (so a hostile header cannot ask for a huge allocation);
// dimensions are held to their product, offsets to the alignment and the
// data section, and tensors to not overlapping.

const ggufMagic = "GGUF"

// Bounds on a GGUF header beyond the file's own size.
const (
	ggufMaxKeyLen   = 1 << 16 // bytes of a metadata key
	ggufMaxNameLen  = 1 << 12 // bytes of a tensor name
	ggufMaxDims     = 4       // ggml's GGML_MAX_DIMS
	ggufMaxDepth    = 4       // nesting of arrays of arrays
	ggufMaxAlign    = 1 << 20
	ggufDefaultAlgn = 32
)

// GGUFType is a metadata value's type.
type GGUFType uint32

// The metadata value types of the GGUF specification.
const (
	GGUFUint8 GGUFType = iota
	GGUFInt8
	GGUFUint16
	GGUFInt16
	GGUFUint32
	GGUFInt32
	GGUFFloat32
	GGUFBool
	GGUFString
	GGUFArray
	GGUFUint64
	GGUFInt64
	GGUFFloat64
)

var ggufTypeNames = [...]string{"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32", "bool", "string", "array", "uint64", "int64", "float64"}

func (t GGUFType) String() string {
	if int(t) < len(ggufTypeNames) {
		return ggufTypeNames[t]
	}
	return fmt.Sprintf("type %d", uint32(t))
}

// size is the encoded size of a fixed-size scalar (0 for string and array).
func (t GGUFType) size() int {
	switch t {
	case GGUFUint8, GGUFInt8, GGUFBool:
		return 1
	case GGUFUint16, GGUFInt16:
		return 2
	case GGUFUint32, GGUFInt32, GGUFFloat32:
		return 4
	case GGUFUint64, GGUFInt64, GGUFFloat64:
		return 8
	}
	return 0
}

// GGUFValue is one metadata value. Scalars keep their raw little-endian
// bytes; arrays keep their element type and elements.
type GGUFValue struct {
	Type GGUFType
	// Elem is the element type of an array.
	Elem GGUFType
	raw  []byte      // a scalar, or an array of fixed-size elements
	str  string      // a string
	strs []string    // an array of strings
	arr  []GGUFValue // an array of arrays
	n    int         // array length
}

// Len is an array's length (0 for a scalar).
func (v GGUFValue) Len() int { return v.n }

// Int returns an integer scalar (any width or signedness) as int64; ok is
// false for other types or a uint64 above math.MaxInt64.
func (v GGUFValue) Int() (int64, bool) {
	if v.Type == GGUFArray {
		return 0, false
	}
	return scalarInt(v.Type, v.raw)
}

// Float returns a float or integer scalar as float64.
func (v GGUFValue) Float() (float64, bool) {
	switch v.Type {
	case GGUFFloat32:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(v.raw))), true
	case GGUFFloat64:
		return math.Float64frombits(binary.LittleEndian.Uint64(v.raw)), true
	}
	i, ok := v.Int()
	return float64(i), ok
}

// Bool returns a bool scalar.
func (v GGUFValue) Bool() (bool, bool) {
	if v.Type != GGUFBool {
		return false, false
	}
	return v.raw[0] != 0, true
}

// String returns a string scalar.
func (v GGUFValue) Str() (string, bool) {
	return v.str, v.Type == GGUFString
}

// Ints returns an array of integers (or bools) as int64s.
func (v GGUFValue) Ints() ([]int64, bool) {
	if v.Type != GGUFArray {
		return nil, false
	}
	sz := v.Elem.size()
	if sz == 0 || v.Elem == GGUFFloat32 || v.Elem == GGUFFloat64 {
		return nil, false
	}
	out := make([]int64, v.n)
	for i := range out {
		x, ok := scalarInt(v.Elem, v.raw[i*sz:(i+1)*sz])
		if !ok {
			return nil, false
		}
		out[i] = x
	}
	return out, true
}

// Floats returns an array of floats or integers as float64s.
func (v GGUFValue) Floats() ([]float64, bool) {
	if v.Type != GGUFArray {
		return nil, false
	}
	switch v.Elem {
	case GGUFFloat32:
		out := make([]float64, v.n)
		for i := range out {
			out[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(v.raw[4*i:])))
		}
		return out, true
	case GGUFFloat64:
		out := make([]float64, v.n)
		for i := range out {
			out[i] = math.Float64frombits(binary.LittleEndian.Uint64(v.raw[8*i:]))
		}
		return out, true
	}
	ints, ok := v.Ints()
	if !ok {
		return nil, false
	}
	out := make([]float64, len(ints))
	for i, x := range ints {
		out[i] = float64(x)
	}
	return out, true
}

// Strings returns an array of strings.
func (v GGUFValue) Strings() ([]string, bool) {
	if v.Type != GGUFArray || v.Elem != GGUFString {
		return nil, false
	}
	return v.strs, true
}

// Arrays returns an array of arrays.
func (v GGUFValue) Arrays() ([]GGUFValue, bool) {
	if v.Type != GGUFArray || v.Elem != GGUFArray {
		return nil, false
	}
	return v.arr, true
}

func scalarInt(t GGUFType, b []byte) (int64, bool) {
	switch t {
	case GGUFUint8, GGUFBool:
		return int64(b[0]), true
	case GGUFInt8:
		return int64(int8(b[0])), true
	case GGUFUint16:
		return int64(binary.LittleEndian.Uint16(b)), true
	case GGUFInt16:
		return int64(int16(binary.LittleEndian.Uint16(b))), true
	case GGUFUint32:
		return int64(binary.LittleEndian.Uint32(b)), true
	case GGUFInt32:
		return int64(int32(binary.LittleEndian.Uint32(b))), true
	case GGUFUint64:
		u := binary.LittleEndian.Uint64(b)
		if u > math.MaxInt64 {
			return 0, false
		}
		return int64(u), true
	case GGUFInt64:
		return int64(binary.LittleEndian.Uint64(b)), true
	}
	return 0, false
}

// GGUFTensor is one tensor info of a GGUF file.
type GGUFTensor struct {
	Name string
	// Dims are ggml's ne: the innermost (contiguous) dimension first, the
	// reverse of a PyTorch or safetensors shape.
	Dims   []int
	Type   GGMLType
	Offset int64 // from the start of the data section
	numel  int
	data   []byte // the tensor's bytes in the mapped file
}

// Shape is the tensor's shape outermost first (PyTorch order).
func (t *GGUFTensor) Shape() []int {
	s := slices.Clone(t.Dims)
	slices.Reverse(s)
	return s
}

// Bytes is the tensor's size in the file.
func (t *GGUFTensor) Bytes() int { return len(t.data) }

// Data is the tensor's encoded bytes (aliasing the file: read only).
func (t *GGUFTensor) Data() []byte { return t.data }

// GGUF is a parsed, memory-mapped GGUF file.
type GGUF struct {
	Path      string
	Version   uint32
	Alignment int
	// Keys lists the metadata keys in file order.
	Keys    []string
	KV      map[string]GGUFValue
	Tensors []*GGUFTensor
	byName  map[string]*GGUFTensor
	file    *stFile
}

// Tensor returns the tensor of that GGUF name.
func (g *GGUF) Tensor(name string) (*GGUFTensor, bool) {
	t, ok := g.byName[name]
	return t, ok
}

// Arch is general.architecture ("" when absent).
func (g *GGUF) Arch() string {
	s, _ := g.KV["general.architecture"].Str()
	return s
}

// Close unmaps the file.
func (g *GGUF) Close() error {
	if g.file == nil || g.file.data == nil {
		return nil
	}
	var err error
	if g.file.mapped {
		err = unmap(g.file.data)
	}
	g.file.data = nil
	return err
}

// OpenGGUFFile memory-maps and parses a GGUF file.
func OpenGGUFFile(path string) (*GGUF, error) {
	fh, fi, err := safefile.Open(path)
	if err != nil {
		return nil, fmt.Errorf("weights: %w", err)
	}
	defer fh.Close()
	size := fi.Size()
	if size < 24 {
		return nil, fmt.Errorf("weights: %s: file is %d bytes, too short for a GGUF header", path, size)
	}
	if size > math.MaxInt {
		return nil, fmt.Errorf("weights: %s: file of %d bytes too large to map", path, size)
	}
	data, mapped, err := mapFile(fh, int(size))
	if err != nil {
		return nil, fmt.Errorf("weights: %s: mmap: %w", path, err)
	}
	f := &stFile{path: path, data: data, mapped: mapped}
	g, err := parseGGUF(f)
	if err != nil {
		if mapped {
			unmap(data)
		}
		return nil, err
	}
	return g, nil
}

// ParseGGUF parses GGUF bytes held in memory (not copied: the tensors alias
// data).
func ParseGGUF(name string, data []byte) (*GGUF, error) {
	return parseGGUF(&stFile{path: name, data: data})
}

// ggufReader reads the header, refusing to read past the end and charging
// what the parsed values cost to a memory budget before allocating them.
type ggufReader struct {
	b   []byte
	off int
	err error
	mem *memBudget
	// item and name say what is being read ("metadata key", "general.name"),
	// for errors; name is empty when there is none yet.
	item, name string
}

// at sets what is being read.
func (r *ggufReader) at(item, name string) { r.item, r.name = item, name }

func (r *ggufReader) fail(format string, a ...any) {
	if r.err != nil {
		return
	}
	where := fmt.Sprintf("at byte %d: ", r.off)
	if r.name != "" {
		where += fmt.Sprintf("%s %s: ", r.item, quoted(r.name))
	}
	r.err = errors.New(where + fmt.Sprintf(format, a...))
}

// charge takes n bytes of the budget, failing the read when they are not
// left.
func (r *ggufReader) charge(n int) bool {
	if r.err != nil {
		return false
	}
	if err := r.mem.take(int64(n), r.item, r.name); err != nil {
		r.err = fmt.Errorf("at byte %d: %w", r.off, err)
		return false
	}
	return true
}

func (r *ggufReader) left() int { return len(r.b) - r.off }

func (r *ggufReader) bytes(n int, what string) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > r.left() {
		r.fail("%s needs %d bytes, %d left (file truncated?)", what, n, r.left())
		return nil
	}
	b := r.b[r.off : r.off+n : r.off+n]
	r.off += n
	return b
}

func (r *ggufReader) u32(what string) uint32 {
	b := r.bytes(4, what)
	if b == nil {
		return 0
	}
	return binary.LittleEndian.Uint32(b)
}

func (r *ggufReader) u64(what string) uint64 {
	b := r.bytes(8, what)
	if b == nil {
		return 0
	}
	return binary.LittleEndian.Uint64(b)
}

// count reads a uint64 count of items of at least minSize bytes each,
// holds it to the bytes left and charges cost bytes for each item.
func (r *ggufReader) count(what string, minSize, cost int) int {
	n := r.u64(what)
	if r.err != nil {
		return 0
	}
	if n > uint64(r.left()/minSize) {
		r.fail("%s %d is more than the %d bytes left can hold", what, n, r.left())
		return 0
	}
	if !r.charge(heapSize(int(n) * cost)) {
		return 0
	}
	return int(n)
}

// str reads a string of at most max bytes, charging its copy.
func (r *ggufReader) str(what string, max int) string {
	b := r.strBytes(what, max)
	if b == nil || !r.charge(heapSize(len(b))) {
		return ""
	}
	return string(b)
}

// strBytes reads a string of at most max bytes, leaving it in the file.
func (r *ggufReader) strBytes(what string, max int) []byte {
	n := r.u64(what + " length")
	if r.err != nil {
		return nil
	}
	if n > uint64(max) {
		r.fail("%s length %d over the limit of %d", what, n, max)
		return nil
	}
	return r.bytes(int(n), what)
}

// named reads a key or tensor name of at most max bytes (what names it in
// errors) and makes it what is being read, charging its copy first.
func (r *ggufReader) named(item, what string, max int) string {
	r.at(item, "")
	b := r.strBytes(what, max)
	if r.err != nil {
		return ""
	}
	if err := r.mem.take(int64(heapSize(len(b))), item, ""); err != nil {
		err.(*BudgetError).Name = string(b)
		r.err = fmt.Errorf("at byte %d: %w", r.off, err)
		return ""
	}
	r.at(item, string(b))
	return r.name
}

// Memory costs of a parsed GGUF header's parts, beyond the strings' bytes
// (charged as they are read): a metadata value, a key-value pair (its map
// slot and its place in Keys) and a tensor info (the struct, its place in
// Tensors, its map slot and its span in the overlap check). The maps and
// slices are made at their full size once their counts are charged, so
// none grows.
var (
	ggufValueCost  = int(unsafe.Sizeof(GGUFValue{}))
	ggufKVCost     = mapEntry(strHeader+ggufValueCost) + strHeader
	ggufTensorCost = heapSize(int(unsafe.Sizeof(GGUFTensor{}))) + ptrSize + mapEntry(strHeader+ptrSize) + int(unsafe.Sizeof(span{}))
)

func (r *ggufReader) value(t GGUFType, depth int) GGUFValue {
	v := GGUFValue{Type: t}
	switch {
	case t.size() > 0:
		v.raw = r.bytes(t.size(), "value")
	case t == GGUFString:
		v.str = r.str("string", r.left())
	case t == GGUFArray:
		if depth >= ggufMaxDepth {
			r.fail("arrays nested deeper than %d", ggufMaxDepth)
			return v
		}
		v.Elem = GGUFType(r.u32("array element type"))
		if r.err != nil {
			return v
		}
		switch {
		case v.Elem.size() > 0:
			// The elements stay in the file's bytes: nothing to charge.
			v.n = r.count("array length", v.Elem.size(), 0)
			v.raw = r.bytes(v.n*v.Elem.size(), "array")
		case v.Elem == GGUFString:
			v.n = r.count("array length", 8, strHeader)
			if r.err != nil {
				return v
			}
			v.strs = make([]string, v.n)
			for i := 0; i < v.n && r.err == nil; i++ {
				v.strs[i] = r.str("string", r.left())
			}
		case v.Elem == GGUFArray:
			v.n = r.count("array length", 12, ggufValueCost)
			if r.err != nil {
				return v
			}
			v.arr = make([]GGUFValue, v.n)
			for i := 0; i < v.n && r.err == nil; i++ {
				v.arr[i] = r.value(GGUFArray, depth+1)
			}
		default:
			r.fail("unknown array element type %d", uint32(v.Elem))
		}
	default:
		r.fail("unknown value type %d", uint32(t))
	}
	return v
}

func parseGGUF(f *stFile) (*GGUF, error) {
	g, err := parseGGUFHeader(f, newBudget("gguf", HeaderBudget))
	if err != nil {
		return nil, fmt.Errorf("weights: %s: %w", f.path, err)
	}
	return g, nil
}

// parseGGUFHeader parses f's header within the memory budget mem.
func parseGGUFHeader(f *stFile, mem *memBudget) (*GGUF, error) {
	r := &ggufReader{b: f.data, mem: mem}
	if string(r.bytes(4, "magic")) != ggufMagic {
		return nil, errors.New("not a GGUF file (no GGUF magic)")
	}
	g := &GGUF{Path: f.path, file: f}
	g.Version = r.u32("version")
	switch {
	case r.err != nil:
		return nil, r.err
	case g.Version == 1:
		return nil, errors.New("GGUF version 1 is not supported (only 2 and 3); convert the file again with a current llama.cpp")
	case g.Version&0xffff == 0 && g.Version>>16 != 0:
		return nil, fmt.Errorf("GGUF version %#x: a big-endian file, not supported", g.Version)
	case g.Version != 2 && g.Version != 3:
		return nil, fmt.Errorf("GGUF version %d is not supported (only 2 and 3)", g.Version)
	}
	// A tensor info is at least 8+4+4+8 bytes (no name, no dimensions), a
	// key-value pair 8+4+1. Both counts are charged before the tables they
	// size are made; names, keys and values as they are read.
	r.at("tensor infos", "")
	nTensors := r.count("tensor count", 24, ggufTensorCost)
	r.at("metadata", "")
	nKV := r.count("metadata count", 13, ggufKVCost)
	if r.err != nil {
		return nil, r.err
	}
	g.KV = make(map[string]GGUFValue, nKV)
	g.Keys = make([]string, 0, nKV)
	g.byName = make(map[string]*GGUFTensor, nTensors)
	g.Alignment = ggufDefaultAlgn
	for i := 0; i < nKV && r.err == nil; i++ {
		key := r.named("metadata key", "metadata key", ggufMaxKeyLen)
		t := GGUFType(r.u32("value type"))
		v := r.value(t, 0)
		if r.err != nil {
			break
		}
		if _, dup := g.KV[key]; dup {
			return nil, fmt.Errorf("metadata key %s appears twice", quoted(key))
		}
		g.KV[key] = v
		g.Keys = append(g.Keys, key)
	}
	if r.err != nil {
		return nil, r.err
	}
	if v, ok := g.KV["general.alignment"]; ok {
		a, isInt := v.Int()
		if !isInt || v.Type != GGUFUint32 {
			return nil, fmt.Errorf("general.alignment is a %s, want uint32", v.Type)
		}
		if a <= 0 || a > ggufMaxAlign || a&(a-1) != 0 {
			return nil, fmt.Errorf("general.alignment %d is not a power of two from 1 to %d", a, ggufMaxAlign)
		}
		g.Alignment = int(a)
	}
	g.Tensors = make([]*GGUFTensor, 0, nTensors)
	for i := 0; i < nTensors && r.err == nil; i++ {
		t := &GGUFTensor{}
		t.Name = r.named("tensor", "tensor name", ggufMaxNameLen)
		nd := r.u32("dimension count")
		if r.err != nil {
			break
		}
		if nd > ggufMaxDims {
			return nil, fmt.Errorf("tensor %s has %d dimensions, more than %d", quoted(t.Name), nd, ggufMaxDims)
		}
		if !r.charge(heapSize(int(nd) * intSize)) {
			break
		}
		t.Dims = make([]int, nd)
		for j := range t.Dims {
			d := r.u64("dimension")
			if d > 1<<53 {
				return nil, fmt.Errorf("tensor %s: dimension %d too large", quoted(t.Name), d)
			}
			t.Dims[j] = int(d)
		}
		t.Type = GGMLType(r.u32("ggml type"))
		off := r.u64("offset")
		if r.err != nil {
			break
		}
		if off > math.MaxInt64 {
			return nil, fmt.Errorf("tensor %s: offset %d too large", quoted(t.Name), off)
		}
		t.Offset = int64(off)
		if _, dup := g.byName[t.Name]; dup {
			return nil, fmt.Errorf("tensor %s appears twice", quoted(t.Name))
		}
		g.byName[t.Name] = t
		g.Tensors = append(g.Tensors, t)
	}
	if r.err != nil {
		return nil, r.err
	}
	start := (r.off + g.Alignment - 1) / g.Alignment * g.Alignment
	if start > len(f.data) {
		start = len(f.data)
	}
	body := f.data[start:]
	spans := make([]span, 0, len(g.Tensors))
	for _, t := range g.Tensors {
		if err := t.place(body, g.Alignment); err != nil {
			return nil, err
		}
		spans = append(spans, span{t.Name, t.Offset, t.Offset + int64(len(t.data))})
	}
	if err := checkOverlap(spans); err != nil {
		return nil, err
	}
	return g, nil
}

// place checks a tensor's type, dimensions and offset against the data
// section and points it at its bytes.
func (t *GGUFTensor) place(body []byte, align int) error {
	tt, ok := ggmlTypes[t.Type]
	if !ok {
		return fmt.Errorf("tensor %s: unknown ggml type %d", quoted(t.Name), uint32(t.Type))
	}
	n, err := numel(t.Dims)
	if err != nil {
		return fmt.Errorf("tensor %s: %w", quoted(t.Name), err)
	}
	t.numel = n
	if len(t.Dims) > 0 && t.Dims[0]%tt.block != 0 {
		return fmt.Errorf("tensor %s: row length %d is not a multiple of %s's block of %d", quoted(t.Name), t.Dims[0], tt.name, tt.block)
	}
	if len(t.Dims) == 0 && tt.block != 1 {
		return fmt.Errorf("tensor %s: a scalar of block type %s", quoted(t.Name), tt.name)
	}
	size := int64(n/tt.block) * int64(tt.size)
	if t.Offset%int64(align) != 0 {
		return fmt.Errorf("tensor %s: offset %d is not a multiple of the alignment %d", quoted(t.Name), t.Offset, align)
	}
	if t.Offset > int64(len(body)) || size > int64(len(body))-t.Offset {
		return fmt.Errorf("tensor %s: data [%d, %d) beyond the %d-byte data section (file truncated?)", quoted(t.Name), t.Offset, t.Offset+size, len(body))
	}
	t.data = body[t.Offset : t.Offset+size : t.Offset+size]
	return nil
}

// TypeCounts summarises the tensor types of a file ("Q4_K×120, F32×300"),
// for display.
func (g *GGUF) TypeCounts() string {
	counts := map[string]int{}
	for _, t := range g.Tensors {
		counts[t.Type.String()]++
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		if counts[a] != counts[b] {
			return counts[b] - counts[a]
		}
		return strings.Compare(a, b)
	})
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s×%d", k, counts[k]))
	}
	return strings.Join(parts, ", ")
}

// GGUFInfo summarises a GGUF file for a model list.
type GGUFInfo struct {
	Arch, Name string
	// Quant is the type holding most of the weights' bytes ("Q4_K", "F16").
	Quant   string
	Types   string // every type with its tensor count (TypeCounts)
	Tensors int
	Params  int64 // elements over all tensors
	Bytes   int64 // the file's size
}

// InspectGGUF reads a GGUF file's header and summarises it.
func InspectGGUF(path string) (GGUFInfo, error) {
	g, err := OpenGGUFFile(path)
	if err != nil {
		return GGUFInfo{}, err
	}
	defer g.Close()
	info := GGUFInfo{Arch: g.Arch(), Types: g.TypeCounts(), Tensors: len(g.Tensors), Bytes: int64(len(g.file.data))}
	info.Name, _ = g.KV["general.name"].Str()
	bytes := map[GGMLType]int{}
	for _, t := range g.Tensors {
		info.Params += int64(t.numel)
		bytes[t.Type] += len(t.data)
	}
	best := -1
	for t, n := range bytes {
		if n > best || n == best && t.String() < info.Quant {
			best, info.Quant = n, t.String()
		}
	}
	return info, nil
}
