/*
 * limits.cu: the device's description and its measured ceilings (the
 * table's info and limits: read bandwidth, float32 and tensor-core
 * throughput).
 */
#include "common.cuh"

/* ---- the device and its limits ---- */

int c_info(vd_backend *b, vd_info *out)
{
	memset(out, 0, sizeof *out);
	int dev = st_of(b)->device;
	cudaSetDevice(dev);
	cudaDeviceProp p;
	if (cudaGetDeviceProperties(&p, dev) != cudaSuccess) {
		cudaGetLastError();
		return 1;
	}
	snprintf(out->name, sizeof out->name, "%s", p.name);
	size_t fr = 0, tot = 0;
	if (cudaMemGetInfo(&fr, &tot) == cudaSuccess)
		out->mem_total = (int64_t)tot, out->mem_free = (int64_t)fr;
	else
		cudaGetLastError();
	out->units = p.multiProcessorCount;
	out->cc = p.major * 10 + p.minor;
	return 0;
}

/* k_read: every float4 of x read once (the sums kept so nothing is
 * optimised away). */
__global__ void k_read(float *out, const float4 *x, int64_t n4)
{
	pdl_wait();
	pdl_launch();
	float a = 0.0f;
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += (int64_t)gridDim.x * blockDim.x) {
		float4 v = __ldcs(x + i);
		a += v.x + v.y + v.z + v.w;
	}
	if (a == 1234.5f)
		out[0] = a;
}

/* k_fma: eight independent chains of fmaf per thread. */
__global__ void k_fma(float *out, int iters, float s)
{
	pdl_wait();
	pdl_launch();
	float a[8];
#pragma unroll
	for (int k = 0; k < 8; k++)
		a[k] = threadIdx.x * 1e-3f + k;
	for (int i = 0; i < iters; i++)
#pragma unroll
		for (int k = 0; k < 8; k++)
			a[k] = fmaf(a[k], s, 0.5f);
	float r = 0;
#pragma unroll
	for (int k = 0; k < 8; k++)
		r += a[k];
	if (r == 1234.5f)
		out[0] = r;
}

/* k_mma: four independent tensor-core products per warp in a loop, bf16
 * (m16n8k16) or tf32 (m16n8k8) inputs with float32 sums, on registers. */
template <bool BF16>
__global__ void k_mma(float *out, int iters)
{
	pdl_wait();
	pdl_launch();
#if __CUDA_ARCH__ >= 800
	uint32_t a0 = threadIdx.x, a1 = a0 ^ 1, a2 = a0 ^ 2, a3 = a0 ^ 3, b0 = a0 ^ 5, b1 = a0 ^ 7;
	float d[4][4] = {};
	for (int i = 0; i < iters; i++) {
#pragma unroll
		for (int k = 0; k < 4; k++) {
			if (BF16)
				asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
				             "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
				             : "+f"(d[k][0]), "+f"(d[k][1]), "+f"(d[k][2]), "+f"(d[k][3])
				             : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
			else
				asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, "
				             "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
				             : "+f"(d[k][0]), "+f"(d[k][1]), "+f"(d[k][2]), "+f"(d[k][3])
				             : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
		}
	}
	float r = 0;
#pragma unroll
	for (int k = 0; k < 4; k++)
		r += d[k][0] + d[k][1] + d[k][2] + d[k][3];
	if (r == 1234.5f)
		out[0] = r;
#endif
}

/* timed: the best of three runs of f on a fresh stream, in seconds. */
template <typename F>
static double timed(cudaStream_t st, F f)
{
	cudaEvent_t a, b;
	cudaEventCreate(&a);
	cudaEventCreate(&b);
	f(); /* warm */
	double best = 1e30;
	for (int k = 0; k < 3; k++) {
		cudaEventRecord(a, st);
		f();
		cudaEventRecord(b, st);
		cudaEventSynchronize(b);
		float ms = 0;
		cudaEventElapsedTime(&ms, a, b);
		best = std::min(best, (double)ms / 1e3);
	}
	cudaEventDestroy(a);
	cudaEventDestroy(b);
	return best;
}

int c_limits(vd_backend *b, vd_limits *out)
{
	memset(out, 0, sizeof *out);
	int dev = st_of(b)->device;
	cudaSetDevice(dev);
	cudaDeviceProp p;
	cudaStream_t st;
	if (cudaGetDeviceProperties(&p, dev) != cudaSuccess || cudaStreamCreate(&st) != cudaSuccess) {
		cudaGetLastError();
		return 1;
	}
	size_t bytes = (size_t)1 << 30;
	size_t fr = 0, tot = 0;
	if (cudaMemGetInfo(&fr, &tot) == cudaSuccess && fr < 3 * bytes)
		bytes = fr / 4;
	float *buf = nullptr, *sink = nullptr;
	if (cudaMalloc(&buf, bytes) != cudaSuccess || cudaMalloc(&sink, 64) != cudaSuccess) {
		cudaGetLastError();
		if (buf)
			cudaFree(buf);
		cudaStreamDestroy(st);
		return 1;
	}
	cudaMemsetAsync(buf, 0, bytes, st);
	int sms = p.multiProcessorCount;
	int64_t n4 = (int64_t)(bytes / 16);
	double t = timed(st, [&] { launch_pdl(false, k_read, sms * 8, 256, 0, st, sink, (const float4 *)buf, n4); });
	out->read_gbs = (double)bytes / t / 1e9;
	int iters = 1 << 14;
	t = timed(st, [&] { launch_pdl(false, k_fma, sms * 16, 256, 0, st, sink, iters, 0.999f); });
	out->fp32_tflops = 2.0 * 8 * iters * (double)sms * 16 * 256 / t / 1e12;
	int mi = 1 << 12;
	double warps = (double)sms * 16 * 8; /* 16 blocks of 8 warps per multiprocessor */
	t = timed(st, [&] { launch_pdl(false, k_mma<true>, sms * 16, 256, 0, st, sink, mi); });
	out->bf16_tc_tflops = 2.0 * 16 * 8 * 16 * 4 * (double)mi * warps / t / 1e12;
	t = timed(st, [&] { launch_pdl(false, k_mma<false>, sms * 16, 256, 0, st, sink, mi); });
	out->tf32_tc_tflops = 2.0 * 16 * 8 * 8 * 4 * (double)mi * warps / t / 1e12;
	cudaError_t e = cudaStreamSynchronize(st);
	cudaFree(buf);
	cudaFree(sink);
	cudaStreamDestroy(st);
	if (e != cudaSuccess) {
		cudaGetLastError();
		memset(out, 0, sizeof *out);
		return 1;
	}
	return 0;
}

