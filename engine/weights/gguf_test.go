package weights_test

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"verdict/engine/weights"
	"verdict/engine/weights/ggufwrite"
)

func gguf(t testing.TB, opt ggufwrite.Options, kvs []ggufwrite.KV, ts []ggufwrite.Tensor) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := ggufwrite.Write(&b, opt, kvs, ts); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func f32data(v ...float32) []byte {
	var b []byte
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return b
}

// Every metadata type reads back, arrays included, and tensors sit at the
// alignment general.alignment asks for.
func TestGGUFMetadataAndAlignment(t *testing.T) {
	kvs := ggufwrite.KVs(
		"general.alignment", uint32(64),
		"u8", uint8(200), "i8", int8(-5), "u16", uint16(60000), "i16", int16(-300),
		"u32", uint32(4000000000), "i32", int32(-7), "f32", float32(0.25), "b", true,
		"s", "héllo", "u64", uint64(1<<40), "i64", int64(-1<<40), "f64", 1e-300,
		"ai", []int32{1, -2, 3}, "af", []float32{0.5, -1}, "ab", []bool{true, false},
		"as", []string{"a", "", "ccc"}, "aa", [][]int32{{1}, {2, 3}},
	)
	ts := []ggufwrite.Tensor{
		{Name: "a", Dims: []int{3}, Type: weights.GGMLF32, Data: f32data(1, 2, 3)},
		{Name: "b", Dims: []int{2, 1}, Type: weights.GGMLF32, Data: f32data(4, 5)},
	}
	for _, version := range []uint32{2, 3} {
		g, err := weights.ParseGGUF("mem", gguf(t, ggufwrite.Options{Version: version, Alignment: 64}, kvs, ts))
		if err != nil {
			t.Fatal(err)
		}
		if g.Version != version || g.Alignment != 64 || len(g.Keys) != len(kvs) {
			t.Fatalf("version %d alignment %d keys %d", g.Version, g.Alignment, len(g.Keys))
		}
		ints := map[string]int64{"u8": 200, "i8": -5, "u16": 60000, "i16": -300, "u32": 4000000000, "i32": -7, "u64": 1 << 40, "i64": -1 << 40, "b": 1}
		for k, want := range ints {
			if got, ok := g.KV[k].Int(); !ok || got != want {
				t.Errorf("%s = %d, %v; want %d", k, got, ok, want)
			}
		}
		if f, _ := g.KV["f32"].Float(); f != 0.25 {
			t.Errorf("f32 = %g", f)
		}
		if f, _ := g.KV["f64"].Float(); f != 1e-300 {
			t.Errorf("f64 = %g", f)
		}
		if s, _ := g.KV["s"].Str(); s != "héllo" {
			t.Errorf("s = %q", s)
		}
		if v, _ := g.KV["ai"].Ints(); len(v) != 3 || v[1] != -2 {
			t.Errorf("ai = %v", v)
		}
		if v, _ := g.KV["af"].Floats(); len(v) != 2 || v[1] != -1 {
			t.Errorf("af = %v", v)
		}
		if v, _ := g.KV["ab"].Ints(); len(v) != 2 || v[0] != 1 || v[1] != 0 {
			t.Errorf("ab = %v", v)
		}
		if v, _ := g.KV["as"].Strings(); strings.Join(v, ",") != "a,,ccc" {
			t.Errorf("as = %q", v)
		}
		if v, _ := g.KV["aa"].Arrays(); len(v) != 2 || v[1].Len() != 2 {
			t.Errorf("aa = %v", v)
		}
		b, _ := g.Tensor("b")
		if b.Offset != 64 || b.Shape()[0] != 1 || b.Shape()[1] != 2 {
			t.Errorf("tensor b at %d shape %v, want offset 64 shape [1 2]", b.Offset, b.Shape())
		}
	}
}

// header builds raw header bytes for hostile-input cases.
type header struct{ bytes.Buffer }

func (h *header) u32(v uint32) *header { binary.Write(h, binary.LittleEndian, v); return h }
func (h *header) u64(v uint64) *header { binary.Write(h, binary.LittleEndian, v); return h }
func (h *header) str(s string) *header { h.u64(uint64(len(s))); h.WriteString(s); return h }
func start(version uint32, tensors, kvs uint64) *header {
	h := &header{}
	h.WriteString("GGUF")
	return h.u32(version).u64(tensors).u64(kvs)
}

// A tensor info: name, dims, type, offset.
func (h *header) tensor(name string, typ uint32, off uint64, dims ...uint64) *header {
	h.str(name).u32(uint32(len(dims)))
	for _, d := range dims {
		h.u64(d)
	}
	return h.u32(typ).u64(off)
}

