/* chain_floor.cu: what a chain of dependent kernels costs a kernel on this
 * GPU, apart from their work: 512 row operations (read a 2,048-float row,
 * sum its squares over the block, write it) recorded in a graph, with and
 * without programmatic dependent launch, one block or many, against the
 * same chain inside one persistent kernel whose operations wait on their
 * predecessor's counter in global memory (acquire/release). Not part of
 * the library; build/gpu-perf.sh's "chain" stage builds and runs it:
 *   nvcc -O3 -arch=sm_90 -std=c++17 -I native/cuda -o chain native/cuda/bench/chain_floor.cu */
#include "pdl.cuh"
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>

#define DIM 2048
#define TPB 256

__device__ __forceinline__ float bsum(float v, float *red)
{
	for (int o = 16; o; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	int w = threadIdx.x >> 5, l = threadIdx.x & 31;
	__syncthreads();
	if (l == 0)
		red[w] = v;
	__syncthreads();
	float s = 0;
	for (int k = 0; k < TPB / 32; k++)
		s += red[k];
	return s;
}

/* the row op: y[part] = x * rsqrt(mean(x^2)) for the part's columns (part
 * = all columns for one block, a slice for G blocks) */
__device__ __forceinline__ void rowop(const float *x, float *y, int nparts, int part, float *red)
{
	float v[DIM / TPB], a = 0;
#pragma unroll
	for (int u = 0; u < DIM / TPB; u++) {
		v[u] = x[threadIdx.x + u * TPB];
		a = fmaf(v[u], v[u], a);
	}
	float s = bsum(a, red);
	float inv = rsqrtf(s / DIM + 1e-6f);
	int w = DIM / nparts, lo = part * w;
#pragma unroll
	for (int u = 0; u < DIM / TPB; u++) {
		int i = threadIdx.x + u * TPB;
		if (i >= lo && i < lo + w)
			y[i] = v[u] * inv * 1.0001f + 1e-3f;
	}
}

__global__ void __launch_bounds__(TPB) k_op(float *buf, int i)
{
	__shared__ float red[32];
	pdl_wait();
	pdl_launch();
	rowop(buf + (i & 1) * DIM, buf + ((i + 1) & 1) * DIM, gridDim.x, blockIdx.x, red);
}

__device__ __forceinline__ unsigned ld_acq(const unsigned *p)
{
	unsigned v;
	asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
	return v;
}
__device__ __forceinline__ void red_rel(unsigned *p, unsigned v)
{
	asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

/* ops alternate: op p has np[p] parts (1 = one block); part j of op p runs
 * on block (base_p + j) % gridDim.x; it waits until cnt[p-1] == np[p-1]. */
__global__ void __launch_bounds__(TPB) k_persist(float *buf, const int *np, int nops, unsigned *cnt)
{
	__shared__ float red[32];
	int base = 0;
	for (int p = 0; p < nops; p++) {
		int n = np[p];
		int j = ((int)blockIdx.x - base) % (int)gridDim.x;
		if (j < 0)
			j += gridDim.x;
		if (j < n) {
			if (p > 0) {
				if (threadIdx.x == 0)
					while (ld_acq(cnt + p - 1) < (unsigned)np[p - 1])
						;
				__syncthreads();
			}
			rowop(buf + (p & 1) * DIM, buf + ((p + 1) & 1) * DIM, n, j, red);
			__syncthreads();
			if (threadIdx.x == 0) {
				__threadfence();
				red_rel(cnt + p, 1u);
			}
		}
		base = (base + n) % gridDim.x;
	}
}

#define CK(x)                                                                                                          \
	do {                                                                                                           \
		cudaError_t e_ = (x);                                                                                  \
		if (e_ != cudaSuccess) {                                                                               \
			printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));                              \
			exit(1);                                                                                       \
		}                                                                                                      \
	} while (0)

static float med(std::vector<float> v)
{
	std::sort(v.begin(), v.end());
	return v[v.size() / 2];
}

int main()
{
	int sms;
	CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
	float *buf;
	CK(cudaMalloc(&buf, 2 * DIM * sizeof(float)));
	std::vector<float> h(2 * DIM, 1.0f);
	CK(cudaMemcpy(buf, h.data(), h.size() * 4, cudaMemcpyHostToDevice));
	cudaStream_t st;
	CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	cudaEvent_t e0, e1;
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	const int N = 512;
	/* patterns: parts of each op */
	struct Pat {
		const char *name;
		int a, b; /* alternate a-part and b-part ops */
	} pats[] = {{"1-block ops", 1, 1}, {"16-block ops", 16, 16}, {"128-block ops", 128, 128}, {"1 / 128 alternating", 1, 128}};
	for (auto &pt : pats) {
		for (int pdl = 0; pdl < 2; pdl++) {
			cudaGraph_t g;
			cudaGraphExec_t ge;
			CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeRelaxed));
			for (int i = 0; i < N; i++)
				CK(launch_pdl(pdl, k_op, dim3(i & 1 ? pt.b : pt.a), dim3(TPB), 0, st, buf, i));
			CK(cudaStreamEndCapture(st, &g));
			CK(cudaGraphInstantiate(&ge, g, 0));
			std::vector<float> t;
			for (int r = 0; r < 15; r++) {
				CK(cudaEventRecord(e0, st));
				CK(cudaGraphLaunch(ge, st));
				CK(cudaEventRecord(e1, st));
				CK(cudaEventSynchronize(e1));
				float ms;
				CK(cudaEventElapsedTime(&ms, e0, e1));
				t.push_back(ms);
			}
			printf("graph %-22s pdl=%d: %.3f us/op\n", pt.name, pdl, 1e3f * med(t) / N);
			cudaGraphExecDestroy(ge);
			cudaGraphDestroy(g);
		}
		/* persistent */
		std::vector<int> np(N);
		for (int i = 0; i < N; i++)
			np[i] = i & 1 ? pt.b : pt.a;
		int *dnp;
		unsigned *cnt;
		CK(cudaMalloc(&dnp, N * sizeof(int)));
		CK(cudaMalloc(&cnt, N * sizeof(unsigned)));
		CK(cudaMemcpy(dnp, np.data(), N * sizeof(int), cudaMemcpyHostToDevice));
		std::vector<float> t;
		for (int r = 0; r < 15; r++) {
			CK(cudaMemsetAsync(cnt, 0, N * sizeof(unsigned), st));
			CK(cudaEventRecord(e0, st));
			k_persist<<<sms, TPB, 0, st>>>(buf, dnp, N, cnt);
			CK(cudaEventRecord(e1, st));
			CK(cudaEventSynchronize(e1));
			CK(cudaGetLastError());
			float ms;
			CK(cudaEventElapsedTime(&ms, e0, e1));
			t.push_back(ms);
		}
		printf("persistent %-17s (%d blocks): %.3f us/op\n", pt.name, sms, 1e3f * med(t) / N);
		cudaFree(dnp);
		cudaFree(cnt);
	}
	return 0;
}
