package native

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
)

// A Driver opens the devices of one kind of backend: the CPU's, compiled
// in, or one in a library loaded at run time (CUDA's, a Library). Open
// and ParseDevices find drivers by name in the registry (Register), so a
// new backend (ROCm, Metal) is one Register call, not a case of a switch.
type Driver struct {
	// Name is the device name: "cuda" in cuda and cuda:1.
	Name string
	// Open returns device dev's backend (the same one each time).
	Open func(dev int) (*Backend, error)
	// Count reports how many devices the driver sees (0 with the reason
	// when none); nil for a driver of one device.
	Count func() (int, error)
	// Max is the most devices it opens: name:0 to name:Max-1 (name alone
	// is name:0); 0 for a driver of one device that takes no number.
	Max int
	// Auto: "auto" and "all" try it (in the order of registration) before
	// falling back to the CPU.
	Auto bool
}

var (
	driversMu sync.Mutex
	// drivers in the order of registration; the CPU's is built in.
	drivers = []Driver{{Name: "cpu", Open: func(int) (*Backend, error) { return Default(), nil }}}
)

// Register adds a driver to the registry that Open and ParseDevices use.
// A name taken already panics.
func Register(d Driver) {
	driversMu.Lock()
	defer driversMu.Unlock()
	if d.Name == "" || d.Open == nil || strings.ContainsAny(d.Name, ":, ") || d.Name == "auto" || d.Name == "all" {
		panic("native: Register: a driver needs a plain name (not auto or all) and Open")
	}
	for _, o := range drivers {
		if o.Name == d.Name {
			panic("native: Register: driver " + d.Name + " registered twice")
		}
	}
	drivers = append(drivers, d)
}

// Drivers lists the registered drivers' names, the CPU's first.
func Drivers() []string {
	var l []string
	for _, d := range registered() {
		l = append(l, d.Name)
	}
	return l
}

func registered() []Driver {
	driversMu.Lock()
	defer driversMu.Unlock()
	return append([]Driver(nil), drivers...)
}

func driverNamed(name string) (Driver, bool) {
	for _, d := range registered() {
		if d.Name == name {
			return d, true
		}
	}
	return Driver{}, false
}

// deviceNames lists the names the registry takes, for messages: cpu,
// cuda, cuda:N.
func deviceNames() []string {
	var l []string
	for _, d := range registered() {
		l = append(l, d.Name)
		if d.Max > 1 {
			l = append(l, d.Name+":N")
		}
	}
	return l
}

// parseDevice reads "name" or "name:N" of a registered driver.
func parseDevice(device string) (Driver, int, error) {
	name, num, hasNum := strings.Cut(device, ":")
	d, ok := driverNamed(name)
	if !ok {
		return Driver{}, 0, errUnknown
	}
	if !hasNum {
		return d, 0, nil
	}
	if d.Max < 1 {
		return Driver{}, 0, fmt.Errorf("native: device %q: %s takes no number", device, name)
	}
	n, err := strconv.Atoi(num)
	if err != nil || n < 0 || n >= d.Max {
		return Driver{}, 0, fmt.Errorf("native: device %q: want %s:N with N a GPU number (0..%d)", device, name, d.Max-1)
	}
	return d, n, nil
}

var errUnknown = errors.New("unknown device")

// Open returns the backend named by device: "cpu" (the built-in one), the
// name of a registered driver, alone or with a device number ("cuda" or
// "cuda:N": GPU N of libverdict_cuda.so, loaded at run time), or "auto"
// (the first driver registered for it that opens, CUDA's, else the CPU,
// with the reason in Note).
//
// The CUDA library is looked for in $VERDICT_CUDA_LIB (a file, or a folder
// holding it; when set, nowhere else), next to the executable, then on the
// system's library path. Each failure has its own error: no library, no
// GPU, a driver too old, a library of another backend ABI.
func Open(device string) (*Backend, error) {
	d := strings.TrimSpace(strings.ToLower(device))
	switch d {
	case "":
		return Default(), nil
	case "auto":
		var first error
		for _, dr := range registered() {
			if !dr.Auto {
				continue
			}
			b, err := dr.Open(0)
			if err == nil {
				return b, nil
			}
			if first == nil {
				first = err
			}
		}
		if first == nil {
			return Default(), nil
		}
		b := newBackend(Default().t)
		b.note = "using the CPU: " + first.Error()
		return b, nil
	}
	dr, n, err := parseDevice(d)
	if err == errUnknown {
		return nil, fmt.Errorf("native: unknown device %q: want %s or auto", device, strings.Join(deviceNames(), ", "))
	} else if err != nil {
		return nil, err
	}
	return dr.Open(n)
}

// Note says why Open gave this backend when that was not what was asked
// ("auto" falling back to the CPU); "" otherwise.
func (b *Backend) Note() string { return b.note }

// Devices are the names Open takes, for flag help.
const Devices = "cpu, cuda (cuda:N for GPU N) or auto (cuda when it opens, else cpu)"

// DevicesHelp describes the lists ParseDevices takes, for flag help.
const DevicesHelp = "devices to run one model replica on each, comma-separated: cuda:0,cuda:1 (cuda is cuda:0), or all (every CUDA device; the CPU when there is none); cpu may repeat (replicas sharing the CPU)"

// ParseDevices reads a list of devices, one model replica each: "cpu",
// the name of a registered driver ("cuda" is cuda:0) and "cuda:N"
// separated by commas, or "all" alone for every device of the first
// driver registered for "auto" that sees any (cuda:0 ... cuda:N-1; with
// none, the CPU, and note says why) or "auto" alone (Open's auto). A GPU
// named twice is refused (one replica a device); "cpu" may repeat:
// several replicas on the CPU share its cores, which helps nothing but a
// test.
func ParseDevices(list string) (devices []string, note string, err error) {
	list = strings.TrimSpace(strings.ToLower(list))
	if list == "all" {
		var first error
		for _, dr := range registered() {
			if !dr.Auto || dr.Count == nil {
				continue
			}
			n, err := dr.Count()
			if n > 0 {
				for i := range n {
					devices = append(devices, dr.Name+":"+strconv.Itoa(i))
				}
				return devices, "", nil
			}
			if first == nil {
				first = err
			}
		}
		if first == nil {
			first = errors.New("no device but the CPU")
		}
		return []string{"cpu"}, "using the CPU: " + first.Error(), nil
	}
	if list == "auto" {
		return []string{"auto"}, "", nil
	}
	seen := map[string]bool{}
	for _, d := range strings.Split(list, ",") {
		d = strings.TrimSpace(d)
		switch d {
		case "all", "auto":
			return nil, "", fmt.Errorf("native: devices %q: %s stands alone", list, d)
		case "":
			return nil, "", fmt.Errorf("native: devices %q: an empty name", list)
		}
		dr, n, err := parseDevice(d)
		if err == errUnknown {
			l := deviceNames()
			want := l[0]
			if len(l) > 1 {
				want = strings.Join(l[:len(l)-1], ", ") + " or " + l[len(l)-1]
			}
			return nil, "", fmt.Errorf("native: unknown device %q: want %s, or all", d, want)
		} else if err != nil {
			return nil, "", err
		}
		if dr.Max > 0 {
			d = dr.Name + ":" + strconv.Itoa(n)
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
	n, err := cudaLibrary.count()
	if err != nil {
		return 0, err
	}
	return n, nil
}
