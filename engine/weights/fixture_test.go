package weights

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"encoding/json"
	"io"
	"math"
	"os"
	"path"
	"path/filepath"
	"slices"
	"testing"
)

// fixture extracts the named files (all when none are named) of the
// repository's testdata/<name>.tar.gz into a temporary folder and returns
// the folder holding them.
func fixture(t testing.TB, name string, files ...string) string {
	t.Helper()
	tarball := filepath.Join("..", "..", "testdata", name+".tar.gz")
	f, err := os.Open(tarball)
	if err != nil {
		t.Fatalf("fixture: %v (the repository's testdata/ should hold it)", err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	dir := filepath.Join(t.TempDir(), name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	found := 0
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		base := path.Base(h.Name)
		if h.Typeflag != tar.TypeReg || (len(files) > 0 && !slices.Contains(files, base)) {
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, base), data, 0o644); err != nil {
			t.Fatal(err)
		}
		found++
	}
	if len(files) > 0 && found != len(files) {
		t.Fatalf("fixture %s: found %d of %v", name, found, files)
	}
	return dir
}

// tspec describes one tensor of a safetensors file built by buildST.
type tspec struct {
	name  string
	dtype string
	shape []int
	data  []byte
}

// buildST makes a safetensors file of the tensors, laid out in order, with
// pad spaces appended to the header (to move the data section's alignment).
func buildST(t testing.TB, pad int, ts ...tspec) []byte {
	t.Helper()
	hdr := map[string]any{"__metadata__": map[string]string{"format": "pt"}}
	var body []byte
	for _, s := range ts {
		hdr[s.name] = map[string]any{"dtype": s.dtype, "shape": s.shape, "data_offsets": []int{len(body), len(body) + len(s.data)}}
		body = append(body, s.data...)
	}
	js, err := json.Marshal(hdr)
	if err != nil {
		t.Fatal(err)
	}
	js = append(js, bytes.Repeat([]byte(" "), pad)...)
	return rawST(string(js), body)
}

// rawST makes a safetensors file from a literal header and body.
func rawST(header string, body []byte) []byte {
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	out = append(out, header...)
	return append(out, body...)
}

func f32bytes(v ...float32) []byte {
	var b []byte
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return b
}

func u16bytes(v ...uint16) []byte {
	var b []byte
	for _, x := range v {
		b = binary.LittleEndian.AppendUint16(b, x)
	}
	return b
}

func writeFile(t testing.TB, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
