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
	"strings"
	"unsafe"
)

// handle opens the library (dlopen keeps one handle however often it is
// opened).
func (l *Library) handle() (unsafe.Pointer, error) {
	var h unsafe.Pointer
	var tried []string
	for _, p := range l.candidates() {
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
		return nil, errors.New(l.noLibrary(tried))
	}
	return h, nil
}

func sym(h unsafe.Pointer, name string) unsafe.Pointer {
	if name == "" {
		return nil
	}
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	return C.vdl_sym(h, cs)
}

// count asks the library how many devices it sees (its CountSym): 0 with
// the reason when there is none. A library without the function (one
// built before it had it) is asked for device after device instead, until
// one does not open.
func (l *Library) count() (int, error) {
	h, err := l.handle()
	if err != nil {
		return 0, err
	}
	fn := sym(h, l.CountSym)
	if fn == nil {
		n := 0
		for ; n < l.Max; n++ {
			if _, err = l.open(n); err != nil {
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
			m = l.noDevice()
		}
		return 0, errors.New(m)
	}
	return n, nil
}

// load opens device dev's table and checks it: this build's ABI, every
// required entry.
func (l *Library) load(dev int) (*Backend, error) {
	h, err := l.handle()
	if err != nil {
		return nil, err
	}
	fn := sym(h, l.OpenSym)
	if fn == nil {
		return nil, errors.New(l.Name + ": the library has no " + l.OpenSym + ": " + C.GoString(C.vdl_error()))
	}
	var msg [512]C.char
	t := C.vdl_call(fn, C.int(dev), &msg[0], C.size_t(len(msg)))
	if t == nil {
		m := C.GoString(&msg[0])
		if m == "" {
			m = l.Name + ": the backend did not start (no reason given)"
		}
		return nil, errors.New(m)
	}
	if t.abi != C.VD_ABI {
		return nil, fmt.Errorf("%s: ABI mismatch: the library implements backend ABI %d, this verdict needs %d; rebuild %s",
			l.Name, int(t.abi), int(C.VD_ABI), l.File)
	}
	if i := int(C.vd_required_missing(t)); i != 0 {
		return nil, fmt.Errorf("%s: the library's table lacks %s (its device, buffer and stream parts are required)",
			l.Name, requiredNames[i-1])
	}
	return newBackend(t), nil
}
