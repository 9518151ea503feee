package native

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// Library is a backend in a shared library loaded at run time (dlopen),
// as CUDA's libverdict_cuda.so is: the library exports a function that
// opens device dev and returns its table (vd_backend *OpenSym(int dev,
// char *err, size_t errlen): NULL with the reason in err), and may export
// one that counts its devices (int CountSym(char *err, size_t errlen)).
// Its Driver registers it under Name:
//
//	native.Register((&native.Library{Name: "rocm", Kind: "ROCm", File: "libverdict_rocm.so",
//		Env: "VERDICT_ROCM_LIB", OpenSym: "vd_rocm_backend", Max: 64}).Driver())
//
// The table must be of this build's VD_ABI with every entry of its
// device, buffer and stream parts; its op table may leave operations out
// (the CPU runs them: Backend.Supports).
type Library struct {
	Name     string // the device name: "cuda"
	Kind     string // the devices' kind in messages: "CUDA" (no CUDA device)
	File     string // the library's file name: "libverdict_cuda.so"
	Env      string // the variable naming the file, or its folder (when set, nowhere else is looked)
	OpenSym  string // the function opening a device: "vd_cuda_backend"
	CountSym string // the function counting devices: "vd_cuda_device_count"; without it devices are probed
	Max      int    // the most devices it opens: name:0 to name:Max-1

	mu     sync.Mutex
	opened map[int]*Backend
}

// Driver is the library's driver: Open loads the library the first time
// and opens each device once; "auto" and "all" try it.
func (l *Library) Driver() Driver {
	return Driver{Name: l.Name, Open: l.open, Count: l.count, Max: l.Max, Auto: true}
}

// candidates lists where the library is looked for, in order: Env's file
// or folder alone when set; else next to the executable, then the
// system's library path.
func (l *Library) candidates() []string {
	if p := os.Getenv(l.Env); p != "" {
		if st, err := os.Stat(p); err == nil && st.IsDir() {
			p = filepath.Join(p, l.File)
		}
		return []string{p}
	}
	var c []string
	if exe, err := os.Executable(); err == nil {
		c = append(c, filepath.Join(filepath.Dir(exe), l.File))
	}
	return append(c, l.File) // the system's library path
}

func (l *Library) open(dev int) (*Backend, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if b := l.opened[dev]; b != nil {
		return b, nil
	}
	b, err := l.load(dev)
	if err != nil {
		return nil, err
	}
	if l.opened == nil {
		l.opened = map[int]*Backend{}
	}
	l.opened[dev] = b
	return b, nil
}

// forget drops the devices opened (tests that swap the library).
func (l *Library) forget() {
	l.mu.Lock()
	l.opened = nil
	l.mu.Unlock()
}

// noDevice is the count's reason where the library gave none.
func (l *Library) noDevice() string { return l.Name + ": no " + l.Kind + " device" }

func (l *Library) noLibrary(tried []string) string {
	return l.Name + ": no usable " + l.File + " (set " + l.Env + ", or put it next to the executable): " +
		strings.Join(tried, "; ")
}

// CUDALibrary is the CUDA backend's file name.
const CUDALibrary = "libverdict_cuda.so"

// maxCUDADevices is the most devices the CUDA library opens.
const maxCUDADevices = 64

// cudaLibrary is the CUDA backend (native/cuda, build/cuda.sh), registered
// as "cuda".
var cudaLibrary = &Library{Name: "cuda", Kind: "CUDA", File: CUDALibrary, Env: "VERDICT_CUDA_LIB",
	OpenSym: "vd_cuda_backend", CountSym: "vd_cuda_device_count", Max: maxCUDADevices}

func init() { Register(cudaLibrary.Driver()) }
