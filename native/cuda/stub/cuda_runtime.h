/*
 * stub/cuda_runtime.h: the parts of the CUDA runtime and device language
 * that native/cuda uses, in plain C++, for build/cuda-syntax.sh: it
 * compiles the .cu files with g++ where there is no nvcc (their kernel
 * launches rewritten as stub_launch calls) and can run a harness on the
 * host: memory is host memory, a stream runs each operation at once, and a
 * launch runs its blocks one after another on a host thread per CUDA
 * thread of a block (made once a launch), with real barriers for
 * __syncthreads and the warp's shuffles. Slow, for small shapes only; the arithmetic
 * of libm, not of the device's intrinsics. Not CUDA: no check of what
 * nvcc alone checks (device-only rules, register use).
 */
#ifndef VERDICT_CUDA_STUB_H
#define VERDICT_CUDA_STUB_H

#include <barrier>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define __restrict__ __restrict
#define __constant__
#define __align__(n) __attribute__((aligned(n)))

struct uint3s {
	unsigned x, y, z;
};
struct dim3 {
	unsigned x, y, z;
	dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
inline thread_local uint3s threadIdx, blockIdx, blockDim, gridDim;
struct float4 {
	float x, y, z, w;
};
inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
struct uint4 {
	unsigned x, y, z, w;
};
struct uint2 {
	unsigned x, y;
};
struct float2 {
	float x, y;
};
inline float2 make_float2(float x, float y) { return float2{x, y}; }

typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;
typedef struct CUgraph_st *cudaGraph_t;
typedef struct CUgraphExec_st *cudaGraphExec_t;
typedef struct CUgraphNode_st *cudaGraphNode_t;
typedef unsigned long long cudaGraphConditionalHandle;
#define CUDART_VERSION 13000
enum cudaError_t { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2, cudaErrorInsufficientDriver = 35, cudaErrorNoDevice = 100 };
enum cudaMemcpyKind { cudaMemcpyHostToHost, cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice, cudaMemcpyDefault };
enum { cudaStreamNonBlocking = 1 };
enum { cudaEventDisableTiming = 2 };
enum cudaStreamCaptureMode { cudaStreamCaptureModeGlobal, cudaStreamCaptureModeThreadLocal, cudaStreamCaptureModeRelaxed };
enum cudaStreamCaptureStatus { cudaStreamCaptureStatusNone, cudaStreamCaptureStatusActive };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize };
enum cudaDeviceAttr {
	cudaDevAttrMaxSharedMemoryPerBlockOptin,
	cudaDevAttrMultiProcessorCount,
	cudaDevAttrComputeCapabilityMajor,
	cudaDevAttrMaxSharedMemoryPerMultiprocessor
};
enum { cudaGraphCondAssignDefault = 1 };
enum cudaGraphNodeType { cudaGraphNodeTypeKernel = 0, cudaGraphNodeTypeConditional = 13 };
enum cudaGraphConditionalNodeType { cudaGraphCondTypeIf, cudaGraphCondTypeWhile };
struct cudaConditionalNodeParams {
	cudaGraphConditionalHandle handle;
	cudaGraphConditionalNodeType type;
	unsigned size;
	cudaGraph_t *phGraph_out;
};
struct cudaGraphNodeParams {
	cudaGraphNodeType type;
	cudaConditionalNodeParams conditional;
};
/* Launches with attributes (cudaLaunchKernelEx): only programmatic
 * stream serialization (PDL), which the host emulation ignores. */
enum cudaLaunchAttributeID { cudaLaunchAttributeProgrammaticStreamSerialization = 5 };
union cudaLaunchAttributeValue {
	char pad[64];
	int programmaticStreamSerializationAllowed;
};
struct cudaLaunchAttribute {
	cudaLaunchAttributeID id;
	cudaLaunchAttributeValue val;
};
struct cudaDeviceProp {
	char name[256];
	int multiProcessorCount, major, minor;
	size_t totalGlobalMem;
	int sharedMemPerBlockOptin, clockRate, memoryClockRate, memoryBusWidth;
};

/* ---- the runtime: host memory, streams that run at once ---- */

