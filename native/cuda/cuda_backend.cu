/*
 * cuda_backend.cu: Verdict's CUDA backend, the table of backend.h over
 * device memory, built as libverdict_cuda.so (build/cuda.sh) and loaded at
 * run time by native.Open("cuda").
 *
 * Memory is device memory (cudaMalloc); bind copies the host weights to
 * the device once, unbind frees them. A stream is a cudaStream_t; every
 * operation is enqueued on it. Failures (a launch, a transfer, an op over a
 * dtype it does not take, attention over more keys than max_keys) set a
 * sticky error that sync returns: a cudaError_t value, or one of the
 * VDC_E* codes below.
 *
 * Exactness: float32 arithmetic, compiled with -fmad=false so that only the
 * fused multiply-adds written as fmaf are fused; exp, tanh and GELU are the
 * CPU kernels' (cpu_math_impl.h) operation for operation. Dot products are
 * summed per warp lane in column order, then by a fixed shuffle tree: a
 * different order from the CPU's 16-lane blocks, so results agree with the
 * CPU backend to float32 rounding, not bit for bit. Every output element is
 * computed by one thread or warp in an order fixed by the shapes alone, so
 * a row's result never depends on the batch it sits in or on the launch.
 */
#include "../backend.h"
#include "device_math.cuh"
#include "pdl.cuh"
#include "q4_mma.h"
#include "tower.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <utility>
#include <vector>

/* Error codes of the backend's own (cudaError_t values are below 1000). */
enum {
	VDC_EDTYPE = 1001,   /* an op over a dtype it does not take */
	VDC_EKEYS = 1002,    /* attention: a query sees more than max_keys keys */
	VDC_ESHARED = 1003,  /* (unused: attention needs no shared memory by keys now) */
	VDC_ESCRATCH = 1004, /* scratch allocation failed */
	VDC_EUNIMPL = VD_EUNIMPL, /* 1005: an operation not on the GPU (none now; the towers' before tower.cu) */
	VDC_ESHAPE = 1006,   /* a tower op's shape past its kernels' limits (tower.cu, TOW_ESHAPE) */
};

struct cuda_state {
	int device;
	int smem_optin; /* the largest dynamic shared memory a block may ask */
	int *dev_err;   /* device-side error flag (attention) */
	bool pdl;       /* launches use PDL (pdl.cuh): compute capability 9.0+, VERDICT_PDL not "0" */
	bool pdl_loop;  /* ... also inside a loop's body (VERDICT_PDL_LOOP not "0"; see pdl_of) */
};

struct vd_stream {
	vd_backend *b;
	cudaStream_t st;
	int dev;
	int err;
	void *scratch; /* per-stream device scratch (sparse_mlp counts) */
	size_t scratch_n;
	std::vector<float> host; /* sample's host copy of the logits */
	int32_t tok;
	bool recording; /* between graph_begin (or loop_begin) and graph_end */
	cudaGraph_t loop; /* loop_begin's graph, whose while node's body is being recorded */
	cudaGraphConditionalHandle cond; /* that node's condition */
	void *amax;     /* argmax partials: AP floats, AP int64s */
	void *apart;    /* attention partials */
	size_t apart_n;
	void *qpart;    /* a split q4 product's slice parts (q4_mma_part_bytes) */
	size_t qpart_n;
	/* Scratch outgrown: recorded graphs may still use it, so it is freed
	 * with the stream only. */
	std::vector<void *> retired;
	std::vector<struct prof_rec> pend; /* profiling: ops not yet summed */
	std::vector<cudaEvent_t> events;   /* profiling: free events */
};

static cuda_state *st_of(vd_backend *b) { return (cuda_state *)b->state; }

static void fail(vd_stream *s, int code)
{
	if (!s->err)
		s->err = code;
}

static void check(vd_stream *s, cudaError_t e)
{
	if (e != cudaSuccess)
		fail(s, (int)e);
}

static void launched(vd_stream *s) { check(s, cudaGetLastError()); }

/* pdl_of: whether s's launches may use programmatic dependent launch,
 * also while a loop's body is being captured (loop_begin: the body of a
 * conditional while node, by cudaStreamBeginCaptureToGraph) unless
 * VERDICT_PDL_LOOP=0. Programmatic edges inside a conditional node's body
 * are not among the documented contents of such a body; on the H200 the
 * catalog gates (a device loop = the host loop bit for bit, a replay = its
 * first run, grammar switches inside replays) pass with them, and a step
 * is about 0.5 ms shorter. */
static bool pdl_of(vd_stream *s)
{
	cuda_state *c = st_of(s->b);
	return c->pdl && (!s->loop || c->pdl_loop);
}

/* launch: k<<<grid, block, smem, s->st>>>(args...) by launch_pdl
 * (pdl.cuh), with PDL where pdl_of allows it; a failed launch is the
 * stream's error (as is any earlier one launched(s) finds). */
template <typename... P, typename... A>
static void launch(vd_stream *s, void (*k)(P...), dim3 grid, dim3 block, size_t smem, A &&...args)
{
	check(s, launch_pdl(pdl_of(s), k, grid, block, smem, s->st, std::forward<A>(args)...));
}

/* ---- profiling (VERDICT_CUDA_PROFILE=1) ----
 *
 * Each operation records an event before and after its work; sync sums
 * the device time between them per operation, with the host time the call
 * took (its launch cost). The table goes to stderr at exit. Recording a
 * graph records no events: a replay counts as one graph_run. */
struct prof_rec {
	const char *name;
	cudaEvent_t a, b;
	double host_us;
};

struct prof_total {
	long calls = 0;
	double dev_ms = 0, host_us = 0;
};

static std::mutex prof_mu;
static std::map<std::string, prof_total> *prof_tab;
static double prof_sync_us;
static long prof_syncs;

/* VERDICT_CUDA_PROFILE names the file the table is written to (rewritten
 * at most every 0.2 s and when a stream is freed: a Go program's exit runs
 * no C exit handlers); "1" or "-" is stderr, at those times too. */
static const char *prof_path()
{
	static const char *p = (const char *)1;
	if (p == (const char *)1) {
		const char *e = getenv("VERDICT_CUDA_PROFILE");
		p = e && *e && strcmp(e, "0") != 0 ? e : nullptr;
	}
	return p;
}

static bool profiling() { return prof_path() != nullptr; }

static void prof_print_locked(FILE *f);

static void prof_write()
{
	const char *p = prof_path();
	bool err = strcmp(p, "1") == 0 || strcmp(p, "-") == 0;
	FILE *f = err ? stderr : fopen(p, "w");
	if (!f)
		return;
	prof_print_locked(f);
	if (!err)
		fclose(f);
}

static void prof_print_locked(FILE *f)
{
	if (!prof_tab)
		return;
	std::vector<std::pair<std::string, prof_total>> v(prof_tab->begin(), prof_tab->end());
	std::sort(v.begin(), v.end(), [](const auto &x, const auto &y) { return x.second.dev_ms > y.second.dev_ms; });
	double dev = 0, host = 0;
	long calls = 0;
	for (auto &e : v)
		dev += e.second.dev_ms, host += e.second.host_us, calls += e.second.calls;
	fprintf(f, "cuda profile: %ld calls, device %.3f ms, host %.3f ms in calls, %ld syncs waiting %.3f ms\n",
	        calls, dev, host / 1e3, prof_syncs, prof_sync_us / 1e3);
	fprintf(f, "%-22s %9s %12s %8s %12s %8s\n", "op", "calls", "device ms", "dev %", "us/call dev", "us host");
	for (auto &e : v)
		fprintf(f, "%-22s %9ld %12.3f %8.1f %12.2f %8.2f\n", e.first.c_str(), e.second.calls,
		        e.second.dev_ms, dev > 0 ? 100 * e.second.dev_ms / dev : 0.0,
		        1e3 * e.second.dev_ms / (double)e.second.calls, e.second.host_us / (double)e.second.calls);
}

static cudaEvent_t prof_event(vd_stream *s)
{
	if (!s->events.empty()) {
		cudaEvent_t e = s->events.back();
		s->events.pop_back();
		return e;
	}
	cudaEvent_t e = nullptr;
	if (cudaEventCreate(&e) != cudaSuccess) {
		cudaGetLastError();
		return nullptr;
	}
	return e;
}

/* prof_scope times the operation it lives in. */
struct prof_scope {
	vd_stream *s = nullptr;
	const char *name;
	cudaEvent_t a = nullptr;
	std::chrono::steady_clock::time_point t0;
	prof_scope(vd_stream *st, const char *n) : name(n)
	{
		if (!profiling() || st->recording || !(a = prof_event(st)))
			return;
		s = st;
		t0 = std::chrono::steady_clock::now();
		cudaEventRecord(a, s->st);
	}
	~prof_scope()
	{
		if (!s)
			return;
		cudaEvent_t b = prof_event(s);
		if (!b) {
			s->events.push_back(a);
			return;
		}
		cudaEventRecord(b, s->st);
		double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
		s->pend.push_back({name, a, b, us});
	}
};

/* prof_flush sums a synchronised stream's records. */
static void prof_flush(vd_stream *s, double wait_us)
{
	if (!profiling())
		return;
	std::lock_guard<std::mutex> l(prof_mu);
	if (!prof_tab)
		prof_tab = new std::map<std::string, prof_total>();
	prof_syncs++;
	prof_sync_us += wait_us > 0 ? wait_us : 0;
	for (auto &r : s->pend) {
		float ms = 0;
		if (cudaEventElapsedTime(&ms, r.a, r.b) != cudaSuccess) {
			cudaGetLastError();
			ms = 0;
		}
		prof_total &t = (*prof_tab)[r.name];
		t.calls++;
		t.dev_ms += ms;
		t.host_us += r.host_us;
		s->events.push_back(r.a);
		s->events.push_back(r.b);
	}
	s->pend.clear();
	static std::chrono::steady_clock::time_point last;
	auto now = std::chrono::steady_clock::now();
	if (wait_us < 0 || now - last > std::chrono::milliseconds(200)) {
		last = now;
		prof_write();
	}
}

static int64_t elems(vd_tensor t) { return t.rows * t.cols; }

static int lg2(int64_t g)
{
	int l = 0;
	while ((1LL << l) < g)
		l++;
	return l;
}

static unsigned blocks_for(int64_t n, int per)
{
	int64_t b = (n + per - 1) / per;
	return (unsigned)(b < 1 ? 1 : b);
}

/* ---- device math: device_math.cuh ---- */

/* block_sum: the sum of every thread's v (blockDim.x a multiple of 32, at
 * most 1024), in a fixed tree; every thread gets it. red: 32 floats. */
__device__ float block_sum(float v, float *red)
{
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
	v = warp_sum(v);
	__syncthreads();
	if (lane == 0)
		red[w] = v;
	__syncthreads();
	float r = lane < nw ? red[lane] : 0.0f;
	return warp_sum(r);
}

__device__ float block_max(float v, float *red)
{
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
	v = warp_max(v);
	__syncthreads();
	if (lane == 0)
		red[w] = v;
	__syncthreads();
	float r = lane < nw ? red[lane] : -INFINITY;
	return warp_max(r);
}

__device__ double block_sum_d(double v, double *red)
{
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	__syncthreads();
	if (lane == 0)
		red[w] = v;
	__syncthreads();
	double r = lane < nw ? red[lane] : 0.0;
	for (int o = 16; o > 0; o >>= 1)
		r += __shfl_xor_sync(0xffffffffu, r, o);
	return r;
}

/* ---- linear ----
 *
 * One warp per output row r, tokens in tiles of LT: the row's weights are
 * read once per tile and every token keeps its own accumulators, so each
 * (token, row) value is computed exactly as it would be alone. Lane l sums
 * its columns (F32: l, l+32, ...; BF16: pairs; Q4: 32-column blocks l,
 * l+32, ...) in order with fmaf, then the warp's fixed shuffle tree. */
#define LT 4
#define LW 8 /* warps per block */
#define QT 8    /* tokens a tile of the tiled and staged products */
#define QK 1024 /* columns of x staged at a time */
#define RW 8    /* rows a warp in the tiled products */

enum { W_F32, W_BF16, W_BF16P, W_Q4 };

template <int K>
__device__ __forceinline__ void lin_row(float *acc, int nt, const float *x,
                                        int64_t ldx, const void *w,
                                        const float *so, int64_t r,
                                        int64_t cols, int lg, int lane)
{
	for (int t = 0; t < LT; t++)
		acc[t] = 0.0f;
	if (K == W_F32) {
		const float *wr = (const float *)w + r * cols;
		int64_t c = lane;
		for (; c + 32 * 7 < cols; c += 32 * 8) { /* eight loads in flight, then their sums in order */
			float wv[8];
#pragma unroll
			for (int u = 0; u < 8; u++)
				wv[u] = __ldg(wr + c + 32 * u);
#pragma unroll
			for (int u = 0; u < 8; u++)
#pragma unroll
				for (int t = 0; t < LT; t++)
					if (t < nt)
						acc[t] = fmaf(x[t * ldx + c + 32 * u], wv[u], acc[t]);
		}
		for (; c < cols; c += 32) {
			float wv = __ldg(wr + c);
#pragma unroll
			for (int t = 0; t < LT; t++)
				if (t < nt)
					acc[t] = fmaf(x[t * ldx + c], wv, acc[t]);
		}
	} else if (K == W_BF16) {
		const uint16_t *wr = (const uint16_t *)w + r * cols;
		for (int64_t c = lane; c < cols; c += 32) {
			float wv = bf2f(__ldg(wr + c));
#pragma unroll
			for (int t = 0; t < LT; t++)
				if (t < nt)
					acc[t] = fmaf(x[t * ldx + c], wv, acc[t]);
		}
	} else if (K == W_BF16P) { /* even cols, 4-byte aligned rows */
		const uint32_t *wr = (const uint32_t *)((const uint16_t *)w + r * cols);
		int64_t c2 = lane;
		for (; 2 * (c2 + 32 * 7) < cols; c2 += 32 * 8) {
			uint32_t uv[8];
#pragma unroll
			for (int k = 0; k < 8; k++)
				uv[k] = __ldg(wr + c2 + 32 * k);
#pragma unroll
			for (int k = 0; k < 8; k++) {
				float w0 = __uint_as_float(uv[k] << 16), w1 = __uint_as_float(uv[k] & 0xffff0000u);
				int64_t c = 2 * (c2 + 32 * k);
#pragma unroll
				for (int t = 0; t < LT; t++)
					if (t < nt) {
						acc[t] = fmaf(x[t * ldx + c], w0, acc[t]);
						acc[t] = fmaf(x[t * ldx + c + 1], w1, acc[t]);
					}
			}
		}
		for (; 2 * c2 < cols; c2 += 32) {
			uint32_t u = __ldg(wr + c2);
			float w0 = __uint_as_float(u << 16), w1 = __uint_as_float(u & 0xffff0000u);
#pragma unroll
			for (int t = 0; t < LT; t++)
				if (t < nt) {
					acc[t] = fmaf(x[t * ldx + 2 * c2], w0, acc[t]);
					acc[t] = fmaf(x[t * ldx + 2 * c2 + 1], w1, acc[t]);
				}
		}
	} else { /* Q4 */
		q4_sums<LT>(acc, nt, [&](int t, int64_t c) { return x[t * ldx + c]; }, (const uint8_t *)w, so, r, cols, lg,
		            lane);
	}
#pragma unroll
	for (int t = 0; t < LT; t++)
		acc[t] = warp_sum(acc[t]);
}

template <int K>
__global__ void k_linear(float *y, const float *x, const void *w,
                         const float *so, const int32_t *ids, int64_t n,
                         int64_t nout, int64_t cols, int lg)
{
	int lane = threadIdx.x & 31;
	int64_t rr = (int64_t)blockIdx.x * LW + (threadIdx.x >> 5);
	if (!ids && rr < nout) { /* the row's first 4 KiB towards L2 while the kernel before drains */
		int64_t rb = K == W_F32 ? cols * 4 : cols * 2;
		if (128 * (int64_t)lane < rb)
			pdl_prefetch_l2((const char *)w + rr * rb + 128 * lane);
	}
	pdl_wait();
	pdl_launch();
	if (rr >= nout)
		return;
	int64_t r = ids ? ids[rr] : rr;
	float acc[LT];
	for (int64_t t0 = (int64_t)blockIdx.y * LT; t0 < n; t0 += (int64_t)gridDim.y * LT) {
		int nt = n - t0 < LT ? (int)(n - t0) : LT;
		lin_row<K>(acc, nt, x + t0 * cols, cols, w, so, r, cols, lg, lane);
		if (lane == 0)
			for (int t = 0; t < nt; t++)
				y[(t0 + t) * nout + rr] = acc[t];
	}
}

/* k_linear_f32_tiled: the f32 product for batches over QT tokens, tiled as
 * k_linear_q4_tiled is (a warp RW rows, the block one tile of QT tokens on
 * grid.y, x staged QK columns at a time; lane l reads columns l, l+32, ...
 * of the stage, on its own bank): each (token, row) accumulator takes lane
 * l's columns in order then the shuffle tree, k_linear's arithmetic, so the
 * kernel chosen never changes a row's bits. */
