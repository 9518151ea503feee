/*
 * q4_linear.cu: the q4 products on the float32 cores (k_linear_q4,
 * k_gemv_q4, k_linear_q4_tiled) and the q4 case of the linear op's
 * dispatch (linear_q4, called by linear.cu's linear_ids): the tensor-core
 * product (q4_mma.cu) where it fits, else one of these kernels. The
 * arithmetic is lin_row's (linear.cu), bit for bit, whichever kernel runs.
 */
#include "common.cuh"
#include "q4_mma.h"

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
					float wv = fmaf(sc, q4_wnib(qv, b), off);
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
					float wv = fmaf(sc[i], q4_wnib(w4, b), off[i]);
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
#pragma unroll
			for (int k = 0; k < RW; k++) {
				float wv = fmaf(sc[k], q4_wnib(qv[k], b), off[k]);
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

/* linear_q4: the q4 case of linear_ids (linear.cu): y = x·wᵀ for n tokens
 * (rows ids of w when ids is set, nout of them); grid and block are
 * linear_ids' (k_linear_q4 takes grid.x). */
void linear_q4(vd_stream *s, float *yd, const float *xd, vd_tensor w, const int32_t *ids, int64_t n, int64_t nout,
               dim3 grid, dim3 block)
{
	int64_t cols = w.cols;
	if (((uintptr_t)w.data & 3) != 0 || cols % 32 != 0) {
		fail(s, VDC_EDTYPE);
		return;
	}
	if (q4_mma_fits(w.data, cols, w.group)) {
		size_t pb = q4_mma_scratch_bytes(n, nout, cols, false);
		if (!grow_scratch(s, &s->qpart, &s->qpart_n, pb, (size_t)256 << 20))
			return;
		check(s, q4_mma(s->st, pdl_of(s), yd, xd, (const uint8_t *)w.data, (const float *)w.aux, ids, n, nout,
		                cols, lg2(w.group), s->qpart, s->qpart_n));
		return;
	}
	if (n > QT) {
		dim3 tg(blocks_for(nout, LW * RW), (unsigned)((n + QT - 1) / QT));
		launch(s, k_linear_q4_tiled, tg, block, 0, yd, xd, (const uint8_t *)w.data, (const float *)w.aux, ids, n,
		                                           nout, cols, lg2(w.group));
	} else if (!gemv_q4(s, yd, xd, w, ids, n, nout))
		launch(s, k_linear_q4, grid.x, block, 0, yd, xd, (const uint8_t *)w.data, (const float *)w.aux, ids, n,
		                                       nout, cols, lg2(w.group));
	launched(s);
}

/* q4_linear_init: k_gemv_q4 may use up to smem_optin bytes of dynamic
 * shared memory (vd_cuda_backend, on the device being opened). */
void q4_linear_init(int smem_optin)
{
	for (void *f : {(void *)k_gemv_q4<1>, (void *)k_gemv_q4<2>, (void *)k_gemv_q4<3>, (void *)k_gemv_q4<4>,
	                (void *)k_gemv_q4<5>, (void *)k_gemv_q4<6>, (void *)k_gemv_q4<7>, (void *)k_gemv_q4<8>})
		cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_optin);
}

/* c_linears: the parts' products in one q4_mma_group launch where it
 * takes them (every matrix q4 on the tensor cores, up to 8 tokens, fewer
 * launches than apart: the same bits; two parts where the second's GELU
 * product goes into the first's y as one pair part); else each part's
 * c_linear, then its GELU product by c_ew (into gelu_mul with
 * gelu_into), in order, as the operations apart. VERDICT_LINEARS=0:
 * always apart, for comparisons; VERDICT_Q4_PAIR=0: a pair as the gate's
 * product, then the up product's launch with its GELU product;
 * VERDICT_Q4_MIXED=0: parts with their own x one by one. */
static void linears(vd_stream *s, const vd_linears *l);

void c_linears(vd_stream *s, const vd_linears *l)
{
	ENTER(s);
	linears(s, l);
}

