package vision

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"verdict/engine/weights"
)

// untar extracts the files of testdata/<name>.tar.gz (repository root) whose
// base names are listed (all when none are) into dir, flattening folders.
func untar(t testing.TB, name, dir string, files ...string) {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "..", "testdata", name+".tar.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	want := map[string]bool{}
	for _, f := range files {
		want[f] = true
	}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		base := filepath.Base(h.Name)
		if h.Typeflag != tar.TypeReg || (len(want) > 0 && !want[base]) {
			continue
		}
		out, err := os.Create(filepath.Join(dir, base))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(out, tr); err != nil {
			t.Fatal(err)
		}
		out.Close()
	}
}

// tinyFixture is the synthetic-weight fixture with the full-size vision
// tower, extracted once per test binary.
var tinyFixture struct {
	once sync.Once
	dir  string
	err  error
}

func tinyDir(t testing.TB) string {
	tinyFixture.once.Do(func() {
		dir, err := os.MkdirTemp("", "vision-tiny-")
		if err != nil {
			tinyFixture.err = err
			return
		}
		untar(t, "gemma3n-synthetic-tiny", dir, "config.json", "recipe.json", "expected.safetensors")
		tinyFixture.dir = dir
	})
	if tinyFixture.err != nil {
		t.Fatal(tinyFixture.err)
	}
	return tinyFixture.dir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if tinyFixture.dir != "" {
		os.RemoveAll(tinyFixture.dir)
	}
	os.Exit(code)
}

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func tensor(t testing.TB, s weights.Store, name string) []float32 {
	t.Helper()
	v, err := s.Float32(name)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func maxAbsDiff(a, b []float32) (worst float64, at int) {
	for i := range a {
		d := math.Abs(float64(a[i]) - float64(b[i]))
		if d > worst || math.IsNaN(d) {
			worst, at = d, i
			if math.IsNaN(d) {
				return math.Inf(1), i
			}
		}
	}
	return worst, at
}

// TestTowerReferences runs the full-size tower of the tiny fixture on its
// pixel_values and checks vision_embeds (transformers + timm, float32), the
// hard path and the input checks. Unless -short, it then swaps in larger
// layer-scale gammas (see strongRecipe) and checks the tower output and the
// embeddings against testdata/strong_ref.safetensors: with the fixture's
// gammas (~1e-5) the residual UIR and attention blocks barely move the
// output, so only that second run really tests them.
func TestTowerReferences(t *testing.T) {
	dir := tinyDir(t)
	store, err := weights.OpenRecipe(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	t0 := time.Now()
	tower, err := LoadTower(store, readFile(t, filepath.Join(dir, "config.json")))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("load: %v", time.Since(t0))
	if tower.TextHidden() != 64 {
		t.Fatalf("TextHidden = %d, want 64", tower.TextHidden())
	}
	exp, err := weights.OpenSafetensors(filepath.Join(dir, "expected.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer exp.Close()
	pixels := tensor(t, exp, "pixel_values")
	want := tensor(t, exp, "vision_embeds")
	t0 = time.Now()
	got, err := tower.SoftTokens(pixels)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("forward: %v", time.Since(t0))
	if len(got) != len(want) {
		t.Fatalf("got %d values, want %d", len(got), len(want))
	}
	d, at := maxAbsDiff(got, want)
	t.Logf("vision_embeds: max |got - want| = %.3g at %d (got %g, want %g)", d, at, got[at], want[at])
	if d > 1e-3 {
		t.Errorf("vision_embeds: max abs error %.3g > 1e-3", d)
	}

	t.Run("hard", func(t *testing.T) { checkHard(t, tower, store) })
	t.Run("input", func(t *testing.T) {
		if _, err := tower.SoftTokens(pixels[:len(pixels)-1]); err == nil {
			t.Error("SoftTokens accepted a short input")
		}
		if _, err := tower.Features(nil); err == nil {
			t.Error("Features accepted no input")
		}
	})

	t.Run("strong", func(t *testing.T) {
		if testing.Short() {
			t.Skip("second full-size forward; skipped in -short")
		}
		strong, err := weights.NewRecipeStore(strongRecipe(t, readFile(t, filepath.Join(dir, "recipe.json"))), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer strong.Close()
		n := 0
		for s, st := range tower.stages {
			for j, b := range st {
				if b.gamma == nil {
					continue
				}
				copy(b.gamma, tensor(t, strong, fmt.Sprintf("%sblocks.%d.%d.layer_scale.gamma", TowerPrefix, s, j)))
				n++
			}
		}
		ref, err := weights.OpenSafetensors(filepath.Join("testdata", "strong_ref.safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		defer ref.Close()
		feat, err := tower.Features(pixels)
		if err != nil {
			t.Fatal(err)
		}
		wantTower := tensor(t, ref, "tower") // [2048, 256]
		h := tower.Config().HiddenSize
		tr := make([]float32, len(feat))
		for tok := range 256 {
			for c := range h {
				tr[c*256+tok] = feat[tok*h+c]
			}
		}
		d, at := maxAbsDiff(tr, wantTower)
		t.Logf("%d gammas swapped; tower output: max |got - want| = %.3g at %d (want %g)", n, d, at, wantTower[at])
		emb := tower.EmbedSoft(feat, 256)
		wantEmb := tensor(t, ref, "embeds")
		de, at := maxAbsDiff(emb, wantEmb)
		t.Logf("embeddings: max |got - want| = %.3g at %d (want %g)", de, at, wantEmb[at])
		if d > 1e-3 || de > 1e-3 {
			t.Errorf("strong layer scale: tower error %.3g, embeddings error %.3g (> 1e-3)", d, de)
		}
	})
}

// checkHard compares HardEmbed with a float64 evaluation of the embedder's
// hard path (embedding row, hard_embedding_norm, projection, scale-free
// norm).
func checkHard(t *testing.T, tower *Tower, store weights.Store) {
	table := tensor(t, store, EmbedderPrefix+"embedding.weight")
	norm := tensor(t, store, EmbedderPrefix+"hard_embedding_norm.weight")
	proj := tensor(t, store, EmbedderPrefix+"embedding_projection.weight")
	h, th := tower.Config().HiddenSize, tower.TextHidden()
	rms := func(x []float64) {
		ss := 0.0
		for _, v := range x {
			ss += v * v
		}
		inv := 1 / math.Sqrt(ss/float64(len(x))+1e-6)
		for i := range x {
			x[i] *= inv
		}
	}
	for _, id := range []int32{262144, 262145, 262271} {
		got := tower.HardEmbed(id)
		r := int(id) - 262144
		e := make([]float64, h)
		for i := range e {
			e[i] = float64(table[r*h+i])
		}
		rms(e)
		for i := range e {
			e[i] *= float64(norm[i])
		}
		want := make([]float64, th)
		for o := range th {
			for i := range h {
				want[o] += e[i] * float64(proj[o*h+i])
			}
		}
		rms(want)
		if len(got) != th {
			t.Fatalf("HardEmbed(%d): %d values, want %d", id, len(got), th)
		}
		worst := 0.0
		for i := range want {
			worst = max(worst, math.Abs(float64(got[i])-want[i]))
		}
		t.Logf("HardEmbed(%d): max error %.3g", id, worst)
		if worst > 1e-4 {
			t.Errorf("HardEmbed(%d): max error %.3g", id, worst)
		}
	}
	for _, id := range []int32{262143, 262272, 0, -1} {
		if got := tower.HardEmbed(id); got != nil {
			t.Errorf("HardEmbed(%d) = %d values, want nil", id, len(got))
		}
	}
}

// strongRecipe rewrites the fixture's recipe so that every layer-scale gamma
// is offset 0.25 + 0.25·u (same seeds), as testdata/make_vision_ref.py did.
func strongRecipe(t testing.TB, recipe []byte) []byte {
	var r map[string]any
	if err := json.Unmarshal(recipe, &r); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range r["tensors"].([]any) {
		m := e.(map[string]any)
		if strings.HasPrefix(m["name"].(string), TowerPrefix) && strings.HasSuffix(m["name"].(string), "layer_scale.gamma") {
			m["offset"], m["scale"] = 0.25, 0.25
			n++
		}
	}
	if n != 81 {
		t.Fatalf("rewrote %d layer-scale gammas, want 81", n)
	}
	out, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func BenchmarkTower(b *testing.B) {
	dir := tinyDir(b)
	store, err := weights.OpenRecipe(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	tower, err := LoadTower(store, readFile(b, filepath.Join(dir, "config.json")))
	if err != nil {
		b.Fatal(err)
	}
	exp, err := weights.OpenSafetensors(filepath.Join(dir, "expected.safetensors"))
	if err != nil {
		b.Fatal(err)
	}
	defer exp.Close()
	pixels := tensor(b, exp, "pixel_values")
	if _, err := tower.SoftTokens(pixels); err != nil { // warm the workspace
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := tower.SoftTokens(pixels); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(tower.FLOPs().Total()*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

// towerFlops counts the encoder's multiply-adds ×2 at 768×768 from the
// architecture's block specs (convolutions, projections, the attention and
// its key/value down-sampling; norms and activations left out): the
// reference for Tower.FLOPs, which walks the loaded layers.
func towerFlops() float64 {
	h, in := ImageSize/2, stemChannels
	total := 2.0 * float64(h*h*stemChannels*27)
	for _, specs := range stages() {
		for _, b := range specs {
			switch b.kind {
			case kindER:
				oh := h / b.stride
				total += 2 * float64(oh*oh*in*b.exp) * float64(in*b.k*b.k+b.out)
				h = oh
			case kindUIR:
				mid := in * b.exp
				oh := h / b.stride
				total += 2*float64(h*h*in*mid) + 2*float64(oh*oh*mid*b.out)
				total += 2 * float64(h*h*in*b.start*b.start+oh*oh*mid*b.k*b.k)
				h = oh
			case kindMQA:
				p := h * h
				kp := p / (b.kvStride * b.kvStride)
				total += 4*float64(p*in*b.heads*b.dim) + 4*float64(kp*in*b.dim) + 4*float64(p*b.heads*kp*b.dim)
				if b.kvStride > 1 {
					total += 4 * float64(kp*in*b.k*b.k)
				}
			}
			in = b.out
		}
	}
	p := (ImageSize / 16) * (ImageSize / 16)
	return total + 2*float64(p*1920*3840) + 2*float64(p*3840*2048)
}

// TestTowerFLOPs: Tower.FLOPs on the fixture's layers (shapes only, nothing
// read) is the count from the block specs plus the embedder's projection,
// and its kinds are each a real share.
func TestTowerFLOPs(t *testing.T) {
	dir := tinyDir(t)
	store, err := weights.OpenRecipe(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	cfg, err := ParseConfig(readFile(t, filepath.Join(dir, "config.json")))
	if err != nil {
		t.Fatal(err)
	}
	tw, err := build(t.Context(), store, cfg, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := tw.FLOPs()
	th := tw.Config().TextHidden
	if th <= 0 {
		t.Fatalf("text hidden %d", th)
	}
	want := towerFlops() + 2*256*2048*float64(th)
	if got := f.Total(); math.Abs(got-want) > 1e-9*want {
		t.Errorf("FLOPs().Total() = %.6g, want %.6g", got, want)
	}
	for name, v := range map[string]float64{"conv": f.Conv, "depthwise": f.Depthwise, "pointwise": f.Pointwise, "attention": f.Attention} {
		if v < 1e-3*want || v > want/2 && name != "pointwise" {
			t.Errorf("%s: %.4g of %.4g", name, v, want)
		}
	}
	t.Logf("%.1f GFLOP: conv %.1f, depthwise %.1f, pointwise %.1f, attention %.1f", f.Total()/1e9, f.Conv/1e9, f.Depthwise/1e9, f.Pointwise/1e9, f.Attention/1e9)
}