func (h *header) pad(n int) *header { h.Write(make([]byte, n)); return h }

// Hostile headers fail with an error naming the problem, before anything is
// sized by them.
func TestGGUFHostile(t *testing.T) {
	valid := gguf(t, ggufwrite.Options{}, nil, []ggufwrite.Tensor{{Name: "a", Dims: []int{2}, Type: weights.GGMLF32, Data: f32data(1, 2)}})
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "no GGUF magic"},
		{"magic", []byte("GGML0000"), "no GGUF magic"},
		{"version 1", start(1, 0, 0).Bytes(), "version 1 is not supported"},
		{"big-endian", start(0x03000000, 0, 0).Bytes(), "big-endian"},
		{"version 9", start(9, 0, 0).Bytes(), "version 9 is not supported"},
		{"truncated counts", []byte("GGUF\x03\x00\x00\x00\x01"), "file truncated"},
		{"tensor count", start(3, 1<<60, 0).Bytes(), "tensor count 1152921504606846976 is more than"},
		{"kv count", start(3, 0, 1<<62).Bytes(), "metadata count"},
		{"key length", start(3, 0, 1).u64(1 << 50).pad(16).Bytes(), "metadata key length 1125899906842624 over the limit"},
		{"key truncated", start(3, 0, 1).u64(100).pad(20).Bytes(), "needs 100 bytes"},
		{"value type", start(3, 0, 1).str("k").u32(77).pad(8).Bytes(), "unknown value type 77"},
		{"array length", start(3, 0, 1).str("k").u32(9).u32(4).u64(1 << 40).pad(16).Bytes(), "array length 1099511627776 is more than"},
		{"string array length", start(3, 0, 1).str("k").u32(9).u32(8).u64(1000).pad(16).Bytes(), "array length 1000 is more than"},
		{"string length", start(3, 0, 1).str("k").u32(8).u64(1 << 33).pad(8).Bytes(), `metadata key "k": string length 8589934592 over the limit`},
		{"array element type", start(3, 0, 1).str("k").u32(9).u32(99).u64(1).pad(8).Bytes(), "unknown array element type 99"},
		{"nesting", func() []byte {
			h := start(3, 0, 1).str("k").u32(9)
			for i := 0; i < 6; i++ {
				h.u32(9).u64(1)
			}
			return h.pad(32).Bytes()
		}(), "nested deeper"},
		{"duplicate key", start(3, 0, 2).str("k").u32(4).u32(1).str("k").u32(4).u32(1).Bytes(), `"k" appears twice`},
		{"alignment type", start(3, 0, 1).str("general.alignment").u32(10).u64(32).Bytes(), "general.alignment is a uint64"},
		{"alignment value", start(3, 0, 1).str("general.alignment").u32(4).u32(48).Bytes(), "not a power of two"},
		{"dimensions", start(3, 1, 0).tensor("t", 0, 0, 1, 1, 1, 1, 1).pad(64).Bytes(), "5 dimensions"},
		{"dimension size", start(3, 1, 0).tensor("t", 0, 0, 1<<60).pad(64).Bytes(), "dimension 1152921504606846976 too large"},
		{"dims overflow", start(3, 1, 0).tensor("t", 0, 0, 1<<40, 1<<40).pad(64).Bytes(), "too large"},
		{"ggml type", start(3, 1, 0).tensor("t", 5, 0, 4).pad(64).Bytes(), "unknown ggml type 5"},
		{"block", start(3, 1, 0).tensor("t", 2, 0, 16).pad(64).Bytes(), "not a multiple of Q4_0's block of 32"},
		{"offset alignment", start(3, 1, 0).tensor("t", 0, 4, 2).pad(64).Bytes(), "offset 4 is not a multiple of the alignment 32"},
		{"offset beyond", start(3, 1, 0).tensor("t", 0, 1<<20, 2).pad(64).Bytes(), "beyond the"},
		{"huge offset", start(3, 1, 0).tensor("t", 0, 1<<63+32, 2).pad(64).Bytes(), "too large"},
		{"overlap", start(3, 2, 0).tensor("t", 0, 0, 16).tensor("u", 0, 32, 16).pad(200).Bytes(), "overlap"},
		{"duplicate tensor", start(3, 2, 0).tensor("t", 0, 0, 2).tensor("t", 0, 32, 2).pad(100).Bytes(), `"t" appears twice`},
		{"name length", start(3, 1, 0).u64(1 << 20).pad(64).Bytes(), "tensor name length 1048576 over the limit"},
		{"truncated data", valid[:len(valid)-4], "beyond the"},
	} {
		_, err := weights.ParseGGUF("hostile.gguf", tc.data)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want it to contain %q", tc.name, err, tc.want)
		}
	}
	if _, err := weights.ParseGGUF("valid", valid); err != nil {
		t.Errorf("the valid file: %v", err)
	}
}

