/*
 * backend_device.h: what a backend runs on (part of backend.h): the
 * device's description and its measured ceilings.
 */
#ifndef VERDICT_BACKEND_DEVICE_H
#define VERDICT_BACKEND_DEVICE_H

#include "backend_buffer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a backend runs on (info). */
typedef struct {
	char name[96];               /* e.g. "NVIDIA H200"; "" where not known */
	int64_t mem_total, mem_free; /* bytes of device memory; 0: host memory */
	int32_t units;               /* multiprocessors, or threads */
	int32_t cc;                  /* compute capability ×10; 0 for the CPU */
} vd_info;

/* The machine's ceilings, measured (limits): bytes read per second from
 * device memory, and multiply-adds (counted as two operations) per second
 * on float32 units and on tensor cores (bf16 and tf32 inputs, float32
 * sums); 0 where not measured. */
typedef struct {
	double read_gbs, fp32_tflops, bf16_tc_tflops, tf32_tc_tflops;
} vd_limits;

/* The device (0, or nonzero where nothing is known) and its measured
 * limits (0, or nonzero where the backend does not measure: the CPU's are
 * measured by the host). Both entries are required (they may answer
 * nonzero). */
typedef struct {
	int (*info)(vd_backend *b, vd_info *out);
	int (*limits)(vd_backend *b, vd_limits *out);
} vd_device_fns;

#ifdef __cplusplus
}
#endif

#endif
