/*
 * cp_async.cuh: asynchronous copies from global into shared memory
 * (cp.async, compute capability 8.0 and later), with the host emulation's
 * plain copies; shared by the kernels that stage their operands.
 */
#ifndef VERDICT_CUDA_CP_ASYNC_CUH
#define VERDICT_CUDA_CP_ASYNC_CUH

#include <cstring>

/* cp16, cp8, cp4: a copy of 16, 8 or 4 bytes from src to the shared dst
 * (both aligned to their size), or zeros when !ok (src then is not read). */
static __device__ __forceinline__ void cp16(void *dst, const void *src, bool ok = true)
{
#if defined(__CUDA_ARCH__)
	unsigned d = (unsigned)__cvta_generic_to_shared(dst);
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(ok ? 16 : 0));
#else
	if (ok)
		memcpy(dst, src, 16);
	else
		memset(dst, 0, 16);
#endif
}

static __device__ __forceinline__ void cp8(void *dst, const void *src, bool ok = true)
{
#if defined(__CUDA_ARCH__)
	unsigned d = (unsigned)__cvta_generic_to_shared(dst);
	asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;" ::"r"(d), "l"(src), "r"(ok ? 8 : 0));
#else
	if (ok)
		memcpy(dst, src, 8);
	else
		memset(dst, 0, 8);
#endif
}

static __device__ __forceinline__ void cp4(void *dst, const void *src, bool ok = true)
{
#if defined(__CUDA_ARCH__)
	unsigned d = (unsigned)__cvta_generic_to_shared(dst);
	asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(d), "l"(src), "r"(ok ? 4 : 0));
#else
	if (ok)
		memcpy(dst, src, 4);
	else
		memset(dst, 0, 4);
#endif
}

/* cp_commit: this thread's copies since the last commit as one group. */
static __device__ __forceinline__ void cp_commit()
{
#if defined(__CUDA_ARCH__)
	asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}

/* cp_wait: until at most N of this thread's groups are still in flight. */
template <int N> static __device__ __forceinline__ void cp_wait()
{
#if defined(__CUDA_ARCH__)
	asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#endif
}

#endif
