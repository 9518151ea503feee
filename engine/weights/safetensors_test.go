package weights

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unsafe"
)

func TestOpenSafetensorsErrors(t *testing.T) {
	good := tspec{"w", "F32", []int{2}, f32bytes(1, 2)}
	cases := []struct {
		name string
		file []byte // nil: the file is not created
		want []string
	}{
		{"missing file", nil, []string{"no such file"}},
		{"too short", []byte{1, 2, 3}, []string{"too short"}},
		{"header length beyond file", rawST(`{}`, nil)[:9], []string{"header length 2 exceeds"}},
		{"bad header json", rawST(`{"w": `, nil), []string{"bad header"}},
		{"header not object", rawST(`[1]`, nil), []string{"bad header"}},
		{"header null", rawST(`null`, nil), []string{"not a JSON object"}},
		{"data after header", rawST(`{} {}`, nil), []string{"data after"}},
		{"bad entry", rawST(`{"w":{"dtype":"F32","shape":"x","data_offsets":[0,4]}}`, f32bytes(1)), []string{`"w"`, "bad header entry"}},
		{"no shape", rawST(`{"w":{"dtype":"F32","data_offsets":[0,4]}}`, f32bytes(1)), []string{`"w"`, "no shape"}},
		{"offsets not pair", rawST(`{"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}}`, f32bytes(1)), []string{`"w"`, "not [begin, end]"}},
		{"offsets reversed", rawST(`{"w":{"dtype":"F32","shape":[0],"data_offsets":[4,0]}}`, f32bytes(1)), []string{`"w"`, "bad data_offsets"}},
		{"negative dim", rawST(`{"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}`, f32bytes(1)), []string{`"w"`, "negative dimension"}},
		{"overlapping data", rawST(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}`, f32bytes(1, 2, 3)), []string{`"a" [0, 8)`, `"b" [4, 12)`, "overlap"}},
		{"same data twice", rawST(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]}}`, f32bytes(1)), []string{`"a" [0, 4)`, `"b" [0, 4)`, "overlap"}},
		{"duplicate name", rawST(`{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, f32bytes(1, 2)), []string{`"w"`, "appears twice"}},
		{"entry not object", rawST(`{"w":[1]}`, nil), []string{`"w"`, "bad header entry", "not a JSON object"}},
		{"shape of floats", rawST(`{"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}}`, f32bytes(1)), []string{`"w"`, "shape element 1.5 is not a 64-bit integer"}},
		{"65 dimensions", rawST(`{"w":{"dtype":"F32","shape":[`+strings.Repeat("1,", 64)+`1],"data_offsets":[0,4]}}`, f32bytes(1)), []string{`"w"`, "65 elements, more than 64"}},
		{"no data_offsets", rawST(`{"w":{"dtype":"F32","shape":[1]}}`, f32bytes(1)), []string{`"w"`, "data_offsets missing"}},
		{"escaped name and dtype", rawST(`{"w\u0000":{"dtype":"F\u0033\u0032","shape":[2],"data_offsets":[0,4]}}`, f32bytes(1)), []string{`"w\x00"`, "4 data bytes, want 8 for F32 [2]"}},
		{"unknown dtype", buildST(t, 0, tspec{"w", "Q4_K", []int{4}, make([]byte, 4)}), []string{`"w"`, `unknown dtype "Q4_K"`}},
		{"wrong data size", buildST(t, 0, tspec{"w", "F32", []int{3}, f32bytes(1, 2)}), []string{`"w"`, "8 data bytes, want 12"}},
		{"truncated", buildST(t, 0, good, tspec{"v", "BF16", []int{4}, u16bytes(1, 2, 3, 4)})[:10+len(`{}`)], []string{"exceeds"}},
		{"truncated data", func() []byte {
			b := buildST(t, 0, good, tspec{"v", "BF16", []int{4}, u16bytes(1, 2, 3, 4)})
			return b[:len(b)-3]
		}(), []string{`"v"`, "beyond", "truncated"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "x.safetensors")
			if c.file != nil {
				writeFile(t, filepath.Dir(p), "x.safetensors", c.file)
			}
			s, err := OpenSafetensors(p)
			if err == nil {
				s.Close()
				t.Fatal("no error")
			}
			msg := err.Error()
			for _, w := range append(c.want, p, "weights: ") {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q lacks %q", msg, w)
				}
			}
		})
	}
	t.Run("no paths", func(t *testing.T) {
		if _, err := OpenSafetensors(); err == nil {
			t.Fatal("no error")
		}
	})
	t.Run("name in two files", func(t *testing.T) {
		dir := t.TempDir()
		a := writeFile(t, dir, "a.safetensors", buildST(t, 0, good))
		b := writeFile(t, dir, "b.safetensors", buildST(t, 0, good))
		_, err := OpenSafetensors(a, b)
		if err == nil || !strings.Contains(err.Error(), "in both") || !strings.Contains(err.Error(), b) {
			t.Fatalf("got %v", err)
		}
	})
}