__global__ void __launch_bounds__(32 * LW) k_linear_f32_tiled(float *y, const float *x, const float *w,
                                                              const int32_t *ids, int64_t n, int64_t nout,
                                                              int64_t cols)
{
	__shared__ float sx[QT][QK];
	int lane = threadIdx.x & 31;
	int64_t r0 = ((int64_t)blockIdx.x * LW + (threadIdx.x >> 5)) * RW;
	int64_t t0 = (int64_t)blockIdx.y * QT;
	int nt = n - t0 < QT ? (int)(n - t0) : QT;
	if (!ids && r0 < nout) { /* the first stage's weights towards L2 while the kernel before drains */
#pragma unroll
		for (int k = 0; k < RW; k++)
			if (r0 + k < nout && 32 * (int64_t)lane < cols)
				pdl_prefetch_l2(w + (r0 + k) * cols + 32 * lane);
	}
	pdl_wait();
	pdl_launch();
	int32_t row[RW];
#pragma unroll
	for (int k = 0; k < RW; k++) {
		int64_t rr = r0 + k;
		row[k] = rr < nout ? (ids ? ids[rr] : (int32_t)rr) : 0;
	}
	float acc[RW][QT];
#pragma unroll
	for (int k = 0; k < RW; k++)
#pragma unroll
		for (int t = 0; t < QT; t++)
			acc[k][t] = 0.0f;
	for (int64_t c0 = 0; c0 < cols; c0 += QK) {
		int64_t wd = cols - c0 < QK ? cols - c0 : QK;
		__syncthreads();
		for (int e = threadIdx.x; e < QT * QK; e += blockDim.x) {
			int t = e / QK, c = e % QK;
			sx[t][c] = t < nt && c < wd ? x[(t0 + t) * cols + c0 + c] : 0.0f;
		}
		__syncthreads();
		if (r0 >= nout)
			continue;
#pragma unroll 2
		for (int64_t c = lane; c < wd; c += 32) {
			float wv[RW], xv[QT];
#pragma unroll
			for (int k = 0; k < RW; k++)
				wv[k] = __ldg(w + (int64_t)row[k] * cols + c0 + c);
#pragma unroll
			for (int t = 0; t < QT; t++)
				xv[t] = sx[t][c];
#pragma unroll
			for (int k = 0; k < RW; k++)
#pragma unroll
				for (int t = 0; t < QT; t++)
					acc[k][t] = fmaf(xv[t], wv[k], acc[k][t]);
		}
	}
#pragma unroll
	for (int k = 0; k < RW; k++) {
		int64_t rr = r0 + k;
#pragma unroll
		for (int t = 0; t < QT; t++) {
			float v = warp_sum(acc[k][t]);
			if (lane == 0 && rr < nout && t < nt)
				y[(t0 + t) * nout + rr] = v;
		}
	}
}

/* k_linear_small: the f32 product of a matrix of at most SMALL_ROWS rows
 * (AltUp's router and coefficients), for every batch: one block per (row,
 * token), warp w summing the w-th eighth of the columns (lane l: columns
 * l, l+32, ... of it, in order, then the shuffle tree), the eight warp
 * sums added in warp order. Fixed by the shapes alone, so a row's bits do
 * not depend on its batch. */
#define SMALL_ROWS 16

__global__ void __launch_bounds__(32 * LW) k_linear_small(float *y, const float *x, const float *w,
                                                          const int32_t *ids, int64_t nout, int64_t cols)
{
	__shared__ float red[LW];
	int lane = threadIdx.x & 31, wi = threadIdx.x >> 5;
	int64_t rr = blockIdx.x, t = blockIdx.y;
	int64_t part = ((cols + LW - 1) / LW + 31) / 32 * 32;
	int64_t lo = wi * part, hi = lo + part < cols ? lo + part : cols;
	if (!ids && lo + 32 * lane < hi) /* the warp's first 4 KiB towards L2 while the kernel before drains */
		pdl_prefetch_l2(w + rr * cols + lo + 32 * lane);
	pdl_wait();
	pdl_launch();
	int64_t r = ids ? ids[rr] : rr;
	const float *wr = w + r * cols, *xr = x + t * cols;
	float acc = 0.0f;
#pragma unroll 8
	for (int64_t c = lo + lane; c < hi; c += 32)
		acc = fmaf(xr[c], __ldg(wr + c), acc);
	acc = warp_sum(acc);
	if (lane == 0)
		red[wi] = acc;
	__syncthreads();
	if (threadIdx.x == 0) {
		float v = 0.0f;
		for (int k = 0; k < LW; k++)
			v += red[k];
		y[t * nout + rr] = v;
	}
}

/* k_linear_q4: the q4 product with the x of QT tokens staged in shared
 * memory, QK columns at a time, for the block's 8 rows (one warp each).
 * Lane l still takes the 32-column blocks l, l+32, ... in order into one
 * accumulator per token, then the shuffle tree: lin_row's arithmetic, bit
 * for bit, with coalesced x loads (a pad word per 32 keeps the lanes' reads
 * on distinct banks) and each weight row read once per QT tokens. */

__global__ void __launch_bounds__(32 * LW) k_linear_q4(float *y, const float *x, const uint8_t *q,
                                                       const float *so, const int32_t *ids, int64_t n,
                                                       int64_t nout, int64_t cols, int lg)
{
	__shared__ float sx[QT][QK + QK / 32];
	int lane = threadIdx.x & 31;
	int64_t rr = (int64_t)blockIdx.x * LW + (threadIdx.x >> 5);
	bool live = rr < nout;
	/* The lane's first 32-column block of the row (weights: no kernel
	 * writes them) is requested before the wait, so its load overlaps the
	 * kernel before; with ids the row is not known until then. */
	bool pre = live && !ids && 32 * (int64_t)lane < cols;
	uint32_t qv0[4];
	float sc0 = 0.0f, off0 = 0.0f;
	if (pre) {
		const uint32_t *p = (const uint32_t *)(q + rr * (cols / 2) + 16 * lane);
		const float *sr = so + rr * ((cols >> lg) * 2) + ((32 * (int64_t)lane) >> lg) * 2;
		qv0[0] = __ldg(p), qv0[1] = __ldg(p + 1), qv0[2] = __ldg(p + 2), qv0[3] = __ldg(p + 3);
		sc0 = __ldg(sr), off0 = __ldg(sr + 1);
	}
	pdl_wait();
	pdl_launch();
	int64_t r = live ? (ids ? ids[rr] : rr) : 0;
	const uint8_t *qr = q + r * (cols / 2);
	const float *sr = so + r * ((cols >> lg) * 2);
	for (int64_t t0 = 0; t0 < n; t0 += QT) {
		int nt = n - t0 < QT ? (int)(n - t0) : QT;
		float acc[QT];
#pragma unroll
		for (int t = 0; t < QT; t++)
			acc[t] = 0.0f;
		for (int64_t c0 = 0; c0 < cols; c0 += QK) {
			int64_t w = cols - c0 < QK ? cols - c0 : QK;
			__syncthreads();
			for (int e = threadIdx.x; e < nt * QK; e += blockDim.x) {
				int t = e / QK, c = e % QK;
				if (c < w)
					sx[t][c + (c >> 5)] = x[(t0 + t) * cols + c0 + c];
			}
			__syncthreads();
			int64_t j = c0 + 32 * (int64_t)lane;
			if (live && j < cols) {
				uint32_t qv[4];
				float sc, off;
				if (pre && t0 == 0 && c0 == 0) {
					qv[0] = qv0[0], qv[1] = qv0[1], qv[2] = qv0[2], qv[3] = qv0[3];
					sc = sc0, off = off0;
				} else {
					const uint32_t *p = (const uint32_t *)(qr + j / 2);
					qv[0] = __ldg(p), qv[1] = __ldg(p + 1), qv[2] = __ldg(p + 2), qv[3] = __ldg(p + 3);
					int64_t g2 = (j >> lg) * 2;
					sc = __ldg(sr + g2), off = __ldg(sr + g2 + 1);
				}
				const int base = 33 * lane;
#pragma unroll
				for (int b = 0; b < 32; b++) {
					int byte = b & 15;
					uint32_t v = (qv[byte >> 2] >> (8 * (byte & 3))) & 0xffu;
					float nib = (float)(b < 16 ? (v & 15u) : (v >> 4));
					float wv = fmaf(sc, nib, off);
#pragma unroll
					for (int t = 0; t < QT; t++)
						if (t < nt)
							acc[t] = fmaf(sx[t][base + b], wv, acc[t]);
				}
			}
		}
		if (live) {
#pragma unroll
			for (int t = 0; t < QT; t++)
				acc[t] = warp_sum(acc[t]);
			if (lane == 0)
				for (int t = 0; t < nt; t++)
					y[(t0 + t) * nout + rr] = acc[t];
		}
	}
}

/* k_gemv_q4: the q4 product for a few tokens (NT, at most QT) whose x fits
 * in shared memory whole: staged once per block, then each warp takes one
 * row with no further barrier, its lane's 32-column blocks loaded GB at a
 * time before any is used (many loads in flight: the product is a stream
 * of the weights). Lane l takes blocks l, l+32, ... in order into one
 * accumulator per token, weight by weight, then the shuffle tree:
 * k_linear_q4's arithmetic, bit for bit. */
#define GB 4

/* gemv_load: the GB blocks of row r from column j0 on (lane's), into
 * registers. */
__device__ __forceinline__ void gemv_load(uint4 *qv, float *sc, float *off, const uint8_t *qr, const float *sr,
                                          int64_t j0, int64_t cols, int lg)
{
#pragma unroll
	for (int i = 0; i < GB; i++) {
		int64_t j = j0 + 1024 * i;
		if (j < cols) {
			qv[i] = __ldg((const uint4 *)(qr + j / 2));
			sc[i] = __ldg(sr + (j >> lg) * 2), off[i] = __ldg(sr + (j >> lg) * 2 + 1);
		}
	}
}

template <int NT>
__global__ void __launch_bounds__(32 * LW) k_gemv_q4(float *y, const float *x, const uint8_t *q, const float *so,
                                                     const int32_t *ids, int64_t nout, int64_t cols, int lg, int R)
{
	extern __shared__ float gx[]; /* [NT][cols + cols/32] */
	int64_t ld = cols + cols / 32;
	int lane = threadIdx.x & 31;
	/* The first row's first blocks are requested before x is staged, so
	 * the two waits overlap; without ids, before pdl_wait too (weights: no
	 * kernel writes them), so they overlap the kernel before as well. */
	uint4 qv[GB];
	float sc[GB], off[GB];
	int64_t rr0 = (int64_t)blockIdx.x * R * LW + (threadIdx.x >> 5);
	if (!ids && rr0 < nout)
		gemv_load(qv, sc, off, q + rr0 * (cols / 2), so + rr0 * ((cols >> lg) * 2), 32 * (int64_t)lane, cols, lg);
	pdl_wait();
	pdl_launch();
	if (ids && rr0 < nout) {
		int64_t r = ids[rr0];
		gemv_load(qv, sc, off, q + r * (cols / 2), so + r * ((cols >> lg) * 2), 32 * (int64_t)lane, cols, lg);
	}
	{ /* x staged in float4s, four loads in flight per thread */
		const float4 *x4 = (const float4 *)x;
		int64_t n4 = NT * cols / 4;
		for (int64_t e0 = threadIdx.x; e0 < n4; e0 += 4 * (int64_t)blockDim.x) {
			float4 v[4];
#pragma unroll
			for (int u = 0; u < 4; u++) {
				int64_t e = e0 + (int64_t)u * blockDim.x;
				if (e < n4)
					v[u] = __ldg(x4 + e);
			}
#pragma unroll
			for (int u = 0; u < 4; u++) {
				int64_t e = e0 + (int64_t)u * blockDim.x;
				if (e < n4) {
					int64_t f = 4 * e, t = f / cols, c = f % cols;
					float *d = gx + t * ld + c + (c >> 5);
					d[0] = v[u].x, d[1] = v[u].y, d[2] = v[u].z, d[3] = v[u].w;
				}
			}
		}
	}
	__syncthreads();
	for (int k = 0; k < R; k++) {
		int64_t rr = ((int64_t)blockIdx.x * R + k) * LW + (threadIdx.x >> 5);
		if (rr >= nout)
			return;
		int64_t r = ids ? ids[rr] : rr;
		const uint8_t *qr = q + r * (cols / 2);
		const float *sr = so + r * ((cols >> lg) * 2);
		float acc[NT];
#pragma unroll
		for (int t = 0; t < NT; t++)
			acc[t] = 0.0f;
		for (int64_t j0 = 32 * (int64_t)lane; j0 < cols; j0 += 1024 * GB) {
			if (k > 0 || j0 != 32 * (int64_t)lane)
				gemv_load(qv, sc, off, qr, sr, j0, cols, lg);
#pragma unroll
			for (int i = 0; i < GB; i++) {
				int64_t j = j0 + 1024 * i;
				if (j >= cols)
					break;
				uint32_t w4[4] = {qv[i].x, qv[i].y, qv[i].z, qv[i].w};
				const float *xs = gx + j + (j >> 5);
#pragma unroll
				for (int b = 0; b < 32; b++) {
					int byte = b & 15;
					uint32_t v = (w4[byte >> 2] >> (8 * (byte & 3))) & 0xffu;
					float nib = (float)(b < 16 ? (v & 15u) : (v >> 4));
					float wv = fmaf(sc[i], nib, off[i]);
#pragma unroll
					for (int t = 0; t < NT; t++)
						acc[t] = fmaf(xs[t * ld + b], wv, acc[t]);
				}
			}
		}
#pragma unroll
		for (int t = 0; t < NT; t++) {
			float v = warp_sum(acc[t]);
			if (lane == 0)
				y[t * nout + rr] = v;
		}
	}
}

/* gemv_q4: k_gemv_q4 for n tokens where it applies; false otherwise. */
static bool gemv_q4(vd_stream *s, float *y, const float *x, vd_tensor w, const int32_t *ids, int64_t n,
                    int64_t nout)
{
	int64_t cols = w.cols;
	size_t smem = (size_t)n * (size_t)(cols + cols / 32) * sizeof(float);
	if (n < 1 || n > QT || smem > (size_t)st_of(s->b)->smem_optin || ((uintptr_t)w.data & 15) != 0 ||
	    ((uintptr_t)x & 15) != 0 || (cols / 2) % 16 != 0)
		return false;
	/* Rows per warp: enough blocks to fill the GPU, each staging x once
	 * for as many rows as that allows. */
	int R = nout >= 131072 ? 8 : nout >= 32768 ? 4 : nout >= 8192 ? 2 : 1;
	dim3 grid(blocks_for(nout, LW * R)), block(32 * LW);
	const uint8_t *q = (const uint8_t *)w.data;
	const float *so = (const float *)w.aux;
	int lg = lg2(w.group);
#define GEMV_CASE(N)                                                                    \
	case N:                                                                         \
		launch(s, k_gemv_q4<N>, grid, block, smem, y, x, q, so, ids, nout, cols, lg, R); \
		break;
	switch (n) {
		GEMV_CASE(1)
		GEMV_CASE(2)
		GEMV_CASE(3)
		GEMV_CASE(4)
		GEMV_CASE(5)
		GEMV_CASE(6)
		GEMV_CASE(7)
		GEMV_CASE(8)
	}
#undef GEMV_CASE
	return true;
}

/* k_linear_q4_tiled: the q4 product for batches over QT tokens. A warp
 * takes RW rows and the block one tile of QT tokens (grid.y), so every x
 * value read from shared memory feeds RW rows and every dequantised weight
 * QT tokens. Each (token, row) accumulator still takes lane l's 32-column
 * blocks l, l+32, ... in order, weight by weight, then the shuffle tree:
 * k_linear_q4's arithmetic, so the kernel chosen for a batch never changes
 * a row's bits. */

/* tiled_load: lane's 32-column block from column j of the RW rows. */
__device__ __forceinline__ void tiled_load(uint32_t (*qv)[4], float *sc, float *off, const uint8_t *q,
                                           const float *so, const int32_t *row, int64_t j, int64_t cols, int lg,
                                           int64_t gpr)
{
	int64_t g2 = (j >> lg) * 2;
#pragma unroll
	for (int k = 0; k < RW; k++) {
		const uint32_t *p = (const uint32_t *)(q + (int64_t)row[k] * (cols / 2) + j / 2);
		const float *sr = so + (int64_t)row[k] * gpr + g2;
		qv[k][0] = __ldg(p), qv[k][1] = __ldg(p + 1), qv[k][2] = __ldg(p + 2), qv[k][3] = __ldg(p + 3);
		sc[k] = __ldg(sr), off[k] = __ldg(sr + 1);
	}
}

