package weights_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"encoding/json"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"verdict/engine/weights"
	"verdict/engine/weights/ggufwrite"
)

// The fuzz targets here and FuzzParseGGUF are run by build/fuzz.sh; their
// seeds are made from the repository's real files (the GGUF files of
// llama.cpp's tools, the safetensors checkpoints and indexes of the
// fixtures), cut down to a few KB, and testdata/fuzz keeps what fuzzing
// found.

// tarballFiles returns the files of testdata/<name> whose names end in
// suffix, by base name.
func tarballFiles(tb testing.TB, name, suffix string) map[string][]byte {
	tb.Helper()
	f, err := os.Open(filepath.Join("..", "..", "testdata", name))
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		tb.Fatal(err)
	}
	out := map[string][]byte{}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			tb.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg && strings.HasSuffix(h.Name, suffix) {
			b, err := io.ReadAll(tr)
			if err != nil {
				tb.Fatal(err)
			}
			out[path.Base(h.Name)] = b
		}
	}
}

// shrinkGGUF keeps a GGUF file's metadata as it is and its first keep
// tensors, each cut to one row of 256 values (zeros), so that a real file's
// header makes a valid seed of a few KB.
func shrinkGGUF(tb testing.TB, file []byte, keep int) []byte {
	tb.Helper()
	g, err := weights.ParseGGUF("seed", file)
	if err != nil {
		tb.Fatal(err)
	}
	info := func(b []byte, t *weights.GGUFTensor, dims []int, off uint64) []byte {
		b = binary.LittleEndian.AppendUint64(b, uint64(len(t.Name)))
		b = append(b, t.Name...)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(dims)))
		for _, d := range dims {
			b = binary.LittleEndian.AppendUint64(b, uint64(d))
		}
		b = binary.LittleEndian.AppendUint32(b, uint32(t.Type))
		return binary.LittleEndian.AppendUint64(b, off)
	}
	var orig []byte
	for _, t := range g.Tensors {
		orig = info(orig, t, t.Dims, uint64(t.Offset))
	}
	at := bytes.Index(file, orig) // where the tensor infos start
	if at < 0 {
		tb.Fatal("seed: tensor infos not found")
	}
	out := append([]byte(nil), file[:at]...)
	var infos, data []byte
	n := 0
	for _, t := range g.Tensors {
		size, err := ggufwrite.RowBytes(t.Type, 256)
		if err != nil || n == keep {
			continue
		}
		infos = info(infos, t, []int{256}, uint64(len(data)))
		data = append(data, make([]byte, size)...)
		data = append(data, make([]byte, (g.Alignment-len(data)%g.Alignment)%g.Alignment)...)
		n++
	}
	binary.LittleEndian.PutUint64(out[8:], uint64(n))
	out = append(out, infos...)
	out = append(out, make([]byte, (g.Alignment-len(out)%g.Alignment)%g.Alignment)...)
	out = append(out, data...)
	if _, err := weights.ParseGGUF("seed", out); err != nil {
		tb.Fatalf("the cut-down seed: %v", err)
	}
	return out
}

// checkAlloc fails when a parse that charged its budget charged bytes gave
// out more than that (and a few KB of fixed structures and errors).
func checkAlloc(t *testing.T, n uint64, charged int64) {
	t.Helper()
	if int64(n) > charged+16<<10 {
		t.Fatalf("parsing allocated %d bytes, over the %d it charged", n, charged)
	}
}

// FuzzSafetensors: any bytes parse as a safetensors file or fail with an
// error, never panic, and allocate no more than the budget they charged; a
// file that parses serves every tensor it lists.
func FuzzSafetensors(f *testing.F) {
	micro := tarballFiles(f, "gemma3n-micro-bf16.tar.gz", ".safetensors")
	f.Add(micro["model-00002-of-00002.safetensors"])
	f.Add(micro["model-00001-of-00002.safetensors"][:6000]) // a real header, its data cut off
	f.Add(tarballFiles(f, "gemma3n-synthetic-tiny.tar.gz", "buffers.safetensors")["buffers.safetensors"])
	f.Add(append(binary.LittleEndian.AppendUint64(nil, 2), "{}"...))
	f.Fuzz(func(t *testing.T, data []byte) {
		var names []string
		var charged int64
		var err error
		n := allocated(func() { names, charged, err = weights.ParseSafetensorsWithin(data, weights.HeaderBudget) })
		checkAlloc(t, n, charged)
		if err != nil {
			return
		}
		p := filepath.Join(t.TempDir(), "f.safetensors")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		s, err := weights.OpenSafetensors(p)
		if err != nil {
			t.Fatalf("parsed in memory but not from a file: %v", err)
		}
		defer s.Close()
		if got := s.Names(); len(got) != len(names) {
			t.Fatalf("%d names from the file, %d parsed", len(got), len(names))
		}
		for _, name := range names {
			shape, dtype, ok := s.Info(name)
			if !ok {
				t.Fatalf("%q listed but not served", name)
			}
			want := 1
			for _, d := range shape {
				want *= d
			}
			v, err := s.Float32(name)
			readable := dtype == "F32" || dtype == "BF16" || dtype == "F16"
			if err == nil && len(v) != want || err != nil && readable {
				t.Fatalf("%q (%s %v): %d values, %v", name, dtype, shape, len(v), err)
			}
		}
	})
}

// FuzzCheckpointIndex: any bytes parse as a checkpoint index or fail with
// an error, never panic, and allocate no more than the budget they charged.
func FuzzCheckpointIndex(f *testing.F) {
	f.Add(tarballFiles(f, "gemma3n-micro-bf16.tar.gz", ".index.json")["model.safetensors.index.json"])
	f.Add([]byte(`{"weight_map":{"a":"x.safetensors","b":"x.safetensors","c\u0000":"y.safetensors"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var entries, shards int
		var charged int64
		var err error
		n := allocated(func() { entries, shards, charged, err = weights.ParseIndexWithin(data, weights.HeaderBudget) })
		checkAlloc(t, n, charged)
		if err == nil && (entries == 0 || shards == 0 || shards > entries) {
			t.Fatalf("%d entries in %d shards", entries, shards)
		}
	})
}

// FuzzRecipe: any bytes parse as a synthetic fixture's recipe.json or fail
// with an error, never panic, and allocate a bounded amount (nothing is
// generated); a recipe that parses lists every tensor with its shape.
func FuzzRecipe(f *testing.F) {
	var r struct {
		Prng    json.RawMessage   `json:"prng"`
		Tensors []json.RawMessage `json:"tensors"`
	}
	if err := json.Unmarshal(tarballFiles(f, "gemma3n-synthetic-tiny.tar.gz", "recipe.json")["recipe.json"], &r); err != nil {
		f.Fatal(err)
	}
	r.Tensors = r.Tensors[:12] // the real file's first tensors, a few KB
	seed, err := json.MarshalIndent(r, "", " ")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Fuzz(func(t *testing.T, data []byte) {
		var s weights.Store
		var err error
		n := allocated(func() { s, err = weights.NewRecipeStore(data, nil) })
		if limit := 8*uint64(len(data)) + 64<<10; n > limit {
			t.Fatalf("parsing %d bytes allocated %d, over %d", len(data), n, limit)
		}
		if err != nil {
			return
		}
		defer s.Close()
		for _, name := range s.Names() {
			if _, dtype, ok := s.Info(name); !ok || dtype != "F32" {
				t.Fatalf("%q listed but Info gives %s, %v", name, dtype, ok)
			}
		}
	})
}