template <class T> inline cudaError_t cudaMalloc(T **p, size_t n)
{
	*p = (T *)calloc(1, n ? n : 1);
	return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
inline cudaError_t cudaFree(void *p)
{
	free(p);
	return cudaSuccess;
}
inline cudaError_t cudaMemcpy(void *d, const void *s, size_t n, cudaMemcpyKind)
{
	if (n)
		memmove(d, s, n);
	return cudaSuccess;
}
inline cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind k, cudaStream_t = nullptr)
{
	return cudaMemcpy(d, s, n, k);
}
inline cudaError_t cudaMemset(void *d, int v, size_t n)
{
	memset(d, v, n);
	return cudaSuccess;
}
inline cudaError_t cudaMemsetAsync(void *d, int v, size_t n, cudaStream_t = nullptr) { return cudaMemset(d, v, n); }
inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned)
{
	static int dummy;
	*s = (cudaStream_t)&dummy;
	return cudaSuccess;
}
inline cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, 0); }
inline cudaError_t cudaGetDeviceCount(int *n)
{
	*n = 1;
	return cudaSuccess;
}
inline cudaError_t cudaDriverGetVersion(int *v)
{
	*v = 13000;
	return cudaSuccess;
}
inline cudaError_t cudaRuntimeGetVersion(int *v)
{
	*v = 13000;
	return cudaSuccess;
}
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int)
{
	memset(p, 0, sizeof *p);
	strcpy(p->name, "host emulation (stub/cuda_runtime.h)");
	p->major = 9;
	p->multiProcessorCount = 1;
	p->totalGlobalMem = (size_t)1 << 30;
	p->sharedMemPerBlockOptin = 227 * 1024;
	return cudaSuccess;
}
inline cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int)
{
	*v = a == cudaDevAttrMaxSharedMemoryPerBlockOptin       ? 227 * 1024
	     : a == cudaDevAttrMaxSharedMemoryPerMultiprocessor ? 228 * 1024
	     : a == cudaDevAttrComputeCapabilityMajor            ? 9
	                                                         : 1;
	return cudaSuccess;
}
inline cudaError_t cudaMemGetInfo(size_t *f, size_t *t)
{
	*f = *t = (size_t)1 << 30;
	return cudaSuccess;
}
inline cudaError_t cudaStreamIsCapturing(cudaStream_t, cudaStreamCaptureStatus *s)
{
	*s = cudaStreamCaptureStatusNone;
	return cudaSuccess;
}
/* The rest: accepted and done at once (events, graphs, symbols, sync). */
#define STUB_API(n) \
	template <class... A> inline cudaError_t n(A &&...) { return cudaSuccess; }
STUB_API(cudaStreamSynchronize)
STUB_API(cudaStreamDestroy)
STUB_API(cudaSetDevice)
STUB_API(cudaGetDevice)
STUB_API(cudaGetLastError)
STUB_API(cudaPeekAtLastError)
STUB_API(cudaEventCreate)
STUB_API(cudaEventCreateWithFlags)
STUB_API(cudaEventRecord)
STUB_API(cudaEventSynchronize)
STUB_API(cudaEventElapsedTime)
STUB_API(cudaEventDestroy)
STUB_API(cudaEventQuery)
STUB_API(cudaFuncSetAttribute)
/* one block a multiprocessor: the emulation runs one at a time */
template <class F> inline cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *n, F, int, size_t)
{
	*n = 1;
	return cudaSuccess;
}
STUB_API(cudaStreamBeginCapture)
STUB_API(cudaStreamEndCapture)
STUB_API(cudaGraphInstantiate)
STUB_API(cudaGraphLaunch)
STUB_API(cudaGraphDestroy)
STUB_API(cudaGraphExecDestroy)
STUB_API(cudaDeviceSynchronize)
STUB_API(cudaMemcpyToSymbolAsync)
STUB_API(cudaMemcpyToSymbol)
STUB_API(cudaMemcpyFromSymbol)
STUB_API(cudaGetSymbolAddress)
STUB_API(cudaStreamWaitEvent)
STUB_API(cudaStreamGetCaptureInfo)
STUB_API(cudaMallocHost)
STUB_API(cudaFreeHost)
STUB_API(cudaHostAlloc)
STUB_API(cudaGraphCreate)
STUB_API(cudaGraphConditionalHandleCreate)
STUB_API(cudaStreamBeginCaptureToGraph)
STUB_API(cudaGraphGetNodes)
STUB_API(cudaGraphNodeGetType)
/* cudaGraphAddNode (CUDA 13's form): a conditional node gets a body. */
template <class D, class E>
inline cudaError_t cudaGraphAddNode(cudaGraphNode_t *n, cudaGraph_t, D, E, size_t, cudaGraphNodeParams *p)
{
	static int body;
	*n = nullptr;
	if (p->type == cudaGraphNodeTypeConditional) {
		static cudaGraph_t out[1] = {(cudaGraph_t)&body};
		p->conditional.phGraph_out = out;
	}
	return cudaSuccess;
}
inline void cudaGraphSetConditional(cudaGraphConditionalHandle, unsigned) {}
inline const char *cudaGetErrorString(cudaError_t) { return "(stub)"; }