__global__ void __launch_bounds__(32 * LW) k_linear_q4_tiled(float *y, const float *x, const uint8_t *q,
                                                             const float *so, const int32_t *ids, int64_t n,
                                                             int64_t nout, int64_t cols, int lg)
{
	__shared__ float sx[QT][QK + QK / 32];
	int lane = threadIdx.x & 31;
	int64_t r0 = ((int64_t)blockIdx.x * LW + (threadIdx.x >> 5)) * RW;
	int64_t t0 = (int64_t)blockIdx.y * QT;
	int nt = n - t0 < QT ? (int)(n - t0) : QT;
	int64_t gpr = (cols >> lg) * 2;
	/* The first stage's weights (lane's block of its RW rows) are loaded
	 * before the wait when the rows are known without ids (weights: no
	 * kernel writes them), so the loads overlap the kernel before. */
	int32_t row[RW];
	uint32_t qv[RW][4];
	float sc[RW], off[RW];
	bool pre = !ids && r0 < nout && 32 * (int64_t)lane < cols;
	if (pre) {
#pragma unroll
		for (int k = 0; k < RW; k++)
			row[k] = r0 + k < nout ? (int32_t)(r0 + k) : 0;
		tiled_load(qv, sc, off, q, so, row, 32 * (int64_t)lane, cols, lg, gpr);
	}
	pdl_wait();
	pdl_launch();
#pragma unroll
	for (int k = 0; k < RW; k++) {
		int64_t rr = r0 + k;
		row[k] = rr < nout ? (ids ? ids[rr] : (int32_t)rr) : 0;
	}
	float acc[RW][QT];
#pragma unroll
	for (int k = 0; k < RW; k++)
#pragma unroll
		for (int t = 0; t < QT; t++)
			acc[k][t] = 0.0f;
	const int base = 33 * lane;
	for (int64_t c0 = 0; c0 < cols; c0 += QK) {
		int64_t w = cols - c0 < QK ? cols - c0 : QK;
		__syncthreads();
		for (int e = threadIdx.x; e < QT * QK; e += blockDim.x) {
			int t = e / QK, c = e % QK;
			sx[t][c + (c >> 5)] = t < nt && c < w ? x[(t0 + t) * cols + c0 + c] : 0.0f;
		}
		__syncthreads();
		int64_t j = c0 + 32 * (int64_t)lane;
		if (r0 >= nout || j >= cols)
			continue;
		if (!pre || c0 != 0)
			tiled_load(qv, sc, off, q, so, row, j, cols, lg, gpr);
#pragma unroll
		for (int b = 0; b < 32; b++) {
			float xv[QT];
#pragma unroll
			for (int t = 0; t < QT; t++)
				xv[t] = sx[t][base + b];
			int byte = b & 15;
#pragma unroll
			for (int k = 0; k < RW; k++) {
				uint32_t v = (qv[k][byte >> 2] >> (8 * (byte & 3))) & 0xffu;
				float nib = (float)(b < 16 ? (v & 15u) : (v >> 4));
				float wv = fmaf(sc[k], nib, off[k]);
#pragma unroll
				for (int t = 0; t < QT; t++)
					acc[k][t] = fmaf(xv[t], wv, acc[k][t]);
			}
		}
	}
#pragma unroll
	for (int k = 0; k < RW; k++) {
		int64_t rr = r0 + k;
#pragma unroll
		for (int t = 0; t < QT; t++) {
			float v = warp_sum(acc[k][t]);
			if (lane == 0 && rr < nout && t < nt)
				y[(t0 + t) * nout + rr] = v;
		}
	}
}

static bool grow_scratch(vd_stream *s, void **p, size_t *n, size_t bytes, size_t cap);

static void linear_ids(vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor w,
                       const int32_t *ids, int64_t nout)
{
	int64_t n = x.rows, cols = w.cols;
	if (n <= 0 || nout <= 0)
		return;
	/* Token tiles across grid.y: enough blocks for a batch. */
	int64_t tiles = (n + LT - 1) / LT, gy = nout >= 4096 ? 1 : (4096 / (nout > 0 ? nout : 1));
	dim3 grid(blocks_for(nout, LW), (unsigned)std::min<int64_t>(std::min<int64_t>(tiles, gy < 1 ? 1 : gy), 65535)),
	    block(32 * LW);
	const float *xd = (const float *)x.data;
	float *yd = (float *)y.data;
	switch (w.dtype) {
	case VD_F32:
		if (w.rows <= SMALL_ROWS && cols >= 32 * LW && n <= 65535)
			launch(s, k_linear_small, dim3((unsigned)nout, (unsigned)n), block, 0, yd, xd, (const float *)w.data, ids,
			                                                                     nout, cols);
		else if (n > QT && nout >= 64)
			launch(s, k_linear_f32_tiled, dim3(blocks_for(nout, LW * RW), (unsigned)((n + QT - 1) / QT)), block, 0,
			    yd, xd, (const float *)w.data, ids, n, nout, cols);
		else
			launch(s, k_linear<W_F32>, grid, block, 0, yd, xd, w.data, nullptr, ids, n, nout, cols, 0);
		break;
	case VD_BF16:
		if (cols % 2 == 0 && ((uintptr_t)w.data & 3) == 0)
			launch(s, k_linear<W_BF16P>, grid, block, 0, yd, xd, w.data, nullptr, ids, n, nout, cols, 0);
		else
			launch(s, k_linear<W_BF16>, grid, block, 0, yd, xd, w.data, nullptr, ids, n, nout, cols, 0);
		break;
	case VD_Q4:
		if (((uintptr_t)w.data & 3) != 0 || cols % 32 != 0) {
			fail(s, VDC_EDTYPE);
			return;
		}
		if (q4_mma_fits(w.data, cols, w.group)) {
			size_t pb = q4_mma_part_bytes(n, nout, cols);
			if (pb && !grow_scratch(s, &s->qpart, &s->qpart_n, pb, pb))
				return;
			check(s, q4_mma(s->st, pdl_of(s), yd, xd, (const uint8_t *)w.data, (const float *)w.aux, ids, n, nout,
			                cols, lg2(w.group), pb ? (float *)s->qpart : nullptr));
			return;
		}
		if (n > QT) {
			dim3 tg(blocks_for(nout, LW * RW), (unsigned)((n + QT - 1) / QT));
			launch(s, k_linear_q4_tiled, tg, block, 0, yd, xd, (const uint8_t *)w.data, (const float *)w.aux, ids, n,
			                                           nout, cols, lg2(w.group));
		} else if (!gemv_q4(s, yd, xd, w, ids, n, nout))
			launch(s, k_linear_q4, grid.x, block, 0, yd, xd, (const uint8_t *)w.data, (const float *)w.aux, ids, n,
			                                       nout, cols, lg2(w.group));
		break;
	default:
		fail(s, VDC_EDTYPE);
		return;
	}
	launched(s);
}

/* ---- sparse MLP ---- */

#define SPB 1024 /* threads of a select block: 8 chunks of E2B's 8,192 gates */
#define SPD 32   /* warps of a down block: the survivors' sum split 32 ways */

/* k_sp_select: one block a token. cut = mean + std·z of g_t; survivors i
 * (g_i − cut > 0) compacted in increasing i: idx[k] = i, g[k] = g_i − cut;
 * cnt[t] their number. */
__global__ void k_sp_select(float *g, int32_t *idx, int32_t *cnt, int64_t inter,
                            float z)
{
	__shared__ float red[32];
	__shared__ int wc[SPB / 32];
	pdl_wait();
	pdl_launch();
	int64_t t = blockIdx.x;
	float *gr = g + t * inter;
	int32_t *ir = idx + t * inter;
	float a = 0.0f;
#pragma unroll 8
	for (int64_t i = threadIdx.x; i < inter; i += SPB)
		a += gr[i];
	float mu = block_sum(a, red) / (float)inter;
	a = 0.0f;
#pragma unroll 8
	for (int64_t i = threadIdx.x; i < inter; i += SPB) {
		float d = gr[i] - mu;
		a = fmaf(d, d, a);
	}
	float var = block_sum(a, red) / (float)inter;
	float cut = mu + (float)sqrt((double)var) * z;
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
	int base = 0;
	for (int64_t i0 = 0; i0 < inter; i0 += SPB) {
		int64_t i = i0 + threadIdx.x;
		float v = i < inter ? gr[i] - cut : 0.0f;
		bool keep = i < inter && v > 0;
		unsigned m = __ballot_sync(0xffffffffu, keep);
		__syncthreads(); /* every g of this chunk read before any write */
		if (lane == 0)
			wc[w] = __popc(m);
		__syncthreads();
		int before = base;
		for (int k = 0; k < w; k++)
			before += wc[k];
		int total = 0;
		for (int k = 0; k < SPB / 32; k++)
			total += wc[k];
		if (keep) {
			int at = before + __popc(m & ((1u << lane) - 1u));
			ir[at] = (int32_t)i;
			gr[at] = v;
		}
		base += total;
		__syncthreads();
	}
	if (threadIdx.x == 0)
		cnt[t] = base;
}

/* k_sp_up: h[k] = gelu(g[k])·(x_t · up[idx[k]]) for the survivors, one
 * warp a survivor, the dot product exactly Linear's (q4_sums, then the
 * shuffle tree), x_t read from shared memory: staged once a block with a
 * word of padding every 32, so that the lanes' 32-column blocks fall in
 * distinct banks. */
__global__ void k_sp_up(float *h, const float *g, const int32_t *idx,
                        const int32_t *cnt, const float *x, const void *uq,
                        const float *uso, int64_t inter, int64_t d, int lg)
{
	extern __shared__ float xs[]; /* [d + d/32] */
	pdl_wait();
	pdl_launch();
	int64_t t = blockIdx.y;
	int lane = threadIdx.x & 31;
	int64_t nk = cnt[t];
	if ((int64_t)blockIdx.x * LW >= nk)
		return; /* no survivor for this block: the whole block leaves */
	for (int64_t c = threadIdx.x; c < d; c += blockDim.x)
		xs[c + (c >> 5)] = x[t * d + c];
	__syncthreads();
	for (int64_t k = (int64_t)blockIdx.x * LW + (threadIdx.x >> 5); k < nk;
	     k += (int64_t)gridDim.x * LW) {
		float acc[LT];
#pragma unroll
		for (int u = 0; u < LT; u++)
			acc[u] = 0.0f;
		q4_sums<LT>(acc, 1, [&](int, int64_t c) { return xs[c + (c >> 5)]; }, (const uint8_t *)uq, uso,
		            idx[t * inter + k], d, lg, lane);
		acc[0] = warp_sum(acc[0]);
		if (lane == 0)
			h[t * inter + k] = d_gelu(g[t * inter + k]) * acc[0];
	}
}

/* k_sp_down: y[t, c] = Σ_k h_k·downᵀ[idx_k, c]: survivor class w (k ≡ w
 * mod SPD) sums its survivors in increasing k, one fma each on the
 * weight fmaf(sc, nib, off), and the SPD partial sums add in class order:
 * an order fixed by the token's survivors alone. A block is SPD_COLS
 * columns of one token and SPD warps, warp w class w; lane l takes the
 * 4-byte word l of the block's slice of a row (columns 4q..4q + 3 and
 * 16 + 4q.. of its 32-column run, q = l & 3: eight columns, one group),
 * its survivors SPK at a time (their indices and h, then their words and
 * scales, all requested before the sums). */
#define SPD_COLS 256
#define SPK 8

__global__ void __launch_bounds__(32 * SPD) k_sp_down(float *y, const float *h, const int32_t *idx,
                                                      const int32_t *cnt, const uint8_t *dq, const float *dso,
                                                      int64_t inter, int64_t d, int lg)
{
	__shared__ float part[SPD][SPD_COLS];
	pdl_wait();
	pdl_launch();
	int64_t t = blockIdx.y;
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
	int64_t c0 = (int64_t)blockIdx.x * SPD_COLS;
	int64_t word = c0 / 8 + lane;                 /* the lane's 4-byte word of a row */
	int64_t run = (word * 8) & ~(int64_t)31;      /* its 32-column run */
	int64_t ca = run + 4 * (lane & 3), cb = ca + 16; /* its columns ca.., cb.. */
	bool on = ca < d;
	int64_t nk = cnt[t], ldw = d / 8, ldso = (d >> lg) * 2, so = (ca >> lg) * 2;
	const int32_t *ir = idx + t * inter;
	const float *hr = h + t * inter;
	const uint32_t *dw = (const uint32_t *)dq;
	float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
	for (int64_t k0 = w; k0 < nk; k0 += (int64_t)SPK * SPD) {
		int64_t ii[SPK];
		float hv[SPK];
#pragma unroll
		for (int j = 0; j < SPK; j++) {
			int64_t k = k0 + (int64_t)j * SPD;
			ii[j] = k < nk ? ir[k] : -1;
			hv[j] = k < nk ? hr[k] : 0.0f;
		}
		uint32_t v[SPK];
		float sc[SPK], of[SPK];
#pragma unroll
		for (int j = 0; j < SPK; j++) {
			bool live = ii[j] >= 0 && on;
			v[j] = live ? __ldg(dw + ii[j] * ldw + word) : 0u;
			sc[j] = live ? __ldg(dso + ii[j] * ldso + so) : 0.0f;
			of[j] = live ? __ldg(dso + ii[j] * ldso + so + 1) : 0.0f;
		}
#pragma unroll
		for (int j = 0; j < SPK; j++) {
			if (ii[j] < 0)
				break;
#pragma unroll
			for (int e = 0; e < 4; e++) {
				float lo = (float)((v[j] >> (8 * e)) & 15u), hi = (float)((v[j] >> (8 * e + 4)) & 15u);
				acc[e] = fmaf(hv[j], fmaf(sc[j], lo, of[j]), acc[e]);
				acc[4 + e] = fmaf(hv[j], fmaf(sc[j], hi, of[j]), acc[4 + e]);
			}
		}
	}
#pragma unroll
	for (int e = 0; e < 4; e++) {
		part[w][ca - c0 + e] = acc[e];
		part[w][cb - c0 + e] = acc[4 + e];
	}
	__syncthreads();
	for (int i = threadIdx.x; i < SPD_COLS; i += 32 * SPD) {
		int64_t c = c0 + i;
		if (c >= d)
			continue;
		float sum = part[0][i];
		for (int k = 1; k < SPD; k++)
			sum += part[k][i];
		y[t * d + c] = sum;
	}
}

/* grow_scratch replaces *p (of *n bytes) by a buffer of at least bytes
 * (doubling, at most cap when bytes fits it), keeping the old one until
 * the stream is freed: a recorded graph may hold it. It cannot grow inside
 * a recording (the recording fails; the pass runs directly and grows it). */
static bool grow_scratch(vd_stream *s, void **p, size_t *n, size_t bytes, size_t cap)
{
	if (*n >= bytes)
		return true;
	if (s->recording) {
		fail(s, VDC_ESCRATCH);
		return false;
	}
	size_t want = std::max(bytes, std::min(2 * *n, cap));
	void *q = nullptr;
	if (cudaMalloc(&q, want) != cudaSuccess) {
		cudaGetLastError();
		fail(s, VDC_ESCRATCH);
		return false;
	}
	if (*p)
		s->retired.push_back(*p);
	*p = q;
	*n = want;
	return true;
}

static void *scratch(vd_stream *s, size_t bytes)
{
	if (!grow_scratch(s, &s->scratch, &s->scratch_n, bytes, (size_t)64 << 20))
		return nullptr;
	return s->scratch;
}

/* ---- row ops ---- */

#define RB 256

/* The row kernels hold a thread's first RN values in registers, loaded
 * together before the sum (the loads overlap; the sum's order is the
 * plain loop's), and reuse them for the output. */
#define RN 8

__global__ void k_rmsnorm(float *y, const float *x, const float *w, int64_t dim,
                          float eps)
{
	__shared__ float red[32];
	pdl_wait();
	pdl_launch();
	int64_t r = blockIdx.x;
	const float *xr = x + r * dim;
	float *yr = y + r * dim;
	float v[RN], wv[RN];
	int64_t i0 = threadIdx.x;
#pragma unroll
	for (int u = 0; u < RN; u++) {
		int64_t i = i0 + (int64_t)u * RB;
		v[u] = i < dim ? xr[i] : 0.0f;
		wv[u] = w && i < dim ? __ldg(w + i) : 1.0f;
	}
	float a = 0.0f;
#pragma unroll
	for (int u = 0; u < RN; u++)
		if (i0 + (int64_t)u * RB < dim)
			a = fmaf(v[u], v[u], a);
	for (int64_t i = i0 + RN * RB; i < dim; i += RB)
		a = fmaf(xr[i], xr[i], a);
	float ss = block_sum(a, red);
	float inv = (float)(1.0 / sqrt((double)(ss / (float)dim + eps)));
#pragma unroll
	for (int u = 0; u < RN; u++) {
		int64_t i = i0 + (int64_t)u * RB;
		if (i < dim)
			yr[i] = w ? (v[u] * inv) * wv[u] : v[u] * inv;
	}
	for (int64_t i = i0 + RN * RB; i < dim; i += RB)
		yr[i] = w ? (xr[i] * inv) * w[i] : xr[i] * inv;
}

