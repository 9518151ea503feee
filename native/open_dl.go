//go:build linux || darwin

package native

/*
#cgo linux LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>
#include "backend.h"

typedef vd_backend *(*vdl_open_fn)(int, char *, size_t);
typedef int (*vdl_count_fn)(char *, size_t);

static void *vdl_open(const char *path) { return dlopen(path, RTLD_NOW | RTLD_LOCAL); }
static const char *vdl_error(void) { const char *e = dlerror(); return e ? e : "unknown error"; }
static void *vdl_sym(void *h, const char *name) { dlerror(); return dlsym(h, name); }
static vd_backend *vdl_call(void *fn, int dev, char *err, size_t n) { return ((vdl_open_fn)fn)(dev, err, n); }
static int vdl_count(void *fn, char *err, size_t n) { return ((vdl_count_fn)fn)(err, n); }

*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unsafe"
)

// CUDALibrary is the CUDA backend's file name.
const CUDALibrary = "libverdict_cuda.so"

// cudaCandidates lists where the library is looked for, in order.
func cudaCandidates() []string {
	if p := os.Getenv("VERDICT_CUDA_LIB"); p != "" {
		if st, err := os.Stat(p); err == nil && st.IsDir() {
			p = filepath.Join(p, CUDALibrary)
		}
		return []string{p}
	}
	var c []string
	if exe, err := os.Executable(); err == nil {
		c = append(c, filepath.Join(filepath.Dir(exe), CUDALibrary))
	}
	return append(c, CUDALibrary) // the system's library path
}

// cudaLib opens the CUDA library (dlopen keeps one handle however often it
// is opened).
func cudaLib() (unsafe.Pointer, error) {
	var h unsafe.Pointer
	var tried []string
	for _, p := range cudaCandidates() {
		if strings.ContainsRune(p, '/') {
			if _, err := os.Stat(p); err != nil {
				tried = append(tried, p+": no such file")
				continue
			}
		}
		cp := C.CString(p)
		h = C.vdl_open(cp)
		C.free(unsafe.Pointer(cp))
		if h != nil {
			break
		}
		tried = append(tried, p+": "+C.GoString(C.vdl_error()))
	}
	if h == nil {
		return nil, fmt.Errorf("cuda: no usable %s (set VERDICT_CUDA_LIB, or put it next to the executable): %s",
			CUDALibrary, strings.Join(tried, "; "))
	}
	return h, nil
}

// cudaCount asks the library how many devices it sees (its
// vd_cuda_device_count): 0 with the reason when there is none. A library
// built before it had the function is asked for device after device
// instead, until one does not open.
func cudaCount() (int, error) {
	h, err := cudaLib()
	if err != nil {
		return 0, err
	}
	sym := C.CString("vd_cuda_device_count")
	fn := C.vdl_sym(h, sym)
	C.free(unsafe.Pointer(sym))
	if fn == nil {
		n := 0
		for ; n < maxCUDADevices; n++ {
			if _, err = openCUDA(n); err != nil {
				break
			}
		}
		if n == 0 {
			return 0, err
		}
		return n, nil
	}
	var msg [512]C.char
	n := int(C.vdl_count(fn, &msg[0], C.size_t(len(msg))))
	if n <= 0 {
		m := C.GoString(&msg[0])
		if m == "" {
			m = "cuda: no CUDA device"
		}
		return 0, errors.New(m)
	}
	return n, nil
}

func loadCUDA(dev int) (*Backend, error) {
	h, err := cudaLib()
	if err != nil {
		return nil, err
	}
	sym := C.CString("vd_cuda_backend")
	fn := C.vdl_sym(h, sym)
	C.free(unsafe.Pointer(sym))
	if fn == nil {
		return nil, errors.New("cuda: the library has no vd_cuda_backend: " + C.GoString(C.vdl_error()))
	}
	var msg [512]C.char
	t := C.vdl_call(fn, C.int(dev), &msg[0], C.size_t(len(msg)))
	if t == nil {
		m := C.GoString(&msg[0])
		if m == "" {
			m = "cuda: the backend did not start (no reason given)"
		}
		return nil, errors.New(m)
	}
	if t.abi != C.VD_ABI {
		return nil, fmt.Errorf("cuda: ABI mismatch: the library implements backend ABI %d, this verdict needs %d; rebuild %s",
			int(t.abi), int(C.VD_ABI), CUDALibrary)
	}
	if i := int(C.vd_required_missing(t)); i != 0 {
		return nil, fmt.Errorf("cuda: the library's table lacks %s (its device, buffer and stream parts are required)",
			requiredNames[i-1])
	}
	return &Backend{t: t}, nil
}
