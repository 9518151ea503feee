package native

/*
#include "backend_call.h"
*/
import "C"

import "errors"

// DeviceInfo describes what a backend runs on.
type DeviceInfo struct {
	Name     string `json:"name,omitempty"`       // e.g. "NVIDIA H200"
	MemTotal int64  `json:"mem_total,omitempty"`  // bytes of device memory
	MemFree  int64  `json:"mem_free,omitempty"`   // bytes free now
	Units    int    `json:"units,omitempty"`      // multiprocessors
	Compute  string `json:"capability,omitempty"` // compute capability, "9.0"
}

// Info reports the backend's device; ok is false where the backend knows
// nothing of its own (the CPU: see HostProcessor).
func (b *Backend) Info() (DeviceInfo, bool) {
	var o C.vd_info
	if C.vdc_info(b.t, &o) != 0 {
		return DeviceInfo{}, false
	}
	d := DeviceInfo{Name: C.GoString(&o.name[0]), MemTotal: int64(o.mem_total), MemFree: int64(o.mem_free),
		Units: int(o.units)}
	if o.cc > 0 {
		d.Compute = itoa(int(o.cc)/10) + "." + itoa(int(o.cc)%10)
	}
	return d, true
}

// DeviceLimits are a device's ceilings, measured: read bandwidth of its
// memory and float32 and tensor-core multiply-add throughput.
type DeviceLimits struct {
	ReadGBs      float64 `json:"read_gb_per_s"`
	FP32TFLOPs   float64 `json:"fp32_tflop_per_s"`
	BF16TCTFLOPs float64 `json:"bf16_tensor_tflop_per_s"`
	TF32TCTFLOPs float64 `json:"tf32_tensor_tflop_per_s"`
}

// MeasureLimits measures the device's limits (about a second); an error
// where the backend does not measure its own (the CPU's are the host's).
func (b *Backend) MeasureLimits() (DeviceLimits, error) {
	var o C.vd_limits
	if C.vdc_limits(b.t, &o) != 0 {
		return DeviceLimits{}, errors.New("native: " + b.Name() + ": the backend measures no limits of its own")
	}
	return DeviceLimits{ReadGBs: float64(o.read_gbs), FP32TFLOPs: float64(o.fp32_tflops),
		BF16TCTFLOPs: float64(o.bf16_tc_tflops), TF32TCTFLOPs: float64(o.tf32_tc_tflops)}, nil
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for ; n > 0; n /= 10 {
		i--
		b[i] = byte('0' + n%10)
	}
	return string(b[i:])
}
