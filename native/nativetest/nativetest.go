//go:build linux || darwin

// Package nativetest holds test support for the packages above native:
// backends that behave in ways the real ones do not on this machine.
package nativetest

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"verdict/native"
)

// unimplLib is a backend library on host memory whose operations do
// nothing and whose sync always fails with VD_EUNIMPL: a GPU backend
// without the towers' kernels, as far as a tower can tell. Its info
// reports the bindings and allocations alive (units, mem_total: see Live).
const unimplLib = `#include "backend.h"
#include <stdlib.h>
#include <string.h>
static int binds, allocs;
static void nop(void) {}
static void *h_alloc(vd_backend *b, size_t n) { (void)b; __atomic_add_fetch(&allocs, 1, __ATOMIC_SEQ_CST); return calloc(1, n ? n : 64); }
static void h_release(vd_backend *b, void *p, size_t n) { (void)b; (void)n; if (p) __atomic_sub_fetch(&allocs, 1, __ATOMIC_SEQ_CST); free(p); }
static void *h_bind(vd_backend *b, void *h, size_t n) { (void)b; (void)n; __atomic_add_fetch(&binds, 1, __ATOMIC_SEQ_CST); return h; }
static void h_unbind(vd_backend *b, void *p, void *h, size_t n) { (void)b; (void)p; (void)h; (void)n; __atomic_sub_fetch(&binds, 1, __ATOMIC_SEQ_CST); }
static int h_info(vd_backend *b, vd_info *o) {
	(void)b; memset(o, 0, sizeof *o); strcpy(o->name, "unimplemented (nativetest)");
	o->units = __atomic_load_n(&binds, __ATOMIC_SEQ_CST); o->mem_total = __atomic_load_n(&allocs, __ATOMIC_SEQ_CST);
	return 0;
}
static vd_stream *h_stream_new(vd_backend *b) { (void)b; return calloc(1, 64); }
static void h_stream_free(vd_stream *s) { free(s); }
static int h_sync(vd_stream *s) { (void)s; return VD_EUNIMPL; }
static vd_backend t;
vd_backend *vd_cuda_backend(int dev, char *err, size_t n) {
	(void)dev; (void)err; (void)n;
	void **f = (void **)&t.device;
	for (size_t i = 0; i < (sizeof t - offsetof(vd_backend, device)) / sizeof(void *); i++)
		f[i] = (void *)nop;
	t.abi = VD_ABI; t.name = "cuda";
	t.buffer.alloc = h_alloc; t.buffer.release = h_release; t.buffer.bind = h_bind; t.buffer.unbind = h_unbind; t.device.info = h_info;
	t.stream.stream_new = h_stream_new; t.stream.stream_free = h_stream_free; t.stream.sync = h_sync;
	return &t;
}
`

// Unimplemented builds unimplLib with the C compiler and opens it as CUDA
// device 3 (a number no other test opens): a backend whose every pass
// fails with native.ErrUnimplemented. It skips the test where there is no
// C compiler.
func Unimplemented(t testing.TB) *native.Backend {
	t.Helper()
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler")
	}
	_, file, _, _ := runtime.Caller(0)
	include := filepath.Join(filepath.Dir(file), "..")
	dir := t.TempDir()
	src := filepath.Join(dir, "unimpl.c")
	if err := os.WriteFile(src, []byte(unimplLib), 0o644); err != nil {
		t.Fatal(err)
	}
	so := filepath.Join(dir, native.CUDALibrary)
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-I"+include, "-o", so, src).CombinedOutput(); err != nil {
		t.Fatalf("cc: %v\n%s", err, out)
	}
	t.Setenv("VERDICT_CUDA_LIB", so)
	be, err := native.Open("cuda:3")
	if err != nil {
		t.Fatal(err)
	}
	return be
}

// Live reports the bindings (Bind) and allocations (Alloc) alive on a
// backend from Unimplemented, which every test of a package shares: compare
// counts taken before and after.
func Live(be *native.Backend) (binds, allocs int) {
	d, _ := be.Info()
	return d.Units, int(d.MemTotal)
}