__global__ void k_row_rms(float *out, const float *x, int64_t dim, float floor)
{
	__shared__ float red[32];
	pdl_wait();
	pdl_launch();
	int64_t r = blockIdx.x;
	const float *xr = x + r * dim;
	float v[RN];
	int64_t i0 = threadIdx.x;
#pragma unroll
	for (int u = 0; u < RN; u++) {
		int64_t i = i0 + (int64_t)u * RB;
		v[u] = i < dim ? xr[i] : 0.0f;
	}
	float a = 0.0f;
#pragma unroll
	for (int u = 0; u < RN; u++)
		if (i0 + (int64_t)u * RB < dim)
			a = fmaf(v[u], v[u], a);
	for (int64_t i = i0 + RN * RB; i < dim; i += RB)
		a = fmaf(xr[i], xr[i], a);
	float m = block_sum(a, red) / (float)dim;
	if (m < floor)
		m = floor;
	if (threadIdx.x == 0)
		out[r] = (float)sqrt((double)m);
}

/* k_norm_add: k_rmsnorm of x (written back), then y = a + x and, with b,
 * y = (y + b)·c: the separate kernels' arithmetic in one launch. */
__global__ void k_norm_add(float *y, float *x, const float *w, const float *a, const float *b, int64_t dim,
                           float eps, float c)
{
	__shared__ float red[32];
	pdl_wait();
	pdl_launch();
	int64_t r = blockIdx.x;
	float *xr = x + r * dim, *yr = y + r * dim;
	const float *ar = a + r * dim, *br = b ? b + r * dim : nullptr;
	float v[RN], wv[RN], av[RN], bv[RN];
	int64_t i0 = threadIdx.x;
#pragma unroll
	for (int u = 0; u < RN; u++) { /* every load of the first RN columns at once (y may be a: read first) */
		int64_t i = i0 + (int64_t)u * RB;
		v[u] = i < dim ? xr[i] : 0.0f;
		wv[u] = w && i < dim ? __ldg(w + i) : 1.0f;
		av[u] = i < dim ? ar[i] : 0.0f;
		bv[u] = br && i < dim ? br[i] : 0.0f;
	}
	float acc = 0.0f;
#pragma unroll
	for (int u = 0; u < RN; u++)
		if (i0 + (int64_t)u * RB < dim)
			acc = fmaf(v[u], v[u], acc);
	for (int64_t i = i0 + RN * RB; i < dim; i += RB)
		acc = fmaf(xr[i], xr[i], acc);
	float ss = block_sum(acc, red);
	float inv = (float)(1.0 / sqrt((double)(ss / (float)dim + eps)));
#pragma unroll
	for (int u = 0; u < RN; u++) {
		int64_t i = i0 + (int64_t)u * RB;
		if (i < dim) {
			float xn = w ? (v[u] * inv) * wv[u] : v[u] * inv;
			xr[i] = xn;
			float o = av[u] + xn;
			if (br)
				o = (o + bv[u]) * c;
			yr[i] = o;
		}
	}
	for (int64_t i = i0 + RN * RB; i < dim; i += RB) {
		float xn = w ? (xr[i] * inv) * w[i] : xr[i] * inv;
		xr[i] = xn;
		float o = ar[i] + xn;
		if (br)
			o = (o + br[i]) * c;
		yr[i] = o;
	}
}

/* router_out: a router block's outputs from each lane's accumulators acc
 * (one an output): each warp's sum by the shuffle tree, then thread r adds
 * output r's warp sums in warp order and writes tanh of it to y[r]. */
template <int NO>
__device__ __forceinline__ void router_out(float *y, const float *acc, float (*wsum)[LW], int64_t nout)
{
	int lane = threadIdx.x & 31, wi = threadIdx.x >> 5;
#pragma unroll
	for (int r = 0; r < NO; r++)
		if (r < nout) { /* nout is the block's: every lane shuffles */
			float sr = warp_sum(acc[r]);
			if (lane == 0)
				wsum[r][wi] = sr;
		}
	__syncthreads();
	if (threadIdx.x < nout) {
		int r = threadIdx.x;
		float sum = 0.0f;
		for (int k = 0; k < LW; k++)
			sum += wsum[r][k];
		y[r] = d_tanh(sum);
	}
}

/* coef_tail: AltUp's coefficients from the router's outputs yr [nout] of
 * a block's token (after every thread's write): cy[j] = yr · cw[j] as
 * k_linear sums it (lane l's column l from 0, the shuffle tree), then
 * + cadd when hasadd (ew add_const), warp w taking rows w, w + LW, ... */
__device__ __forceinline__ void coef_tail(const float *yr, int64_t nout, const float *cw, float *cy, int64_t ncoef,
                                          float cadd, int hasadd)
{
	__syncthreads();
	int lane = threadIdx.x & 31, wi = threadIdx.x >> 5;
	float m = lane < nout ? yr[lane] : 0.0f;
	for (int64_t j = wi; j < ncoef; j += blockDim.x >> 5) {
		float acc = lane < nout ? fmaf(m, __ldg(cw + j * nout + lane), 0.0f) : 0.0f;
		acc = warp_sum(acc);
		if (lane == 0)
			cy[j] = hasadd ? acc + cadd : acc;
	}
}

/* k_router: AltUp's router for one token a block: the row normalised
 * (k_rmsnorm) and scaled in shared memory, then each of the nout outputs
 * summed as k_linear_small sums (warp w the w-th eighth of the columns,
 * lane order, the shuffle tree, warp order), then tanh. Up to ROUT_MAX
 * outputs in one pass over the columns (each lane keeps one accumulator
 * an output, every one with the same operations in the same order as a
 * row alone), one barrier, then thread r adds output r's warp sums;
 * more outputs take them a row at a time. */
#define ROUT_MAX 8

__global__ void __launch_bounds__(RB) k_router(float *y, const float *x, const float *nw, const float *w,
                                               int64_t nout, int64_t dim, float eps, float scale, const float *cw,
                                               float *cy, int64_t ncoef, float cadd, int hasadd)
{
	extern __shared__ float fx[];
	__shared__ float red[32];
	__shared__ float wsum[ROUT_MAX][LW];
	/* The router's matrix (a weight) towards L2 while the kernel before
	 * drains: a line a thread, 32 KiB a pass. */
	for (int64_t o = 32 * (int64_t)threadIdx.x; o < nout * dim; o += 32 * RB)
		pdl_prefetch_l2(w + o);
	pdl_wait();
	pdl_launch();
	int64_t t = blockIdx.x;
	const float *xr = x + t * dim;
	float v[RN];
#pragma unroll
	for (int u = 0; u < RN; u++) { /* the loads at once; the sum in the plain loop's order */
		int64_t i = threadIdx.x + (int64_t)u * RB;
		v[u] = i < dim ? xr[i] : 0.0f;
	}
	float a = 0.0f;
#pragma unroll
	for (int u = 0; u < RN; u++) {
		int64_t i = threadIdx.x + (int64_t)u * RB;
		if (i < dim) {
			fx[i] = v[u];
			a = fmaf(v[u], v[u], a);
		}
	}
	for (int64_t i = threadIdx.x + RN * RB; i < dim; i += RB) {
		float x1 = xr[i];
		fx[i] = x1;
		a = fmaf(x1, x1, a);
	}
	float ss = block_sum(a, red);
	float inv = (float)(1.0 / sqrt((double)(ss / (float)dim + eps)));
	for (int64_t i = threadIdx.x; i < dim; i += RB)
		fx[i] = (nw ? (fx[i] * inv) * nw[i] : fx[i] * inv) * scale;
	__syncthreads();
	int lane = threadIdx.x & 31, wi = threadIdx.x >> 5;
	int64_t part = ((dim + LW - 1) / LW + 31) / 32 * 32;
	int64_t lo = wi * part, hi = lo + part < dim ? lo + part : dim;
	if (nout <= ROUT_MAX) {
		float acc[ROUT_MAX];
#pragma unroll
		for (int r = 0; r < ROUT_MAX; r++)
			acc[r] = 0.0f;
#pragma unroll 4
		for (int64_t c = lo + lane; c < hi; c += 32) {
			float xv = fx[c];
#pragma unroll
			for (int r = 0; r < ROUT_MAX; r++)
				if (r < nout)
					acc[r] = fmaf(xv, __ldg(w + r * dim + c), acc[r]);
		}
		router_out<ROUT_MAX>(y + t * nout, acc, wsum, nout);
		if (cw)
			coef_tail(y + t * nout, nout, cw, cy + t * ncoef, ncoef, cadd, hasadd);
		return;
	}
	for (int64_t r = 0; r < nout; r++) {
		const float *wr = w + r * dim;
		float acc = 0.0f;
#pragma unroll 8
		for (int64_t c = lo + lane; c < hi; c += 32)
			acc = fmaf(fx[c], __ldg(wr + c), acc);
		acc = warp_sum(acc);
		__syncthreads();
		if (lane == 0)
			red[wi] = acc;
		__syncthreads();
		if (threadIdx.x == 0) {
			float v = 0.0f;
			for (int k = 0; k < LW; k++)
				v += red[k];
			y[t * nout + r] = d_tanh(v);
		}
	}
	if (cw)
		coef_tail(y + t * nout, nout, cw, cy + t * ncoef, ncoef, cadd, hasadd);
}

/* k_router_reg: k_router for at most RR_OUT outputs and rows of at most
 * RR_J·32 columns a warp: each lane's weights (and norm weights) are
 * loaded into registers before pdl_wait, its columns' x read at once with
 * the norm's, so no shared row and no dependent weight loads; the same
 * operations in the same order as k_router. */
#define RR_OUT 4
#define RR_J 12

__global__ void __launch_bounds__(RB) k_router_reg(float *y, const float *x, const float *nw, const float *w,
                                                   int64_t nout, int64_t dim, float eps, float scale, const float *cw,
                                                   float *cy, int64_t ncoef, float cadd, int hasadd)
{
	__shared__ float red[32];
	__shared__ float wsum[RR_OUT][LW];
	int lane = threadIdx.x & 31, wi = threadIdx.x >> 5;
	int64_t part = ((dim + LW - 1) / LW + 31) / 32 * 32;
	int64_t lo = wi * part, hi = lo + part < dim ? lo + part : dim;
	float wr[RR_J][RR_OUT], nv[RR_J], xc[RR_J];
#pragma unroll
	for (int j = 0; j < RR_J; j++) {
		int64_t c = lo + lane + 32 * j;
		bool on = c < hi;
		nv[j] = on && nw ? __ldg(nw + c) : 1.0f;
#pragma unroll
		for (int r = 0; r < RR_OUT; r++)
			wr[j][r] = on && r < nout ? __ldg(w + r * dim + c) : 0.0f;
	}
	pdl_wait();
	pdl_launch();
	int64_t t = blockIdx.x;
	const float *xr = x + t * dim;
	float v[RN];
#pragma unroll
	for (int u = 0; u < RN; u++) { /* the loads at once; the sum in the plain loop's order */
		int64_t i = threadIdx.x + (int64_t)u * RB;
		v[u] = i < dim ? xr[i] : 0.0f;
	}
#pragma unroll
	for (int j = 0; j < RR_J; j++) {
		int64_t c = lo + lane + 32 * j;
		xc[j] = c < hi ? xr[c] : 0.0f;
	}
	float a = 0.0f;
#pragma unroll
	for (int u = 0; u < RN; u++)
		if (threadIdx.x + (int64_t)u * RB < dim)
			a = fmaf(v[u], v[u], a);
	for (int64_t i = threadIdx.x + RN * RB; i < dim; i += RB)
		a = fmaf(xr[i], xr[i], a);
	float ss = block_sum(a, red);
	float inv = (float)(1.0 / sqrt((double)(ss / (float)dim + eps)));
	float acc[RR_OUT];
#pragma unroll
	for (int r = 0; r < RR_OUT; r++)
		acc[r] = 0.0f;
#pragma unroll
	for (int j = 0; j < RR_J; j++)
		if (lo + lane + 32 * j < hi) {
			float xv = (nw ? (xc[j] * inv) * nv[j] : xc[j] * inv) * scale;
#pragma unroll
			for (int r = 0; r < RR_OUT; r++)
				if (r < nout)
					acc[r] = fmaf(xv, wr[j][r], acc[r]);
		}
	router_out<RR_OUT>(y + t * nout, acc, wsum, nout);
	if (cw)
		coef_tail(y + t * nout, nout, cw, cy + t * ncoef, ncoef, cadd, hasadd);
}

/* k_scale_rows: x[r, i] *= sc[r] (sc) or w[i] (w). */
__global__ void k_scale_rows(float *x, const float *sc, const float *w,
                             int64_t rows, int64_t dim)
{
	pdl_wait();
	pdl_launch();
	int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (e >= rows * dim)
		return;
	x[e] = x[e] * (w ? w[e % dim] : sc[e / dim]);
}

__global__ void k_sparse_gelu_mul(float *g, const float *u, int64_t dim, float z)
{
	__shared__ float red[32];
	pdl_wait();
	pdl_launch();
	int64_t r = blockIdx.x;
	float *gr = g + r * dim;
	const float *ur = u + r * dim;
	float a = 0.0f;
	for (int64_t i = threadIdx.x; i < dim; i += RB)
		a += gr[i];
	float mu = block_sum(a, red) / (float)dim;
	a = 0.0f;
	for (int64_t i = threadIdx.x; i < dim; i += RB) {
		float d = gr[i] - mu;
		a = fmaf(d, d, a);
	}
	float cut = mu + (float)sqrt((double)(block_sum(a, red) / (float)dim)) * z;
	for (int64_t i = threadIdx.x; i < dim; i += RB) {
		float v = gr[i] - cut;
		if (v < 0)
			v = 0.0f;
		gr[i] = d_gelu(v) * ur[i];
	}
}

__global__ void k_ew(int op, float *y, const float *a, const float *b, int64_t n,
                     int64_t nb, float c)
{
	pdl_wait();
	pdl_launch();
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n)
		return;
	float x = a[i], r;
	switch (op) {
	case VD_EW_GELU:
		r = d_gelu(x);
		break;
	case VD_EW_GELU_MUL:
		r = d_gelu(x) * b[i];
		break;
	case VD_EW_SOFTCAP:
		r = c * d_tanh(x / c);
		break;
	case VD_EW_TANH:
		r = d_tanh(x);
		break;
	case VD_EW_ADD:
		r = x + b[i];
		break;
	case VD_EW_MUL:
		r = x * b[i];
		break;
	case VD_EW_DIV:
		r = x / b[i];
		break;
	case VD_EW_ADD_CONST:
		r = x + c;
		break;
	case VD_EW_SCALE:
		r = x * c;
		break;
	case VD_EW_ADD_REP:
		r = x + b[i % nb];
		break;
	case VD_EW_MUL_REP:
		r = x * b[i % nb];
		break;
	default: /* VD_EW_ADD_SCALED */
		r = (x + b[i]) * c;
		break;
	}
	y[i] = r;
}

/* k_rope: one thread a (token, head, pair); the angle in float32, its sine
 * and cosine in double then rounded, as the CPU does. */
__global__ void k_rope(float *x, const int32_t *pos, int64_t n, int64_t heads,
                       int64_t hd, const float *inv_freq)
{
	pdl_wait();
	pdl_launch();
	int64_t half = hd / 2;
	int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (e >= n * heads * half)
		return;
	int64_t i = e % half, th = e / half, t = th / heads;
	float f = (float)pos[t] * inv_freq[i];
	double sd, cd;
	sincos((double)f, &sd, &cd);
	float co = (float)cd, sn = (float)sd;
	float *b = x + th * hd;
	float a = b[i], bb = b[half + i];
	b[i] = a * co - bb * sn;
	b[half + i] = bb * co + a * sn;
}

/* k_norm_rope: k_rmsnorm, then k_rope (inv_freq set), then k_rows'
 * scatter to y's rows idx (y set), over a block a head (row r of width
 * hd: token r / heads), their expressions in their order; the normalised
 * head passes through shared memory to the rotation. */
__global__ void k_norm_rope(float *y, const int32_t *idx, float *x, const float *w, float eps, const int32_t *pos,
                            int64_t heads, int64_t hd, const float *inv_freq)
{
	__shared__ float red[32];
	extern __shared__ float hv[]; /* hd */
	pdl_wait();
	pdl_launch();
	int64_t r = blockIdx.x;
	float *xr = x + r * hd;
	float a = 0.0f;
	for (int64_t i = threadIdx.x; i < hd; i += RB)
		a = fmaf(xr[i], xr[i], a);
	float ss = block_sum(a, red);
	float inv = (float)(1.0 / sqrt((double)(ss / (float)hd + eps)));
	for (int64_t i = threadIdx.x; i < hd; i += RB)
		hv[i] = w ? (xr[i] * inv) * __ldg(w + i) : xr[i] * inv;
	__syncthreads();
	int64_t half = hd / 2, t = r / heads;
	float *yr = y ? y + (int64_t)idx[t] * heads * hd + (r % heads) * hd : nullptr;
	if (!inv_freq) {
		for (int64_t i = threadIdx.x; i < hd; i += RB) {
			xr[i] = hv[i];
			if (yr)
				yr[i] = hv[i];
		}
		return;
	}
	for (int64_t i = threadIdx.x; i < half; i += RB) {
		float f = (float)pos[t] * inv_freq[i];
		double sd, cd;
		sincos((double)f, &sd, &cd);
		float co = (float)cd, sn = (float)sd;
		float p = hv[i], q = hv[half + i];
		float a = p * co - q * sn, b = q * co + p * sn;
		xr[i] = a, xr[half + i] = b;
		if (yr)
			yr[i] = a, yr[half + i] = b;
	}
}

