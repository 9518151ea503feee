//go:build linux || darwin

package vision

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"verdict/engine/weights"
	"verdict/native"
)

// unimplLib is a backend library on host memory whose operations do
// nothing and whose sync always fails with VD_EUNIMPL: a GPU backend
// without the towers' kernels, as far as a tower can tell.
const unimplLib = `#include "backend.h"
#include <stdlib.h>
static void nop(void) {}
static void *h_alloc(vd_backend *b, size_t n) { (void)b; return calloc(1, n ? n : 64); }
static void h_release(vd_backend *b, void *p, size_t n) { (void)b; (void)n; free(p); }
static void *h_bind(vd_backend *b, void *h, size_t n) { (void)b; (void)n; return h; }
static vd_stream *h_stream_new(vd_backend *b) { (void)b; return calloc(1, 64); }
static void h_stream_free(vd_stream *s) { free(s); }
static int h_sync(vd_stream *s) { (void)s; return VD_EUNIMPL; }
static vd_backend t;
vd_backend *vd_cuda_backend(int dev, char *err, size_t n) {
	(void)dev; (void)err; (void)n;
	void **f = (void **)&t.alloc;
	for (size_t i = 0; i < (sizeof t - offsetof(vd_backend, alloc)) / sizeof(void *); i++)
		f[i] = (void *)nop;
	t.abi = VD_ABI; t.name = "cuda";
	t.alloc = h_alloc; t.release = h_release; t.bind = h_bind;
	t.stream_new = h_stream_new; t.stream_free = h_stream_free; t.sync = h_sync;
	return &t;
}
`

// TestFeaturesFallBackToCPU: a tower loaded on a backend that lacks its
// operations (sync fails with VD_EUNIMPL) rebinds its weights to the CPU
// on the first pass and gives the host path's bits.
func TestFeaturesFallBackToCPU(t *testing.T) {
	if testing.Short() {
		t.Skip("two full-size forwards; skipped in -short")
	}
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler")
	}
	tmp := t.TempDir()
	src := filepath.Join(tmp, "unimpl.c")
	if err := os.WriteFile(src, []byte(unimplLib), 0o644); err != nil {
		t.Fatal(err)
	}
	so := filepath.Join(tmp, native.CUDALibrary)
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-I"+filepath.Join("..", "..", "native"), "-o", so, src).CombinedOutput(); err != nil {
		t.Fatalf("cc: %v\n%s", err, out)
	}
	t.Setenv("VERDICT_CUDA_LIB", so)
	be, err := native.Open("cuda:3")
	if err != nil {
		t.Fatal(err)
	}
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
