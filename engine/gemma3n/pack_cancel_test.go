//go:build unix

package gemma3n_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"verdict/engine/gemma3n"
)

// TestPackCancelAndTemporaryFiles: a load cancelled while packing returns
// the context's error and leaves no file; a later load removes the
// temporary files nobody writes and keeps a locked one; progress ends at
// its total.
func TestPackCancelAndTemporaryFiles(t *testing.T) {
	defer gemma3n.SetPackMinCache(0)()
	st, cfg, sp := tinyStore(t)
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	opt := gemma3n.LoadOptions{Weights: gemma3n.WeightsQ4, CacheDir: dir, CacheKey: "tiny", CacheName: "tiny", Context: ctx,
		Progress: func(stage string, done, total int64) {
			if stage == gemma3n.StagePacking {
				calls++
				cancel() // stop at the first report
			}
		}}
	if _, err := gemma3n.LoadWith(st, cfg, sp, opt); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled load: %v, want context.Canceled", err)
	}
	if calls != 1 {
		t.Errorf("packing went on for %d reports after the cancel", calls-1)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) > 0 {
		t.Errorf("a cancelled load left %v", left)
	}

	// Leftovers of a crash: one unlocked, one still locked by its writer.
	orphan := filepath.Join(dir, "tiny-g64-0123456789abcdef.q4.tmp-111")
	busy := filepath.Join(dir, "other-g64-0123456789abcdef.q4.tmp-222")
	for _, p := range []string{orphan, busy} {
		if err := os.WriteFile(p, []byte("half"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	w, err := os.Open(busy)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := syscall.Flock(int(w.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	var last [2]int64
	opt.Context = context.Background()
	opt.Progress = func(stage string, done, total int64) {
		if stage == gemma3n.StagePacking {
			last = [2]int64{done, total}
		}
	}
	m, err := gemma3n.LoadWith(st, cfg, sp, opt)
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
	if _, err := os.Stat(orphan); !os.IsNotExist(err) {
		t.Errorf("the orphaned temporary file is still there (%v)", err)
	}
	if _, err := os.Stat(busy); err != nil {
		t.Errorf("the temporary file being written was removed: %v", err)
	}
	if last[1] == 0 || last[0] != last[1] {
		t.Errorf("the last packing report is %d of %d", last[0], last[1])
	}
	// The next load checks the cache and says so.
	var checked bool
	opt.Progress = func(stage string, done, total int64) {
		checked = checked || stage == gemma3n.StageChecking && done == total
	}
	m, err = gemma3n.LoadWith(st, cfg, sp, opt)
	if err != nil {
		t.Fatal(err)
	}
	if _, disk := m.PackedCache(); !disk || !checked {
		t.Errorf("second load: from disk %v, check reported %v", disk, checked)
	}
	m.Close()
}