__global__ void k_altup_predict(float *pred, const float *h, const float *coef,
                                int64_t n, int64_t d)
{
	pdl_wait();
	pdl_launch();
	int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (e >= n * d)
		return;
	int64_t t = e / d, nd = n * d;
	float h0 = h[e], h1 = h[nd + e], h2 = h[2 * nd + e], h3 = h[3 * nd + e];
	float hv[4] = {h0, h1, h2, h3}, o[4];
	for (int j = 0; j < 4; j++) {
		const float *a = coef + t * 16 + 4 * j;
		float s = hv[j];
		s = s + a[0] * h0;
		s = s + a[1] * h1;
		s = s + a[2] * h2;
		s = s + a[3] * h3;
		o[j] = s;
	}
	for (int j = 0; j < 4; j++)
		pred[j * nd + e] = o[j];
}

__global__ void k_altup_correct(float *out, const float *pred, const float *act,
                                const float *cf, int64_t n, int64_t d)
{
	pdl_wait();
	pdl_launch();
	int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (e >= n * d)
		return;
	int64_t t = e / d, nd = n * d;
	float p0 = pred[e];
	float in = act[e] - p0;
	float o[4];
	for (int k = 0; k < 4; k++)
		o[k] = pred[k * nd + e] + cf[t * 4 + k] * in;
	for (int k = 0; k < 4; k++)
		out[k * nd + e] = o[k];
}

/* Paged attention in chunks of AC keys. A query's visible keys (in
 * position order, across its sequence's entries) are cut at fixed key
 * counts, AC each: block (query·head, c) takes chunk c, its scores (a warp a
 * key: lanes over d, the shuffle tree; times scale), their max m_c, e_j =
 * exp(s_j − m_c), l_c = Σ e_j and o_c = Σ e_j·v_j (a thread per output
 * element, keys in order), written as partials; a second kernel combines
 * them in chunk order: M = max m_c, w_c = exp(m_c − M), out = Σ w_c·o_c /
 * Σ w_c·l_c. Chunks past a query's keys are empty and add exact zeros, so
 * the result depends on the query's own keys only, never on the batch or
 * the grid (max_keys fixes only the number of chunk blocks launched). */
#define AB 256
#define AC 64

__device__ __forceinline__ int64_t attn_keys(const vd_attn &a, int64_t i, int64_t *lo_out, int64_t *e0_out,
                                             int64_t *e1_out)
{
	const int32_t *qpos = (const int32_t *)a.qpos.data, *qseq = (const int32_t *)a.qseq.data;
	const int32_t *sent = (const int32_t *)a.seq_ent.data;
	const int32_t *epos = (const int32_t *)a.ent_pos.data, *elen = (const int32_t *)a.ent_len.data;
	int64_t pos = qpos[i], lo = 0, s = qseq[i];
	if (a.window > 0 && pos - a.window + 1 > lo)
		lo = pos - a.window + 1;
	int64_t e0 = sent[s], e1 = sent[s + 1], nkeys = 0;
	for (int64_t e = e0; e < e1; e++) {
		int64_t p0 = epos[e], p1 = p0 + elen[e];
		int64_t first = p0 > lo ? p0 : lo, last = p1 < pos + 1 ? p1 : pos + 1;
		if (last > first)
			nkeys += last - first;
	}
	*lo_out = lo, *e0_out = e0, *e1_out = e1;
	return nkeys;
}

/* block_scan: the inclusive prefix sum of v over the block's AB threads
 * (integers: any order is exact). */
__device__ int block_scan(int v, int *ws)
{
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
	for (int o = 1; o < 32; o <<= 1) {
		int u = __shfl_up_sync(0xffffffffu, v, o);
		if (lane >= o)
			v += u;
	}
	if (lane == 31)
		ws[w] = v;
	__syncthreads();
	int before = 0;
	for (int k = 0; k < w; k++)
		before += ws[k];
	__syncthreads();
	return v + before;
}

/* k_attn_part: chunk blockIdx.y of GH query heads (of one key/value
 * group) of query i: block x = i·(hq/GH) + h0/GH. The chunk's key rows
 * are found in parallel (a scan of the entries' visible keys, then each
 * key's entry by bisection), every key row serves the GH heads, and each
 * head's scores, softmax and sums are those of a head alone. */
template <int GH>
__global__ void __launch_bounds__(AB) k_attn_part(vd_attn a, float *part, int64_t nch, int *err)
{
	__shared__ float sc[GH][AC];
	__shared__ int64_t krow[AC];
	__shared__ float red[32];
	__shared__ int ecum[AB], ws[AB / 32];
	__shared__ float smx[GH], sl[GH];
	pdl_wait();
	pdl_launch();
	int64_t per = a.hq / GH, bq = blockIdx.x, ch = blockIdx.y;
	int64_t i = bq / per, h0 = (bq % per) * GH;
	int64_t d = a.d, G = a.hq / a.hkv, g = h0 / G, ldk = a.hkv * d;
	int64_t lo, e0, e1;
	int64_t nkeys = attn_keys(a, i, &lo, &e0, &e1);
	if (nkeys > a.max_keys) {
		if (threadIdx.x == 0 && ch == 0)
			atomicExch(err, VDC_EKEYS);
		nkeys = 0;
	}
	auto pp = [&](int hh) { return part + ((i * a.hq + h0 + hh) * nch + ch) * (d + 2); };
	int64_t cs = ch * AC, ce = cs + AC < nkeys ? cs + AC : nkeys;
	if (cs >= ce) { /* empty: neutral in the combination */
		if (threadIdx.x < GH)
			pp(threadIdx.x)[0] = -INFINITY, pp(threadIdx.x)[1] = 0.0f;
		return;
	}
	{ /* the chunk's key rows in the pool, in key order */
		const int32_t *eblk = (const int32_t *)a.ent_blk.data, *epos = (const int32_t *)a.ent_pos.data;
		const int32_t *elen = (const int32_t *)a.ent_len.data;
		int64_t pos = ((const int32_t *)a.qpos.data)[i], base = 0;
		for (int64_t t0 = e0; t0 < e1 && base < ce; t0 += AB) {
			int64_t e = t0 + threadIdx.x;
			int vis = 0;
			if (e < e1) {
				int64_t p0 = epos[e], p1 = p0 + elen[e];
				int64_t first = p0 > lo ? p0 : lo, last = p1 < pos + 1 ? p1 : pos + 1;
				vis = last > first ? (int)(last - first) : 0;
			}
			int incl = block_scan(vis, ws);
			ecum[threadIdx.x] = incl;
			__syncthreads();
			int total = ecum[AB - 1];
			int64_t kk = cs + threadIdx.x;
			if (threadIdx.x < AC && kk < ce && kk >= base && kk < base + total) {
				int r = (int)(kk - base), l0 = 0, l1 = AB - 1; /* the first entry with ecum > r */
				while (l0 < l1) {
					int mid = (l0 + l1) / 2;
					if (ecum[mid] > r)
						l1 = mid;
					else
						l0 = mid + 1;
				}
				int64_t ee = t0 + l0, p0 = epos[ee], first = p0 > lo ? p0 : lo;
				krow[threadIdx.x] = eblk[ee] * a.block + (first - p0) + (r - (l0 ? ecum[l0 - 1] : 0));
			}
			base += total;
			__syncthreads();
		}
	}
	int cnt = (int)(ce - cs);
	const float *K = (const float *)a.k.data, *V = (const float *)a.v.data;
	const float *q = (const float *)a.q.data + (i * a.hq + h0) * d;
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = AB / 32;
	for (int pj = w; pj < GH * cnt; pj += nw) {
		int hh = pj / cnt, j = pj % cnt;
		const float *kr = K + krow[j] * ldk + g * d, *qh = q + hh * d;
		float acc = 0.0f;
		for (int64_t c = lane; c < d; c += 32)
			acc = fmaf(qh[c], kr[c], acc);
		acc = warp_sum(acc);
		if (lane == 0)
			sc[hh][j] = acc * a.scale;
	}
	__syncthreads();
#pragma unroll
	for (int hh = 0; hh < GH; hh++) {
		float m = threadIdx.x < cnt ? sc[hh][threadIdx.x] : -INFINITY;
		float mx = block_max(m, red);
		float ev = threadIdx.x < cnt ? d_exp(sc[hh][threadIdx.x] - mx) : 0.0f;
		__syncthreads();
		if (threadIdx.x < cnt)
			sc[hh][threadIdx.x] = ev;
		float l = block_sum(ev, red);
		if (threadIdx.x == 0)
			smx[hh] = mx, sl[hh] = l;
		__syncthreads();
	}
	for (int64_t c = threadIdx.x; c < d; c += AB) {
		float acc[GH];
#pragma unroll
		for (int hh = 0; hh < GH; hh++)
			acc[hh] = 0.0f;
		for (int j = 0; j < cnt; j++) {
			float v = V[krow[j] * ldk + g * d + c];
#pragma unroll
			for (int hh = 0; hh < GH; hh++)
				acc[hh] = fmaf(sc[hh][j], v, acc[hh]);
		}
#pragma unroll
		for (int hh = 0; hh < GH; hh++)
			pp(hh)[2 + c] = acc[hh];
	}
	if (threadIdx.x < GH)
		pp(threadIdx.x)[0] = smx[threadIdx.x], pp(threadIdx.x)[1] = sl[threadIdx.x];
}

__global__ void __launch_bounds__(AB) k_attn_combine(vd_attn a, const float *part, int64_t nch)
{
	pdl_wait();
	pdl_launch();
	int64_t bq = blockIdx.x, d = a.d;
	const float *pp = part + bq * nch * (d + 2);
	float *o = (float *)a.out.data + bq * d;
	float M = -INFINITY;
	for (int64_t c = 0; c < nch; c++)
		if (pp[c * (d + 2) + 1] > 0.0f)
			M = fmaxf(M, pp[c * (d + 2)]);
	float L = 0.0f;
	for (int64_t c = 0; c < nch; c++)
		if (pp[c * (d + 2) + 1] > 0.0f)
			L = fmaf(d_exp(pp[c * (d + 2)] - M), pp[c * (d + 2) + 1], L);
	for (int64_t e = threadIdx.x; e < d; e += AB) {
		if (!(L > 0.0f)) { /* no keys */
			o[e] = 0.0f;
			continue;
		}
		float acc = 0.0f;
		for (int64_t c = 0; c < nch; c++)
			if (pp[c * (d + 2) + 1] > 0.0f)
				acc = fmaf(d_exp(pp[c * (d + 2)] - M), pp[c * (d + 2) + 2 + e], acc);
		o[e] = acc / L;
	}
}

/* ---- memory work and reductions ---- */

__global__ void k_embed(float *y, const void *t, const float *so, int dtype,
                        const int32_t *ids, int64_t n, int64_t C, int lg,
                        float scale)
{
	pdl_wait();
	pdl_launch();
	int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (e >= n * C)
		return;
	int64_t i = e / C, c = e % C, r = ids[i];
	float v;
	if (dtype == VD_F32) {
		v = ((const float *)t)[r * C + c];
	} else if (dtype == VD_BF16) {
		v = bf2f(((const uint16_t *)t)[r * C + c]);
	} else {
		int64_t j = c & ~(int64_t)31, b = c & 31;
		uint32_t q = ((const uint8_t *)t)[r * (C / 2) + j / 2 + (b & 15)];
		float nib = (float)(b >= 16 ? (q >> 4) : (q & 15u));
		const float *sr = so + r * ((C >> lg) * 2) + (c >> lg) * 2;
		v = fmaf(sr[0], nib, sr[1]);
	}
	y[e] = v * scale;
}

/* k_rows: y[yi(i)·C + c] = x[xi(i)·C + c]; gather (xi = idx) or scatter
 * (yi = idx). */
__global__ void k_rows(float *y, const float *x, const int32_t *idx, int scatter,
                       int64_t n, int64_t C)
{
	pdl_wait();
	pdl_launch();
	int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (e >= n * C)
		return;
	int64_t i = e / C, c = e % C;
	if (scatter)
		y[idx[i] * C + c] = x[i * C + c];
	else
		y[i * C + c] = x[idx[i] * C + c];
}

__global__ void k_copy2d(float *y, int64_t ys, const float *x, int64_t xs,
                         int64_t rows, int64_t cols)
{
	pdl_wait();
	pdl_launch();
	int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (e >= rows * cols)
		return;
	int64_t r = e / cols, c = e % cols;
	y[r * ys + c] = x[r * xs + c];
}

__global__ void k_logsumexp(float *out, const float *x, int64_t dim)
{
	__shared__ float red[32];
	__shared__ double redd[32];
	pdl_wait();
	pdl_launch();
	int64_t r = blockIdx.x;
	const float *xr = x + r * dim;
	float m = -INFINITY;
	for (int64_t i = threadIdx.x; i < dim; i += RB)
		m = fmaxf(m, xr[i]);
	float mx = block_max(m, red);
	double s = 0.0;
	for (int64_t i = threadIdx.x; i < dim; i += RB)
		s += (double)d_exp(xr[i] - mx);
	double tot = block_sum_d(s, redd);
	if (threadIdx.x == 0)
		out[r] = mx + (float)log(tot);
}

/* k_argmax: the lowest index of the row's largest value, NaNs skipped;
 * the CPU's scan answers 0 when the first element is NaN, so does this. */
__global__ void k_argmax(int32_t *out, const float *x, int64_t dim)
{
	__shared__ float bv[RB];
	__shared__ int64_t bi[RB];
	pdl_wait();
	pdl_launch();
	int64_t r = blockIdx.x;
	const float *xr = x + r * dim;
	float best = -INFINITY;
	int64_t at = -1;
	for (int64_t i = threadIdx.x; i < dim; i += RB) {
		float v = xr[i];
		if (v == v && (at < 0 || v > best)) {
			best = v;
			at = i;
		}
	}
	bv[threadIdx.x] = best;
	bi[threadIdx.x] = at;
	__syncthreads();
	for (int st = RB / 2; st > 0; st >>= 1) {
		if (threadIdx.x < st) {
			float v = bv[threadIdx.x + st];
			int64_t j = bi[threadIdx.x + st];
			int64_t k = bi[threadIdx.x];
			if (j >= 0 && (k < 0 || v > bv[threadIdx.x] || (v == bv[threadIdx.x] && j < k))) {
				bv[threadIdx.x] = v;
				bi[threadIdx.x] = j;
			}
		}
		__syncthreads();
	}
	if (threadIdx.x == 0) {
		int64_t res = bi[0];
		if (res < 0 || xr[0] != xr[0])
			res = 0;
		out[r] = (int32_t)res;
	}
}

__global__ void k_select(float *out, const float *x, const int32_t *row,
                         const int32_t *col, int64_t n, int64_t cols)
{
	pdl_wait();
	pdl_launch();
	int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (j < n)
		out[j] = x[(int64_t)row[j] * cols + col[j]];
}

/* The argmax of one long row in two launches: AP blocks each find the
 * best of a slice (the same rule: NaNs skipped, ties to the lower index),
 * then one block the best of theirs. */
#define AP 128

__device__ __forceinline__ bool better(float v, int64_t j, float bv, int64_t bj)
{
	return j >= 0 && (bj < 0 || v > bv || (v == bv && j < bj));
}

__global__ void k_argmax_part(float *pv, int64_t *pi, const float *x, int64_t dim)
{
	__shared__ float bv[RB];
	__shared__ int64_t bi[RB];
	pdl_wait();
	pdl_launch();
	int64_t chunk = (dim + AP - 1) / AP, lo = blockIdx.x * chunk, hi = lo + chunk < dim ? lo + chunk : dim;
	float best = -INFINITY;
	int64_t at = -1;
#pragma unroll 8
	for (int64_t i = lo + threadIdx.x; i < hi; i += RB) {
		float v = x[i];
		if (v == v && (at < 0 || v > best))
			best = v, at = i;
	}
	bv[threadIdx.x] = best, bi[threadIdx.x] = at;
	__syncthreads();
	for (int st = RB / 2; st > 0; st >>= 1) {
		if (threadIdx.x < st && better(bv[threadIdx.x + st], bi[threadIdx.x + st], bv[threadIdx.x], bi[threadIdx.x]))
			bv[threadIdx.x] = bv[threadIdx.x + st], bi[threadIdx.x] = bi[threadIdx.x + st];
		__syncthreads();
	}
	if (threadIdx.x == 0)
		pv[blockIdx.x] = bv[0], pi[blockIdx.x] = bi[0];
}