/* ---- launches: a block's threads as host threads ---- */

struct stub_block {
	std::unique_ptr<std::barrier<>> all;
	std::vector<std::unique_ptr<std::barrier<>>> warp;
	std::vector<uint64_t> slot; /* a shuffle's values, a lane each */
	std::vector<unsigned char> dyn;
};
inline thread_local stub_block *stub_cur;
inline thread_local unsigned stub_tid;

inline void *stub_dyn_smem() { return stub_cur->dyn.data(); }

/* stub_launch: the launch's threads are made once and run its blocks one
 * after another, in blockIdx order (x fastest), with a barrier of all of
 * them between blocks; each block gets fresh barriers, shuffle slots and
 * dynamic shared memory (filled with 0xff) before it starts. */
template <class F> inline void stub_launch(F f, dim3 grid, dim3 block, size_t smem = 0, cudaStream_t = nullptr)
{
	unsigned nt = block.x * block.y * block.z;
	unsigned nw = (nt + 31) / 32;
	size_t nb = (size_t)grid.x * grid.y * grid.z;
	if (nt == 0 || nb == 0)
		return;
	stub_block b;
	std::barrier<> gate(nt);
	auto fresh = [&] {
		b.all.reset(new std::barrier<>(nt));
		b.warp.clear();
		for (unsigned w = 0; w < nw; w++)
			b.warp.emplace_back(new std::barrier<>(std::min(32u, nt - 32 * w)));
		b.slot.assign((size_t)nw * 32, 0);
		b.dyn.assign(smem + 16, 0xff);
	};
	std::vector<std::thread> th;
	for (unsigned t = 0; t < nt; t++)
		th.emplace_back([&, t] {
			stub_cur = &b;
			stub_tid = t;
			threadIdx = {t % block.x, t / block.x % block.y, t / (block.x * block.y)};
			blockDim = {block.x, block.y, block.z};
			gridDim = {grid.x, grid.y, grid.z};
			for (size_t k = 0; k < nb; k++) {
				if (t == 0)
					fresh();
				gate.arrive_and_wait(); /* the block's state is fresh */
				blockIdx = {(unsigned)(k % grid.x), (unsigned)(k / grid.x % grid.y), (unsigned)(k / ((size_t)grid.x * grid.y))};
				f();
				b.all->arrive_and_drop();
				b.warp[t / 32]->arrive_and_drop();
				gate.arrive_and_wait(); /* every thread is done with it */
			}
		});
	for (auto &x : th)
		x.join();
}

struct cudaLaunchConfig_t {
	dim3 gridDim, blockDim;
	size_t dynamicSmemBytes;
	cudaStream_t stream;
	cudaLaunchAttribute *attrs;
	unsigned numAttrs;
};

/* cudaLaunchKernelEx: the kernel run at once, as a launch is; the
 * arguments converted to the kernel's parameter types, as the runtime's
 * template does. */
template <class... P, class... A>
inline cudaError_t cudaLaunchKernelEx(const cudaLaunchConfig_t *c, void (*k)(P...), A &&...a)
{
	auto run = [&](P... v) { stub_launch([&] { k(v...); }, c->gridDim, c->blockDim, c->dynamicSmemBytes, c->stream); };
	run(std::forward<A>(a)...);
	return cudaSuccess;
}

