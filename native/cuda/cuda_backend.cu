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

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <vector>

/* Error codes of the backend's own (cudaError_t values are below 1000). */
enum {
	VDC_EDTYPE = 1001,   /* an op over a dtype it does not take */
	VDC_EKEYS = 1002,    /* attention: a query sees more than max_keys keys */
	VDC_ESHARED = 1003,  /* attention: max_keys too large for shared memory */
	VDC_ESCRATCH = 1004, /* scratch allocation failed */
};

struct cuda_state {
	int device;
	int smem_optin; /* the largest dynamic shared memory a block may ask */
	int *dev_err;   /* device-side error flag (attention) */
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

/* ---- device math: the CPU kernels' exp, tanh and GELU, scalar ---- */

__device__ __forceinline__ float bf2f(uint16_t u)
{
	return __uint_as_float((uint32_t)u << 16);
}

__device__ float d_exp(float x)
{
	if (x != x)
		return x;
	const float magic = 12582912.0f;
	x = fminf(88.8f, x);
	x = fmaxf(-104.0f, x);
	float t = fmaf(x, 1.44269504088896341f, magic);
	float n = t - magic;
	float r = fmaf(n, -0.693359375f, x);
	r = fmaf(n, 2.12194440e-4f, r);
	float p = 1.9875691500e-4f;
	p = fmaf(p, r, 1.3981999507e-3f);
	p = fmaf(p, r, 8.3334519073e-3f);
	p = fmaf(p, r, 4.1665795894e-2f);
	p = fmaf(p, r, 1.6666665459e-1f);
	p = fmaf(p, r, 5.0000001201e-1f);
	p = fmaf(p, r * r, r);
	p = p + 1.0f;
	int ni = __float_as_int(t) - __float_as_int(magic);
	int n1 = ni >> 1, n2 = ni - n1;
	float s1 = __int_as_float((n1 + 127) << 23);
	float s2 = __int_as_float((n2 + 127) << 23);
	return (p * s1) * s2;
}

__device__ float d_tanh(float x)
{
	float ax = fabsf(x);
	float z = x * x;
	float p = -5.70498872745e-3f;
	p = fmaf(p, z, 2.06390887954e-2f);
	p = fmaf(p, z, -5.37397155531e-2f);
	p = fmaf(p, z, 1.33314422036e-1f);
	p = fmaf(p, z, -3.33332819422e-1f);
	float small = fmaf(p * z, ax, ax);
	float e = d_exp(ax + ax);
	float large = 1.0f - 2.0f / (e + 1.0f);
	float t = ax < 0.625f ? small : large;
	return __int_as_float(__float_as_int(t) | (__float_as_int(x) & (int)0x80000000));
}

__device__ float d_gelu(float x)
{
	float c3 = ((0.044715f * x) * x) * x;
	float in = 0.7978845608028654f * (x + c3);
	float t = d_tanh(in);
	return (0.5f * x) * (1.0f + t);
}

__device__ __forceinline__ float warp_sum(float v)
{
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

__device__ __forceinline__ float warp_max(float v)
{
	for (int o = 16; o > 0; o >>= 1)
		v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

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
		for (int64_t c = lane; c < cols; c += 32) {
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
		for (int64_t c2 = lane; 2 * c2 < cols; c2 += 32) {
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
		const uint8_t *qr = (const uint8_t *)w + r * (cols / 2);
		const float *sr = so + r * ((cols >> lg) * 2);
		for (int64_t j = 32 * (int64_t)lane; j < cols; j += 32 * 32) {
			const uint32_t *p = (const uint32_t *)(qr + j / 2);
			uint32_t q[4] = {__ldg(p), __ldg(p + 1), __ldg(p + 2), __ldg(p + 3)};
			int64_t g2 = (j >> lg) * 2;
			float s = __ldg(sr + g2), off = __ldg(sr + g2 + 1);
#pragma unroll
			for (int b = 0; b < 32; b++) {
				int byte = b & 15;
				uint32_t v = (q[byte >> 2] >> (8 * (byte & 3))) & 0xffu;
				float nib = (float)(b < 16 ? (v & 15u) : (v >> 4));
				float wv = fmaf(s, nib, off);
#pragma unroll
				for (int t = 0; t < LT; t++)
					if (t < nt)
						acc[t] = fmaf(x[t * ldx + j + b], wv, acc[t]);
			}
		}
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
	if (rr >= nout)
		return;
	int64_t r = ids ? ids[rr] : rr;
	float acc[LT];
	for (int64_t t0 = 0; t0 < n; t0 += LT) {
		int nt = n - t0 < LT ? (int)(n - t0) : LT;
		lin_row<K>(acc, nt, x + t0 * cols, cols, w, so, r, cols, lg, lane);
		if (lane == 0)
			for (int t = 0; t < nt; t++)
				y[(t0 + t) * nout + rr] = acc[t];
	}
}

/* k_linear_q4: the q4 product with the x of QT tokens staged in shared
 * memory, QK columns at a time, for the block's 8 rows (one warp each).
 * Lane l still takes the 32-column blocks l, l+32, ... in order into one
 * accumulator per token, then the shuffle tree: lin_row's arithmetic, bit
 * for bit, with coalesced x loads (a pad word per 32 keeps the lanes' reads
 * on distinct banks) and each weight row read once per QT tokens. */
#define QT 8
#define QK 1024

__global__ void __launch_bounds__(32 * LW) k_linear_q4(float *y, const float *x, const uint8_t *q,
                                                       const float *so, const int32_t *ids, int64_t n,
                                                       int64_t nout, int64_t cols, int lg)
{
	__shared__ float sx[QT][QK + QK / 32];
	int lane = threadIdx.x & 31;
	int64_t rr = (int64_t)blockIdx.x * LW + (threadIdx.x >> 5);
	bool live = rr < nout;
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
				const uint32_t *p = (const uint32_t *)(qr + j / 2);
				uint32_t qv[4] = {__ldg(p), __ldg(p + 1), __ldg(p + 2), __ldg(p + 3)};
				int64_t g2 = (j >> lg) * 2;
				float sc = __ldg(sr + g2), off = __ldg(sr + g2 + 1);
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

static void linear_ids(vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor w,
                       const int32_t *ids, int64_t nout)
{
	int64_t n = x.rows, cols = w.cols;
	if (n <= 0 || nout <= 0)
		return;
	dim3 grid(blocks_for(nout, LW)), block(32 * LW);
	const float *xd = (const float *)x.data;
	float *yd = (float *)y.data;
	switch (w.dtype) {
	case VD_F32:
		k_linear<W_F32><<<grid, block, 0, s->st>>>(yd, xd, w.data, nullptr, ids, n, nout, cols, 0);
		break;
	case VD_BF16:
		if (cols % 2 == 0 && ((uintptr_t)w.data & 3) == 0)
			k_linear<W_BF16P><<<grid, block, 0, s->st>>>(yd, xd, w.data, nullptr, ids, n, nout, cols, 0);
		else
			k_linear<W_BF16><<<grid, block, 0, s->st>>>(yd, xd, w.data, nullptr, ids, n, nout, cols, 0);
		break;
	case VD_Q4:
		if (((uintptr_t)w.data & 3) != 0 || cols % 32 != 0) {
			fail(s, VDC_EDTYPE);
			return;
		}
		k_linear_q4<<<grid, block, 0, s->st>>>(yd, xd, (const uint8_t *)w.data, (const float *)w.aux, ids, n, nout, cols,
		                                       lg2(w.group));
		break;
	default:
		fail(s, VDC_EDTYPE);
		return;
	}
	launched(s);
}

/* ---- sparse MLP ---- */

#define SPB 256

/* k_sp_select: one block a token. cut = mean + std·z of g_t; survivors i
 * (g_i − cut > 0) compacted in increasing i: idx[k] = i, g[k] = g_i − cut;
 * cnt[t] their number. */
__global__ void k_sp_select(float *g, int32_t *idx, int32_t *cnt, int64_t inter,
                            float z)
{
	__shared__ float red[32];
	__shared__ int wc[SPB / 32];
	int64_t t = blockIdx.x;
	float *gr = g + t * inter;
	int32_t *ir = idx + t * inter;
	float a = 0.0f;
	for (int64_t i = threadIdx.x; i < inter; i += SPB)
		a += gr[i];
	float mu = block_sum(a, red) / (float)inter;
	a = 0.0f;
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
 * warp a survivor, the dot product exactly Linear's. */
__global__ void k_sp_up(float *h, const float *g, const int32_t *idx,
                        const int32_t *cnt, const float *x, const void *uq,
                        const float *uso, int64_t inter, int64_t d, int lg)
{
	int64_t t = blockIdx.y;
	int lane = threadIdx.x & 31;
	int64_t nk = cnt[t];
	for (int64_t k = (int64_t)blockIdx.x * LW + (threadIdx.x >> 5); k < nk;
	     k += (int64_t)gridDim.x * LW) {
		float acc[LT];
		lin_row<W_Q4>(acc, 1, x + t * d, d, uq, uso, idx[t * inter + k], d, lg, lane);
		if (lane == 0)
			h[t * inter + k] = d_gelu(g[t * inter + k]) * acc[0];
	}
}

/* k_sp_down: y[t, c] = Σ_k h_k·downᵀ[idx_k, c]. A block is 32 columns
 * (one a lane) and 8 warps; warp w sums the survivors k ≡ w (mod 8) in
 * increasing k, one fma each, and the 8 partial sums add in warp order: an
 * order fixed by the token's survivors alone. */
__global__ void k_sp_down(float *y, const float *h, const int32_t *idx,
                          const int32_t *cnt, const uint8_t *dq,
                          const float *dso, int64_t inter, int64_t d, int lg)
{
	__shared__ float part[LW][32];
	int64_t t = blockIdx.y;
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
	int64_t c = (int64_t)blockIdx.x * 32 + lane;
	int64_t nk = cnt[t], ldq = d / 2, ldso = (d >> lg) * 2;
	int64_t j = c & ~(int64_t)31, b = c & 31;
	int64_t qo = j / 2 + (b & 15), so = (c >> lg) * 2;
	int hi = b >= 16;
	const int32_t *ir = idx + t * inter;
	const float *hr = h + t * inter;
	float acc = 0.0f;
	if (c < d)
		for (int64_t k = w; k < nk; k += LW) {
			int64_t i = ir[k];
			uint32_t v = __ldg(dq + i * ldq + qo);
			float nib = (float)(hi ? (v >> 4) : (v & 15u));
			const float *sr = dso + i * ldso + so;
			acc = fmaf(hr[k], fmaf(__ldg(sr), nib, __ldg(sr + 1)), acc);
		}
	part[w][lane] = acc;
	__syncthreads();
	if (w == 0 && c < d) {
		float sum = part[0][lane];
		for (int k = 1; k < LW; k++)
			sum += part[k][lane];
		y[t * d + c] = sum;
	}
}

static void *scratch(vd_stream *s, size_t bytes)
{
	if (s->scratch_n < bytes) {
		cudaStreamSynchronize(s->st);
		if (s->scratch)
			cudaFree(s->scratch);
		s->scratch = nullptr;
		s->scratch_n = 0;
		if (cudaMalloc(&s->scratch, bytes) != cudaSuccess) {
			cudaGetLastError();
			s->scratch = nullptr;
			fail(s, VDC_ESCRATCH);
			return nullptr;
		}
		s->scratch_n = bytes;
	}
	return s->scratch;
}

/* ---- row ops ---- */

#define RB 256

__global__ void k_rmsnorm(float *y, const float *x, const float *w, int64_t dim,
                          float eps)
{
	__shared__ float red[32];
	int64_t r = blockIdx.x;
	const float *xr = x + r * dim;
	float *yr = y + r * dim;
	float a = 0.0f;
	for (int64_t i = threadIdx.x; i < dim; i += RB)
		a = fmaf(xr[i], xr[i], a);
	float ss = block_sum(a, red);
	float inv = (float)(1.0 / sqrt((double)(ss / (float)dim + eps)));
	for (int64_t i = threadIdx.x; i < dim; i += RB)
		yr[i] = w ? (xr[i] * inv) * w[i] : xr[i] * inv;
}

__global__ void k_row_rms(float *out, const float *x, int64_t dim, float floor)
{
	__shared__ float red[32];
	int64_t r = blockIdx.x;
	const float *xr = x + r * dim;
	float a = 0.0f;
	for (int64_t i = threadIdx.x; i < dim; i += RB)
		a = fmaf(xr[i], xr[i], a);
	float m = block_sum(a, red) / (float)dim;
	if (m < floor)
		m = floor;
	if (threadIdx.x == 0)
		out[r] = (float)sqrt((double)m);
}

/* k_scale_rows: x[r, i] *= sc[r] (sc) or w[i] (w). */
__global__ void k_scale_rows(float *x, const float *sc, const float *w,
                             int64_t rows, int64_t dim)
{
	int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (e >= rows * dim)
		return;
	x[e] = x[e] * (w ? w[e % dim] : sc[e / dim]);
}

__global__ void k_sparse_gelu_mul(float *g, const float *u, int64_t dim, float z)
{
	__shared__ float red[32];
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
                     float c)
{
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

__global__ void k_altup_predict(float *pred, const float *h, const float *coef,
                                int64_t n, int64_t d)
{
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

/* ---- paged attention ----
 *
 * One block a (query, head). The scores of the visible keys (in position
 * order, across the sequence's entries) sit in shared memory: each a dot
 * product of one warp, lanes over d then the shuffle tree; scaled, soft-
 * maxed (block max, exp, block sum, divide); then every output element is
 * Σ_j p_j·v_j[c] with one fma per key in key order. */
#define AB 256

__global__ void k_attention(vd_attn a, int *err)
{
	extern __shared__ float sc[];
	__shared__ float red[32];
	int64_t i = blockIdx.x / a.hq, h = blockIdx.x % a.hq;
	int64_t d = a.d, G = a.hq / a.hkv, g = h / G, ldk = a.hkv * d;
	const int32_t *qpos = (const int32_t *)a.qpos.data, *qseq = (const int32_t *)a.qseq.data;
	const int32_t *sent = (const int32_t *)a.seq_ent.data, *eblk = (const int32_t *)a.ent_blk.data;
	const int32_t *epos = (const int32_t *)a.ent_pos.data, *elen = (const int32_t *)a.ent_len.data;
	const float *K = (const float *)a.k.data, *V = (const float *)a.v.data;
	const float *q = (const float *)a.q.data + (i * a.hq + h) * d;
	float *o = (float *)a.out.data + (i * a.hq + h) * d;
	int64_t pos = qpos[i], lo = 0, s = qseq[i];
	if (a.window > 0 && pos - a.window + 1 > lo)
		lo = pos - a.window + 1;
	int64_t e0 = sent[s], e1 = sent[s + 1];
	int64_t nkeys = 0;
	for (int64_t e = e0; e < e1; e++) {
		int64_t p0 = epos[e], p1 = p0 + elen[e];
		int64_t first = p0 > lo ? p0 : lo, last = p1 < pos + 1 ? p1 : pos + 1;
		if (last > first)
			nkeys += last - first;
	}
	if (nkeys == 0 || nkeys > a.max_keys) {
		if (nkeys > a.max_keys && threadIdx.x == 0)
			atomicExch(err, VDC_EKEYS);
		for (int64_t c = threadIdx.x; c < d; c += AB)
			o[c] = 0.0f;
		return;
	}
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = AB / 32;
	int64_t kk = 0;
	for (int64_t e = e0; e < e1; e++) {
		int64_t p0 = epos[e], p1 = p0 + elen[e];
		int64_t first = p0 > lo ? p0 : lo, last = p1 < pos + 1 ? p1 : pos + 1;
		if (last <= first)
			continue;
		const float *kb = K + (eblk[e] * a.block + (first - p0)) * ldk + g * d;
		for (int64_t j = w; j < last - first; j += nw) {
			const float *kr = kb + j * ldk;
			float acc = 0.0f;
			for (int64_t c = lane; c < d; c += 32)
				acc = fmaf(q[c], kr[c], acc);
			acc = warp_sum(acc);
			if (lane == 0)
				sc[kk + j] = acc * a.scale;
		}
		kk += last - first;
	}
	__syncthreads();
	float m = -INFINITY;
	for (int64_t j = threadIdx.x; j < nkeys; j += AB)
		m = fmaxf(m, sc[j]);
	float mx = block_max(m, red);
	float sum = 0.0f;
	for (int64_t j = threadIdx.x; j < nkeys; j += AB) {
		float ev = d_exp(sc[j] - mx);
		sc[j] = ev;
		sum += ev;
	}
	float tot = block_sum(sum, red);
	for (int64_t j = threadIdx.x; j < nkeys; j += AB)
		sc[j] = sc[j] / tot;
	__syncthreads();
	for (int64_t c = threadIdx.x; c < d; c += AB) {
		float acc = 0.0f;
		int64_t k2 = 0;
		for (int64_t e = e0; e < e1; e++) {
			int64_t p0 = epos[e], p1 = p0 + elen[e];
			int64_t first = p0 > lo ? p0 : lo, last = p1 < pos + 1 ? p1 : pos + 1;
			if (last <= first)
				continue;
			const float *vb = V + (eblk[e] * a.block + (first - p0)) * ldk + g * d + c;
			for (int64_t j = 0; j < last - first; j++)
				acc = fmaf(sc[k2 + j], vb[j * ldk], acc);
			k2 += last - first;
		}
		o[c] = acc;
	}
}

/* ---- memory work and reductions ---- */

__global__ void k_embed(float *y, const void *t, const float *so, int dtype,
                        const int32_t *ids, int64_t n, int64_t C, int lg,
                        float scale)
{
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
	int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (j < n)
		out[j] = x[(int64_t)row[j] * cols + col[j]];
}

/* ---- the table ---- */

#define EW 256
#define ENTER(s) cudaSetDevice((s)->dev)

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
	return s;
}

static void c_stream_free(vd_stream *s)
{
	if (!s)
		return;
	ENTER(s);
	cudaStreamSynchronize(s->st);
	if (s->scratch)
		cudaFree(s->scratch);
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
	ENTER(s);
	check(s, cudaStreamSynchronize(s->st));
	int *flag = st_of(s->b)->dev_err;
	int e = 0;
	if (cudaMemcpy(&e, flag, sizeof e, cudaMemcpyDeviceToHost) == cudaSuccess && e) {
		fail(s, e);
		int zero = 0;
		cudaMemcpy(flag, &zero, sizeof zero, cudaMemcpyHostToDevice);
	}
	return s->err;
}

static void c_linear(vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor w)
{
	ENTER(s);
	linear_ids(s, y, x, w, nullptr, w.rows);
}

static void c_linear_rows(vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor w,
                          vd_tensor ids)
{
	ENTER(s);
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
	k_sp_select<<<(unsigned)n, SPB, 0, s->st>>>((float *)g.data, (int32_t *)idx.data, cnt, inter, z);
	launched(s);
	int64_t gx = (inter + LW - 1) / LW;
	dim3 ug((unsigned)(gx < 128 ? gx : 128), (unsigned)n);
	k_sp_up<<<ug, 32 * LW, 0, s->st>>>((float *)h.data, (const float *)g.data, (const int32_t *)idx.data, cnt,
	                                   (const float *)x.data, up.data, (const float *)up.aux, inter, d, lg);
	launched(s);
	dim3 dg(blocks_for(d, 32), (unsigned)n);
	k_sp_down<<<dg, 32 * LW, 0, s->st>>>((float *)y.data, (const float *)h.data, (const int32_t *)idx.data, cnt,
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
	k_rmsnorm<<<(unsigned)rows, RB, 0, s->st>>>((float *)y.data, (const float *)x.data, (const float *)w.data, dim, eps);
	launched(s);
}

static void c_row_rms(vd_stream *s, vd_tensor out, vd_tensor x, int64_t dim,
                      float floor)
{
	ENTER(s);
	int64_t rows = elems(out);
	if (rows <= 0)
		return;
	k_row_rms<<<(unsigned)rows, RB, 0, s->st>>>((float *)out.data, (const float *)x.data, dim, floor);
	launched(s);
}

static void c_scale_rows(vd_stream *s, vd_tensor x, vd_tensor sc, int64_t dim)
{
	ENTER(s);
	int64_t rows = elems(sc);
	if (rows * dim <= 0)
		return;
	k_scale_rows<<<blocks_for(rows * dim, EW), EW, 0, s->st>>>((float *)x.data, (const float *)sc.data, nullptr, rows, dim);
	launched(s);
}

static void c_mul_rows(vd_stream *s, vd_tensor x, vd_tensor w)
{
	ENTER(s);
	int64_t dim = elems(w), rows = dim ? elems(x) / dim : 0;
	if (rows * dim <= 0)
		return;
	k_scale_rows<<<blocks_for(rows * dim, EW), EW, 0, s->st>>>((float *)x.data, nullptr, (const float *)w.data, rows, dim);
	launched(s);
}

static void c_sparse_gelu_mul(vd_stream *s, vd_tensor g, vd_tensor u,
                              int64_t dim, float z)
{
	ENTER(s);
	int64_t rows = elems(g) / dim;
	if (rows <= 0)
		return;
	k_sparse_gelu_mul<<<(unsigned)rows, RB, 0, s->st>>>((float *)g.data, (const float *)u.data, dim, z);
	launched(s);
}

static void c_ew(vd_stream *s, int op, vd_tensor y, vd_tensor a, vd_tensor b,
                 float c)
{
	ENTER(s);
	int64_t n = elems(y);
	if (n <= 0)
		return;
	if (op < VD_EW_GELU || op > VD_EW_ADD_SCALED) {
		fail(s, VDC_EDTYPE);
		return;
	}
	k_ew<<<blocks_for(n, EW), EW, 0, s->st>>>(op, (float *)y.data, (const float *)a.data, (const float *)b.data, n, c);
	launched(s);
}

static void c_rope(vd_stream *s, vd_tensor x, vd_tensor pos, int64_t heads,
                   int64_t head_dim, vd_tensor inv_freq)
{
	ENTER(s);
	int64_t n = elems(pos), m = n * heads * (head_dim / 2);
	if (m <= 0)
		return;
	k_rope<<<blocks_for(m, EW), EW, 0, s->st>>>((float *)x.data, (const int32_t *)pos.data, n, heads, head_dim,
	                                            (const float *)inv_freq.data);
	launched(s);
}

static void c_altup_predict(vd_stream *s, vd_tensor pred, vd_tensor h,
                            vd_tensor coef, int64_t n, int64_t d)
{
	ENTER(s);
	if (n * d <= 0)
		return;
	k_altup_predict<<<blocks_for(n * d, EW), EW, 0, s->st>>>((float *)pred.data, (const float *)h.data,
	                                                         (const float *)coef.data, n, d);
	launched(s);
}

static void c_altup_correct(vd_stream *s, vd_tensor out, vd_tensor pred,
                            vd_tensor act, vd_tensor c, int64_t n, int64_t d)
{
	ENTER(s);
	if (n * d <= 0)
		return;
	k_altup_correct<<<blocks_for(n * d, EW), EW, 0, s->st>>>((float *)out.data, (const float *)pred.data,
	                                                         (const float *)act.data, (const float *)c.data, n, d);
	launched(s);
}

static void c_attention(vd_stream *s, const vd_attn *a)
{
	ENTER(s);
	int64_t nq = a->q.rows;
	if (nq <= 0 || a->hq <= 0)
		return;
	int64_t mk = a->max_keys > 0 ? a->max_keys : 1;
	size_t smem = (size_t)mk * sizeof(float);
	cuda_state *cs = st_of(s->b);
	if (smem > (size_t)cs->smem_optin) {
		fail(s, VDC_ESHARED);
		return;
	}
	if (smem > 48 * 1024)
		check(s, cudaFuncSetAttribute(k_attention, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
	vd_attn c = *a;
	c.max_keys = mk;
	k_attention<<<(unsigned)(nq * a->hq), AB, smem, s->st>>>(c, cs->dev_err);
	launched(s);
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
	k_embed<<<blocks_for(n * C, EW), EW, 0, s->st>>>((float *)y.data, t.data, (const float *)t.aux, t.dtype,
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
	k_rows<<<blocks_for(n * C, EW), EW, 0, s->st>>>((float *)y.data, (const float *)x.data, (const int32_t *)idx.data, 0, n, C);
	launched(s);
}

static void c_scatter(vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor idx)
{
	ENTER(s);
	int64_t n = elems(idx), C = x.cols;
	if (n * C <= 0)
		return;
	k_rows<<<blocks_for(n * C, EW), EW, 0, s->st>>>((float *)y.data, (const float *)x.data, (const int32_t *)idx.data, 1, n, C);
	launched(s);
}

static void c_copy2d(vd_stream *s, vd_tensor y, int64_t ys, vd_tensor x,
                     int64_t xs, int64_t rows, int64_t cols)
{
	ENTER(s);
	if (rows * cols <= 0)
		return;
	k_copy2d<<<blocks_for(rows * cols, EW), EW, 0, s->st>>>((float *)y.data, ys, (const float *)x.data, xs, rows, cols);
	launched(s);
}

static void c_logsumexp(vd_stream *s, vd_tensor out, vd_tensor x)
{
	ENTER(s);
	if (x.rows <= 0 || x.cols <= 0)
		return;
	k_logsumexp<<<(unsigned)x.rows, RB, 0, s->st>>>((float *)out.data, (const float *)x.data, x.cols);
	launched(s);
}

static void c_argmax(vd_stream *s, vd_tensor out, vd_tensor x)
{
	ENTER(s);
	if (x.rows <= 0 || x.cols <= 0)
		return;
	k_argmax<<<(unsigned)x.rows, RB, 0, s->st>>>((int32_t *)out.data, (const float *)x.data, x.cols);
	launched(s);
}

static void c_select(vd_stream *s, vd_tensor out, vd_tensor x, vd_tensor row,
                     vd_tensor col)
{
	ENTER(s);
	int64_t n = elems(row);
	if (n <= 0)
		return;
	k_select<<<blocks_for(n, EW), EW, 0, s->st>>>((float *)out.data, (const float *)x.data, (const int32_t *)row.data,
	                                              (const int32_t *)col.data, n, x.cols);
	launched(s);
}

/* c_sample: cpu_sample's algorithm on a host copy of the logits (a
 * sampling step is one row; its cost is the copy). Candidates are ordered
 * by logit, ties by lower id: a strict order, so the top k and their order
 * are the CPU's. */
static void c_sample(vd_stream *s, vd_tensor out, vd_tensor x, vd_sampling p)
{
	ENTER(s);
	int64_t V = x.cols;
	if (V <= 0)
		return;
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

/* ---- the catalog step (catalog.cu) ---- */

int cat_cuda_bind(int dev, const vd_grammar *g, vd_gram **out);
void cat_cuda_free(int dev, vd_gram *g);
int cat_cuda_init(cudaStream_t st, vd_gram *g, const vd_cat_step *c);
int cat_cuda_step(cudaStream_t st, vd_gram *g, const vd_cat_step *c);

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
	if (int e = cat_cuda_init(s->st, g, c))
		fail(s, e);
}

static void c_catalog_step(vd_stream *s, vd_gram *g, const vd_cat_step *c)
{
	ENTER(s);
	if (int e = cat_cuda_step(s->st, g, c))
		fail(s, e);
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
	t.grammar_bind = c_grammar_bind;
	t.grammar_free = c_grammar_free;
	t.catalog_init = c_catalog_init;
	t.catalog_step = c_catalog_step;
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
	int drv = 0, rt = 0;
	cudaDriverGetVersion(&drv);
	cudaRuntimeGetVersion(&rt);
	int count = 0;
	cudaError_t e = cudaGetDeviceCount(&count);
	if (e == cudaErrorInsufficientDriver || (drv > 0 && drv < rt)) {
		say(err, errlen, "cuda: the driver (CUDA %d) is older than this library's runtime (CUDA %d)%s", drv, rt, "");
		return nullptr;
	}
	if (e == cudaErrorNoDevice || (e == cudaSuccess && count == 0) || drv == 0) {
		say(err, errlen, "cuda: no CUDA device (driver version %d, runtime %d)%s", drv, rt, "");
		return nullptr;
	}
	if (e != cudaSuccess) {
		say(err, errlen, "cuda: cannot count devices (error %d, runtime %d): %s", (int)e, rt, cudaGetErrorString(e));
		return nullptr;
	}
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
	if ((e = cudaMalloc(&cs->dev_err, sizeof(int))) != cudaSuccess ||
	    (e = cudaMemset(cs->dev_err, 0, sizeof(int))) != cudaSuccess) {
		say(err, errlen, "cuda: device %d: cannot allocate (error %d): %s", device, (int)e, cudaGetErrorString(e));
		delete cs;
		return nullptr;
	}
	vd_backend *b = new vd_backend(table_template());
	b->state = cs;
	opened[device] = b;
	return b;
}