__global__ void k_argmax_fin(int32_t *out, const float *pv, const int64_t *pi, const float *x)
{
	__shared__ float bv[AP];
	__shared__ int64_t bi[AP];
	pdl_wait();
	pdl_launch();
	bv[threadIdx.x] = pv[threadIdx.x], bi[threadIdx.x] = pi[threadIdx.x];
	__syncthreads();
	for (int st = AP / 2; st > 0; st >>= 1) {
		if (threadIdx.x < st && better(bv[threadIdx.x + st], bi[threadIdx.x + st], bv[threadIdx.x], bi[threadIdx.x]))
			bv[threadIdx.x] = bv[threadIdx.x + st], bi[threadIdx.x] = bi[threadIdx.x + st];
		__syncthreads();
	}
	if (threadIdx.x == 0) {
		int64_t res = bi[0];
		if (res < 0 || x[0] != x[0])
			res = 0;
		out[0] = (int32_t)res;
	}
}

/* argmax1: the argmax of one row into out (two launches over the stream's
 * partials buffer); false when there is none. */
static bool argmax1(vd_stream *s, int32_t *out, const float *x, int64_t dim)
{
	if (!s->amax || dim < AP * RB)
		return false;
	float *pv = (float *)s->amax;
	int64_t *pi = (int64_t *)((char *)s->amax + AP * sizeof(float));
	launch(s, k_argmax_part, AP, RB, 0, pv, pi, x, dim);
	launch(s, k_argmax_fin, 1, AP, 0, out, pv, pi, x);
	launched(s);
	return true;
}

/* ---- sampling on the device ----
 *
 * k_sample: one block of SB threads draws the token cpu_sample draws, for
 * top-k between 1 and SB: the logits scaled by inv_temp in place; the k
 * best (logit, then lower id) found by a radix select on order-preserving
 * keys (4 passes of 8 bits) and collected in id order; sorted by a bitonic
 * network; then the host's double-precision softmax, top-p cut and draw,
 * in its order, by one thread. Only the token id is written. */
#define SB 1024

__device__ __forceinline__ uint32_t order_key(float f)
{
	if (f == 0.0f)
		f = 0.0f; /* -0 and +0 tie, as the host's comparison has them */
	uint32_t u = __float_as_uint(f);
	return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* block_scan: the exclusive prefix of v over the block (SB threads) in
 * thread order; *total gets the sum. ws: 32 ints. */
__device__ int block_scan(int v, int *ws, int *total)
{
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
	int inc = v;
	for (int o = 1; o < 32; o <<= 1) {
		int t = __shfl_up_sync(0xffffffffu, inc, o);
		if (lane >= o)
			inc += t;
	}
	__syncthreads();
	if (lane == 31)
		ws[w] = inc;
	__syncthreads();
	if (w == 0) {
		int x = lane < (int)(blockDim.x >> 5) ? ws[lane] : 0, y = x;
		for (int o = 1; o < 32; o <<= 1) {
			int t = __shfl_up_sync(0xffffffffu, y, o);
			if (lane >= o)
				y += t;
		}
		ws[lane] = y - x; /* exclusive over warps */
		if (lane == 31)
			ws[32] = y;
	}
	__syncthreads();
	*total = ws[32];
	return ws[w] + inc - v;
}

__global__ void __launch_bounds__(SB) k_sample(int32_t *out, float *l, int64_t V, float inv_temp, int k,
                                                double top_p, double u)
{
	__shared__ int hist[256];
	__shared__ int ws[33];
	__shared__ uint32_t s_prefix;
	__shared__ int s_left;
	__shared__ int32_t cid[SB];
	__shared__ float cl[SB];
	__shared__ double pr[SB];
	pdl_wait();
	pdl_launch();
	int tid = threadIdx.x;
	for (int64_t i = tid; i < V; i += SB)
		l[i] = l[i] * inv_temp;
	if (tid == 0)
		s_prefix = 0, s_left = k;
	__syncthreads();
	/* The k-th best key: digit by digit from the top. */
	for (int pass = 0; pass < 4; pass++) {
		int shift = 24 - 8 * pass;
		uint32_t hmask = pass == 0 ? 0u : 0xffffffffu << (shift + 8);
		for (int i = tid; i < 256; i += SB)
			hist[i] = 0;
		__syncthreads();
		uint32_t pre = s_prefix;
		for (int64_t i = tid; i < V; i += SB) {
			uint32_t key = order_key(l[i]);
			if ((key & hmask) == pre)
				atomicAdd(&hist[(key >> shift) & 255u], 1);
		}
		__syncthreads();
		if (tid == 0) {
			int left = s_left, dgt = 255;
			for (; dgt > 0; dgt--) {
				if (hist[dgt] >= left)
					break;
				left -= hist[dgt];
			}
			s_prefix = pre | ((uint32_t)dgt << shift);
			s_left = left;
		}
		__syncthreads();
	}
	uint32_t T = s_prefix;
	int ties = s_left; /* the ties at T taken, lowest ids first */
	int64_t chunk = (V + SB - 1) / SB, lo = tid * chunk, hi = lo + chunk < V ? lo + chunk : V;
	int gt = 0, eq = 0;
	for (int64_t i = lo; i < hi; i++) {
		uint32_t key = order_key(l[i]);
		gt += key > T;
		eq += key == T;
	}
	int ngt, neq;
	int pg = block_scan(gt, ws, &ngt);
	int pe = block_scan(eq, ws, &neq);
	for (int64_t i = lo; i < hi; i++) {
		uint32_t key = order_key(l[i]);
		if (key > T) {
			cid[pg] = (int32_t)i, cl[pg] = l[i];
			pg++;
		} else if (key == T) {
			if (pe < ties)
				cid[ngt + pe] = (int32_t)i, cl[ngt + pe] = l[i];
			pe++;
		}
	}
	__syncthreads();
	/* Bitonic sort of the k candidates, best first. */
	int P = 1;
	while (P < k)
		P <<= 1;
	if (tid >= k && tid < P)
		cid[tid] = 0x7fffffff, cl[tid] = -INFINITY;
	__syncthreads();
	for (int size = 2; size <= P; size <<= 1) {
		for (int stride = size >> 1; stride > 0; stride >>= 1) {
			int i = tid, j = i ^ stride;
			if (i < P && j > i) {
				bool up = (i & size) == 0;
				float li = cl[i], lj = cl[j];
				int32_t ii = cid[i], ij = cid[j];
				bool j_first = lj > li || (lj == li && ij < ii); /* j before i */
				if (j_first == up) {
					cl[i] = lj, cl[j] = li;
					cid[i] = ij, cid[j] = ii;
				}
			}
			__syncthreads();
		}
	}
	double mx = (double)cl[0];
	if (tid < k)
		pr[tid] = exp((double)cl[tid] - mx);
	__syncthreads();
	if (tid == 0) {
		double sum = 0;
		int n = k;
		for (int i = 0; i < n; i++)
			sum += pr[i];
		if (top_p > 0 && top_p < 1) {
			double cum = 0;
			for (int i = 0; i < n; i++) {
				cum += pr[i] / sum;
				if (cum >= top_p) {
					n = i + 1;
					break;
				}
			}
			sum = 0;
			for (int i = 0; i < n; i++)
				sum += pr[i];
		}
		double r = u * sum;
		int32_t tok = cid[n - 1];
		for (int i = 0; i < n; i++) {
			r -= pr[i];
			if (r < 0) {
				tok = cid[i];
				break;
			}
		}
		out[0] = tok;
	}
}

/* ---- the table ---- */

#define EW 256
#define ENTER(s) ENTER_AS(s, __func__ + 2)
#define ENTER_AS(s, name)         \
	cudaSetDevice((s)->dev);  \
	prof_scope prof_ {(s), (name)}

static void *c_alloc(vd_backend *b, size_t bytes)
{
	cudaSetDevice(st_of(b)->device);
	void *p = nullptr;
	if (cudaMalloc(&p, bytes ? bytes : 64) != cudaSuccess) {
		cudaGetLastError();
		return nullptr;
	}
	return p;
}

static void c_release(vd_backend *b, void *p, size_t bytes)
{
	(void)bytes;
	if (!p)
		return;
	cudaSetDevice(st_of(b)->device);
	cudaFree(p);
}

static void *c_bind(vd_backend *b, void *host, size_t bytes)
{
	void *p = c_alloc(b, bytes);
	if (!p)
		return nullptr;
	if (bytes && cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice) != cudaSuccess) {
		cudaGetLastError();
		cudaFree(p);
		return nullptr;
	}
	return p;
}

static void c_unbind(vd_backend *b, void *p, void *host, size_t bytes)
{
	(void)host;
	c_release(b, p, bytes);
}

static vd_stream *c_stream_new(vd_backend *b)
{
	cudaSetDevice(st_of(b)->device);
	vd_stream *s = new (std::nothrow) vd_stream();
	if (!s)
		return nullptr;
	s->b = b;
	s->dev = st_of(b)->device;
	if (cudaStreamCreateWithFlags(&s->st, cudaStreamNonBlocking) != cudaSuccess) {
		cudaGetLastError();
		delete s;
		return nullptr;
	}
	if (cudaMalloc(&s->amax, AP * (sizeof(float) + sizeof(int64_t))) != cudaSuccess) {
		cudaGetLastError();
		s->amax = nullptr; /* argmax in one launch */
	}
	return s;
}

static void c_stream_free(vd_stream *s)
{
	if (!s)
		return;
	cudaSetDevice(s->dev);
	cudaStreamSynchronize(s->st);
	prof_flush(s, -1); /* and write the table */
	for (cudaEvent_t e : s->events)
		cudaEventDestroy(e);
	if (s->scratch)
		cudaFree(s->scratch);
	if (s->amax)
		cudaFree(s->amax);
	if (s->apart)
		cudaFree(s->apart);
	if (s->qpart)
		cudaFree(s->qpart);
	for (void *p : s->retired)
		cudaFree(p);
	cudaStreamDestroy(s->st);
	delete s;
}

static void c_upload(vd_stream *s, void *dst, const void *host, size_t n)
{
	ENTER(s);
	if (n)
		check(s, cudaMemcpyAsync(dst, host, n, cudaMemcpyHostToDevice, s->st));
}

static void c_download(vd_stream *s, void *host, const void *src, size_t n)
{
	ENTER(s);
	if (n)
		check(s, cudaMemcpyAsync(host, src, n, cudaMemcpyDeviceToHost, s->st));
}

static void c_copy(vd_stream *s, void *dst, const void *src, size_t n)
{
	ENTER(s);
	if (n && dst != src)
		check(s, cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, s->st));
}

static int c_sync(vd_stream *s)
{
	cudaSetDevice(s->dev);
	auto t0 = std::chrono::steady_clock::now();
	check(s, cudaStreamSynchronize(s->st));
	prof_flush(s, std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
	int *flag = st_of(s->b)->dev_err;
	int e = 0;
	if (cudaMemcpy(&e, flag, sizeof e, cudaMemcpyDeviceToHost) == cudaSuccess && e) {
		fail(s, e);
		int zero = 0;
		cudaMemcpy(flag, &zero, sizeof zero, cudaMemcpyHostToDevice);
	}
	return s->err;
}

/* lin_name: the profile's name of a product, by weight type and batch. */
static const char *lin_name(const char *op, vd_tensor x, vd_tensor w)
{
	static const char *names[2][4][2] = {
		{{"linear_f32_1", "linear_f32_n"}, {"linear_bf16_1", "linear_bf16_n"},
		 {"linear_q4_1", "linear_q4_n"}, {"linear_other_1", "linear_other_n"}},
		{{"linear_rows_f32_1", "linear_rows_f32_n"}, {"linear_rows_bf16_1", "linear_rows_bf16_n"},
		 {"linear_rows_q4_1", "linear_rows_q4_n"}, {"linear_rows_other_1", "linear_rows_other_n"}},
	};
	int d = w.dtype >= 0 && w.dtype < 3 ? w.dtype : 3;
	return names[op[6] == '_'][d][x.rows > 1];
}

static void c_linear(vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor w)
{
	ENTER_AS(s, lin_name("linear", x, w));
	linear_ids(s, y, x, w, nullptr, w.rows);
}

static void c_linear_rows(vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor w,
                          vd_tensor ids)
{
	ENTER_AS(s, lin_name("linear_rows", x, w));
	linear_ids(s, y, x, w, (const int32_t *)ids.data, elems(ids));
}

static void c_sparse_mlp(vd_stream *s, vd_tensor y, vd_tensor g, vd_tensor h,
                         vd_tensor idx, vd_tensor x, vd_tensor up, vd_tensor dt,
                         float z)
{
	ENTER(s);
	int64_t n = x.rows, inter = up.rows, d = up.cols;
	if (up.dtype != VD_Q4 || dt.dtype != VD_Q4 || d % 32 != 0) {
		fail(s, VDC_EDTYPE);
		return;
	}
	int32_t *cnt = (int32_t *)scratch(s, (size_t)n * sizeof(int32_t));
	if (!cnt)
		return;
	int lg = lg2(up.group);
	launch(s, k_sp_select, (unsigned)n, SPB, 0, (float *)g.data, (int32_t *)idx.data, cnt, inter, z);
	launched(s);
	/* Blocks a token: enough warps for every survivor of one token; for
	 * many tokens fewer, each warp taking several (any warp computes a
	 * survivor's product the same way). */
	int64_t gx = (inter + LW - 1) / LW, gmax = n >= 64 ? 32 : 128;
	dim3 ug((unsigned)(gx < gmax ? gx : gmax), (unsigned)n);
	size_t xs = (size_t)(d + d / 32) * sizeof(float);
	if (xs > 48 * 1024 && (xs > (size_t)st_of(s->b)->smem_optin ||
	                       cudaFuncSetAttribute(k_sp_up, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)xs) !=
	                           cudaSuccess)) {
		cudaGetLastError();
		fail(s, VDC_ESHAPE); /* a row of x past shared memory */
		return;
	}
	launch(s, k_sp_up, ug, 32 * LW, xs, (float *)h.data, (const float *)g.data, (const int32_t *)idx.data, cnt,
	                                   (const float *)x.data, up.data, (const float *)up.aux, inter, d, lg);
	launched(s);
	dim3 dg(blocks_for(d, SPD_COLS), (unsigned)n);
	launch(s, k_sp_down, dg, 32 * SPD, 0, (float *)y.data, (const float *)h.data, (const int32_t *)idx.data, cnt,
	                                 (const uint8_t *)dt.data, (const float *)dt.aux, inter, d, lg2(dt.group));
	launched(s);
}

static void c_rmsnorm(vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor w,
                      int64_t dim, float eps)
{
	ENTER(s);
	int64_t rows = elems(x) / dim;
	if (rows <= 0)
		return;
	launch(s, k_rmsnorm, (unsigned)rows, RB, 0, (float *)y.data, (const float *)x.data, (const float *)w.data, dim, eps);
	launched(s);
}

static void c_row_rms(vd_stream *s, vd_tensor out, vd_tensor x, int64_t dim,
                      float floor)
{
	ENTER(s);
	int64_t rows = elems(out);
	if (rows <= 0)
		return;
	launch(s, k_row_rms, (unsigned)rows, RB, 0, (float *)out.data, (const float *)x.data, dim, floor);
	launched(s);
}

static void c_scale_rows(vd_stream *s, vd_tensor x, vd_tensor sc, int64_t dim)
{
	ENTER(s);
	int64_t rows = elems(sc);
	if (rows * dim <= 0)
		return;
	launch(s, k_scale_rows, blocks_for(rows * dim, EW), EW, 0, (float *)x.data, (const float *)sc.data, nullptr, rows, dim);
	launched(s);
}

static void c_mul_rows(vd_stream *s, vd_tensor x, vd_tensor w)
{
	ENTER(s);
	int64_t dim = elems(w), rows = dim ? elems(x) / dim : 0;
	if (rows * dim <= 0)
		return;
	launch(s, k_scale_rows, blocks_for(rows * dim, EW), EW, 0, (float *)x.data, nullptr, (const float *)w.data, rows, dim);
	launched(s);
}

static void c_sparse_gelu_mul(vd_stream *s, vd_tensor g, vd_tensor u,
                              int64_t dim, float z)
{
	ENTER(s);
	int64_t rows = elems(g) / dim;
	if (rows <= 0)
		return;
	launch(s, k_sparse_gelu_mul, (unsigned)rows, RB, 0, (float *)g.data, (const float *)u.data, dim, z);
	launched(s);
}

static void c_ew(vd_stream *s, int op, vd_tensor y, vd_tensor a, vd_tensor b,
                 float c)
{
	ENTER(s);
	int64_t n = elems(y);
	if (n <= 0)
		return;
	int64_t nb = elems(b);
	if (op < VD_EW_GELU || op > VD_EW_MUL_REP || ((op == VD_EW_ADD_REP || op == VD_EW_MUL_REP) && nb <= 0)) {
		fail(s, VDC_EDTYPE);
		return;
	}
	launch(s, k_ew, blocks_for(n, EW), EW, 0, op, (float *)y.data, (const float *)a.data, (const float *)b.data, n, nb,
	       c);
	launched(s);
}

