/*
 * linear.cu: the f32 and bf16 products (k_linear, k_linear_f32_tiled,
 * k_linear_small) and the linear op's dispatch by weight type (linear_ids,
 * the table's linear and linear_rows); q4 weights go to q4_linear.cu.
 */
#include "common.cuh"

/* ---- linear ----
 *
 * One warp per output row r, tokens in tiles of LT: the row's weights are
 * read once per tile and every token keeps its own accumulators, so each
 * (token, row) value is computed exactly as it would be alone. Lane l sums
 * its columns (F32: l, l+32, ...; BF16: pairs; Q4: 32-column blocks l,
 * l+32, ...) in order with fmaf, then the warp's fixed shuffle tree. */

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
		linear_q4(s, yd, xd, w, ids, n, nout, grid, block);
		return;
	default:
		fail(s, VDC_EDTYPE);
		return;
	}
	launched(s);
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

void c_linear(vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor w)
{
	ENTER_AS(s, lin_name("linear", x, w));
	linear_ids(s, y, x, w, nullptr, w.rows);
}

void c_linear_rows(vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor w,
                          vd_tensor ids)
{
	ENTER_AS(s, lin_name("linear_rows", x, w));
	linear_ids(s, y, x, w, (const int32_t *)ids.data, elems(ids));
}
