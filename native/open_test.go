//go:build linux || darwin

package native

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// fakeLib builds a shared library from C source with the system compiler
// (the test is skipped without one) and returns its path.
func fakeLib(t *testing.T, src string) string {
	t.Helper()
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler")
	}
	dir := t.TempDir()
	c := filepath.Join(dir, "fake.c")
	if err := os.WriteFile(c, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	wd, _ := os.Getwd()
	so := filepath.Join(dir, CUDALibrary)
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-I"+wd, "-o", so, c).CombinedOutput(); err != nil {
		t.Fatalf("cc: %v\n%s", err, out)
	}
	return so
}

// A table whose every function is a no-op, with the given ABI.
const fakeTable = `#include "backend.h"
#include <stdio.h>
#include <string.h>
static void nop(void) {}
static vd_backend t;
vd_backend *vd_cuda_backend(int dev, char *err, size_t n) {
	if (dev == 7) { snprintf(err, n, "cuda: no CUDA device (fake)"); return 0; }
	void **f = (void **)&t.device;
	for (size_t i = 0; i < (sizeof t - offsetof(vd_backend, device)) / sizeof(void *); i++)
		f[i] = (void *)nop;
	t.abi = ABI; t.name = "cuda";
	if (HOLE == 1) t.op.sample = 0;     /* an operation it leaves to the CPU */
	if (HOLE == 2) t.stream.sync = 0;   /* a required entry */
	return &t;
}
`

func fake(abi, hole string) string {
	return "#define ABI " + abi + "\n#define HOLE " + hole + "\n" + fakeTable
}

func resetCUDA() {
	cudaMu.Lock()
	cudaOpened = map[int]*Backend{}
	cudaMu.Unlock()
}

func TestOpenCUDA(t *testing.T) {
	wrongABI := fakeLib(t, fake("(VD_ABI + 1)", "0"))
	good := fakeLib(t, fake("VD_ABI", "0"))
	holed := fakeLib(t, fake("VD_ABI", "1"))
	broken := fakeLib(t, fake("VD_ABI", "2"))
	noSym := fakeLib(t, "int something_else(void) { return 1; }\n")
	missing := filepath.Join(t.TempDir(), CUDALibrary)
	for _, tc := range []struct {
		name, lib, device string
		want              string // error substring; "" for success
		backend, note     string // the backend's name; a substring of Note
	}{
		{"missing library", missing, "cuda", "no usable libverdict_cuda.so", "", ""},
		{"missing library, auto", missing, "auto", "", "cpu", "no usable libverdict_cuda.so"},
		{"abi mismatch", wrongABI, "cuda", "ABI mismatch", "", ""},
		{"abi mismatch, auto", wrongABI, "auto", "", "cpu", "ABI mismatch"},
		{"no symbol", noSym, "cuda", "no vd_cuda_backend", "", ""},
		{"no device", good, "cuda:7", "no CUDA device (fake)", "", ""},
		{"table without sync", broken, "cuda", "lacks sync (its device, buffer and stream parts are required)", "", ""},
		{"table without sample", holed, "cuda", "", "cuda", ""},
		{"folder of the library", filepath.Dir(good), "cuda", "", "cuda", ""},
		{"good", good, "cuda", "", "cuda", ""},
		{"good, auto", good, "auto", "", "cuda", ""},
		{"cpu", missing, "cpu", "", "cpu", ""},
		{"bad name", good, "gpu", "unknown device", "", ""},
		{"bad number", good, "cuda:x", "want cuda:N", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resetCUDA()
			t.Setenv("VERDICT_CUDA_LIB", tc.lib)
			b, err := Open(tc.device)
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("Open(%q) = %v, want an error with %q", tc.device, err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatalf("Open(%q): %v", tc.device, err)
			}
			if b.Name() != tc.backend {
				t.Errorf("backend %q, want %q", b.Name(), tc.backend)
			}
			if !strings.Contains(b.Note(), tc.note) || (tc.note == "" && b.Note() != "") {
				t.Errorf("note %q, want %q", b.Note(), tc.note)
			}
		})
	}
	resetCUDA()
}

func TestCUDADevices(t *testing.T) {
	counted := fakeLib(t, fake("VD_ABI", "0")+`
int vd_cuda_device_count(char *err, size_t n) { return 3; }
`)
	none := fakeLib(t, fake("VD_ABI", "0")+`
int vd_cuda_device_count(char *err, size_t n) { snprintf(err, n, "cuda: no CUDA device (fake count)"); return 0; }
`)
	probed := fakeLib(t, fake("VD_ABI", "0")) // no count: devices 0..6 open, 7 does not
	missing := filepath.Join(t.TempDir(), CUDALibrary)
	for _, tc := range []struct {
		name, lib string
		want      int
		reason    string
	}{
		{"counted", counted, 3, ""},
		{"none", none, 0, "no CUDA device (fake count)"},
		{"probed", probed, 7, ""},
		{"missing library", missing, 0, "no usable libverdict_cuda.so"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resetCUDA()
			t.Setenv("VERDICT_CUDA_LIB", tc.lib)
			n, err := CUDADevices()
			if n != tc.want {
				t.Errorf("CUDADevices() = %d, want %d (%v)", n, tc.want, err)
			}
			if tc.reason != "" && (err == nil || !strings.Contains(err.Error(), tc.reason)) {
				t.Errorf("error %v, want %q", err, tc.reason)
			}
			if tc.reason == "" && err != nil {
				t.Errorf("error %v", err)
			}
		})
	}
	resetCUDA()
}

func TestParseDevices(t *testing.T) {
	counted := fakeLib(t, fake("VD_ABI", "0")+`
int vd_cuda_device_count(char *err, size_t n) { return 2; }
`)
	missing := filepath.Join(t.TempDir(), CUDALibrary)
	for _, tc := range []struct {
		lib, list string
		want      string // the devices joined by commas
		note, err string // substrings; "" for none
	}{
		{counted, "all", "cuda:0,cuda:1", "", ""},
		{missing, "all", "cpu", "using the CPU: cuda: no usable", ""},
		{missing, " cuda:1, CUDA:0 ", "cuda:1,cuda:0", "", ""},
		{missing, "cuda,cuda:2", "cuda:0,cuda:2", "", ""},
		{missing, "cpu,cpu,cpu", "cpu,cpu,cpu", "", ""},
		{missing, "auto", "auto", "", ""},
		{missing, "cuda,cuda:0", "", "", "cuda:0 twice"},
		{missing, "cuda:1,all", "", "", "all stands alone"},
		{missing, "cuda:x", "", "", "want cuda:N"},
		{missing, "cuda:64", "", "", "want cuda:N"},
		{missing, "gpu", "", "", "unknown device"},
		{missing, "cpu,", "", "", "an empty name"},
	} {
		resetCUDA()
		t.Setenv("VERDICT_CUDA_LIB", tc.lib)
		got, note, err := ParseDevices(tc.list)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseDevices(%q) = %v, %v, want an error with %q", tc.list, got, err, tc.err)
			}
			continue
		}
		if err != nil || strings.Join(got, ",") != tc.want {
			t.Errorf("ParseDevices(%q) = %v, %v, want %s", tc.list, got, err, tc.want)
		}
		if !strings.Contains(note, tc.note) || (tc.note == "" && note != "") {
			t.Errorf("ParseDevices(%q): note %q, want %q", tc.list, note, tc.note)
		}
	}
	resetCUDA()
}
