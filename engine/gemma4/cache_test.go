package gemma4

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"verdict/engine/model"
	"verdict/engine/packcache"
	"verdict/engine/weights"
)

// countingStore counts the whole tensors read from a store.
type countingStore struct {
	weights.Store
	mu    sync.Mutex
	reads map[string]int
}

func (s *countingStore) Float32(name string) ([]float32, error) {
	s.mu.Lock()
	s.reads[name]++
	s.mu.Unlock()
	return s.Store.Float32(name)
}

// cacheRun opens a q4 decoder of fx's store with opt (Log collecting into
// logs) and returns its logits on ids, its cache file, whether it was
// mapped from disk, the whole tensors the load read and the matrices it
// packed or mapped.
func cacheRun(t *testing.T, fx *fixtureData, opt Options, ids []int32, logs *[]string) (logits []float32, path string, disk bool, reads, packed int) {
	t.Helper()
	st := &countingStore{Store: fx.store, reads: map[string]int{}}
	opt.Weights, opt.KVPositions = model.WeightsQ4, 2048
	opt.Log = func(s string) { *logs = append(*logs, s) }
	d, err := Open(fx.Cfg, st, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	logits, _ = prefill(t, d, ids)
	path, disk = d.PackedCache()
	for _, n := range st.reads {
		reads += n
	}
	return logits, path, disk, reads, len(d.packed)
}

func sameBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d logits, want %d", what, len(got), len(want))
	}
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s: logit %d is %v, want %v", what, i, got[i], want[i])
		}
	}
}

