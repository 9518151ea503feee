package models

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestCacheKeyFollowsContent: rewriting a checkpoint's weights with the
// same size and modification time gives another packed-cache key, for a
// small file (hashed whole) and a large one (header and samples).
func TestCacheKeyFollowsContent(t *testing.T) {
	for _, tc := range []struct {
		name string
		size int64
		at   func(header int64) int64 // the byte changed
	}{
		{"small file, a weight", 4096, func(hl int64) int64 { return 8 + hl + 100 }},
		{"large file, a weight", wholeHashMax + 8<<20, func(hl int64) int64 {
			span := wholeHashMax + 8<<20 - (8 + hl)
			return 8 + hl + span*100/fingerprintSamples + 10
		}},
		{"large file, the header", wholeHashMax + 8<<20, func(hl int64) int64 { return 20 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := []byte(`{"model_type":"gemma3n"}`)
			os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644)
			w := filepath.Join(dir, "model.safetensors")
			header := []byte(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`)
			f, err := os.Create(w)
			if err != nil {
				t.Fatal(err)
			}
			var n [8]byte
			binary.LittleEndian.PutUint64(n[:], uint64(len(header)))
			f.Write(n[:])
			f.Write(header)
			f.Truncate(tc.size)
			f.Close()
			mtime := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
			os.Chtimes(w, mtime, mtime)
			key := func() string {
				k, err := cacheKey(dir, &Model{}, cfg)
				if err != nil {
					t.Fatal(err)
				}
				return k
			}
			before := key()
			if again := key(); again != before {
				t.Fatalf("the key changed with nothing changed: %s then %s", before, again)
			}
			f, _ = os.OpenFile(w, os.O_RDWR, 0)
			f.WriteAt([]byte{0x5a}, tc.at(int64(len(header))))
			f.Close()
			os.Chtimes(w, mtime, mtime)
			if fi, _ := os.Stat(w); fi.Size() != tc.size || !fi.ModTime().Equal(mtime) {
				t.Fatalf("size %d time %v: the test changed them", fi.Size(), fi.ModTime())
			}
			if after := key(); after == before {
				t.Errorf("changed content kept the key %s", before)
			}
		})
	}
}

// TestOutputCacheBound: the tower cache keeps the most recently used
// outputs within its bound and refuses one larger than the bound.
func TestOutputCacheBound(t *testing.T) {
	c := newOutputCache(3 * 400) // three outputs of 100 floats
	k := func(i int) [32]byte { return outputKey('v', []float32{float32(i)}) }
	for i := range 3 {
		c.put(k(i), make([]float32, 100))
	}
	c.get(k(0)) // 1 is now the least recently used
	c.put(k(3), make([]float32, 100))
	if _, ok := c.get(k(1)); ok {
		t.Error("the least recently used output was kept past the bound")
	}
	for _, i := range []int{0, 2, 3} {
		if _, ok := c.get(k(i)); !ok {
			t.Errorf("output %d was dropped", i)
		}
	}
	c.put(k(9), make([]float32, 301))
	if n, b := c.size(); n != 3 || b != 1200 {
		t.Errorf("after an oversized put: %d entries, %d bytes", n, b)
	}
	if outputKey('v', []float32{1}) == outputKey('a', []float32{1}) {
		t.Error("image and audio inputs share a key")
	}
	c.clear()
	if n, b := c.size(); n != 0 || b != 0 {
		t.Errorf("after clear: %d entries, %d bytes", n, b)
	}
}

// TestGGUFCacheKey: a GGUF model's packed-cache key is the file's: stable,
// the same through its folder, and another one when a weight changes with
// size and time kept.
func TestGGUFCacheKey(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "m.gguf")
	data := append([]byte("GGUF"), make([]byte, 4092)...)
	os.WriteFile(p, data, 0o644)
	mtime := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	os.Chtimes(p, mtime, mtime)
	key := func(spec string) string {
		g, err := GGUFPath(spec)
		if err != nil || g == "" {
			t.Fatalf("GGUFPath(%s) = %q, %v", spec, g, err)
		}
		k, err := cacheKey(spec, &Model{gguf: g}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	before := key(p)
	if key(p) != before || key(dir) != before {
		t.Fatal("the key is not stable, or differs through the folder")
	}
	f, _ := os.OpenFile(p, os.O_RDWR, 0)
	f.WriteAt([]byte{1}, 3000)
	f.Close()
	os.Chtimes(p, mtime, mtime)
	if key(p) == before {
		t.Error("changed content kept the key")
	}
}