static void linears(vd_stream *s, const vd_linears *l)
{
	static const bool on = !env_is("VERDICT_LINEARS", "0");
	int np = l->nparts;
	vd_tensor x = l->x;
	if (np < 1 || np > Q4_MMA_PARTS || x.rows <= 0) {
		if (np != 0 && x.rows > 0)
			fail(s, VDC_ESHAPE);
		return;
	}
	bool group = on && x.dtype == VD_F32;
	/* a part whose GELU product takes an earlier part's y goes after it:
	 * as one pair part (an MLP's gate, then its up product into it) where
	 * q4_mma_group takes it, else one by one; so does a part whose own x
	 * is another part's y (one by one) */
	for (int i = 0; i < np; i++)
		for (int j = 0; j < np; j++) {
			if (j != i && l->gelu_mul[i].data && l->gelu_mul[i].data == l->y[j].data)
				group = group && np == 2 && i == 1 && j == 0 && l->gelu_into[1] && !l->gelu_mul[0].data;
			if (j != i && l->xs[i].data && l->xs[i].data == l->y[j].data)
				group = false;
		}
	static const bool pair_on = !env_is("VERDICT_Q4_PAIR", "0");
	static const bool mixed_on = !env_is("VERDICT_Q4_MIXED", "0");
	for (int i = 0; i < np; i++)
		group = group && (mixed_on || !l->xs[i].data);
	bool pair = group && np == 2 && l->gelu_mul[1].data && l->gelu_mul[1].data == l->y[0].data && !l->xs[0].data &&
	            !l->xs[1].data;
	if (pair && pair_on) {
		vd_tensor w0 = l->w[0], w1 = l->w[1], y0 = l->y[0], y1 = l->y[1];
		group = w0.dtype == VD_Q4 && w1.dtype == VD_Q4 && w0.rows == w1.rows && w0.cols == x.cols &&
		        w1.cols == x.cols && w0.group == w1.group && y0.dtype == VD_F32 && y1.dtype == VD_F32 &&
		        y0.rows == x.rows && y1.rows == x.rows && y0.cols == w0.rows && y1.cols == w1.rows &&
		        q4_mma_fits(w0.data, w0.cols, w0.group) && q4_mma_fits(w1.data, w1.cols, w1.group);
		if (group) {
			q4_mma_part p = {(float *)y1.data, (float *)y0.data, (const uint8_t *)w1.data, (const float *)w1.aux,
			                 w1.rows, lg2(w1.group), true, (const uint8_t *)w0.data, (const float *)w0.aux};
			size_t b = q4_mma_scratch_bytes(x.rows, 0, x.cols, true);
			if (!grow_scratch(s, &s->qpart, &s->qpart_n, b, (size_t)256 << 20))
				return;
			cudaError_t e;
			if (q4_mma_group(s->st, pdl_of(s), &p, 1, (const float *)x.data, x.rows, x.cols, s->qpart, s->qpart_n,
			                 &e)) {
				check(s, e);
				return;
			}
		}
	}
	if (pair) { /* the gate alone, then the up product with its GELU product */
		c_linear(s, l->y[0], x, l->w[0]);
		vd_linears up = *l;
		up.y[0] = l->y[1], up.w[0] = l->w[1], up.gelu_mul[0] = l->gelu_mul[1], up.gelu_into[0] = 1;
		up.nparts = 1;
		linears(s, &up);
		return;
	}
	q4_mma_part parts[Q4_MMA_PARTS];
	for (int i = 0; i < np && group; i++) {
		vd_tensor w = l->w[i], y = l->y[i], m = l->gelu_mul[i], px = l->xs[i].data ? l->xs[i] : x;
		group = w.dtype == VD_Q4 && px.dtype == VD_F32 && px.rows == x.rows && w.cols == px.cols &&
		        y.dtype == VD_F32 && y.rows == x.rows && y.cols == w.rows &&
		        (!m.data || (m.dtype == VD_F32 && elems(m) >= elems(y))) && q4_mma_fits(w.data, w.cols, w.group);
		/* mul = gelu(mul)·y is ew's over mul's elements: y's shape */
		group = group && !(m.data && l->gelu_into[i] && elems(m) != elems(y));
		parts[i] = q4_mma_part{(float *)y.data, (float *)m.data, (const uint8_t *)w.data, (const float *)w.aux,
		                       w.rows, lg2(w.group), m.data && l->gelu_into[i], nullptr, nullptr,
		                       l->xs[i].data ? (const float *)px.data : nullptr, px.cols};
	}
	if (group) {
		size_t b = q4_mma_scratch_bytes(x.rows, 0, x.cols, true);
		if (!grow_scratch(s, &s->qpart, &s->qpart_n, b, (size_t)256 << 20))
			return;
		cudaError_t e;
		if (q4_mma_group(s->st, pdl_of(s), parts, np, (const float *)x.data, x.rows, x.cols, s->qpart, s->qpart_n,
		                 &e)) {
			check(s, e);
			return;
		}
	}
	for (int i = 0; i < np; i++) {
		c_linear(s, l->y[i], l->xs[i].data ? l->xs[i] : x, l->w[i]);
		if (l->gelu_mul[i].data && l->gelu_into[i])
			c_ew(s, VD_EW_GELU_MUL, l->gelu_mul[i], l->gelu_mul[i], l->y[i], 0);
		else if (l->gelu_mul[i].data)
			c_ew(s, VD_EW_GELU_MUL, l->y[i], l->y[i], l->gelu_mul[i], 0);
	}
}