inline void __syncthreads() { stub_cur->all->arrive_and_wait(); }
inline void __syncwarp(unsigned = 0xffffffffu) { stub_cur->warp[stub_tid / 32]->arrive_and_wait(); }
inline int __syncthreads_or(int p)
{
	static int acc;
	__syncthreads();
	if (stub_tid == 0)
		acc = 0;
	__syncthreads();
	if (p)
		__atomic_store_n(&acc, 1, __ATOMIC_SEQ_CST);
	__syncthreads();
	return acc;
}

/* stub_shfl: every lane posts v, then reads lane src's. */
template <class T> inline T stub_shfl(T v, unsigned src)
{
	static_assert(sizeof(T) <= 8, "shuffle of a wide type");
	unsigned w = stub_tid / 32;
	uint64_t u = 0;
	memcpy(&u, &v, sizeof v);
	stub_cur->slot[stub_tid] = u;
	__syncwarp();
	u = stub_cur->slot[w * 32 + (src & 31)];
	__syncwarp();
	T r;
	memcpy(&r, &u, sizeof r);
	return r;
}
template <class T> inline T __shfl_xor_sync(unsigned, T v, int o, int = 32) { return stub_shfl(v, (stub_tid & 31) ^ (unsigned)o); }
template <class T> inline T __shfl_sync(unsigned, T v, int src, int = 32) { return stub_shfl(v, (unsigned)src); }
template <class T> inline T __shfl_up_sync(unsigned, T v, unsigned d, int = 32)
{
	unsigned l = stub_tid & 31;
	T r = stub_shfl(v, l >= d ? l - d : l);
	return r;
}
template <class T> inline T __shfl_down_sync(unsigned, T v, unsigned d, int = 32)
{
	unsigned l = stub_tid & 31;
	return stub_shfl(v, l + d < 32 ? l + d : l);
}
inline unsigned __ballot_sync(unsigned, int p)
{
	unsigned w = stub_tid / 32, r = 0;
	stub_cur->slot[stub_tid] = p != 0;
	__syncwarp();
	for (unsigned l = 0; l < 32 && w * 32 + l < stub_cur->slot.size(); l++)
		r |= (unsigned)(stub_cur->slot[w * 32 + l] != 0) << l;
	__syncwarp();
	return r;
}

inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
template <class T> inline T __ldg(const T *p) { return *p; }
template <class T> inline T __ldcg(const T *p) { return *p; }
template <class T> inline T __ldcs(const T *p) { return *p; }
inline unsigned __float_as_uint(float f)
{
	unsigned u;
	memcpy(&u, &f, 4);
	return u;
}
inline float __uint_as_float(unsigned u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}
inline int __float_as_int(float f) { return (int)__float_as_uint(f); }
inline float __int_as_float(int i) { return __uint_as_float((unsigned)i); }
template <class T> inline T atomicAdd(T *p, T v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
inline float atomicAdd(float *p, float v)
{
	static std::mutex m;
	std::lock_guard<std::mutex> l(m);
	float o = *p;
	*p = o + v;
	return o;
}
template <class T> inline T atomicExch(T *p, T v) { return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST); }
inline int atomicExch(int *p, int v) { return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST); }
template <class T> inline T atomicMax(T *p, T v)
{
	T o = __atomic_load_n(p, __ATOMIC_SEQ_CST);
	while (o < v && !__atomic_compare_exchange_n(p, &o, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
	}
	return o;
}
template <class T> inline T atomicMin(T *p, T v)
{
	T o = __atomic_load_n(p, __ATOMIC_SEQ_CST);
	while (o > v && !__atomic_compare_exchange_n(p, &o, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
	}
	return o;
}
template <class T> inline T atomicOr(T *p, T v) { return __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST); }
template <class T> inline T atomicAnd(T *p, T v) { return __atomic_fetch_and(p, v, __ATOMIC_SEQ_CST); }
template <class T> inline T atomicCAS(T *p, T c, T v)
{
	__atomic_compare_exchange_n(p, &c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
	return c;
}
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline long long clock64() { return 0; }
using std::exp;
using std::fmaf;
using std::fmaxf;
using std::fminf;
using std::sqrt;

#endif
