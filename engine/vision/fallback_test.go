//go:build linux || darwin

package vision

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"verdict/engine/weights"
	"verdict/native"
	"verdict/native/nativetest"
)

// TestFeaturesFallBackToCPU: a tower loaded on a backend that lacks its
// operations (sync fails with VD_EUNIMPL) rebinds its weights to the CPU
// on the first pass and gives the host path's bits.
func TestFeaturesFallBackToCPU(t *testing.T) {
	if testing.Short() {
		t.Skip("two full-size forwards; skipped in -short")
	}
	be := nativetest.Unimplemented(t)
	dir := tinyDir(t)
	store, err := weights.OpenRecipe(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	tower, err := LoadTowerOn(context.Background(), store, readFile(t, filepath.Join(dir, "config.json")), be, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tower.Backend() != be {
		t.Fatalf("loaded on %s, want the fake backend", tower.Backend().Name())
	}
	exp, err := weights.OpenSafetensors(filepath.Join(dir, "expected.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer exp.Close()
	pixels := tensor(t, exp, "pixel_values")
	got, err := tower.Features(pixels)
	if err != nil {
		t.Fatalf("Features on a backend without the operations: %v", err)
	}
	if tower.Backend() != native.Default() {
		t.Errorf("after the pass the tower runs on %s, want the CPU", tower.Backend().Name())
	}
	want, err := tower.forwardHost(&hostWorkspace{}, context.Background(), pixels, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if at := firstDiff(got, want); at >= 0 {
		t.Fatalf("value %d is %g, host's %g", at, got[at], want[at])
	}
}

// TestCloseFreesBoundWeights: Close unbinds every weight the tower bound to
// its backend, frees its stream's buffers, and later passes fail with
// ErrClosed.
func TestCloseFreesBoundWeights(t *testing.T) {
	be := nativetest.Unimplemented(t)
	dir := tinyDir(t)
	store, err := weights.OpenRecipe(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	binds0, allocs0 := nativetest.Live(be)
	tower, err := LoadTowerOn(context.Background(), store, readFile(t, filepath.Join(dir, "config.json")), be, nil)
	if err != nil {
		t.Fatal(err)
	}
	if binds, _ := nativetest.Live(be); binds <= binds0 {
		t.Fatalf("loading bound %d buffers on the fake backend, want some", binds-binds0)
	}
	tower.Close()
	if binds, allocs := nativetest.Live(be); binds != binds0 || allocs != allocs0 {
		t.Errorf("after Close %d bindings and %d allocations are left on the backend", binds-binds0, allocs-allocs0)
	}
	tower.Close() // again: nothing
	if _, err := tower.Features(make([]float32, 3*ImageSize*ImageSize)); !errors.Is(err, ErrClosed) {
		t.Errorf("Features after Close: %v, want ErrClosed", err)
	}
}