static void c_rope(vd_stream *s, vd_tensor x, vd_tensor pos, int64_t heads,
                   int64_t head_dim, vd_tensor inv_freq)
{
	ENTER(s);
	int64_t n = elems(pos), m = n * heads * (head_dim / 2);
	if (m <= 0)
		return;
	launch(s, k_rope, blocks_for(m, EW), EW, 0, (float *)x.data, (const int32_t *)pos.data, n, heads, head_dim,
	                                            (const float *)inv_freq.data);
	launched(s);
}

static void c_altup_predict(vd_stream *s, vd_tensor pred, vd_tensor h,
                            vd_tensor coef, int64_t n, int64_t d)
{
	ENTER(s);
	if (n * d <= 0)
		return;
	launch(s, k_altup_predict, blocks_for(n * d, EW), EW, 0, (float *)pred.data, (const float *)h.data,
	                                                         (const float *)coef.data, n, d);
	launched(s);
}

static void c_altup_correct(vd_stream *s, vd_tensor out, vd_tensor pred,
                            vd_tensor act, vd_tensor c, int64_t n, int64_t d)
{
	ENTER(s);
	if (n * d <= 0)
		return;
	launch(s, k_altup_correct, blocks_for(n * d, EW), EW, 0, (float *)out.data, (const float *)pred.data,
	                                                         (const float *)act.data, (const float *)c.data, n, d);
	launched(s);
}

/* c_attention: the chunked kernels over the stream's partials buffer,
 * queries in groups whose partials fit in APART_MAX bytes (a group's bits
 * are each query's own). The buffer grows between recordings only, and
 * an outgrown one lives on for the graphs recorded with it. */
#define APART_MAX ((size_t)256 << 20)

static void c_attention(vd_stream *s, const vd_attn *a)
{
	ENTER(s);
	int64_t nq = a->q.rows;
	if (nq <= 0 || a->hq <= 0)
		return;
	int64_t mk = a->max_keys > 0 ? a->max_keys : 1;
	int64_t nch = (mk + AC - 1) / AC;
	size_t per = (size_t)a->hq * (size_t)nch * (size_t)(a->d + 2) * sizeof(float); /* one query's partials */
	int64_t group = (int64_t)(APART_MAX / per);
	if (group < 1)
		group = 1;
	if (group > nq)
		group = nq;
	size_t need = per * (size_t)group;
	if (!grow_scratch(s, &s->apart, &s->apart_n, need, APART_MAX))
		return;
	cuda_state *cs = st_of(s->b);
	for (int64_t q0 = 0; q0 < nq; q0 += group) {
		int64_t g = nq - q0 < group ? nq - q0 : group;
		vd_attn c = *a;
		c.max_keys = mk;
		c.q.data = (float *)a->q.data + q0 * a->hq * a->d;
		c.out.data = (float *)a->out.data + q0 * a->hq * a->d;
		c.qpos.data = (int32_t *)a->qpos.data + q0;
		c.qseq.data = (int32_t *)a->qseq.data + q0;
		/* the query heads of a key/value group in one block (up to 8)
		 * once there are queries enough to fill the device; a head a
		 * block for a few (decode steps: more blocks, shorter ones) */
		int64_t G = a->hkv > 0 && a->hq % a->hkv == 0 && g >= 16 ? a->hq / a->hkv : 1;
		auto kp = G == 8 ? k_attn_part<8> : G == 4 ? k_attn_part<4> : G == 2 ? k_attn_part<2> : k_attn_part<1>;
		int64_t gh = G == 8 || G == 4 || G == 2 ? G : 1;
		launch(s, kp, dim3((unsigned)(g * (a->hq / gh)), (unsigned)nch), AB, 0, c, (float *)s->apart, nch,
		       cs->dev_err);
		launch(s, k_attn_combine, (unsigned)(g * a->hq), AB, 0, c, (const float *)s->apart, nch);
		launched(s);
	}
}

static void c_embed(vd_stream *s, vd_tensor y, vd_tensor t, vd_tensor ids,
                    float scale)
{
	ENTER(s);
	int64_t n = elems(ids), C = t.cols;
	if (n * C <= 0)
		return;
	if (t.dtype != VD_F32 && t.dtype != VD_BF16 && t.dtype != VD_Q4) {
		fail(s, VDC_EDTYPE);
		return;
	}
	launch(s, k_embed, blocks_for(n * C, EW), EW, 0, (float *)y.data, t.data, (const float *)t.aux, t.dtype,
	                                                 (const int32_t *)ids.data, n, C,
	                                                 t.dtype == VD_Q4 ? lg2(t.group) : 0, scale);
	launched(s);
}

static void c_gather(vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor idx)
{
	ENTER(s);
	int64_t n = elems(idx), C = x.cols;
	if (n * C <= 0)
		return;
	launch(s, k_rows, blocks_for(n * C, EW), EW, 0, (float *)y.data, (const float *)x.data, (const int32_t *)idx.data, 0, n, C);
	launched(s);
}

static void c_scatter(vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor idx)
{
	ENTER(s);
	int64_t n = elems(idx), C = x.cols;
	if (n * C <= 0)
		return;
	launch(s, k_rows, blocks_for(n * C, EW), EW, 0, (float *)y.data, (const float *)x.data, (const int32_t *)idx.data, 1, n, C);
	launched(s);
}

static void c_copy2d(vd_stream *s, vd_tensor y, int64_t ys, vd_tensor x,
                     int64_t xs, int64_t rows, int64_t cols)
{
	ENTER(s);
	if (rows * cols <= 0)
		return;
	launch(s, k_copy2d, blocks_for(rows * cols, EW), EW, 0, (float *)y.data, ys, (const float *)x.data, xs, rows, cols);
	launched(s);
}

static void c_logsumexp(vd_stream *s, vd_tensor out, vd_tensor x)
{
	ENTER(s);
	if (x.rows <= 0 || x.cols <= 0)
		return;
	launch(s, k_logsumexp, (unsigned)x.rows, RB, 0, (float *)out.data, (const float *)x.data, x.cols);
	launched(s);
}

static void c_argmax(vd_stream *s, vd_tensor out, vd_tensor x)
{
	ENTER(s);
	if (x.rows <= 0 || x.cols <= 0)
		return;
	if (x.rows == 1 && argmax1(s, (int32_t *)out.data, (const float *)x.data, x.cols))
		return;
	launch(s, k_argmax, (unsigned)x.rows, RB, 0, (int32_t *)out.data, (const float *)x.data, x.cols);
	launched(s);
}

static void c_select(vd_stream *s, vd_tensor out, vd_tensor x, vd_tensor row,
                     vd_tensor col)
{
	ENTER(s);
	int64_t n = elems(row);
	if (n <= 0)
		return;
	launch(s, k_select, blocks_for(n, EW), EW, 0, (float *)out.data, (const float *)x.data, (const int32_t *)row.data,
	                                              (const int32_t *)col.data, n, x.cols);
	launched(s);
}

/* c_sample: greedy and top-k up to SB on the device (k_argmax, k_sample);
 * otherwise cpu_sample's algorithm on a host copy of the logits (a
 * sampling step is one row; its cost is the copy). Candidates are ordered
 * by logit, ties by lower id: a strict order, so the top k and their order
 * are the CPU's. */
static void c_sample(vd_stream *s, vd_tensor out, vd_tensor x, vd_sampling p)
{
	ENTER(s);
	int64_t V = x.cols;
	if (V <= 0)
		return;
	if (p.inv_temp == 0) { /* greedy: on the device, nothing crosses */
		if (!argmax1(s, (int32_t *)out.data, (const float *)x.data, V)) {
			launch(s, k_argmax, 1, RB, 0, (int32_t *)out.data, (const float *)x.data, V);
			launched(s);
		}
		return;
	}
	if (p.top_k > 0 && p.top_k <= SB && p.top_k < V) {
		launch(s, k_sample, 1, SB, 0, (int32_t *)out.data, (float *)x.data, V, p.inv_temp, (int)p.top_k, p.top_p,
		                              p.u);
		launched(s);
		return;
	}
	s->host.resize((size_t)V);
	float *l = s->host.data();
	check(s, cudaMemcpyAsync(l, x.data, (size_t)V * sizeof(float), cudaMemcpyDeviceToHost, s->st));
	check(s, cudaStreamSynchronize(s->st));
	if (s->err)
		return;
	int32_t tok = 0;
	if (p.inv_temp == 0) {
		for (int64_t j = 1; j < V; j++)
			if (l[j] > l[tok])
				tok = (int32_t)j;
	} else {
		for (int64_t i = 0; i < V; i++)
			l[i] = l[i] * p.inv_temp;
		std::vector<int32_t> idx((size_t)V);
		for (int64_t i = 0; i < V; i++)
			idx[(size_t)i] = (int32_t)i;
		int64_t k = V;
		if (p.top_k > 0 && p.top_k < k)
			k = p.top_k;
		auto before = [l](int32_t i, int32_t j) {
			if (l[i] != l[j])
				return l[i] > l[j];
			return i < j;
		};
		std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), before);
		std::vector<double> pr((size_t)k);
		double mx = (double)l[idx[0]], sum = 0;
		for (int64_t i = 0; i < k; i++) {
			pr[(size_t)i] = exp((double)l[idx[(size_t)i]] - mx);
			sum += pr[(size_t)i];
		}
		if (p.top_p > 0 && p.top_p < 1) {
			double cum = 0;
			for (int64_t i = 0; i < k; i++) {
				cum += pr[(size_t)i] / sum;
				if (cum >= p.top_p) {
					k = i + 1;
					break;
				}
			}
			sum = 0;
			for (int64_t i = 0; i < k; i++)
				sum += pr[(size_t)i];
		}
		double r = p.u * sum;
		tok = idx[(size_t)(k - 1)];
		for (int64_t i = 0; i < k; i++) {
			r -= pr[(size_t)i];
			if (r < 0) {
				tok = idx[(size_t)i];
				break;
			}
		}
	}
	s->tok = tok;
	check(s, cudaMemcpyAsync(out.data, &s->tok, sizeof s->tok, cudaMemcpyHostToDevice, s->st));
	check(s, cudaStreamSynchronize(s->st));
}

static void c_norm_add(vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor w, vd_tensor a, vd_tensor b, int64_t dim,
                       float eps, float c)
{
	ENTER(s);
	int64_t rows = elems(x) / dim;
	if (rows <= 0)
		return;
	launch(s, k_norm_add, (unsigned)rows, RB, 0, (float *)y.data, (float *)x.data, (const float *)w.data,
	                                             (const float *)a.data, (const float *)b.data, dim, eps, c);
	launched(s);
}

/* c_router: one launch for an f32 router of at most SMALL_ROWS rows whose
 * row fits in shared memory; the four operations otherwise. */
/* router_one: the router in one launch where it fits (and, cw given, its
 * coefficients after it); false where it does not. */
static bool router_one(vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor nw, vd_tensor w, int64_t dim, float eps,
                       float scale, const float *cw, float *cy, int64_t ncoef, float cadd, int hasadd)
{
	int64_t n = x.rows;
	bool reg = w.rows <= RR_OUT && ((dim + LW - 1) / LW + 31) / 32 <= RR_J;
	if (!(w.dtype == VD_F32 && w.rows <= SMALL_ROWS && dim >= 32 * LW && dim * 4 <= 48 * 1024 && n <= 65535))
		return false;
	launch(s, reg ? k_router_reg : k_router, (unsigned)n, RB, (size_t)dim * sizeof(float), (float *)y.data,
	       (const float *)x.data, (const float *)nw.data, (const float *)w.data, w.rows, dim, eps, scale, cw, cy, ncoef,
	       cadd, hasadd);
	launched(s);
	return true;
}

static void c_router(vd_stream *s, vd_tensor y, vd_tensor f, vd_tensor x, vd_tensor nw, vd_tensor w, int64_t dim,
                     float eps, float scale)
{
	ENTER(s);
	if (x.rows <= 0)
		return;
	if (router_one(s, y, x, nw, w, dim, eps, scale, nullptr, nullptr, 0, 0.0f, 0))
		return;
	c_rmsnorm(s, f, x, nw, dim, eps);
	c_ew(s, VD_EW_SCALE, f, f, vd_tensor{}, scale);
	c_linear(s, y, f, w);
	c_ew(s, VD_EW_TANH, y, y, vd_tensor{}, 0);
}

static void c_router_coef(vd_stream *s, vd_tensor y, vd_tensor f, vd_tensor x, vd_tensor nw, vd_tensor w, int64_t dim,
                          float eps, float scale, vd_tensor cw, vd_tensor cy, float add, int has_add)
{
	ENTER(s);
	if (x.rows <= 0)
		return;
	/* VERDICT_ROUTER_COEF=0: the three operations apart, for comparisons */
	static const bool fuse = [] {
		const char *e = getenv("VERDICT_ROUTER_COEF");
		return !(e && strcmp(e, "0") == 0);
	}();
	if (fuse && cw.dtype == VD_F32 && cw.cols == w.rows && w.rows <= 32 &&
	    router_one(s, y, x, nw, w, dim, eps, scale, (const float *)cw.data, (float *)cy.data, cw.rows, add, has_add))
		return;
	c_router(s, y, f, x, nw, w, dim, eps, scale);
	c_linear(s, cy, y, cw);
	if (has_add)
		c_ew(s, VD_EW_ADD_CONST, cy, cy, vd_tensor{}, add);
}

/* ---- the device and its limits ---- */

static int c_info(vd_backend *b, vd_info *out)
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

static int c_limits(vd_backend *b, vd_limits *out)
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

/* Graphs: stream capture in relaxed mode (the operations' own checks may
 * call the runtime); an operation that waits for the host (a scratch that
 * grows, a sampling draw on the host) invalidates the capture, and
 * graph_end then reports NULL with the stream's error as it was. */
static int c_graph_begin(vd_stream *s)
{
	cudaSetDevice(s->dev);
	if (s->err || s->recording)
		return s->err ? s->err : -1;
	cudaError_t e = cudaStreamBeginCapture(s->st, cudaStreamCaptureModeRelaxed);
	if (e != cudaSuccess) {
		cudaGetLastError();
		return (int)e;
	}
	s->recording = true;
	return 0;
}

static void *c_graph_end(vd_stream *s)
{
	cudaSetDevice(s->dev);
	if (!s->recording)
		return nullptr;
	s->recording = false;
	cudaGraph_t g = nullptr;
	cudaError_t e = cudaStreamEndCapture(s->st, &g);
	if (s->loop) { /* g is the while node's body; the loop is its graph */
		g = s->loop;
		s->loop = nullptr;
	}
	cudaGraphExec_t x = nullptr;
	if (e == cudaSuccess && !s->err)
		e = cudaGraphInstantiate(&x, g, 0);
	if (g)
		cudaGraphDestroy(g);
	if (e != cudaSuccess || s->err) {
		cudaGetLastError();
		s->err = 0; /* the recording's errors: nothing ran */
		if (x)
			cudaGraphExecDestroy(x);
		return nullptr;
	}
	return (void *)x;
}

/* Loops: a graph of one conditional while node (its condition's default
 * 1 at every launch, so the body runs at least once), the body recorded by
 * capture into the node's graph; loop_while's kernel sets the condition
 * for the next round from the device. Needs CUDA 12.4 or later. */
static int c_loop_begin(vd_stream *s)
{
	cudaSetDevice(s->dev);
	if (s->err || s->recording)
		return s->err ? s->err : -1;
	cudaGraph_t g = nullptr;
	cudaError_t e = cudaGraphCreate(&g, 0);
	cudaGraphConditionalHandle h = 0;
	if (e == cudaSuccess)
		e = cudaGraphConditionalHandleCreate(&h, g, 1, cudaGraphCondAssignDefault);
	cudaGraphNodeParams p = {};
	p.type = cudaGraphNodeTypeConditional;
	p.conditional.handle = h;
	p.conditional.type = cudaGraphCondTypeWhile;
	p.conditional.size = 1;
	cudaGraphNode_t node = nullptr;
	if (e == cudaSuccess)
#if CUDART_VERSION >= 13000
		e = cudaGraphAddNode(&node, g, nullptr, nullptr, 0, &p);
#else
		e = cudaGraphAddNode(&node, g, nullptr, 0, &p);
#endif
	if (e == cudaSuccess)
		e = cudaStreamBeginCaptureToGraph(s->st, p.conditional.phGraph_out[0], nullptr, nullptr, 0,
		                                  cudaStreamCaptureModeRelaxed);
	if (e != cudaSuccess) {
		cudaGetLastError();
		if (g)
			cudaGraphDestroy(g);
		return (int)e;
	}
	s->loop = g;
	s->cond = h;
	s->recording = true;
	return 0;
}

__global__ void k_loop_while(cudaGraphConditionalHandle h, const int32_t *cond, const int32_t *iter, int64_t limit)
{
	pdl_wait();
	pdl_launch();
	cudaGraphSetConditional(h, cond[0] != 0 && iter[0] < limit ? 1u : 0u);
}

