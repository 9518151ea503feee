package native

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
)

// Open returns the backend named by device: "cpu" (the built-in one),
// "cuda" or "cuda:N" (GPU N of libverdict_cuda.so, loaded at run time), or
// "auto" (CUDA when it opens, else the CPU, with the reason in Note).
//
// The CUDA library is looked for in $VERDICT_CUDA_LIB (a file, or a folder
// holding it; when set, nowhere else), next to the executable, then on the
// system's library path. Each failure has its own error: no library, no
// GPU, a driver too old, a library of another backend ABI.
func Open(device string) (*Backend, error) {
	switch d := strings.TrimSpace(strings.ToLower(device)); {
	case d == "" || d == "cpu":
		return Default(), nil
	case d == "auto":
		b, err := openCUDA(0)
		if err != nil {
			return &Backend{t: Default().t, note: "using the CPU: " + err.Error()}, nil
		}
		return b, nil
	case d == "cuda":
		return openCUDA(0)
	case strings.HasPrefix(d, "cuda:"):
		n, err := strconv.Atoi(d[len("cuda:"):])
		if err != nil || n < 0 {
			return nil, fmt.Errorf("native: device %q: want cuda:N with N a GPU number", device)
		}
		return openCUDA(n)
	default:
		return nil, fmt.Errorf("native: unknown device %q: want cpu, cuda, cuda:N or auto", device)
	}
}

// Note says why Open gave this backend when that was not what was asked
// ("auto" falling back to the CPU); "" otherwise.
func (b *Backend) Note() string { return b.note }

// Devices are the names Open takes, for flag help.
const Devices = "cpu, cuda (cuda:N for GPU N) or auto (cuda when it opens, else cpu)"

var (
	cudaMu     sync.Mutex
	cudaOpened = map[int]*Backend{}
)

func openCUDA(dev int) (*Backend, error) {
	cudaMu.Lock()
	defer cudaMu.Unlock()
	if b := cudaOpened[dev]; b != nil {
		return b, nil
	}
	b, err := loadCUDA(dev)
	if err != nil {
		return nil, err
	}
	cudaOpened[dev] = b
	return b, nil
}
