package native

import (
	"bufio"
	"os"
	"runtime"
	"strings"
)

// HostProcessor reports the host processor's model name ("unknown" where
// the system does not say).
func HostProcessor() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// HostCores reports the host's logical cores.
func HostCores() int { return runtime.NumCPU() }
