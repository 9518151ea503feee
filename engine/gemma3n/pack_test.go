package gemma3n_test

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"verdict/engine/fixture/testmodel"
	"verdict/engine/gemma3n"
	"verdict/engine/model"
	"verdict/engine/weights"
)

// tinyStore opens the tiny fixture's weights and config.
func tinyStore(t *testing.T) (weights.Store, gemma3n.Config, gemma3n.Special) {
	t.Helper()
	dir := testmodel.Dir(t, "gemma3n-synthetic-tiny.tar.gz")
	st, err := weights.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	js, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, sp, err := gemma3n.ParseConfig(js)
	if err != nil {
		t.Fatal(err)
	}
	return st, cfg, sp
}

var tinyIDs = []int32{2, 105, 2364, 107, 6190, 531, 9, 77, 1000, 4242}

func forward(t *testing.T, m *gemma3n.Model) []float32 {
	t.Helper()
	h, err := m.Forward(m.NewCache(), tinyIDs, nil)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestQ4Load: q4 weights load for every group size and stay near the
// float32 model; bad options are refused.
func TestQ4Load(t *testing.T) {
	st, cfg, sp := tinyStore(t)
	f32, err := gemma3n.LoadWith(st, cfg, sp, gemma3n.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if f32.Weights() != gemma3n.WeightsF32 || f32.Group() != 0 {
		t.Errorf("default load: %s group %d, want f32", f32.Weights(), f32.Group())
	}
	ref := forward(t, f32)
	var norm float64
	for _, v := range ref {
		norm += float64(v) * float64(v)
	}
	for _, g := range []int{32, 64, 128} {
		m, err := gemma3n.LoadWith(st, cfg, sp, gemma3n.LoadOptions{Weights: gemma3n.WeightsQ4, Group: g})
		if err != nil {
			t.Fatal(err)
		}
		if m.Group() != g {
			t.Errorf("group %d reported as %d", g, m.Group())
		}
		h := forward(t, m)
		var d float64
		for i := range h {
			d += float64(h[i]-ref[i]) * float64(h[i]-ref[i])
		}
		rel := math.Sqrt(d / norm)
		t.Logf("group %d: hidden states' relative error %.3g", g, rel)
		// The tiny model's random weights are uniform, 4-bit's worst case
		// (about 7% error per weight), and six random layers amplify it:
		// this bounds gross mistakes; the scorer's distributions are held
		// to their float32 ones in engine/models.
		if rel > 0.4 || math.IsNaN(rel) {
			t.Errorf("group %d: relative error %.3g of the hidden states", g, rel)
		}
		m.Close()
	}
	for _, bad := range []gemma3n.LoadOptions{{Weights: "q8"}, {Weights: gemma3n.WeightsQ4, Group: 48}, {Weights: gemma3n.WeightsQ4, Group: 16}} {
		if _, err := gemma3n.LoadWith(st, cfg, sp, bad); err == nil {
			t.Errorf("LoadWith(%+v) did not fail", bad)
		}
	}
	if _, err := model.ParseWeights("f16"); err == nil {
		t.Error("ParseWeights(f16) did not fail")
	}
}

// TestPackedCache: the first q4 load writes a cache file, the second maps
// it (same bits); a corrupt, truncated or stale file is rebuilt.
func TestPackedCache(t *testing.T) {
	defer gemma3n.SetPackMinCache(0)()
	st, cfg, sp := tinyStore(t)
	dir := t.TempDir()
	opt := gemma3n.LoadOptions{Weights: gemma3n.WeightsQ4, CacheDir: dir, CacheKey: "tiny v1", CacheName: "tiny"}
	var logs []string
	opt.Log = func(s string) { logs = append(logs, s) }
	load := func(wantDisk bool) (string, []float32) {
		t.Helper()
		m, err := gemma3n.LoadWith(st, cfg, sp, opt)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		path, disk := m.PackedCache()
		if path == "" || disk != wantDisk {
			t.Fatalf("cache %q, from disk %v, want from disk %v (log %q)", path, disk, wantDisk, logs)
		}
		return path, forward(t, m)
	}
	nocache, err := gemma3n.LoadWith(st, cfg, sp, gemma3n.LoadOptions{Weights: gemma3n.WeightsQ4})
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := nocache.PackedCache(); p != "" {
		t.Errorf("a load without a cache directory made %s", p)
	}
	want := forward(t, nocache)
	nocache.Close()
	same := func(what string, h []float32) {
		t.Helper()
		for i := range want {
			if math.Float32bits(h[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%s: hidden value %d is %v, want %v", what, i, h[i], want[i])
			}
		}
	}
	path, h := load(false)
	same("built", h)
	if !strings.HasPrefix(filepath.Base(path), "tiny-g64-") {
		t.Errorf("cache file %s", path)
	}
	_, h = load(true)
	same("mapped", h)

	// Corrupt one byte of the packed data, then of the header.
	for _, at := range []int64{-100, 20} {
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		fi, _ := f.Stat()
		off := at
		if at < 0 {
			off = fi.Size() + at
		}
		b := make([]byte, 1)
		f.ReadAt(b, off)
		b[0] ^= 0x10
		f.WriteAt(b, off)
		f.Close()
		logs = nil
		_, h = load(false)
		same("rebuilt after corruption", h)
		if len(logs) == 0 {
			t.Errorf("corruption at %d not reported", at)
		}
	}
	// Truncated.
	fi, _ := os.Stat(path)
	os.Truncate(path, fi.Size()-4096)
	_, h = load(false)
	same("rebuilt after truncation", h)
	_, h = load(true)
	same("mapped again", h)

	// Another checkpoint identity: a new file; the old one is pruned.
	opt.CacheKey = "tiny v2"
	path2, h := load(false)
	same("new key", h)
	if path2 == path {
		t.Error("a new key reused the file name")
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("stale cache file %s not removed", path)
	}
	// Another group size: its own file.
	opt.Group = 32
	path3, _ := load(false)
	if path3 == path2 || !strings.Contains(filepath.Base(path3), "-g32-") {
		t.Errorf("group 32 cache file %s", path3)
	}
	// No temporary files are left behind.
	left, _ := filepath.Glob(filepath.Join(dir, "*.tmp-*"))
	if len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
}
