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

func resetCUDA() { cudaLibrary.forget() }

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

// register adds d to the registry for the test's length.
func register(t *testing.T, d Driver) {
	t.Helper()
	Register(d)
	t.Cleanup(func() {
		driversMu.Lock()
		defer driversMu.Unlock()
		for i, o := range drivers {
			if o.Name == d.Name {
				drivers = append(drivers[:i], drivers[i+1:]...)
				return
			}
		}
	})
}

// TestRegistry: a backend library registered under a name of its own (as
// a ROCm or Metal one would be) is opened, listed and parsed through the
// registry, beside the CPU and CUDA, with CUDA's errors for its own.
func TestRegistry(t *testing.T) {
	good := fakeLib(t, fake("VD_ABI", "0")+`
int fake_count(char *err, size_t n) { return 4; }
`)
	lib := &Library{Name: "fakegpu", Kind: "fake", File: CUDALibrary, Env: "VERDICT_FAKEGPU_LIB",
		OpenSym: "vd_cuda_backend", CountSym: "fake_count", Max: 4}
	d := lib.Driver()
	d.Auto = false // "auto" and "all" keep to CUDA here
	register(t, d)
	if got := strings.Join(Drivers(), ","); got != "cpu,cuda,fakegpu" {
		t.Errorf("Drivers() = %s", got)
	}
	t.Setenv("VERDICT_FAKEGPU_LIB", good)
	b, err := Open("fakegpu:2")
	if err != nil {
		t.Fatal(err)
	}
	if b2, _ := Open("FAKEGPU:2"); b2 != b {
		t.Errorf("a device opened twice gave two backends")
	}
	if n, err := d.Count(); n != 4 || err != nil {
		t.Errorf("Count() = %d, %v", n, err)
	}
	for _, tc := range []struct{ device, want string }{
		{"fakegpu:4", "want fakegpu:N with N a GPU number (0..3)"},
		{"fakegpu:x", "want fakegpu:N"},
		{"fakegpu:7", "want fakegpu:N"},
		{"cpu:1", "cpu takes no number"},
		{"gpu", "want cpu, cuda, cuda:N, fakegpu, fakegpu:N or auto"},
	} {
		if _, err := Open(tc.device); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(%q) = %v, want an error with %q", tc.device, err, tc.want)
		}
	}
	got, _, err := ParseDevices("fakegpu, fakegpu:3,cpu")
	if err != nil || strings.Join(got, ",") != "fakegpu:0,fakegpu:3,cpu" {
		t.Errorf("ParseDevices = %v, %v", got, err)
	}
	if _, _, err := ParseDevices("tpu"); err == nil || !strings.Contains(err.Error(), "want cpu, cuda, cuda:N, fakegpu or fakegpu:N, or all") {
		t.Errorf("ParseDevices(tpu): %v", err)
	}
	t.Setenv("VERDICT_FAKEGPU_LIB", filepath.Join(t.TempDir(), "none.so"))
	lib.forget()
	if _, err := Open("fakegpu"); err == nil || !strings.Contains(err.Error(), "fakegpu: no usable "+CUDALibrary+" (set VERDICT_FAKEGPU_LIB") {
		t.Errorf("Open(fakegpu) without its library: %v", err)
	}
	for _, bad := range []Driver{{Name: "cuda", Open: d.Open}, {Name: "auto", Open: d.Open}, {Name: "a:b", Open: d.Open}, {Name: "x"}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Register(%q) did not panic", bad.Name)
				}
			}()
			Register(bad)
		}()
	}
}