// FuzzParseGGUF: any bytes parse or fail with an error, never panic, and
// allocate no more than the budget they charged; a file that parses has
// every readable tensor dequantise. Its seeds include the llama.cpp files
// of testdata/gguf-llamacpp, their metadata whole, six tensors cut to a row.
func FuzzParseGGUF(f *testing.F) {
	x := make([]float32, 256)
	for i := range x {
		x[i] = float32(i%17) - 8
	}
	var ts []ggufwrite.Tensor
	for _, typ := range []weights.GGMLType{weights.GGMLF32, weights.GGMLF16, weights.GGMLBF16, weights.GGMLQ8_0, weights.GGMLQ4_0, weights.GGMLQ4_K, weights.GGMLQ6_K} {
		d, err := ggufwrite.Encode(typ, x)
		if err != nil {
			f.Fatal(err)
		}
		ts = append(ts, ggufwrite.Tensor{Name: typ.String(), Dims: []int{256}, Type: typ, Data: d})
	}
	f.Add(gguf(f, ggufwrite.Options{}, ggufwrite.KVs("general.architecture", "gemma3n", "a", []string{"x", "y"}), ts))
	f.Add(start(3, 1, 0).tensor("t", 0, 0, 2).pad(64).Bytes())
	for _, file := range tarballFiles(f, "gguf-llamacpp/micro.tar.gz", ".gguf") {
		f.Add(shrinkGGUF(f, file, 6))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var g *weights.GGUF
		var charged int64
		var err error
		n := allocated(func() { g, charged, err = weights.ParseGGUFWithin(data, weights.HeaderBudget) })
		checkAlloc(t, n, charged)
		if err != nil {
			return
		}
		for _, tt := range g.Tensors {
			n := 1
			for _, d := range tt.Dims {
				n *= d
			}
			if n > 1<<20 {
				continue
			}
			dst := make([]float32, n)
			if err := weights.DequantizeGGML(tt.Type, dst, tt.Data()); err != nil && supported(tt.Type) {
				t.Fatalf("%s: %v", tt.Name, err)
			}
		}
		if s, err := weights.NewGGUFStore(g); err == nil {
			for _, name := range s.Names() {
				s.Float32(name)
			}
		}
	})
}

func supported(t weights.GGMLType) bool {
	switch t {
	case weights.GGMLF32, weights.GGMLF16, weights.GGMLBF16, weights.GGMLQ8_0, weights.GGMLQ4_0, weights.GGMLQ4_K, weights.GGMLQ5_K, weights.GGMLQ6_K:
		return true
	}
	return false
}

// The GGUF store refuses other architectures and files missing a tensor,
// naming what is wrong, and reading a tensor of a type without a
// dequantiser names the type.
func TestGGUFStoreErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, kvs []ggufwrite.KV, ts []ggufwrite.Tensor) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, gguf(t, ggufwrite.Options{}, kvs, ts), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	llama := write("llama.gguf", ggufwrite.KVs("general.architecture", "llama"), nil)
	none := write("none.gguf", nil, nil)
	missing := write("missing.gguf", ggufwrite.KVs("general.architecture", "gemma3n", "gemma3n.block_count", uint32(1)), nil)
	for _, tc := range []struct{ path, want string }{
		{llama, `architecture "llama" is not gemma3n`},
		{none, "no general.architecture"},
		{missing, "missing tensor"},
		{filepath.Join(dir, "absent.gguf"), "no such file"},
	} {
		_, err := weights.OpenGGUF(tc.path)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("OpenGGUF(%s) = %v, want %q", filepath.Base(tc.path), err, tc.want)
		}
	}
	if err := weights.DequantizeGGML(20, make([]float32, 32), make([]byte, 18)); err == nil || !strings.Contains(err.Error(), "IQ4_NL cannot be read") {
		t.Errorf("IQ4_NL: %v", err)
	}
	if err := weights.DequantizeGGML(weights.GGMLQ8_0, make([]float32, 32), make([]byte, 33)); err == nil || !strings.Contains(err.Error(), "not whole blocks") {
		t.Errorf("short Q8_0: %v", err)
	}
}

