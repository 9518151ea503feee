package audio_test

import (
	"archive/tar"
	"compress/gzip"
	"encoding/binary"
	"encoding/json"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// testdata is the repository's testdata folder.
var testdata = filepath.Join("..", "..", "testdata")

// unpack extracts testdata/<name>.tar.gz into a temporary folder and returns
// the folder the archive holds (<tmp>/<name>).
func unpack(t testing.TB, name string) string {
	t.Helper()
	dst := t.TempDir()
	f, err := os.Open(filepath.Join(testdata, name+".tar.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Clean(h.Name)
		if filepath.IsAbs(p) || strings.HasPrefix(p, "..") {
			t.Fatalf("unsafe path %q in %s", h.Name, name)
		}
		out := filepath.Join(dst, p)
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(out, 0o755)
		case tar.TypeReg:
			if err = os.MkdirAll(filepath.Dir(out), 0o755); err == nil {
				var w *os.File
				if w, err = os.Create(out); err == nil {
					_, err = io.Copy(w, tr)
					if cerr := w.Close(); err == nil {
						err = cerr
					}
				}
			}
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dst, name)
}

// readWAV reads a mono 16-bit PCM WAV file as float32 samples (int16/32768).
func readWAV(t testing.TB, path string) []float32 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 12 || string(b[:4]) != "RIFF" || string(b[8:12]) != "WAVE" {
		t.Fatalf("%s: not a WAV file", path)
	}
	var channels, bitsPer int
	for off := 12; off+8 <= len(b); {
		id, size := string(b[off:off+4]), int(binary.LittleEndian.Uint32(b[off+4:]))
		body := b[off+8 : min(len(b), off+8+size)]
		switch id {
		case "fmt ":
			channels = int(binary.LittleEndian.Uint16(body[2:]))
			if rate := binary.LittleEndian.Uint32(body[4:]); rate != 16000 {
				t.Fatalf("%s: sample rate %d", path, rate)
			}
			bitsPer = int(binary.LittleEndian.Uint16(body[14:]))
		case "data":
			if channels != 1 || bitsPer != 16 {
				t.Fatalf("%s: %d channels, %d bits", path, channels, bitsPer)
			}
			out := make([]float32, len(body)/2)
			for i := range out {
				out[i] = float32(int16(binary.LittleEndian.Uint16(body[2*i:]))) / 32768
			}
			return out
		}
		off += 8 + size + size&1
	}
	t.Fatalf("%s: no data chunk", path)
	return nil
}

// readF32 reads a raw little-endian float32 file.
func readF32(t testing.TB, path string) []float32 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

// readSafetensors reads the float32 tensors of a small safetensors file.
func readSafetensors(t testing.TB, path string) map[string]tensor {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := binary.LittleEndian.Uint64(b)
	var hdr map[string]json.RawMessage
	if err := json.Unmarshal(b[8:8+n], &hdr); err != nil {
		t.Fatal(err)
	}
	data := b[8+n:]
	out := map[string]tensor{}
	for name, raw := range hdr {
		if name == "__metadata__" {
			continue
		}
		var e struct {
			DType   string   `json:"dtype"`
			Shape   []int    `json:"shape"`
			Offsets [2]int64 `json:"data_offsets"`
		}
		if err := json.Unmarshal(raw, &e); err != nil {
			t.Fatal(err)
		}
		if e.DType != "F32" {
			continue
		}
		seg := data[e.Offsets[0]:e.Offsets[1]]
		v := make([]float32, len(seg)/4)
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(seg[4*i:]))
		}
		out[name] = tensor{e.Shape, v}
	}
	return out
}

type tensor struct {
	shape []int
	data  []float32
}

// maxAbsDiff is max |a-b| over equal-length slices (+Inf when lengths differ).
func maxAbsDiff(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	var m float64
	for i := range a {
		d := math.Abs(float64(a[i]) - float64(b[i]))
		if d > m || d != d {
			m = d
		}
	}
	return m
}

func maxAbs(a []float32) float64 {
	var m float64
	for _, v := range a {
		m = math.Max(m, math.Abs(float64(v)))
	}
	return m
}