func TestSafetensorsAccess(t *testing.T) {
	dir := t.TempDir()
	p := writeFile(t, dir, "m.safetensors", buildST(t, 0,
		tspec{"f32", "F32", []int{2, 3}, f32bytes(1, 2, 3, 4, 5, 6)},
		tspec{"f64", "F64", []int{1}, make([]byte, 8)},
		tspec{"bf16", "BF16", []int{3, 1}, u16bytes(0x3f80, 0xc000, 0x7f80)},
		tspec{"f16", "F16", []int{6}, u16bytes(0x3c00, 0xc000, 0x0001, 0x7c00, 0xfc00, 0x8000)},
		tspec{"scalar", "F32", []int{}, f32bytes(8)},
		tspec{"empty", "F32", []int{0, 4}, nil},
	))
	s, err := OpenSafetensors(p)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	if got, want := s.Names(), []string{"bf16", "empty", "f16", "f32", "f64", "scalar"}; !slices.Equal(got, want) {
		t.Errorf("Names = %v, want %v", got, want)
	}
	if shape, dtype, ok := s.Info("bf16"); !ok || dtype != "BF16" || !slices.Equal(shape, []int{3, 1}) {
		t.Errorf("Info(bf16) = %v %q %v", shape, dtype, ok)
	}
	if _, _, ok := s.Info("nope"); ok {
		t.Error("Info(nope) ok")
	}
	if shape, dtype, ok := s.Info("f64"); !ok || dtype != "F64" || len(shape) != 1 {
		t.Errorf("Info(f64) = %v %q %v", shape, dtype, ok)
	}

	check := func(name string, want ...float32) {
		t.Helper()
		got, err := s.Float32(name)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("Float32(%s) = %v, want %v", name, got, want)
		}
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("Float32(%s) = %v, want %v", name, got, want)
			}
		}
	}
	inf := float32(math.Inf(1))
	check("f32", 1, 2, 3, 4, 5, 6)
	check("bf16", 1, -2, inf)
	check("f16", 1, -2, float32(math.Ldexp(1, -24)), inf, -inf, float32(math.Copysign(0, -1)))
	check("scalar", 8)
	check("empty")

	bits, err := s.BF16("bf16")
	if err != nil || !slices.Equal(bits, []uint16{0x3f80, 0xc000, 0x7f80}) {
		t.Errorf("BF16 = %v, %v", bits, err)
	}
	row := make([]float32, 3)
	if err := s.Rows("f32", 1, row); err != nil || !slices.Equal(row, []float32{4, 5, 6}) {
		t.Errorf("Rows(f32, 1) = %v, %v", row, err)
	}
	if err := s.Rows("bf16", 1, row[:2]); err != nil || !slices.Equal(row[:2], []float32{-2, inf}) {
		t.Errorf("Rows(bf16, 1) = %v, %v", row[:2], err)
	}
	if err := s.Rows("f32", 2, nil); err != nil {
		t.Errorf("empty Rows at the end: %v", err)
	}

	// Errors on access.
	errCases := []struct {
		name string
		err  error
		want []string
	}{
		{"missing Float32", second(s.Float32("nope")), []string{"nope", "not found"}},
		{"missing BF16", second(s.BF16("nope")), []string{"nope", "not found"}},
		{"missing Rows", s.Rows("nope", 0, row), []string{"nope", "not found"}},
		{"F64 Float32", second(s.Float32("f64")), []string{"f64", "F64"}},
		{"F64 Rows", s.Rows("f64", 0, row[:1]), []string{"f64", "F64"}},
		{"BF16 of F32", second(s.BF16("f32")), []string{"f32", "not BF16"}},
		{"BF16 of F16", second(s.BF16("f16")), []string{"f16", "not BF16"}},
		{"Rows of 1-D", s.Rows("f16", 0, row[:1]), []string{"f16", "2 or more dimensions"}},
		{"Rows beyond end", s.Rows("f32", 1, make([]float32, 6)), []string{"f32", "out of range"}},
		{"Rows negative", s.Rows("f32", -1, row), []string{"f32", "out of range"}},
		{"Rows ragged", s.Rows("f32", 0, row[:2]), []string{"f32", "multiple"}},
	}
	for _, c := range errCases {
		if c.err == nil {
			t.Errorf("%s: no error", c.name)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(c.err.Error(), w) {
				t.Errorf("%s: error %q lacks %q", c.name, c.err, w)
			}
		}
	}
	if _, err := s.Float32("nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing tensor error %v is not ErrNotFound", err)
	}

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Float32("f32"); err == nil {
		t.Error("Float32 after Close: no error")
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func second[T any](_ T, err error) error { return err }

// TestAlignment reads F32 and BF16 data that starts at every byte alignment.
func TestAlignment(t *testing.T) {
	for pad := range 4 {
		dir := t.TempDir()
		p := writeFile(t, dir, "m.safetensors", buildST(t, pad,
			tspec{"a", "F32", []int{3}, f32bytes(1.5, -2.25, 3)},
			tspec{"b", "BF16", []int{2}, u16bytes(0x3f80, 0x4000)},
		))
		s, err := OpenSafetensors(p)
		if err != nil {
			t.Fatal(err)
		}
		a, err := s.Float32("a")
		if err != nil || !slices.Equal(a, []float32{1.5, -2.25, 3}) {
			t.Errorf("pad %d: Float32 = %v, %v", pad, a, err)
		}
		b, err := s.BF16("b")
		if err != nil || !slices.Equal(b, []uint16{0x3f80, 0x4000}) {
			t.Errorf("pad %d: BF16 = %v, %v", pad, b, err)
		}
		s.Close()
	}
}

// TestZeroCopy checks that aligned F32 and BF16 data is served from the
// mapping itself.
func TestZeroCopy(t *testing.T) {
	p := writeFile(t, t.TempDir(), "m.safetensors", buildST(t, 0,
		tspec{"a", "F32", []int{2}, f32bytes(1, 2)},
		tspec{"b", "BF16", []int{2}, u16bytes(1, 2)},
	))
	st, err := OpenSafetensors(p)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s := st.(*stStore)
	if !s.files[0].mapped {
		t.Skip("no mmap on this platform")
	}
	a, _ := s.Float32("a")
	b, _ := s.BF16("b")
	if unsafe.Pointer(&a[0]) != unsafe.Pointer(&s.tensors["a"].raw[0]) {
		t.Error("Float32 of aligned F32 copied")
	}
	if unsafe.Pointer(&b[0]) != unsafe.Pointer(&s.tensors["b"].raw[0]) {
		t.Error("BF16 copied")
	}
}

func TestF16ToFloat32(t *testing.T) {
	cases := []struct {
		h    uint16
		want float64
	}{
		{0x0000, 0}, {0x0001, math.Ldexp(1, -24)}, {0x03ff, math.Ldexp(1023, -24)},
		{0x0400, math.Ldexp(1, -14)}, {0x3c00, 1}, {0x3c01, 1 + math.Ldexp(1, -10)},
		{0xc000, -2}, {0x7bff, 65504}, {0x3555, 0.333251953125},
		{0x7c00, math.Inf(1)}, {0xfc00, math.Inf(-1)}, {0x8001, -math.Ldexp(1, -24)},
	}
	for _, c := range cases {
		if got := F16ToFloat32(c.h); float64(got) != c.want {
			t.Errorf("F16ToFloat32(%#04x) = %v, want %v", c.h, got, c.want)
		}
	}
	if got := F16ToFloat32(0x8000); got != 0 || !math.Signbit(float64(got)) {
		t.Errorf("F16ToFloat32(0x8000) = %v, want -0", got)
	}
	// Every bit pattern against the textbook formula.
	for h := range 1 << 16 {
		sign, exp, mant := h>>15, (h>>10)&0x1f, h&0x3ff
		var want float64
		switch exp {
		case 0:
			want = math.Ldexp(float64(mant), -24)
		case 31:
			want = math.Inf(1)
			if mant != 0 {
				want = math.NaN()
			}
		default:
			want = math.Ldexp(float64(1024+mant), exp-25)
		}
		if sign == 1 {
			want = -want
		}
		got := F16ToFloat32(uint16(h))
		if math.IsNaN(want) {
			if !math.IsNaN(float64(got)) || math.Float32bits(got)&0x7fffff != uint32(mant)<<13 || math.Signbit(float64(got)) != (sign == 1) {
				t.Fatalf("F16ToFloat32(%#04x) = %#08x, want NaN with payload", h, math.Float32bits(got))
			}
			continue
		}
		if float64(got) != want || math.Signbit(float64(got)) != math.Signbit(want) {
			t.Fatalf("F16ToFloat32(%#04x) = %v, want %v", h, got, want)
		}
	}
}

func TestMicroCheckpoint(t *testing.T) {
	dir := fixture(t, "gemma3n-micro-bf16")
	for _, open := range []struct {
		name string
		fn   func(string) (Store, error)
	}{{"OpenCheckpoint", OpenCheckpoint}, {"Open", Open}} {
		t.Run(open.name, func(t *testing.T) {
			s, err := open.fn(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			var index struct {
				WeightMap map[string]string `json:"weight_map"`
			}
			js, _ := os.ReadFile(filepath.Join(dir, indexFile))
			if err := json.Unmarshal(js, &index); err != nil {
				t.Fatal(err)
			}
			names := s.Names()
			if len(names) != len(index.WeightMap) || len(names) != 104 || !slices.IsSorted(names) {
				t.Fatalf("%d names (sorted %v), index has %d", len(names), slices.IsSorted(names), len(index.WeightMap))
			}
			for _, name := range names {
				if _, ok := index.WeightMap[name]; !ok {
					t.Errorf("%s not in the index", name)
				}
				shape, dtype, ok := s.Info(name)
				if !ok || dtype != "BF16" {
					t.Errorf("Info(%s) = %v %s %v", name, shape, dtype, ok)
				}
				bits, err := s.BF16(name)
				if err != nil {
					t.Fatal(err)
				}
				f, err := s.Float32(name)
				if err != nil {
					t.Fatal(err)
				}
				n, _ := numel(shape)
				if len(bits) != n || len(f) != n {
					t.Fatalf("%s: %d bits, %d floats, want %d", name, len(bits), len(f), n)
				}
				for i := range f {
					if math.Float32bits(f[i]) != uint32(bits[i])<<16 {
						t.Fatalf("%s[%d] = %v, bits %#x", name, i, f[i], bits[i])
					}
				}
			}
			// Values read independently with Python (struct) from the shards.
			for _, c := range []struct {
				name string
				i    int
				bits uint16
			}{
				{"model.language_model.embed_tokens.weight", 0, 0xbc49},
				{"model.language_model.embed_tokens.weight", 1, 0x3cb3},
				{"model.language_model.embed_tokens.weight", 65535, 0xbc96},
				{"model.language_model.norm.weight", 0, 0x3f81},
				{"model.language_model.norm.weight", 15, 0x3f8a},
				{"model.language_model.layers.0.self_attn.q_proj.weight", 1, 0x3bae},
				{"model.language_model.layers.0.self_attn.q_proj.weight", 255, 0x3c85},
			} {
				bits, _ := s.BF16(c.name)
				if bits[c.i] != c.bits {
					t.Errorf("%s[%d] = %#x, want %#x", c.name, c.i, bits[c.i], c.bits)
				}
			}
			const emb = "model.language_model.embed_tokens.weight"
			all, _ := s.Float32(emb)
			dst := make([]float32, 3*16)
			for _, r0 := range []int{0, 17, 4093} {
				if err := s.Rows(emb, r0, dst); err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(dst, all[r0*16:(r0+3)*16]) {
					t.Errorf("Rows(%d) differs from Float32", r0)
				}
			}
		})
	}
}

// copyDir copies the regular files of src into a new temporary folder.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, dst, e.Name(), b)
	}
	return dst
}