// flip xors one byte of the file at off (from the end when negative).
func flip(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	if off < 0 {
		off += fi.Size()
	}
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x10
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// TestPackedCache: with a cache directory and key, the first q4 Open packs
// into a cache file, the next maps it without reading the packed tensors
// and gives the same logits bit for bit; a corrupt, truncated or foreign
// file is refused (logged) and rebuilt with the same logits; a new key or
// group packs again into its own file; no temporary file is left.
func TestPackedCache(t *testing.T) {
	defer func(old int64) { packMinCache = old }(packMinCache)
	packMinCache = 0
	for _, name := range fixtures[:2] { // dense and MoE
		t.Run(name, func(t *testing.T) {
			fx := loadFixture(t, name)
			other := loadFixture(t, fixtures[1-slicesIndex(fixtures, name)])
			ids := ids32(fx.Meta.IDs)
			dir := t.TempDir()
			var logs []string
			want, p0, _, allReads, packed := cacheRun(t, fx, Options{}, ids, &logs)
			if p0 != "" || packed == 0 {
				t.Fatalf("a load without a cache directory made %q, packed %d matrices", p0, packed)
			}
			t.Logf("%d of the %d tensors read are packed", packed, allReads)
			opt := Options{CacheDir: dir, CacheKey: name + " v1", CacheName: "tiny"}
			type step struct {
				what     string
				before   func(path string) // spoils the file first
				opt      func(o *Options)
				wantDisk bool
				wantLog  bool
			}
			var path string
			steps := []step{
				{what: "first load packs", wantDisk: false},
				{what: "second load maps", wantDisk: true},
				{what: "corrupt data", before: func(p string) { flip(t, p, -100) }, wantLog: true},
				{what: "mapped after the rebuild", wantDisk: true},
				{what: "corrupt header", before: func(p string) { flip(t, p, 20) }, wantLog: true},
				{what: "truncated", before: func(p string) {
					fi, _ := os.Stat(p)
					os.Truncate(p, fi.Size()-4096)
				}, wantLog: true},
				{what: "not a cache file", before: func(p string) { os.WriteFile(p, []byte("hello"), 0o644) }, wantLog: true},
				{what: "another model's file under this name and key", before: func(p string) {
					var l []string
					o := opt
					o.CacheDir = t.TempDir()
					_, q, _, _, _ := cacheRun(t, other, o, ids32(other.Meta.IDs), &l)
					b, err := os.ReadFile(q)
					if err != nil {
						t.Fatal(err)
					}
					os.WriteFile(p, b, 0o644)
				}, wantLog: true},
				{what: "mapped at last", wantDisk: true},
				{what: "a changed checkpoint packs again", opt: func(o *Options) { o.CacheKey = name + " v2" }},
				{what: "group 32 packs into its own file", opt: func(o *Options) { o.Group = 32 }},
			}
			for _, s := range steps {
				if s.before != nil {
					s.before(path)
				}
				if s.opt != nil {
					s.opt(&opt)
				}
				logs = nil
				got, p, disk, reads, _ := cacheRun(t, fx, opt, ids, &logs)
				if opt.Group == 0 {
					sameBits(t, s.what, got, want)
				}
				if p == "" || disk != s.wantDisk {
					t.Fatalf("%s: cache %q, from disk %v, want from disk %v (log %q)", s.what, p, disk, s.wantDisk, logs)
				}
				// From disk, every tensor but the packed ones is read.
				if wantReads := allReads - map[bool]int{true: packed}[disk]; reads != wantReads {
					t.Errorf("%s: from disk %v, %d tensors read, want %d (%d packed of %d)", s.what, disk, reads, wantReads, packed, allReads)
				}
				if s.wantLog != (len(logs) > 0) {
					t.Errorf("%s: log %q", s.what, logs)
				}
				if s.opt != nil {
					if p == path {
						t.Errorf("%s: the file name %s did not change", s.what, p)
					}
					if _, err := os.Stat(path); opt.Group == 0 && !os.IsNotExist(err) {
						t.Errorf("%s: the stale file %s is still there", s.what, path)
					}
				}
				path = p
			}
			if !strings.Contains(filepath.Base(path), "tiny-g32-") {
				t.Errorf("group 32 file %s", path)
			}
			if left, _ := filepath.Glob(filepath.Join(dir, packcache.TempPattern)); len(left) > 0 {
				t.Errorf("temporary files left: %v", left)
			}
		})
	}
}

func slicesIndex(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

// TestPackedCacheConcurrent: loads of one model at once each get the same
// logits and leave one whole file, which the next load maps.
func TestPackedCacheConcurrent(t *testing.T) {
	defer func(old int64) { packMinCache = old }(packMinCache)
	packMinCache = 0
	fx := loadFixture(t, fixtures[0])
	ids := ids32(fx.Meta.IDs)
	var logs []string
	want, _, _, _, _ := cacheRun(t, fx, Options{}, ids, &logs)
	dir := t.TempDir()
	opt := Options{CacheDir: dir, CacheKey: "k", CacheName: "tiny", Weights: model.WeightsQ4, KVPositions: 2048}
	const n = 6
	ds := make([]*Decoder, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { ds[i], errs[i] = Open(fx.Cfg, fx.store, opt) })
	}
	wg.Wait()
	for i, d := range ds {
		if errs[i] != nil {
			t.Fatalf("load %d: %v", i, errs[i])
		}
		got, _ := prefill(t, d, ids)
		sameBits(t, "concurrent load", got, want)
	}
	for _, d := range ds {
		d.Close()
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*"))
	if len(files) != 1 || !strings.HasSuffix(files[0], ".q4") {
		t.Errorf("files after concurrent loads: %v", files)
	}
	got, _, disk, _, _ := cacheRun(t, fx, Options{CacheDir: dir, CacheKey: "k", CacheName: "tiny"}, ids, &logs)
	if !disk || len(logs) > 0 {
		t.Errorf("after concurrent loads: from disk %v, log %q", disk, logs)
	}
	sameBits(t, "mapped after concurrent loads", got, want)
}

// TestPackedCacheCancel: a load cancelled while packing returns the
// context's error and leaves no file; a small model gets no file.
func TestPackedCacheCancel(t *testing.T) {
	defer func(old int64) { packMinCache = old }(packMinCache)
	packMinCache = 0
	fx := loadFixture(t, fixtures[0])
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	opt := Options{CacheDir: dir, CacheKey: "k", CacheName: "tiny", Weights: model.WeightsQ4, KVPositions: 2048, Context: ctx,
		Progress: func(done, total int64) { cancel() }}
	if _, err := Open(fx.Cfg, fx.store, opt); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled load: %v, want context.Canceled", err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) > 0 {
		t.Errorf("a cancelled load left %v", left)
	}
	packMinCache = 1 << 40
	opt.Context, opt.Progress = nil, nil
	d, err := Open(fx.Cfg, fx.store, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if p, _ := d.PackedCache(); p != "" {
		t.Errorf("a model under the threshold got the file %s", p)
	}
}
