/*
 * sparse_mlp.cu: Gemma 3n's activation-sparse MLP (k_sp_select, k_sp_up,
 * k_sp_down: the table's sparse_mlp) and the sparse GELU product the
 * unfused path takes (sparse_gelu_mul).
 */
#include "common.cuh"

/* ---- sparse MLP ---- */

#define SPB 1024 /* threads of a select block: 8 chunks of E2B's 8,192 gates */
#define SPD 32   /* warps of a down block: the survivors' sum split 32 ways */

/* k_sp_select: one block a token. cut = mean + std·z of g_t; survivors i
 * (g_i − cut > 0) compacted in increasing i: idx[k] = i, g[k] = g_i − cut;
 * cnt[t] their number. Thread j's sums take its gates j, j + SPB, ... in
 * order, then block_sum. Up to SPN·SPB gates (E2B's 8,192) are read once
 * into registers, and every survivor's place comes from one scan of the
 * SPN·32 warps' counts (warp 0, in (chunk, warp) order): two barriers in
 * place of three a chunk of SPB; more gates take the chunks in turn. */
#define SPN 8
static_assert(SPB == 1024, "sp_places takes SPB / 32 = 32 warps' counts a chunk");

/* sp_places: the exclusive prefix sums of the SPN·32 counts c (index u·32
 * + warp) in place, and their total into *tot: warp 0, lane l taking
 * entries SPN·l .. SPN·l + SPN − 1. */
static __device__ __forceinline__ void sp_places(int *c, int *tot)
{
	int lane = threadIdx.x & 31;
	if (threadIdx.x >= 32)
		return;
	int v[SPN], s = 0;
#pragma unroll
	for (int k = 0; k < SPN; k++)
		s += v[k] = c[SPN * lane + k];
	int incl = s;
#pragma unroll
	for (int o = 1; o < 32; o <<= 1) {
		int u = __shfl_up_sync(0xffffffffu, incl, o);
		if (lane >= o)
			incl += u;
	}
	int run = incl - s;
#pragma unroll
	for (int k = 0; k < SPN; k++) {
		c[SPN * lane + k] = run;
		run += v[k];
	}
	if (lane == 31)
		*tot = incl;
}

__global__ void k_sp_select(float *g, int32_t *idx, int32_t *cnt, int64_t inter,
                            float z)
{
	__shared__ float red[32];
	__shared__ int wc[SPN * (SPB / 32)], tot;
	pdl_wait();
	pdl_launch();
	int64_t t = blockIdx.x;
	float *gr = g + t * inter;
	int32_t *ir = idx + t * inter;
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
	if (inter <= SPN * SPB) {
		float gv[SPN];
#pragma unroll
		for (int u = 0; u < SPN; u++) {
			int64_t i = threadIdx.x + (int64_t)u * SPB;
			gv[u] = i < inter ? gr[i] : 0.0f;
		}
		float a = 0.0f;
#pragma unroll
		for (int u = 0; u < SPN; u++)
			if (threadIdx.x + (int64_t)u * SPB < inter)
				a += gv[u];
		float mu = block_sum(a, red) / (float)inter;
		a = 0.0f;
#pragma unroll
		for (int u = 0; u < SPN; u++)
			if (threadIdx.x + (int64_t)u * SPB < inter) {
				float d = gv[u] - mu;
				a = fmaf(d, d, a);
			}
		float var = block_sum(a, red) / (float)inter;
		float cut = mu + (float)sqrt((double)var) * z;
		unsigned m[SPN];
#pragma unroll
		for (int u = 0; u < SPN; u++) { /* every gate was read before block_sum's barriers */
			gv[u] = gv[u] - cut;
			m[u] = __ballot_sync(0xffffffffu, threadIdx.x + (int64_t)u * SPB < inter && gv[u] > 0);
			if (lane == 0)
				wc[u * (SPB / 32) + w] = __popc(m[u]);
		}
		__syncthreads();
		sp_places(wc, &tot);
		__syncthreads();
#pragma unroll
		for (int u = 0; u < SPN; u++)
			if (m[u] >> lane & 1u) {
				int at = wc[u * (SPB / 32) + w] + __popc(m[u] & ((1u << lane) - 1u));
				ir[at] = (int32_t)(threadIdx.x + u * SPB);
				gr[at] = gv[u];
			}
		if (threadIdx.x == 0)
			cnt[t] = tot;
		return;
	}
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
 * distinct banks. (A form loading two 32-column blocks' weights at once
 * measured 7% slower on an H100, 2026-12-07.) */
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
	const float *xt = x + t * d;
#pragma unroll 8
	for (int64_t c = threadIdx.x; c < d; c += blockDim.x)
		xs[c + (c >> 5)] = xt[c];
	__syncthreads();
	for (int64_t k = (int64_t)blockIdx.x * LW + (threadIdx.x >> 5); k < nk; k += (int64_t)gridDim.x * LW) {
		float acc = 0.0f;
		int64_t r = idx[t * inter + k];
		q4_sums<1>(&acc, 1, [&](int, int64_t c) { return xs[c + (c >> 5)]; }, (const uint8_t *)uq, uso, r, d, lg,
		           lane);
		float v = warp_sum(acc);
		if (lane == 0)
			h[t * inter + k] = d_gelu(g[t * inter + k]) * v;
	}
}

