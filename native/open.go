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

// DevicesHelp describes the lists ParseDevices takes, for flag help.
const DevicesHelp = "devices to run one model replica on each, comma-separated: cuda:0,cuda:1 (cuda is cuda:0), or all (every CUDA device; the CPU when there is none); cpu may repeat (replicas sharing the CPU)"

// ParseDevices reads a list of devices, one model replica each: "cpu",
// "cuda" (cuda:0) and "cuda:N" separated by commas, or "all" alone for
// every CUDA device the library reports (cuda:0 ... cuda:N-1; with none,
// the CPU, and note says why) or "auto" alone (Open's auto). A GPU named
// twice is refused (one replica a device); "cpu" may repeat: several
// replicas on the CPU share its cores, which helps nothing but a test.
func ParseDevices(list string) (devices []string, note string, err error) {
	list = strings.TrimSpace(strings.ToLower(list))
	if list == "all" {
		n, err := CUDADevices()
		if n == 0 {
			return []string{"cpu"}, "using the CPU: " + err.Error(), nil
		}
		for i := range n {
			devices = append(devices, "cuda:"+strconv.Itoa(i))
		}
		return devices, "", nil
	}
	if list == "auto" {
		return []string{"auto"}, "", nil
	}
	seen := map[string]bool{}
	for _, d := range strings.Split(list, ",") {
		d = strings.TrimSpace(d)
		switch {
		case d == "cpu":
		case d == "cuda":
			d = "cuda:0"
		case strings.HasPrefix(d, "cuda:"):
			n, err := strconv.Atoi(d[len("cuda:"):])
			if err != nil || n < 0 || n >= maxCUDADevices {
				return nil, "", fmt.Errorf("native: device %q: want cuda:N with N a GPU number (0..%d)", d, maxCUDADevices-1)
			}
			d = "cuda:" + strconv.Itoa(n)
		case d == "all" || d == "auto":
			return nil, "", fmt.Errorf("native: devices %q: %s stands alone", list, d)
		case d == "":
			return nil, "", fmt.Errorf("native: devices %q: an empty name", list)
		default:
			return nil, "", fmt.Errorf("native: unknown device %q: want cpu, cuda or cuda:N, or all", d)
		}
		if seen[d] && d != "cpu" {
			return nil, "", fmt.Errorf("native: devices %q: %s twice (one replica a device)", list, d)
		}
		seen[d] = true
		devices = append(devices, d)
	}
	return devices, "", nil
}

// CUDADevices reports how many CUDA devices the CUDA library sees (cuda:0
// to cuda:N-1); 0, with the reason, when there is no library or no device.
func CUDADevices() (int, error) {
	n, err := cudaCount()
	if err != nil {
		return 0, err
	}
	return n, nil
}

// maxCUDADevices is the most devices the CUDA library opens.
const maxCUDADevices = 64

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