// TestGGUFWrittenByGGML reads a file written by ggml's own gguf.cpp when
// VERDICT_GGML_GGUF names one (skipped otherwise). The file holds (at
// ggml's default alignment, 32: gguf.cpp does not apply a general.alignment
// set on a context it writes) u8 200, i8 -5, u16 60000, i16 -300, u32 4000000000,
// i32 -7, f32 0.25, b true, u64 2^40, i64 -2^40, f64 1e-300, s "héllo",
// ai [1 -2 3], af [0.5 -1], as ["a" "" "ccc"], and 512×3 tensors t.f32,
// t.f16, t.q8_0 and t.q4_k of x[i] = ((i·37 mod 101) − 50)/25, quantised by
// ggml_quantize_chunk.
func TestGGUFWrittenByGGML(t *testing.T) {
	path := os.Getenv("VERDICT_GGML_GGUF")
	if path == "" {
		t.Skip("VERDICT_GGML_GGUF is not set")
	}
	g, err := weights.OpenGGUFFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if g.Alignment != 32 || g.Version != 3 {
		t.Errorf("alignment %d version %d", g.Alignment, g.Version)
	}
	ints := map[string]int64{"u8": 200, "i8": -5, "u16": 60000, "i16": -300, "u32": 4000000000, "i32": -7, "u64": 1 << 40, "i64": -1 << 40, "b": 1}
	for k, want := range ints {
		if got, ok := g.KV[k].Int(); !ok || got != want {
			t.Errorf("%s = %d, %v; want %d", k, got, ok, want)
		}
	}
	if f, _ := g.KV["f32"].Float(); f != 0.25 {
		t.Errorf("f32 = %g", f)
	}
	if f, _ := g.KV["f64"].Float(); f != 1e-300 {
		t.Errorf("f64 = %g", f)
	}
	if s, _ := g.KV["s"].Str(); s != "héllo" {
		t.Errorf("s = %q", s)
	}
	if v, _ := g.KV["ai"].Ints(); len(v) != 3 || v[0] != 1 || v[1] != -2 || v[2] != 3 {
		t.Errorf("ai = %v", v)
	}
	if v, _ := g.KV["af"].Floats(); len(v) != 2 || v[0] != 0.5 || v[1] != -1 {
		t.Errorf("af = %v", v)
	}
	if v, _ := g.KV["as"].Strings(); strings.Join(v, "|") != "a||ccc" {
		t.Errorf("as = %q", v)
	}
	x := make([]float32, 512*3)
	for i := range x {
		x[i] = float32(i*37%101-50) / 25
	}
	for name, tol := range map[string]float64{"t.f32": 0, "t.f16": 1e-3, "t.q8_0": 2.0 / 127, "t.q4_k": 2.0 / 12} {
		tt, ok := g.Tensor(name)
		if !ok {
			t.Fatalf("no tensor %s", name)
		}
		if tt.Offset%32 != 0 || len(tt.Dims) != 2 || tt.Dims[0] != 512 || tt.Dims[1] != 3 {
			t.Errorf("%s: offset %d dims %v", name, tt.Offset, tt.Dims)
		}
		y := make([]float32, len(x))
		if err := weights.DequantizeGGML(tt.Type, y, tt.Data()); err != nil {
			t.Fatal(err)
		}
		e := 0.0
		for i := range x {
			e = max(e, math.Abs(float64(x[i]-y[i])))
		}
		t.Logf("%s (%s): max error %.3g", name, tt.Type, e)
		if e > tol {
			t.Errorf("%s: max error %g over %g", name, e, tol)
		}
	}
}

// InspectGGUF names the type holding most of the bytes and counts the rest.
func TestInspectGGUF(t *testing.T) {
	x := make([]float32, 512)
	q, _ := ggufwrite.Encode(weights.GGMLQ4_K, x)
	ts := []ggufwrite.Tensor{
		{Name: "big", Dims: []int{512}, Type: weights.GGMLQ4_K, Data: q},
		{Name: "norm", Dims: []int{4}, Type: weights.GGMLF32, Data: f32data(1, 2, 3, 4)},
	}
	p := filepath.Join(t.TempDir(), "m.gguf")
	os.WriteFile(p, gguf(t, ggufwrite.Options{}, ggufwrite.KVs("general.architecture", "gemma3n", "general.name", "tiny"), ts), 0o644)
	info, err := weights.InspectGGUF(p)
	if err != nil {
		t.Fatal(err)
	}
	if info.Arch != "gemma3n" || info.Name != "tiny" || info.Quant != "Q4_K" || info.Tensors != 2 || info.Params != 516 || info.Types != "F32×1, Q4_K×1" {
		t.Errorf("%+v", info)
	}
	if _, err := weights.InspectGGUF(filepath.Join(t.TempDir(), "none.gguf")); err == nil {
		t.Error("a missing file gave no error")
	}
}
