/*
 * pdl.cuh: programmatic dependent launch (PDL, compute capability 9.0 and
 * later) for cuda_backend.cu and catalog.cu.
 *
 * A kernel launched by launch_pdl with pdl set may start while the kernel
 * before it on the stream is still draining: as soon as every block of
 * that one has executed pdl_launch (or exited). Its pdl_wait then blocks
 * until the kernel before has completed and its memory is visible. The
 * rules every kernel launched this way keeps:
 *   - pdl_wait before the first read of anything another kernel may have
 *     written, and before the first write to global memory (the kernel
 *     before may still be reading it); only immutable data (weights) may
 *     be read before it;
 *   - every thread executes pdl_wait before it exits, so a kernel never
 *     completes before the one it follows (completion stays transitive
 *     down the stream: a kernel, copy or host wait after it sees every
 *     earlier kernel's writes);
 *   - pdl_launch only after pdl_wait, so waiting kernels do not pile up.
 * Both are no-ops below sm_90 and off the device, and pdl_wait is one when
 * the launch did not ask for PDL.
 */
#ifndef VERDICT_PDL_CUH
#define VERDICT_PDL_CUH

#include <cuda_runtime.h>

#include <utility>

__device__ __forceinline__ void pdl_wait()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_launch()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* pdl_prefetch_l2: a hint that the line at p (immutable data: weights) be
 * brought into L2; for the stretch before pdl_wait. */
__device__ __forceinline__ void pdl_prefetch_l2(const void *p)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
#else
	(void)p;
#endif
}

/* pdl_skip_depth: above 0 while the calling thread is inside an
 * operation that VERDICT_CUDA_SKIP names (common.cuh, prof_scope): its
 * launches are left out (a measuring aid only, the results are wrong). */
inline thread_local int pdl_skip_depth = 0;

/* launch_pdl launches k<<<grid, block, smem, st>>>(args...), with
 * programmatic stream serialization when pdl is set; the launch's error
 * (none and no launch inside a skipped operation). */
template <typename... P, typename... A>
static inline cudaError_t launch_pdl(bool pdl, void (*k)(P...), dim3 grid, dim3 block, size_t smem,
                                     cudaStream_t st, A &&...args)
{
	if (pdl_skip_depth > 0)
		return cudaSuccess;
	cudaLaunchAttribute at[1];
	cudaLaunchConfig_t cfg = {};
	cfg.gridDim = grid;
	cfg.blockDim = block;
	cfg.dynamicSmemBytes = smem;
	cfg.stream = st;
	if (pdl) {
		at[0] = {};
		at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
		at[0].val.programmaticStreamSerializationAllowed = 1;
		cfg.attrs = at;
		cfg.numAttrs = 1;
	}
	return cudaLaunchKernelEx(&cfg, k, std::forward<A>(args)...);
}

#endif
