/*
 * dev_props.h: what the launch plans read of a device (host code): its
 * multiprocessors, compute capability and shared memory, read once a
 * device (up to 64) and kept, so each device of a host gets its own.
 */
#pragma once
#include <cuda_runtime.h>

#include <mutex>

struct dev_props {
	int sms;        /* multiprocessors (1 where it cannot be read) */
	int major;      /* compute capability's major number (0: unread) */
	int smem_sm;    /* shared memory a multiprocessor, bytes */
	int smem_block; /* shared memory a block may opt in to, bytes */
};

/* current_dev: the current device's properties; after a device's first
 * read this costs one cudaGetDevice and one atomic load. */
inline const dev_props &current_dev()
{
	static dev_props d[64];
	static std::once_flag once[64];
	int i = 0;
	if (cudaGetDevice(&i) != cudaSuccess || i < 0 || i >= 64)
		i = 0;
	std::call_once(once[i], [i] {
		dev_props v = {};
		cudaDeviceGetAttribute(&v.sms, cudaDevAttrMultiProcessorCount, i);
		cudaDeviceGetAttribute(&v.major, cudaDevAttrComputeCapabilityMajor, i);
		cudaDeviceGetAttribute(&v.smem_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, i);
		cudaDeviceGetAttribute(&v.smem_block, cudaDevAttrMaxSharedMemoryPerBlockOptin, i);
		v.sms = v.sms > 0 ? v.sms : 1;
		d[i] = v;
	});
	return d[i];
}
