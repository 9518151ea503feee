package gemma4

import (
	"archive/tar"
	"compress/gzip"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path"
	"path/filepath"
	"sync"
	"testing"

	"verdict/engine/weights"
)

// fixtureDir extracts testdata/<name>.tar.gz into a temporary folder (once
// per test binary) and returns it.
var fixtureDirs sync.Map

func fixtureDir(t testing.TB, name string) string {
	t.Helper()
	if d, ok := fixtureDirs.Load(name); ok {
		return d.(string)
	}
	f, err := os.Open(filepath.Join("..", "..", "testdata", name+".tar.gz"))
	if err != nil {
		t.Fatalf("fixture: %v (the repository's testdata/ should hold it)", err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "gemma4-"+name+"-")
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		data, err := io.ReadAll(io.LimitReader(tr, 64<<20))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, path.Base(h.Name)), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fixtureDirs.Store(name, dir)
	return dir
}

func TestMain(m *testing.M) {
	code := m.Run()
	fixtureDirs.Range(func(_, v any) bool {
		os.RemoveAll(v.(string))
		return true
	})
	os.Exit(code)
}

// meta is the part of a fixture's meta.json the tests read.
type meta struct {
	Variant      string  `json:"variant"`
	DType        string  `json:"dtype"`
	IDs          []int   `json:"text_prompt_ids"`
	Greedy8      []int   `json:"greedy_8"`
	ExtraPrompts []extra `json:"extra_prompts"`
	Tolerances   map[string]float64
	Margins      struct {
		ArgmaxAll float64 `json:"argmax_all_min_top2_margin"`
	} `json:"margins"`
}

type extra struct {
	Name    string `json:"name"`
	IDs     []int  `json:"input_ids"`
	Logits  string `json:"logits"`
	Greedy8 []int  `json:"greedy_8"`
}

// tensor is one tensor of expected.safetensors: F32 as f, I32 as i.
type tensor struct {
	shape []int
	f     []float32
	i     []int
}

// readExpected reads a safetensors file of F32 and I32 tensors (the
// weights stores read floats only).
func readExpected(t testing.TB, file string) map[string]tensor {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 8 {
		t.Fatalf("%s: too short", file)
	}
	hn := binary.LittleEndian.Uint64(b)
	if hn > uint64(len(b)-8) {
		t.Fatalf("%s: header of %d bytes", file, hn)
	}
	var hdr map[string]json.RawMessage
	if err := json.Unmarshal(b[8:8+hn], &hdr); err != nil {
		t.Fatal(err)
	}
	data := b[8+hn:]
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
		seg := data[e.Offsets[0]:e.Offsets[1]]
		tn := tensor{shape: e.Shape}
		switch e.DType {
		case "F32":
			tn.f = make([]float32, len(seg)/4)
			for k := range tn.f {
				tn.f[k] = math.Float32frombits(binary.LittleEndian.Uint32(seg[4*k:]))
			}
		case "I32":
			tn.i = make([]int, len(seg)/4)
			for k := range tn.i {
				tn.i[k] = int(int32(binary.LittleEndian.Uint32(seg[4*k:])))
			}
		default:
			t.Fatalf("%s: %s is %s", file, name, e.DType)
		}
		out[name] = tn
	}
	return out
}

// fixtureData is one fixture, loaded.
type fixtureData struct {
	name  string
	dir   string
	cfg   *Config
	meta  meta
	exp   map[string]tensor
	store weights.Store
	// scoring is scoring_ids.json.
	scoring struct {
		Prefix []int `json:"prefix_ids"`
		Fields []struct {
			Name        string    `json:"name"`
			FieldIDs    []int     `json:"field_ids"`
			Candidates  [][]int   `json:"candidate_ids"`
			LogprobSums []float64 `json:"logprob_sums"`
		} `json:"fields"`
	}
}

func loadFixture(t testing.TB, name string) *fixtureData {
	t.Helper()
	dir := fixtureDir(t, name)
	fx := &fixtureData{name: name, dir: dir}
	js, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if fx.cfg, err = ParseConfig(js); err != nil {
		t.Fatal(err)
	}
	mj, err := os.ReadFile(filepath.Join(dir, "meta.json"))
	if err != nil {
		t.Fatal(err)
	}
	var raw struct {
		meta
		Tol map[string]float64 `json:"tolerances"`
	}
	if err := json.Unmarshal(mj, &raw); err != nil {
		t.Fatal(err)
	}
	fx.meta = raw.meta
	fx.meta.Tolerances = raw.Tol
	fx.exp = readExpected(t, filepath.Join(dir, "expected.safetensors"))
	sj, err := os.ReadFile(filepath.Join(dir, "scoring_ids.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(sj, &fx.scoring); err != nil {
		t.Fatal(err)
	}
	if len(fx.scoring.Fields) == 0 {
		t.Fatalf("%s: scoring_ids.json has no fields", name)
	}
	st, err := weights.OpenSafetensors(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	fx.store = st
	return fx
}

func (fx *fixtureData) model(t testing.TB) *Model {
	t.Helper()
	m, err := Load(fx.cfg, fx.store)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func (fx *fixtureData) want(t testing.TB, name string) tensor {
	t.Helper()
	e, ok := fx.exp[name]
	if !ok {
		t.Fatalf("%s: expected.safetensors has no %s", fx.name, name)
	}
	return e
}

// maxAbs is max |a-b| (lengths must agree).
func maxAbs(a, b []float32) (float64, error) {
	if len(a) != len(b) {
		return 0, fmt.Errorf("%d values, want %d", len(a), len(b))
	}
	var w float64
	for i := range a {
		d := math.Abs(float64(a[i]) - float64(b[i]))
		if math.IsNaN(d) {
			return math.Inf(1), nil
		}
		w = math.Max(w, d)
	}
	return w, nil
}

func maxOf(a []float32) float64 {
	var w float64
	for _, v := range a {
		w = math.Max(w, math.Abs(float64(v)))
	}
	return w
}