static void c_loop_while(vd_stream *s, vd_tensor cond, vd_tensor iter, int64_t limit)
{
	ENTER(s);
	if (!s->loop)
		return;
	launch(s, k_loop_while, 1, 1, 0, s->cond, (const int32_t *)cond.data, (const int32_t *)iter.data, limit);
	check(s, cudaGetLastError());
}

/* One block: every thread reads the step before thread 0 advances it. */
__global__ void k_loop_rows(vd_loop_rows r)
{
	pdl_wait();
	pdl_launch();
	int32_t *it = (int32_t *)r.iter.data;
	int64_t t = it[0], ts = t < r.steps ? t : r.steps - 1, nl = r.lut.rows * r.lut.cols;
	const int32_t *ids = (const int32_t *)r.ids.data, *lut = (const int32_t *)r.lut.data;
	for (int64_t i = threadIdx.x; i < r.n; i += blockDim.x) {
		int32_t id = ids[i];
		((int32_t *)r.pos.data)[i] = ((const int32_t *)r.pos0.data)[i] + (int32_t)t;
		((int32_t *)r.slot0.data)[i] = ((const int32_t *)r.slots0.data)[i * r.steps + ts];
		((int32_t *)r.slot1.data)[i] = ((const int32_t *)r.slots1.data)[i * r.steps + ts];
		((int32_t *)r.row.data)[i] = id >= 0 && id < nl ? lut[id] : 0;
	}
	__syncthreads();
	if (threadIdx.x == 0)
		it[0] = (int32_t)(t + 1);
}

static void c_loop_rows(vd_stream *s, const vd_loop_rows *r)
{
	ENTER(s);
	if (r->n <= 0 || r->steps <= 0)
		return;
	launch(s, k_loop_rows, 1, 128, 0, *r);
	check(s, cudaGetLastError());
}

/* One block: thread i keeps row i's token and marks it done; the count of
 * rows left is a block sum (rows of more than one pass of the block add
 * in thread order). */
__global__ void k_loop_emit(vd_loop_emit e)
{
	pdl_wait();
	pdl_launch();
	__shared__ int32_t left[128];
	int64_t t = (int64_t)((const int32_t *)e.iter.data)[0] - 1, ns = e.stop.rows * e.stop.cols;
	const int32_t *ids = (const int32_t *)e.ids.data, *stop = (const int32_t *)e.stop.data;
	int32_t *out = (int32_t *)e.out.data, *done = (int32_t *)e.done.data, mine = 0;
	for (int64_t i = threadIdx.x; i < e.n; i += blockDim.x) {
		int32_t id = ids[i], d = done[i];
		if (t >= 0 && t < e.steps)
			out[i * e.steps + t] = id;
		for (int64_t k = 0; k < ns && !d; k++)
			if (stop[k] >= 0 && stop[k] == id)
				d = 1;
		done[i] = d;
		mine += !d;
	}
	left[threadIdx.x] = mine;
	__syncthreads();
	if (threadIdx.x == 0) {
		int32_t c = 0;
		for (int i = 0; i < (int)blockDim.x; i++)
			c += left[i];
		((int32_t *)e.cond.data)[0] = c;
	}
}

static void c_loop_emit(vd_stream *s, const vd_loop_emit *e)
{
	ENTER(s);
	if (e->n <= 0)
		return;
	launch(s, k_loop_emit, 1, 128, 0, *e);
	check(s, cudaGetLastError());
}

static void c_norm_rope(vd_stream *s, vd_tensor y, vd_tensor idx, vd_tensor x, vd_tensor w, float eps,
                        vd_tensor pos, int64_t heads, int64_t head_dim, vd_tensor inv_freq)
{
	ENTER(s);
	int64_t rows = elems(pos) * heads;
	if (rows <= 0 || head_dim <= 0)
		return;
	launch(s, k_norm_rope, (unsigned)rows, RB, (size_t)head_dim * sizeof(float), (float *)y.data,
	       (const int32_t *)idx.data, (float *)x.data, (const float *)w.data, eps, (const int32_t *)pos.data, heads,
	       head_dim, (const float *)inv_freq.data);
	launched(s);
}

static void c_graph_run(vd_stream *s, void *g)
{
	ENTER(s);
	check(s, cudaGraphLaunch((cudaGraphExec_t)g, s->st));
}

static void c_graph_free(vd_backend *b, void *g)
{
	cudaSetDevice(st_of(b)->device);
	if (g)
		cudaGraphExecDestroy((cudaGraphExec_t)g);
}

/* ---- the catalog step (catalog.cu) ---- */

int cat_cuda_bind(int dev, const vd_grammar *g, vd_gram **out);
void cat_cuda_free(int dev, vd_gram *g);
int cat_cuda_init(cudaStream_t st, bool pdl, vd_gram *g, const vd_cat_step *c);
int cat_cuda_step_pdl(cudaStream_t st, bool pdl, vd_gram *g, const vd_cat_step *c);

static int c_grammar_bind(vd_backend *b, const vd_grammar *g, vd_gram **out)
{
	cudaSetDevice(st_of(b)->device);
	return cat_cuda_bind(st_of(b)->device, g, out);
}

static void c_grammar_free(vd_backend *b, vd_gram *g)
{
	cudaSetDevice(st_of(b)->device);
	cat_cuda_free(st_of(b)->device, g);
}

static void c_catalog_init(vd_stream *s, vd_gram *g, const vd_cat_step *c)
{
	ENTER(s);
	if (int e = cat_cuda_init(s->st, pdl_of(s), g, c))
		fail(s, e);
}

static void c_catalog_step(vd_stream *s, vd_gram *g, const vd_cat_step *c)
{
	ENTER(s);
	if (int e = cat_cuda_step_pdl(s->st, pdl_of(s), g, c))
		fail(s, e);
}

/* ---- the towers' operations (tower.cu) ----
 *
 * Each runs tower.cu's kernels on the stream; an error they return (a bad
 * dtype, a shape past their limits, a failed launch) is the stream's. */

static void *tow_scratch(void *s, size_t bytes) { return scratch((vd_stream *)s, bytes); }

#define TOW(s, call)                                        \
	do {                                                \
		ENTER(s);                                   \
		tow_ctx ctx_ {(s)->st, tow_scratch, (s)};   \
		if (int e_ = call)                          \
			fail((s), e_);                      \
	} while (0)

static void c_pointwise(vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor w)
{
	TOW(s, tow_pointwise(&ctx_, y, x, w));
}

static void c_conv2d(vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor w, vd_tensor bias, const vd_conv *g)
{
	TOW(s, tow_conv2d(&ctx_, y, x, w, bias, g));
}

static void c_dwconv2d(vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor w, const vd_conv *g)
{
	TOW(s, tow_dwconv2d(&ctx_, y, x, w, g));
}

static void c_norm_act(vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor w, vd_tensor gamma, vd_tensor res,
                       int64_t dim, float eps, int gelu)
{
	TOW(s, tow_norm_act(&ctx_, y, x, w, gamma, res, dim, eps, gelu));
}

static void c_avgpool2d(vd_stream *s, vd_tensor y, vd_tensor x, int64_t h, int64_t w, int64_t c, int64_t k)
{
	TOW(s, tow_avgpool2d(&ctx_, y, x, h, w, c, k));
}

static void c_upsample_concat(vd_stream *s, vd_tensor y, vd_tensor a, vd_tensor b, int64_t h, int64_t w,
                              int64_t bh, int64_t bw)
{
	TOW(s, tow_upsample_concat(&ctx_, y, a, b, h, w, bh, bw));
}

static void c_transpose(vd_stream *s, vd_tensor y, vd_tensor x)
{
	TOW(s, tow_transpose(&ctx_, y, x));
}

static void c_mqa(vd_stream *s, vd_tensor out, vd_tensor q, vd_tensor k, vd_tensor v, int64_t heads, float scale)
{
	TOW(s, tow_mqa(&ctx_, out, q, k, v, heads, scale));
}

static void c_im2col(vd_stream *s, vd_tensor y, vd_tensor x, const vd_conv *g, int64_t kh, int64_t kw,
                     int64_t stride_w)
{
	TOW(s, tow_im2col(&ctx_, y, x, g, kh, kw, stride_w));
}

static void c_cum_group_norm_relu(vd_stream *s, vd_tensor x, vd_tensor w, float eps)
{
	TOW(s, tow_cum_group_norm_relu(&ctx_, x, w, eps));
}

static void c_local_attention(vd_stream *s, vd_tensor out, vd_tensor q, vd_tensor k, vd_tensor v, vd_tensor pos,
                              vd_tensor valid, int64_t heads, int64_t past, int64_t future, float cap)
{
	TOW(s, tow_local_attention(&ctx_, out, q, k, v, pos, valid, heads, past, future, cap));
}

static void c_dwconv_causal(vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor w)
{
	TOW(s, tow_dwconv_causal(&ctx_, y, x, w));
}

static void c_glu(vd_stream *s, vd_tensor y, vd_tensor x)
{
	TOW(s, tow_glu(&ctx_, y, x));
}

static void c_silu(vd_stream *s, vd_tensor y, vd_tensor x)
{
	TOW(s, tow_silu(&ctx_, y, x));
}

static void c_clip(vd_stream *s, vd_tensor y, vd_tensor x, float lim)
{
	TOW(s, tow_clip(&ctx_, y, x, lim));
}

static vd_backend table_template()
{
	vd_backend t;
	memset(&t, 0, sizeof t);
	t.abi = VD_ABI;
	t.name = "cuda";
	t.alloc = c_alloc;
	t.release = c_release;
	t.bind = c_bind;
	t.unbind = c_unbind;
	t.stream_new = c_stream_new;
	t.stream_free = c_stream_free;
	t.upload = c_upload;
	t.download = c_download;
	t.copy = c_copy;
	t.sync = c_sync;
	t.linear = c_linear;
	t.linear_rows = c_linear_rows;
	t.sparse_mlp = c_sparse_mlp;
	t.rmsnorm = c_rmsnorm;
	t.row_rms = c_row_rms;
	t.scale_rows = c_scale_rows;
	t.mul_rows = c_mul_rows;
	t.sparse_gelu_mul = c_sparse_gelu_mul;
	t.ew = c_ew;
	t.rope = c_rope;
	t.altup_predict = c_altup_predict;
	t.altup_correct = c_altup_correct;
	t.attention = c_attention;
	t.embed = c_embed;
	t.gather = c_gather;
	t.scatter = c_scatter;
	t.copy2d = c_copy2d;
	t.logsumexp = c_logsumexp;
	t.argmax = c_argmax;
	t.select = c_select;
	t.sample = c_sample;
	t.info = c_info;
	t.limits = c_limits;
	t.norm_add = c_norm_add;
	t.router = c_router;
	t.graph_begin = c_graph_begin;
	t.graph_end = c_graph_end;
	t.graph_run = c_graph_run;
	t.graph_free = c_graph_free;
	t.loop_begin = c_loop_begin;
	t.loop_while = c_loop_while;
	t.loop_rows = c_loop_rows;
	t.loop_emit = c_loop_emit;
	t.norm_rope = c_norm_rope;
	t.router_coef = c_router_coef;
	t.grammar_bind = c_grammar_bind;
	t.grammar_free = c_grammar_free;
	t.catalog_init = c_catalog_init;
	t.catalog_step = c_catalog_step;
	t.pointwise = c_pointwise;
	t.conv2d = c_conv2d;
	t.dwconv2d = c_dwconv2d;
	t.norm_act = c_norm_act;
	t.avgpool2d = c_avgpool2d;
	t.upsample_concat = c_upsample_concat;
	t.transpose = c_transpose;
	t.mqa = c_mqa;
	t.im2col = c_im2col;
	t.cum_group_norm_relu = c_cum_group_norm_relu;
	t.local_attention = c_local_attention;
	t.dwconv_causal = c_dwconv_causal;
	t.glu = c_glu;
	t.silu = c_silu;
	t.clip = c_clip;
	return t;
}

static void say(char *err, size_t errlen, const char *fmt, int a, int b, const char *m)
{
	if (err && errlen)
		snprintf(err, errlen, fmt, a, b, m);
}

#define MAXDEV 64
static std::mutex open_mu;
static vd_backend *opened[MAXDEV];

/* cuda_pdl_device: whether device dev's backend launches with PDL (false
 * before it is opened); for catalog.cu's cat_cuda_step. */
bool cuda_pdl_device(int dev)
{
	std::lock_guard<std::mutex> lock(open_mu);
	return dev >= 0 && dev < MAXDEV && opened[dev] && st_of(opened[dev])->pdl;
}

/* count_devices returns the number of CUDA devices; 0 when there is none
 * and -1 when they cannot be counted (a driver older than this build's
 * runtime, a failed query), with the reason in err. */
static int count_devices(char *err, size_t errlen)
{
	int drv = 0, rt = 0;
	cudaDriverGetVersion(&drv);
	cudaRuntimeGetVersion(&rt);
	int count = 0;
	cudaError_t e = cudaGetDeviceCount(&count);
	if (e == cudaErrorInsufficientDriver || (drv > 0 && drv < rt)) {
		say(err, errlen, "cuda: the driver (CUDA %d) is older than this library's runtime (CUDA %d)%s", drv, rt, "");
		return -1;
	}
	if (e == cudaErrorNoDevice || (e == cudaSuccess && count == 0) || drv == 0) {
		say(err, errlen, "cuda: no CUDA device (driver version %d, runtime %d)%s", drv, rt, "");
		return 0;
	}
	if (e != cudaSuccess) {
		say(err, errlen, "cuda: cannot count devices (error %d, runtime %d): %s", (int)e, rt, cudaGetErrorString(e));
		return -1;
	}
	return count < MAXDEV ? count : MAXDEV;
}

/* vd_cuda_device_count returns the number of CUDA devices this library can
 * open as cuda:0 .. cuda:N-1 (at most MAXDEV): 0 when there is none, -1
 * when they cannot be counted, with the reason in err in both cases.
 * Whether each one opens (its compute capability, its memory) is known
 * when vd_cuda_backend opens it. */
extern "C" __attribute__((visibility("default"))) int
vd_cuda_device_count(char *err, size_t errlen)
{
	std::lock_guard<std::mutex> lock(open_mu);
	return count_devices(err, errlen);
}

/* vd_cuda_backend returns the backend of CUDA device device, or NULL with
 * the reason in err (no device, a driver older than this build's runtime,
 * a device older than compute capability 8.0, a failed start). */
extern "C" __attribute__((visibility("default"))) vd_backend *
vd_cuda_backend(int device, char *err, size_t errlen)
{
	std::lock_guard<std::mutex> lock(open_mu);
	if (device < 0 || device >= MAXDEV) {
		say(err, errlen, "cuda: device %d out of range (0..%d)%s", device, MAXDEV - 1, "");
		return nullptr;
	}
	if (opened[device])
		return opened[device];
	int count = count_devices(err, errlen);
	if (count <= 0)
		return nullptr;
	cudaError_t e;
	if (device >= count) {
		say(err, errlen, "cuda: no device %d (%d present)%s", device, count, "");
		return nullptr;
	}
	cudaDeviceProp prop;
	if ((e = cudaGetDeviceProperties(&prop, device)) != cudaSuccess) {
		say(err, errlen, "cuda: device %d: error %d: %s", device, (int)e, cudaGetErrorString(e));
		return nullptr;
	}
	if (prop.major < 8) {
		say(err, errlen, "cuda: device compute capability %d.%d is older than 8.0%s", prop.major, prop.minor, "");
		return nullptr;
	}
	if ((e = cudaSetDevice(device)) != cudaSuccess || (e = cudaFree(0)) != cudaSuccess) {
		say(err, errlen, "cuda: device %d: cannot start (error %d): %s", device, (int)e, cudaGetErrorString(e));
		return nullptr;
	}
	cuda_state *cs = new cuda_state();
	cs->device = device;
	int optin = 0;
	cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
	cs->smem_optin = optin > 0 ? optin - 1024 : 48 * 1024; /* room for the static part */
	const char *pe = getenv("VERDICT_PDL"), *pl = getenv("VERDICT_PDL_LOOP");
	cs->pdl = prop.major >= 9 && !(pe && strcmp(pe, "0") == 0);
	cs->pdl_loop = !(pl && strcmp(pl, "0") == 0);
	if ((e = cudaMalloc(&cs->dev_err, sizeof(int))) != cudaSuccess ||
	    (e = cudaMemset(cs->dev_err, 0, sizeof(int))) != cudaSuccess) {
		say(err, errlen, "cuda: device %d: cannot allocate (error %d): %s", device, (int)e, cudaGetErrorString(e));
		delete cs;
		return nullptr;
	}
	for (void *f : {(void *)k_gemv_q4<1>, (void *)k_gemv_q4<2>, (void *)k_gemv_q4<3>, (void *)k_gemv_q4<4>,
	                (void *)k_gemv_q4<5>, (void *)k_gemv_q4<6>, (void *)k_gemv_q4<7>, (void *)k_gemv_q4<8>})
		cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, cs->smem_optin);
	cudaGetLastError();
	vd_backend *b = new vd_backend(table_template());
	b->state = cs;
	opened[device] = b;
	return b;
}
