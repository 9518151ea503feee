package native

// #include "cpu/kernels.h"
import "C"

// ReadBandwidth measures the machine's streaming read bandwidth in GB/s:
// every kernel thread sums its share of a buffer of bytes bytes (larger
// than the caches), best of reps passes.
func ReadBandwidth(bytes int64, reps int) float64 {
	return float64(C.vk_bench_read_bandwidth(C.int64_t(bytes), C.int(max(reps, 1))))
}

// FMAPeak measures the machine's float32 fused multiply-add rate in GFLOP/s
// (2 flops an FMA): independent FMA chains of the active kernel set's
// widest vectors on every kernel thread, best of three runs of about
// seconds each.
func FMAPeak(seconds float64) float64 {
	return float64(C.vk_bench_fma_peak(C.double(seconds)))
}

// SIMD names the active kernel set: portable, avx2, neon or avx512.
func SIMD() string {
	return simdNames[int(C.vk_simd_active())]
}

var simdNames = []string{"portable", "avx2", "neon", "avx512"}
