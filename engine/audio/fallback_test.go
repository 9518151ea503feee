//go:build linux || darwin

package audio_test

import (
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"verdict/engine/audio"
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

// TestEncodeFallsBackToCPU: a tower loaded on a backend that lacks its
// operations (sync fails with VD_EUNIMPL) rebinds its weights to the CPU
// on the first pass and gives the host path's bits.
func TestEncodeFallsBackToCPU(t *testing.T) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "unimpl.c")
	if err := os.WriteFile(src, []byte(unimplLib), 0o644); err != nil {
		t.Fatal(err)
	}
	so := filepath.Join(dir, native.CUDALibrary)
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-I"+filepath.Join("..", "..", "native"), "-o", so, src).CombinedOutput(); err != nil {
		t.Fatalf("cc: %v\n%s", err, out)
	}
	t.Setenv("VERDICT_CUDA_LIB", so)
	be, err := native.Open("cuda:3") // a device number no other test opens
	if err != nil {
		t.Fatal(err)
	}

	fx := unpack(t, "gemma3n-synthetic-tiny")
	store, err := weights.OpenRecipe(fx)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	cfg, err := os.ReadFile(filepath.Join(fx, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	tw, err := audio.LoadTowerOn(store, cfg, be)
	if err != nil {
		t.Fatal(err)
	}
	if tw.Backend() != be {
		t.Fatalf("loaded on %s, want the fake backend", tw.Backend().Name())
	}
	in := readSafetensors(t, filepath.Join(fx, "expected.safetensors"))["audio_input_features"]
	mask := make([]bool, in.shape[1])
	for i := range mask {
		mask[i] = true
	}
	got, _, err := tw.Encode(in.data, mask)
	if err != nil {
		t.Fatalf("Encode on a backend without the operations: %v", err)
	}
	if tw.Backend() != native.Default() {
		t.Errorf("after the pass the tower runs on %s, want the CPU", tw.Backend().Name())
	}
	want, _, err := tw.EncodeHost(in.data, mask)
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("value %d is %g, host's %g", i, got[i], want[i])
		}
	}
}
