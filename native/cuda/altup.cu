/*
 * altup.cu: AltUp's steps around a layer for one token a block of AQ·RB
 * threads (k_altup_wide): the same operations in the same order as
 * k_altup_step (norm.cu) and the separate kernels it stands for, so the
 * same bits, with each thread holding a quarter of the columns.
 *
 * A block's sums keep the RB-thread order of every row kernel (thread t
 * of RB: its columns t, t + RB, ... in order, then block_sum's trees):
 * the rows a sum reads are staged in shared memory and warps 0..LW-1 (or
 * LW..2·LW-1, for a second sum at once) take the RB threads' parts. The
 * router's sums (k_router's order: warp w of LW the w-th part of the
 * columns, lane order, the shuffle tree, warp order) run one output a
 * warp: warp i takes the part i mod LW of output i / LW. Coefficient j
 * is warp j's.
 */
#include "common.cuh"

/* the router outputs of a warp */
#define AO ((RR_OUT + AQ - 1) / AQ)

/* k_altup_wide: k_altup_step for one token a block of AT threads, the
 * rows its sums read staged in shared memory (2·dim floats: ra, pre's row
 * then the prediction's first stream; rb, x's row then the router's
 * input). Before (PRED): streams 1..3 += rmsnorm(pre)·pre_w (with pre),
 * the router of x (the first stream) and its 16 coefficients, the
 * prediction into pred and out = rmsnorm(its first stream)·out_w. After:
 * x += rmsnorm(pre)·pre_w (with pre), the router of x and its 4
 * coefficients, the correction into h and out = h's first stream·out_w.
 * The weights are loaded before pdl_wait and every value of a thread's
 * first AS columns at once after it. */