/* k_sp_down: y[t, c] = Σ_k h_k·downᵀ[idx_k, c]: survivor class w (k ≡ w
 * mod SPD) sums its survivors in increasing k, one fma each on the
 * weight fmaf(sc, nib, off), and the SPD partial sums add in class order:
 * an order fixed by the token's survivors alone. A block is SPD_COLS
 * columns of one token and SPD warps, warp w class w; lane l takes the
 * 4-byte word l of the block's slice of a row (columns 4q..4q + 3 and
 * 16 + 4q.. of its 32-column run, q = l & 3: eight columns, one group),
 * its survivors SPK at a time (their indices and h staged in shared
 * memory for the block, then their words and scales, all requested
 * before the sums; 16 at a time measured 26% slower than 8 on an H100,
 * 2026-12-07). */
#define SPD_COLS 256
#define SPK 8

__global__ void __launch_bounds__(32 * SPD) k_sp_down(float *y, const float *h, const int32_t *idx,
                                                      const int32_t *cnt, const uint8_t *dq, const float *dso,
                                                      int64_t inter, int64_t d, int lg)
{
	__shared__ float part[SPD][SPD_COLS];
	__shared__ int32_t sidx[2][SPK * SPD];
	__shared__ float sh[2][SPK * SPD];
	static_assert(2 * SPK * SPD <= 32 * SPD, "a thread stages one index or one h");
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
	bool pair = ((uintptr_t)dso & 7) == 0; /* a scale and its offset in one 8-byte load */
	float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
	/* the token's survivors SPK·SPD at a time: their indices and h staged
	 * in shared memory by the block (one load a thread), then warp w takes
	 * k = kb + w + SPD·j in increasing k, as before */
	for (int64_t kb = 0; kb < nk; kb += (int64_t)SPK * SPD) {
		int st = (int)((kb / (SPK * SPD)) & 1); /* two buffers: one barrier a round */
		if (threadIdx.x < SPK * SPD) {
			int64_t k = kb + threadIdx.x;
			sidx[st][threadIdx.x] = k < nk ? ir[k] : -1;
		} else if (threadIdx.x < 2 * SPK * SPD) {
			int64_t k = kb + threadIdx.x - SPK * SPD;
			sh[st][threadIdx.x - SPK * SPD] = k < nk ? hr[k] : 0.0f;
		}
		__syncthreads();
		int32_t ii[SPK];
		float hv[SPK];
#pragma unroll
		for (int j = 0; j < SPK; j++) {
			ii[j] = sidx[st][w + SPD * j];
			hv[j] = sh[st][w + SPD * j];
		}
		uint32_t v[SPK];
		float sc[SPK], of[SPK];
#pragma unroll
		for (int j = 0; j < SPK; j++) {
			bool live = ii[j] >= 0 && on;
			int64_t i = live ? ii[j] : 0;
			v[j] = live ? __ldg(dw + i * ldw + word) : 0u;
			float2 so2 = live ? (pair ? __ldg((const float2 *)(dso + i * ldso + so))
			                          : make_float2(__ldg(dso + i * ldso + so), __ldg(dso + i * ldso + so + 1)))
			                  : make_float2(0.0f, 0.0f);
			sc[j] = so2.x, of[j] = so2.y;
		}
#pragma unroll
		for (int j = 0; j < SPK; j++) {
			if (ii[j] < 0)
				break;
#pragma unroll
			for (int e = 0; e < 4; e++) {
				float lo = q4_nib(v[j], 2 * e), hi = q4_nib(v[j], 2 * e + 1);
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

/* sp_up_blocks: k_sp_up's blocks a token when there are 64 tokens or
 * more (VERDICT_SP_UP_BLOCKS, default 8: each block stages x once for more
 * survivors). Measured on an H100, 2026-12-07 (ncu, a 521-token prefill,
 * k_sp_up over its 20 calls):
 * 1,797 us at 8 blocks, 2,149 at 16, 2,209 at 32 (1,971 with q4_sums at
 * 32); two survivors a warp at once, 1,842 at 8 blocks. */
static int64_t sp_up_blocks()
{
	static const int64_t b = [] {
		const char *e = getenv("VERDICT_SP_UP_BLOCKS");
		long v = e ? strtol(e, nullptr, 10) : 0;
		return (int64_t)(v >= 1 && v <= 1024 ? v : 8);
	}();
	return b;
}

void c_sparse_mlp(vd_stream *s, vd_tensor y, vd_tensor g, vd_tensor h,
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
	int64_t gx = (inter + LW - 1) / LW, gmax = n >= 64 ? sp_up_blocks() : 128;
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

void c_sparse_gelu_mul(vd_stream *s, vd_tensor g, vd_tensor u,
                              int64_t dim, float z)
{
	ENTER(s);
	int64_t rows = elems(g) / dim;
	if (rows <= 0)
		return;
	launch(s, k_sparse_gelu_mul, (unsigned)rows, RB, 0, (float *)g.data, (const float *)u.data, dim, z);
	launched(s);
}
