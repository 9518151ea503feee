package app

import (
	"fmt"
	"strconv"
	"strings"

	"verdict/engine/session"
)

// Device settings: which compute backend runs the model.
const (
	DeviceAuto = "auto" // the GPU when the CUDA library opens, else the CPU
	DeviceCPU  = "cpu"
	DeviceCUDA = "cuda" // GPU 0; cuda:N for GPU N
)

// CheckDevice checks a device setting's form: auto, cpu, cuda or cuda:N
// (whether that device opens is known only when a model loads).
func CheckDevice(d string) error {
	switch d {
	case DeviceAuto, DeviceCPU, DeviceCUDA:
		return nil
	}
	if n, ok := strings.CutPrefix(d, DeviceCUDA+":"); ok {
		if i, err := strconv.Atoi(n); err == nil && i >= 0 && strconv.Itoa(i) == n {
			return nil
		}
	}
	return fmt.Errorf("%q is not one of auto, cpu, cuda, cuda:N (N a GPU number)", d)
}

// DeviceInfo is the backend the model runs on, and why.
type DeviceInfo struct {
	// Requested is the device setting; Backend what runs the model (cpu,
	// cuda).
	Requested string `json:"requested"`
	Backend   string `json:"backend"`
	// Fallback marks the CPU standing in for the GPU asked for (auto or
	// cuda); Note says why.
	Fallback bool   `json:"fallback,omitempty"`
	Note     string `json:"note,omitempty"`
	// Name is the processor (CPU) or the GPU; Cores and SIMD describe the
	// CPU. MemoryBytes and FreeBytes are the GPU's memory and what was free
	// when the backend opened (0 for the CPU).
	Name        string `json:"name,omitempty"`
	Cores       int    `json:"cores,omitempty"`
	SIMD        string `json:"simd,omitempty"`
	MemoryBytes int64  `json:"memory_bytes,omitempty"`
	FreeBytes   int64  `json:"free_bytes,omitempty"`
}

// openBackend opens device's backend. A GPU that does not open (no
// library, no GPU, an old driver, another ABI) gives the CPU, with the
// reason in the report's Note; an unknown name too.
func openBackend(device string) (*session.Backend, DeviceInfo) {
	be, err := session.OpenBackend(device)
	note := ""
	switch {
	case err != nil:
		be, note = session.DefaultBackend(), "using the CPU: "+err.Error()
	default:
		note = be.Note()
	}
	return be, describe(device, be, note)
}

// describe reports be as the backend for the device setting requested.
func describe(requested string, be *session.Backend, note string) DeviceInfo {
	d := DeviceInfo{Requested: requested, Backend: be.Name(), Note: note}
	if d.Backend == DeviceCPU {
		d.Fallback = requested != DeviceCPU
		d.Name, d.Cores, d.SIMD = session.HostProcessor(), session.HostCores(), session.SIMD()
	} else if gi, ok := be.Info(); ok {
		d.Name, d.MemoryBytes, d.FreeBytes = gi.Name, gi.MemTotal, gi.MemFree
	}
	return d
}

// afterFailedLoad is the device to retry a load on after it failed on dev
// with err: the CPU, when a GPU failed (too little memory, a kernel error);
// ok is false when a retry would not help (the CPU failed, or the load was
// cancelled).
func afterFailedLoad(dev DeviceInfo, err error, cancelled bool) (DeviceInfo, bool) {
	if cancelled || dev.Backend == DeviceCPU {
		return dev, false
	}
	return describe(dev.Requested, session.DefaultBackend(), fmt.Sprintf("using the CPU: loading on %s failed: %v", dev.Backend, err)), true
}

// ResidentInfo is what the loaded model keeps in its backend's memory.
type ResidentInfo struct {
	Weights     string `json:"weights"` // q4 or f32
	WeightBytes int64  `json:"weight_bytes"`
	// PLEBytes is the per-layer embedding table on the device (0: on the
	// host, read a row a token).
	PLEBytes int64 `json:"ple_bytes"`
	// KVPositions and KVBytes are the key/value pool reserved (the CPU
	// commits its pages only when they are written).
	KVPositions int   `json:"kv_positions"`
	KVBytes     int64 `json:"kv_bytes"`
	// Towers are the towers loaded (vision, audio): each loads with its
	// first input.
	Towers []string `json:"towers"`
}

// residentOf reports s's resident memory, its towers as loaded now.
func residentOf(s *session.Session) *ResidentInfo {
	r := s.Info().Resident
	out := &ResidentInfo{Weights: string(r.Weights), WeightBytes: r.WeightBytes, PLEBytes: r.PLEBytes, KVPositions: r.KVPositions, KVBytes: r.KVBytes, Towers: []string{}}
	vision, audio := s.Towers()
	if vision {
		out.Towers = append(out.Towers, "vision")
	}
	if audio {
		out.Towers = append(out.Towers, "audio")
	}
	return out
}
