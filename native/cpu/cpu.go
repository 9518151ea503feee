// Package cpu is the CPU backend's C: the kernels of kernels.h (the
// slice kernels package native calls), the backend table of ../backend.h
// over host memory (vd_cpu_backend, cpu_backend.c), the towers' and the
// catalog step's host versions, the thread pool and the SIMD kernel sets
// (cpu_isa_*.c, picked at run time; all give the same bits).
//
// It exports nothing to Go: cgo compiles C files only in a package's own
// folder, so the C lives in this package and package native imports it for
// its symbols (C symbols link globally in one binary), calling them
// through its own cgo preambles (#include "cpu/kernels.h", "backend.h").
package cpu

/*
#cgo CFLAGS: -O3 -std=c11 -pthread
#cgo LDFLAGS: -lm -pthread
*/
import "C"
