package audio_test

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"verdict/engine/audio"
	"verdict/engine/weights"
)

// loadFixtureTower opens a synthetic fixture (recipe weights) and loads its
// audio tower.
func loadFixtureTower(t testing.TB, name string) (*audio.Tower, string) {
	t.Helper()
	dir := unpack(t, name)
	store, err := weights.OpenRecipe(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	cfg, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	tw, err := audio.LoadTower(store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return tw, dir
}

// TestTowerFixtures compares the tower and the embedder with transformers on
// the tiny audio tower (hidden 64, 2 layers) and the full-size one (hidden
// 1536, 12 layers, real speech).
func TestTowerFixtures(t *testing.T) {
	cases := []struct {
		fixture   string
		feats     string // expected.safetensors key of the input features
		tower     string // key of the tower output ("" if none)
		embeds    string
		wantN     int
		tolTower  float64
		tolEmbeds float64
		long      bool
	}{
		{"gemma3n-synthetic-tiny", "audio_input_features", "", "audio_embeds", 16, 0, 1e-3, false},
		{"gemma3n-synthetic-audiofull", "input_features", "audio_tower_output", "audio_embeds", 35, 1e-3, 1e-3, true},
	}
	for _, c := range cases {
		t.Run(c.fixture, func(t *testing.T) {
			if c.long && testing.Short() {
				t.Skip("full-size tower: skipped in -short mode")
			}
			tw, dir := loadFixtureTower(t, c.fixture)
			exp := readSafetensors(t, filepath.Join(dir, "expected.safetensors"))
			in := exp[c.feats]
			T := in.shape[1]
			mask := make([]bool, T)
			for i := range mask {
				mask[i] = true
			}
			enc, encMask, err := tw.Encode(in.data, mask)
			if err != nil {
				t.Fatal(err)
			}
			if len(encMask) != c.wantN || tw.Cfg.NumTokens(T) != c.wantN {
				t.Fatalf("%d rows (NumTokens %d), want %d", len(encMask), tw.Cfg.NumTokens(T), c.wantN)
			}
			if c.tower != "" {
				want := exp[c.tower]
				d := maxAbsDiff(enc, want.data)
				t.Logf("tower output %v: max |diff| %.3g (max |value| %.3g)", want.shape, d, maxAbs(want.data))
				if d > c.tolTower {
					t.Errorf("tower output differs by %g > %g", d, c.tolTower)
				}
			}
			emb, err := tw.Embed(enc)
			if err != nil {
				t.Fatal(err)
			}
			want := exp[c.embeds]
			d := maxAbsDiff(emb, want.data)
			t.Logf("audio_embeds %v: max |diff| %.3g (max |value| %.3g)", want.shape, d, maxAbs(want.data))
			if d > c.tolEmbeds {
				t.Errorf("audio_embeds differ by %g > %g", d, c.tolEmbeds)
			}
		})
	}
}

// TestSoftTokens runs the whole path from samples on the tiny fixture's
// waveform: 16 embedded rows, then the padding row up to 188.
func TestSoftTokens(t *testing.T) {
	tw, dir := loadFixtureTower(t, "gemma3n-synthetic-tiny")
	exp := readSafetensors(t, filepath.Join(dir, "expected.safetensors"))
	samples := readF32(t, filepath.Join(dir, "audio_waveform.f32"))
	got, err := tw.SoftTokens(samples)
	if err != nil {
		t.Fatal(err)
	}
	H := tw.TextHidden()
	if len(got) != 188*H {
		t.Fatalf("%d values, want 188×%d", len(got), H)
	}
	want := exp["audio_embeds"].data
	n := len(want) / H
	d := maxAbsDiff(got[:n*H], want)
	t.Logf("soft tokens from samples: max |diff| %.3g over %d rows", d, n)
	if d > 1e-3 {
		t.Errorf("soft tokens differ by %g", d)
	}
	pad, err := tw.HardEmbed(262399)
	if err != nil {
		t.Fatal(err)
	}
	for r := n; r < 188; r++ {
		if maxAbsDiff(got[r*H:(r+1)*H], pad) != 0 {
			t.Fatalf("row %d is not the padding embedding", r)
		}
	}
	// Concurrent calls give the same rows.
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			again, err := tw.SoftTokens(samples)
			if err != nil || maxAbsDiff(again, got) != 0 {
				t.Errorf("concurrent SoftTokens differs (err %v)", err)
			}
		}()
	}
	wg.Wait()
	if _, err := tw.SoftTokens(make([]float32, 100)); err == nil {
		t.Error("SoftTokens of a 100-sample clip: no error")
	}
}

// TestTowerFLOPs: the conformer's matrix products counted by Tower.FLOPs
// are 2·rows·(the elements of every 2-D conformer weight in the
// checkpoint), the attention's keys the window's, and a longer clip costs
// more.
func TestTowerFLOPs(t *testing.T) {
	tw, dir := loadFixtureTower(t, "gemma3n-synthetic-tiny")
	store, err := weights.OpenRecipe(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	elems := 0.0
	for _, name := range store.Names() {
		shape, _, _ := store.Info(name)
		if strings.Contains(name, "audio_tower.conformer.") && strings.HasSuffix(name, ".weight") && len(shape) == 2 &&
			!strings.Contains(name, "pos_proj") { // folded into pos at load
			elems += float64(shape[0] * shape[1])
		}
	}
	cfg := tw.Cfg
	const frames = 400
	T := 4 * cfg.NumTokens(frames) // 400 frames: 100 rows after the subsampling, 25 after the reduction
	f := tw.FLOPs(frames)
	D, L := float64(cfg.HiddenSize), float64(cfg.NumLayers)
	products := f.FeedForward + f.Projections + f.LightConv - L*2*float64(T)*D*float64(cfg.ConvKernel)
	if want := 2 * float64(T) * elems; math.Abs(products-want) > 1e-9*want {
		t.Errorf("conformer products %.6g, want 2·%d rows·%g elements = %.6g", products, T, elems, want)
	}
	past := float64(cfg.ContextLeft - 1)
	keys := (past+1)*float64(T) - past*(past+1)/2 // future 0: min(i, past)+1 keys for query i
	if cfg.ContextRight != 0 {
		t.Fatalf("fixture's context right %d, the count assumes 0", cfg.ContextRight)
	}
	if want := L * 6 * keys * D; math.Abs(f.Attention-want) > 1e-9*want {
		t.Errorf("attention %.6g, want %.6g", f.Attention, want)
	}
	if f.Subsample <= 0 || f.Embed != 2*float64(cfg.NumTokens(frames))*D*float64(tw.TextHidden()) {
		t.Errorf("subsample %g, embed %g", f.Subsample, f.Embed)
	}
	if long := tw.FLOPs(2 * frames); long.Total() <= f.Total() || tw.FLOPs(0).Total() != 0 {
		t.Errorf("FLOPs(%d) = %g, FLOPs(%d) = %g, FLOPs(0) = %g", 2*frames, long.Total(), frames, f.Total(), tw.FLOPs(0).Total())
	}
}