func TestCheckpointErrors(t *testing.T) {
	micro := fixture(t, "gemma3n-micro-bf16")
	const shard1 = "model-00001-of-00002.safetensors"
	const shard2 = "model-00002-of-00002.safetensors"
	editIndex := func(t *testing.T, dir string, edit func(m map[string]string)) {
		var index map[string]any
		js, _ := os.ReadFile(filepath.Join(dir, indexFile))
		if err := json.Unmarshal(js, &index); err != nil {
			t.Fatal(err)
		}
		wm := map[string]string{}
		for k, v := range index["weight_map"].(map[string]any) {
			wm[k] = v.(string)
		}
		edit(wm)
		index["weight_map"] = wm
		js, _ = json.Marshal(index)
		writeFile(t, dir, indexFile, js)
	}
	cases := []struct {
		name  string
		setup func(t *testing.T, dir string)
		want  []string
	}{
		{"empty folder", func(t *testing.T, dir string) {
			for _, f := range []string{indexFile, shard1, shard2} {
				os.Remove(filepath.Join(dir, f))
			}
		}, []string{"neither"}},
		{"bad index", func(t *testing.T, dir string) {
			writeFile(t, dir, indexFile, []byte(`{"weight_map": [`))
		}, []string{indexFile}},
		{"tensor listed twice", func(t *testing.T, dir string) {
			writeFile(t, dir, indexFile, []byte(`{"weight_map": {"a": "`+shard1+`", "a": "`+shard2+`"}}`))
		}, []string{`"a" is listed twice`}},
		{"weight_map not an object", func(t *testing.T, dir string) {
			writeFile(t, dir, indexFile, []byte(`{"weight_map": ["a"]}`))
		}, []string{indexFile, "weight_map: not a JSON object"}},
		{"empty weight_map", func(t *testing.T, dir string) {
			writeFile(t, dir, indexFile, []byte(`{"metadata": {}}`))
		}, []string{"empty weight_map"}},
		{"missing shard", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, shard2))
		}, []string{shard2, "no such file"}},
		{"index names absent shard", func(t *testing.T, dir string) {
			editIndex(t, dir, func(m map[string]string) { m["model.language_model.norm.weight"] = "model-00003-of-00002.safetensors" })
		}, []string{"model-00003-of-00002.safetensors", "no such file"}},
		{"shard outside folder", func(t *testing.T, dir string) {
			editIndex(t, dir, func(m map[string]string) { m["model.language_model.norm.weight"] = "../" + shard2 })
		}, []string{"not a file inside"}},
		{"tensor missing from shard", func(t *testing.T, dir string) {
			editIndex(t, dir, func(m map[string]string) { m["model.language_model.extra.weight"] = shard2 })
		}, []string{"model.language_model.extra.weight", shard2, "not in that shard"}},
		{"tensor in the other shard", func(t *testing.T, dir string) {
			editIndex(t, dir, func(m map[string]string) { m["model.language_model.norm.weight"] = shard1 })
		}, []string{"model.language_model.norm.weight", shard1, "not in that shard"}},
		{"truncated shard", func(t *testing.T, dir string) {
			p := filepath.Join(dir, shard1)
			fi, _ := os.Stat(p)
			if err := os.Truncate(p, fi.Size()-1000); err != nil {
				t.Fatal(err)
			}
		}, []string{shard1, "truncated"}},
		{"shard with bad header", func(t *testing.T, dir string) {
			writeFile(t, dir, shard2, rawST(`{"x"`, nil))
		}, []string{shard2, "bad header"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := copyDir(t, micro)
			c.setup(t, dir)
			s, err := OpenCheckpoint(dir)
			if err == nil {
				s.Close()
				t.Fatal("no error")
			}
			for _, w := range append(c.want, "weights: ") {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestSingleFileCheckpoint(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, singleFile, buildST(t, 0, tspec{"model.norm.weight", "F32", []int{2}, f32bytes(1, 2)}))
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got, err := s.Float32("model.norm.weight"); err != nil || !slices.Equal(got, []float32{1, 2}) {
		t.Errorf("Float32 = %v, %v", got, err)
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	file := writeFile(t, dir, "f", nil)
	for _, c := range []struct{ path, want string }{
		{filepath.Join(dir, "nope"), "no such file"},
		{file, "not a directory"},
		{dir, "no model.safetensors"},
	} {
		if _, err := Open(c.path); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Open(%s) = %v, want %q", c.path, err, c.want)
		}
	}
}