template <bool PRED>
__global__ void __launch_bounds__(AT) k_altup_wide(vd_altup a)
{
	extern __shared__ float sm[];
	__shared__ float red[LW], red2[LW], wsum[RR_OUT][LW], ys[RR_OUT], cs[16];
	const float *ow = (const float *)a.out_w.data, *pw = (const float *)a.pre_w.data;
	const float *nw = (const float *)a.norm_w.data, *rw = (const float *)a.w.data, *cw = (const float *)a.cw.data;
	int64_t nout = a.w.rows, ncoef = a.cw.rows, dim = a.dim, nd = a.n * dim;
	int T = threadIdx.x, lane = T & 31, wi = T >> 5;
	/* the router's part of this warp: columns [lo, hi) of outputs r0 + AQ·k */
	int cwp = wi % LW, r0 = wi / LW;
	int64_t part = ((dim + LW - 1) / LW + 31) / 32 * 32;
	int64_t lo = cwp * part, hi = lo + part < dim ? lo + part : dim;
	float wr[RR_J][AO], nwv[AS], owv[AS], pwv[AS];
#pragma unroll
	for (int j = 0; j < RR_J; j++) {
		int64_t c = lo + lane + 32 * j;
#pragma unroll
		for (int k = 0; k < AO; k++) {
			int64_t r = r0 + AQ * k;
			wr[j][k] = c < hi && r < nout ? __ldg(rw + r * dim + c) : 0.0f;
		}
	}
#pragma unroll
	for (int s = 0; s < AS; s++) {
		int64_t c = T + (int64_t)s * AT;
		bool on = c < dim;
		nwv[s] = nw && on ? __ldg(nw + c) : 1.0f;
		owv[s] = ow && on ? __ldg(ow + c) : 1.0f;
		pwv[s] = pw && on ? __ldg(pw + c) : 1.0f;
	}
	float cwv = wi < ncoef && lane < nout ? __ldg(cw + wi * nout + lane) : 0.0f;
	pdl_wait();
	pdl_launch();
	int64_t t = blockIdx.x, row = t * dim;
	float *h = (float *)a.h.data, *pred = (float *)a.pred.data;
	float *out = (float *)a.out.data + row, *x = (float *)a.x.data + row;
	float *pr = a.pre.data ? (float *)a.pre.data + row : nullptr;
	float *ra = sm, *rb = sm + dim;
	const float *src = PRED ? h : pred;
	float pv[AS], xv[AS], sv[4][AS];
#pragma unroll
	for (int s = 0; s < AS; s++) {
		int64_t c = T + (int64_t)s * AT;
		bool on = c < dim;
		pv[s] = pr && on ? pr[c] : 0.0f;
		xv[s] = on ? x[c] : 0.0f;
#pragma unroll
		for (int k = 0; k < 4; k++)
			sv[k][s] = on ? src[k * nd + row + c] : 0.0f;
	}
	/* the rows the first sums read: pre's; x's unless pre changes it first (after) */
	bool xlate = !PRED && pr;
#pragma unroll
	for (int s = 0; s < AS; s++) {
		int64_t c = T + (int64_t)s * AT;
		if (c < dim) {
			if (pr)
				ra[c] = pv[s];
			if (!xlate)
				rb[c] = xv[s];
		}
	}
	for (int64_t c = T + (int64_t)AS * AT; c < dim; c += AT) {
		if (pr)
			ra[c] = pr[c];
		if (!xlate)
			rb[c] = x[c];
	}
	__syncthreads();
	if (pr)
		aw_part(ra, dim, 0, red);
	if (!xlate)
		aw_part(rb, dim, pr ? LW : 0, red2);
	__syncthreads();
	if (pr) { /* before: streams 1..3 += rmsnorm(pre)·pre_w; after: x += it; pre normalised in place */
		float inv = rms_inv(aw_total(red), dim, a.eps);
#pragma unroll
		for (int s = 0; s < AS; s++) {
			int64_t c = T + (int64_t)s * AT;
			if (c < dim) {
				float xn = pw ? (pv[s] * inv) * pwv[s] : pv[s] * inv;
				pr[c] = xn;
				if (PRED) {
#pragma unroll
					for (int k = 1; k < 4; k++) {
						sv[k][s] = sv[k][s] + xn;
						h[k * nd + row + c] = sv[k][s];
					}
				} else {
					xv[s] = xv[s] + xn;
					x[c] = xv[s];
					rb[c] = xv[s];
				}
			}
		}
		for (int64_t c = T + (int64_t)AS * AT; c < dim; c += AT) {
			float xn = pw ? (pr[c] * inv) * __ldg(pw + c) : pr[c] * inv;
			pr[c] = xn;
			if (PRED) {
				for (int k = 1; k < 4; k++)
					h[k * nd + row + c] = h[k * nd + row + c] + xn;
			} else {
				x[c] = x[c] + xn;
				rb[c] = x[c];
			}
		}
		if (xlate) { /* x's new row, for the router */
			__syncthreads();
			aw_part(rb, dim, 0, red2);
			__syncthreads();
		}
	}
	/* the router's input, (x·rms_inv)·norm_w·scale, over x's row */
	float xinv = rms_inv(aw_total(red2), dim, a.eps);
#pragma unroll
	for (int s = 0; s < AS; s++) {
		int64_t c = T + (int64_t)s * AT;
		if (c < dim)
			rb[c] = (nw ? (xv[s] * xinv) * nwv[s] : xv[s] * xinv) * a.scale;
	}
	for (int64_t c = T + (int64_t)AS * AT; c < dim; c += AT) {
		float x1 = x[c];
		rb[c] = (nw ? (x1 * xinv) * __ldg(nw + c) : x1 * xinv) * a.scale;
	}
	__syncthreads();
	float acc[AO];
#pragma unroll
	for (int k = 0; k < AO; k++)
		acc[k] = 0.0f;
#pragma unroll
	for (int j = 0; j < RR_J; j++) {
		int64_t c = lo + lane + 32 * j;
		if (c < hi) {
			float xr = rb[c];
#pragma unroll
			for (int k = 0; k < AO; k++)
				acc[k] = fmaf(xr, wr[j][k], acc[k]);
		}
	}
#pragma unroll
	for (int k = 0; k < AO; k++)
		if (r0 + AQ * k < nout) { /* the warp's: every lane shuffles */
			float sr = warp_sum(acc[k]);
			if (lane == 0)
				wsum[r0 + AQ * k][cwp] = sr;
		}
	__syncthreads();
	if (T < nout) {
		float sum = 0.0f;
		for (int k = 0; k < LW; k++)
			sum += wsum[T][k];
		float th = d_tanh(sum);
		((float *)a.y.data)[t * nout + T] = th;
		ys[T] = th;
	}
	__syncthreads();
	if (wi < ncoef) { /* coefficient wi: coef_tail's sum */
		float m = lane < nout ? ys[lane] : 0.0f;
		float c = lane < nout ? fmaf(m, cwv, 0.0f) : 0.0f;
		c = warp_sum(c);
		if (lane == 0) {
			c = a.has_add ? c + a.add : c;
			((float *)a.cy.data)[t * ncoef + wi] = c;
			cs[wi] = c;
		}
	}
	__syncthreads();
	if (PRED) {
		float cf[16];
#pragma unroll
		for (int j = 0; j < 16; j++)
			cf[j] = cs[j];
		float v[AS];
#pragma unroll
		for (int s = 0; s < AS; s++) {
			int64_t c = T + (int64_t)s * AT;
			v[s] = 0.0f;
			if (c < dim) {
				float hv[4] = {sv[0][s], sv[1][s], sv[2][s], sv[3][s]}, o[4];
				altup_pred_elem(o, hv, cf);
#pragma unroll
				for (int k = 0; k < 4; k++)
					pred[k * nd + row + c] = o[k];
				v[s] = o[0];
				ra[c] = o[0];
			}
		}
		for (int64_t c = T + (int64_t)AS * AT; c < dim; c += AT) {
			float hv[4] = {h[row + c], h[nd + row + c], h[2 * nd + row + c], h[3 * nd + row + c]}, o[4];
			altup_pred_elem(o, hv, cf);
			for (int k = 0; k < 4; k++)
				pred[k * nd + row + c] = o[k];
			ra[c] = o[0];
		}
		__syncthreads();
		aw_part(ra, dim, 0, red);
		__syncthreads();
		float inv = rms_inv(aw_total(red), dim, a.eps);
#pragma unroll
		for (int s = 0; s < AS; s++) {
			int64_t c = T + (int64_t)s * AT;
			if (c < dim)
				out[c] = ow ? (v[s] * inv) * owv[s] : v[s] * inv;
		}
		for (int64_t c = T + (int64_t)AS * AT; c < dim; c += AT) {
			float p = ra[c];
			out[c] = ow ? (p * inv) * __ldg(ow + c) : p * inv;
		}
		return;
	}
	float cf[4] = {cs[0], cs[1], cs[2], cs[3]};
#pragma unroll
	for (int s = 0; s < AS; s++) {
		int64_t c = T + (int64_t)s * AT;
		if (c < dim) {
			float p4[4] = {sv[0][s], sv[1][s], sv[2][s], sv[3][s]}, o[4];
			altup_corr_elem(o, p4, 1, xv[s], cf);
#pragma unroll
			for (int k = 0; k < 4; k++)
				h[k * nd + row + c] = o[k];
			out[c] = ow ? o[0] * owv[s] : o[0];
		}
	}
	for (int64_t c = T + (int64_t)AS * AT; c < dim; c += AT) {
		float o[4];
		altup_corr_elem(o, pred + row + c, nd, x[c], cf);
		for (int k = 0; k < 4; k++)
			h[k * nd + row + c] = o[k];
		out[c] = ow ? o[0] * __ldg(ow + c) : o[0];
	}
}

/* altup_wide: launches k_altup_wide for a where it fits (k_altup_step's
 * conditions, the two staged rows in 48 KiB, a warp a coefficient) and
 * VERDICT_ROWS_WIDE is not 0; false otherwise. */
bool altup_wide(vd_stream *s, const vd_altup *a, bool pred)
{
	size_t smem = 2 * (size_t)a->dim * sizeof(float);
	if (!rows_wide() || smem > 48 * 1024 || a->cw.rows > AT / 32 || a->cw.rows > 16)
		return false;
	if (pred)
		launch(s, k_altup_wide<true>, (unsigned)a->n, AT, smem, *a);
	else
		launch(s, k_altup_wide<false>, (unsigned)a->n, AT, smem, *a);
	launched(s);
	return true;
}
