/*
 * tower.cu: the CUDA backend's operations of the vision and audio towers
 * (backend.h, VD_ABI 6), compiled into libverdict_cuda.so beside
 * cuda_backend.cu (build/cuda.sh), whose table calls the tow_* entry points
 * (tower.h).
 *
 * Each op follows its CPU kernel (kernels_conv.h, kernels_audio.h):
 *   - memory ops (upsample_concat, transpose, im2col, avgpool2d, clip) give
 *     its values exactly: a thread per output element (transpose through a
 *     32×32 shared-memory tile);
 *   - pointwise and conv2d: one tiled product (64×64 outputs a block of 256
 *     threads, 4×4 a thread, 16 columns of the operands a step in shared
 *     memory; conv2d reads its im2col view of the image on the fly). Every
 *     output sums its products with fmaf in column order in blocks of the
 *     CPU's K blocking (kc_step below), the blocks added in order, then the
 *     bias: the CPU's arithmetic, so the same bits;
 *   - dwconv2d: a thread per output, the taps in (ky, kx) order with fmaf
 *     (the CPU's order: the same bits);
 *   - norm_act: a warp per row (lane-strided sum of squares, the warp's
 *     shuffle tree), then the CPU's per-element arithmetic with the shared
 *     GELU of device_math.cuh;
 *   - mqa: a block per 32 (query, head) rows, keys in tiles of 32 in shared
 *     memory; pass 1 the rows' largest scores, pass 2 the same scores again
 *     (the same bits), their exponentials (terms under e^-60 dropped, as the
 *     CPU), the sum in key order and the products with v in the CPU's K
 *     blocking, then the division;
 *   - cum_group_norm_relu: per-step sums in double (a block a step), the
 *     cumulative statistics by one thread in step order (staged through
 *     shared memory), the CPU's float arithmetic for the output;
 *   - local_attention: a warp per (query, head), logits in shared memory;
 *   - dwconv_causal, glu, silu: a thread per output, the CPU's operations.
 * No result depends on the batch or the launch: every output is computed by
 * one thread (or warp) in an order fixed by the shapes. Bad dtypes and
 * shapes past the limits return TOW_EDTYPE / TOW_ESHAPE before any launch.
 */
#include "tower.h"

#include "device_math.cuh"

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#define TB 256           /* threads of the elementwise launches */
#define MAXGRID 2147483647LL
#define KC_MAX 320       /* the CPU's K block (VK_CONV_KC in cpu_conv.c) */

static bool f32(vd_tensor t) { return t.dtype == VD_F32 && t.data; }
static bool f32_or_nil(vd_tensor t) { return !t.data || t.dtype == VD_F32; }

/* grid1: blocks of per threads over n, or 0 when n is past one grid. */
static unsigned grid1(int64_t n, int per)
{
	int64_t b = (n + per - 1) / per;
	if (b < 1)
		b = 1;
	return b > MAXGRID ? 0u : (unsigned)b;
}

static int launched() { return (int)cudaGetLastError(); }

/* kc_step: the CPU product's K block (cpu_conv.c): K in ceil(K/320)
 * blocks of equal size, the last shorter. */
static int64_t kc_step(int64_t k)
{
	int64_t nkb = (k + KC_MAX - 1) / KC_MAX;
	if (nkb < 1)
		nkb = 1;
	return (k + nkb - 1) / nkb;
}

/* ---- pointwise, conv2d: the tiled product ---- */

#define GM 64 /* output rows (pixels) a block */
#define GN 64 /* output columns a block */
#define GK 16 /* operand columns a step */

struct conv_geom {
	int h, w, c, ow, k, stride, pad_t, pad_l;
};

/* k_gemm: y[i·ldy + j] = Σ_p A[i, p]·B[j, p] (+ bias[j]) for i < m,
 * j < n, B packed (kernels_conv.h: panels of 16 columns, k-major), A the
 * matrix x (row stride ldx) or, when CONV, the im2col view of the image x
 * (row = output pixel, column = (ky·k + kx)·c + channel). The sum: fmaf in
 * p order from 0 within each block of kcs columns, the blocks' sums added
 * in order (ukr's acc), then the bias, as the CPU. */
template <bool CONV>
__global__ void __launch_bounds__(256) k_gemm(float *__restrict__ y, int64_t ldy, const float *__restrict__ x,
                                              int64_t ldx, const float *__restrict__ bp,
                                              const float *__restrict__ bias, int64_t m, int64_t n, int64_t k,
                                              int64_t kcs, conv_geom g)
{
	__shared__ __align__(16) float As[GK][GM + 4];
	__shared__ __align__(16) float Bs[GK][GN];
	const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
	const int64_t m0 = (int64_t)blockIdx.x * GM, n0 = (int64_t)blockIdx.y * GN;
	const int64_t npad = (n + 15) / 16 * 16;
	const int lk = tid & 15; /* this thread's A column within a step */
	/* The 4 A rows this thread loads: (tid >> 4) + 16·l. */
	int64_t arow[4];
	int iy0[4], ix0[4];
	bool aok[4];
#pragma unroll
	for (int l = 0; l < 4; l++) {
		int64_t i = m0 + (tid >> 4) + 16 * l;
		aok[l] = i < m;
		arow[l] = i;
		iy0[l] = ix0[l] = 0;
		if (CONV && aok[l]) {
			int oy = (int)(i / g.ow), ox = (int)(i - (int64_t)oy * g.ow);
			iy0[l] = oy * g.stride - g.pad_t;
			ix0[l] = ox * g.stride - g.pad_l;
		}
	}
	float t[4][4], tot[4][4];
#pragma unroll
	for (int a = 0; a < 4; a++)
#pragma unroll
		for (int b = 0; b < 4; b++)
			t[a][b] = tot[a][b] = 0.0f;
	bool have = false;
	int64_t next = kcs; /* the next K block's first column */
	for (int64_t k0 = 0; k0 < k; k0 += GK) {
		{
			int64_t p = k0 + lk;
			bool pok = p < k;
			int ky = 0, kx = 0, ci = 0;
			if (CONV && pok) {
				int tap = (int)(p / g.c);
				ci = (int)(p - (int64_t)tap * g.c);
				ky = tap / g.k;
				kx = tap - ky * g.k;
			}
#pragma unroll
			for (int l = 0; l < 4; l++) {
				float v = 0.0f;
				if (aok[l] && pok) {
					if (CONV) {
						int iy = iy0[l] + ky, ix = ix0[l] + kx;
						if (iy >= 0 && iy < g.h && ix >= 0 && ix < g.w)
							v = x[((int64_t)iy * g.w + ix) * g.c + ci];
					} else {
						v = x[arow[l] * ldx + p];
					}
				}
				As[lk][(tid >> 4) + 16 * l] = v;
			}
		}
#pragma unroll
		for (int l = 0; l < 4; l++) {
			int e = tid + 256 * l, kk = e >> 6, cc = e & 63;
			int64_t j = n0 + cc, p = k0 + kk;
			float v = 0.0f;
			if (j < npad && p < k)
				v = bp[(j >> 4) * 16 * k + p * 16 + (j & 15)];
			Bs[kk][cc] = v;
		}
		__syncthreads();
		int64_t kn = k - k0 < GK ? k - k0 : GK;
		if (kn == GK && next >= k0 + GK) {
#pragma unroll
			for (int kk = 0; kk < GK; kk++) {
				float4 av = *(const float4 *)&As[kk][ty * 4];
				float4 bv = *(const float4 *)&Bs[kk][tx * 4];
				float a4[4] = {av.x, av.y, av.z, av.w}, b4[4] = {bv.x, bv.y, bv.z, bv.w};
#pragma unroll
				for (int a = 0; a < 4; a++)
#pragma unroll
					for (int b = 0; b < 4; b++)
						t[a][b] = fmaf(a4[a], b4[b], t[a][b]);
			}
		} else {
			for (int kk = 0; kk < kn; kk++) {
				if (k0 + kk == next) { /* a K block ends: its sum joins the total */
#pragma unroll
					for (int a = 0; a < 4; a++)
#pragma unroll
						for (int b = 0; b < 4; b++) {
							tot[a][b] = have ? tot[a][b] + t[a][b] : t[a][b];
							t[a][b] = 0.0f;
						}
					have = true;
					next += kcs;
				}
				float4 av = *(const float4 *)&As[kk][ty * 4];
				float4 bv = *(const float4 *)&Bs[kk][tx * 4];
				float a4[4] = {av.x, av.y, av.z, av.w}, b4[4] = {bv.x, bv.y, bv.z, bv.w};
#pragma unroll
				for (int a = 0; a < 4; a++)
#pragma unroll
					for (int b = 0; b < 4; b++)
						t[a][b] = fmaf(a4[a], b4[b], t[a][b]);
			}
		}
		__syncthreads();
	}
#pragma unroll
	for (int a = 0; a < 4; a++) {
		int64_t i = m0 + ty * 4 + a;
		if (i >= m)
			continue;
#pragma unroll
		for (int b = 0; b < 4; b++) {
			int64_t j = n0 + tx * 4 + b;
			if (j >= n)
				continue;
			float v = have ? tot[a][b] + t[a][b] : t[a][b];
			if (bias)
				v = v + bias[j];
			y[i * ldy + j] = v;
		}
	}
}

static int gemm(const tow_ctx *c, float *y, int64_t ldy, const float *x, int64_t ldx, const float *bp,
                const float *bias, int64_t m, int64_t n, int64_t k, const conv_geom *g)
{
	if (m <= 0 || n <= 0)
		return 0;
	int64_t gx = (m + GM - 1) / GM, gy = (n + GN - 1) / GN;
	if (gx > MAXGRID || gy > 65535 || k <= 0 || k > ((int64_t)1 << 31))
		return TOW_ESHAPE;
	dim3 grid((unsigned)gx, (unsigned)gy);
	if (g)
		k_gemm<true><<<grid, 256, 0, c->st>>>(y, ldy, x, ldx, bp, bias, m, n, k, kc_step(k), *g);
	else
		k_gemm<false><<<grid, 256, 0, c->st>>>(y, ldy, x, ldx, bp, bias, m, n, k, kc_step(k), conv_geom{});
	return launched();
}

int tow_pointwise(const tow_ctx *c, vd_tensor y, vd_tensor x, vd_tensor w)
{
	if (x.rows <= 0)
		return 0;
	if (!f32(y) || !f32(x) || !f32(w))
		return TOW_EDTYPE;
	return gemm(c, (float *)y.data, w.rows, (const float *)x.data, w.cols, (const float *)w.data, nullptr, x.rows,
	            w.rows, w.cols, nullptr);
}

static bool geom_ok(const vd_conv *g)
{
	const int64_t lim = (int64_t)1 << 30;
	return g->h > 0 && g->w > 0 && g->c > 0 && g->oh > 0 && g->ow > 0 && g->k > 0 && g->stride > 0 &&
	       g->pad_t >= 0 && g->pad_l >= 0 && g->h < lim && g->w < lim && g->c < lim && g->oh < lim &&
	       g->ow < lim && g->h * g->w < lim * 2 && g->oh * g->ow < lim * 2;
}

int tow_conv2d(const tow_ctx *c, vd_tensor y, vd_tensor x, vd_tensor w, vd_tensor bias, const vd_conv *g)
{
	if (!f32(y) || !f32(x) || !f32(w) || !f32_or_nil(bias))
		return TOW_EDTYPE;
	if (!geom_ok(g))
		return TOW_ESHAPE;
	conv_geom cg{(int)g->h, (int)g->w, (int)g->c, (int)g->ow, g->k, g->stride, g->pad_t, g->pad_l};
	return gemm(c, (float *)y.data, w.rows, (const float *)x.data, 0, (const float *)w.data,
	            (const float *)bias.data, g->oh * g->ow, w.rows, (int64_t)g->k * g->k * g->c, &cg);
}

/* ---- dwconv2d: a thread per output ---- */

__global__ void k_dwconv2d(float *__restrict__ y, const float *__restrict__ x, const float *__restrict__ wt,
                           int64_t n, int h, int w, int c, int ow, int k, int stride, int pad_t, int pad_l)
{
	int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (e >= n)
		return;
	int ch = (int)(e % c);
	int64_t pix = e / c;
	int oy = (int)(pix / ow), ox = (int)(pix - (int64_t)oy * ow);
	int iy0 = oy * stride - pad_t, ix0 = ox * stride - pad_l;
	int ky0 = iy0 < 0 ? -iy0 : 0, ky1 = iy0 + k > h ? h - iy0 : k;
	int kx0 = ix0 < 0 ? -ix0 : 0, kx1 = ix0 + k > w ? w - ix0 : k;
	float s = 0.0f;
	for (int ky = ky0; ky < ky1; ky++)
		for (int kx = kx0; kx < kx1; kx++)
			s = fmaf(x[((int64_t)(iy0 + ky) * w + ix0 + kx) * c + ch], wt[((int64_t)ky * k + kx) * c + ch], s);
	y[e] = s;
}

int tow_dwconv2d(const tow_ctx *c, vd_tensor y, vd_tensor x, vd_tensor w, const vd_conv *g)
{
	if (!f32(y) || !f32(x) || !f32(w))
		return TOW_EDTYPE;
	if (!geom_ok(g))
		return TOW_ESHAPE;
	int64_t n = g->oh * g->ow * g->c;
	unsigned gr = grid1(n, TB);
	if (!gr)
		return TOW_ESHAPE;
	k_dwconv2d<<<gr, TB, 0, c->st>>>((float *)y.data, (const float *)x.data, (const float *)w.data, n, (int)g->h,
	                                 (int)g->w, (int)g->c, (int)g->ow, g->k, g->stride, g->pad_t, g->pad_l);
	return launched();
}

/* ---- norm_act: a warp per row ---- */

#define NW 8 /* warps a block */

__global__ void k_norm_act(float *y, const float *x, const float *__restrict__ w, const float *__restrict__ gamma,
                           const float *res, int64_t rows, int64_t dim, float eps, int gelu)
{
	int lane = threadIdx.x & 31;
	int64_t r = (int64_t)blockIdx.x * NW + (threadIdx.x >> 5);
	if (r >= rows)
		return;
	const float *xr = x + r * dim;
	float ss = 0.0f;
	for (int64_t i = lane; i < dim; i += 32)
		ss = fmaf(xr[i], xr[i], ss);
	ss = warp_sum(ss);
	float inv = 1.0f / sqrtf(ss / (float)dim + eps);
	/* Every read of the row is done (the shuffles above wait for the
	 * warp): y may alias x or res, element by element. */
	for (int64_t i = lane; i < dim; i += 32) {
		float v = xr[i] * inv * w[i];
		if (gelu)
			v = d_gelu(v);
		if (gamma)
			v *= gamma[i];
		if (res)
			v += res[r * dim + i];
		y[r * dim + i] = v;
	}
}

int tow_norm_act(const tow_ctx *c, vd_tensor y, vd_tensor x, vd_tensor w, vd_tensor gamma, vd_tensor res,
                 int64_t dim, float eps, int gelu)
{
	int64_t n = x.rows * x.cols;
	if (n <= 0)
		return 0;
	if (!f32(y) || !f32(x) || !f32(w) || !f32_or_nil(gamma) || !f32_or_nil(res))
		return TOW_EDTYPE;
	if (dim <= 0 || n % dim)
		return TOW_ESHAPE;
	int64_t rows = n / dim;
	unsigned gr = grid1(rows, NW);
	if (!gr)
		return TOW_ESHAPE;
	k_norm_act<<<gr, NW * 32, 0, c->st>>>((float *)y.data, (const float *)x.data, (const float *)w.data,
	                                      (const float *)gamma.data, (const float *)res.data, rows, dim, eps,
	                                      gelu);
	return launched();
}

/* ---- avgpool2d, upsample_concat, transpose, im2col: memory ---- */

__global__ void k_avgpool2d(float *__restrict__ y, const float *__restrict__ x, int64_t n, int64_t w, int64_t c,
                            int64_t ow, int k)
{
	int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (e >= n)
		return;
	int64_t ch = e % c, pix = e / c, oy = pix / ow, ox = pix - oy * ow;
	float s = 0.0f;
	for (int ky = 0; ky < k; ky++)
		for (int kx = 0; kx < k; kx++)
			s += x[((oy * k + ky) * w + ox * k + kx) * c + ch];
	y[e] = s / (float)(k * k);
}

int tow_avgpool2d(const tow_ctx *c, vd_tensor y, vd_tensor x, int64_t h, int64_t w, int64_t ch, int64_t k)
{
	if (!f32(y) || !f32(x))
		return TOW_EDTYPE;
	if (h <= 0 || w <= 0 || ch <= 0 || k <= 0 || k > 46340)
		return TOW_ESHAPE;
	int64_t oh = h / k, ow = w / k, n = oh * ow * ch;
	if (n <= 0)
		return 0;
	unsigned gr = grid1(n, TB);
	if (!gr)
		return TOW_ESHAPE;
	k_avgpool2d<<<gr, TB, 0, c->st>>>((float *)y.data, (const float *)x.data, n, w, ch, ow, (int)k);
	return launched();
}

__global__ void k_upsample_concat(float *__restrict__ y, const float *__restrict__ a, int64_t ca,
                                  const float *__restrict__ b, int64_t cb, int64_t n, int64_t h, int64_t w,
                                  int64_t bh, int64_t bw)
{
	int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (e >= n)
		return;
	int64_t cw = ca + cb, p = e / cw, col = e - p * cw;
	if (col < ca) {
		y[e] = a[p * ca + col];
		return;
	}
	int64_t oy = p / w, ox = p - oy * w;
	int64_t sy = oy * bh / h, sx = ox * bw / w;
	y[e] = b[(sy * bw + sx) * cb + col - ca];
}

int tow_upsample_concat(const tow_ctx *c, vd_tensor y, vd_tensor a, vd_tensor b, int64_t h, int64_t w, int64_t bh,
                        int64_t bw)
{
	if (!f32(y) || !f32(a) || !f32(b))
		return TOW_EDTYPE;
	if (h <= 0 || w <= 0 || bh <= 0 || bw <= 0 || a.cols < 0 || b.cols < 0)
		return TOW_ESHAPE;
	int64_t n = h * w * (a.cols + b.cols);
	if (n <= 0)
		return 0;
	unsigned gr = grid1(n, TB);
	if (!gr)
		return TOW_ESHAPE;
	k_upsample_concat<<<gr, TB, 0, c->st>>>((float *)y.data, (const float *)a.data, a.cols, (const float *)b.data,
	                                        b.cols, n, h, w, bh, bw);
	return launched();
}

/* k_transpose: y [cols, rows] = xᵀ through a 32×32 tile (block 32×8). */
__global__ void k_transpose(float *__restrict__ y, const float *__restrict__ x, int64_t rows, int64_t cols)
{
	__shared__ float tile[32][33];
	int64_t c0 = (int64_t)blockIdx.x * 32, r0 = (int64_t)blockIdx.y * 32;
	for (int i = threadIdx.y; i < 32; i += 8) {
		int64_t r = r0 + i, cc = c0 + threadIdx.x;
		if (r < rows && cc < cols)
			tile[i][threadIdx.x] = x[r * cols + cc];
	}
	__syncthreads();
	for (int i = threadIdx.y; i < 32; i += 8) {
		int64_t cc = c0 + i, r = r0 + threadIdx.x;
		if (r < rows && cc < cols)
			y[cc * rows + r] = tile[threadIdx.x][i];
	}
}

int tow_transpose(const tow_ctx *c, vd_tensor y, vd_tensor x)
{
	if (x.rows <= 0 || x.cols <= 0)
		return 0;
	if (!f32(y) || !f32(x))
		return TOW_EDTYPE;
	int64_t gx = (x.cols + 31) / 32, gy = (x.rows + 31) / 32;
	if (gx > MAXGRID || gy > 65535)
		return TOW_ESHAPE;
	k_transpose<<<dim3((unsigned)gx, (unsigned)gy), dim3(32, 8), 0, c->st>>>((float *)y.data,
	                                                                        (const float *)x.data, x.rows, x.cols);
	return launched();
}

__global__ void k_im2col(float *__restrict__ y, const float *__restrict__ x, int64_t n, int64_t h, int64_t w,
                         int64_t c, int64_t ow, int64_t kw, int64_t row, int64_t st, int64_t sw, int64_t pad_t,
                         int64_t pad_l)
{
	int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (e >= n)
		return;
	int64_t p = e / row, col = e - p * row;
	int64_t to = p / ow, fo = p - to * ow;
	int64_t tap = col / c, ch = col - tap * c;
	int64_t i = tap / kw, j = tap - i * kw;
	int64_t ti = to * st + i - pad_t, fi = fo * sw + j - pad_l;
	y[e] = ti < 0 || ti >= h || fi < 0 || fi >= w ? 0.0f : x[(ti * w + fi) * c + ch];
}

int tow_im2col(const tow_ctx *c, vd_tensor y, vd_tensor x, const vd_conv *g, int64_t kh, int64_t kw,
               int64_t stride_w)
{
	if (g->oh <= 0 || g->ow <= 0)
		return 0;
	if (!f32(y) || !f32(x))
		return TOW_EDTYPE;
	if (g->h < 0 || g->w < 0 || g->c <= 0 || kh <= 0 || kw <= 0 || g->stride <= 0 || stride_w <= 0 ||
	    g->pad_t < 0 || g->pad_l < 0)
		return TOW_ESHAPE;
	int64_t row = kh * kw * g->c, n = g->oh * g->ow * row;
	unsigned gr = grid1(n, TB);
	if (!gr)
		return TOW_ESHAPE;
	k_im2col<<<gr, TB, 0, c->st>>>((float *)y.data, (const float *)x.data, n, g->h, g->w, g->c, g->ow, kw, row,
	                               g->stride, stride_w, g->pad_t, g->pad_l);
	return launched();
}

/* ---- mqa ----
 *
 * Rows are (query, head) pairs, q's row r at q + r·d (q [nq, heads·d]).
 * A block of 256 threads takes MQ_R rows: thread (r = tid/8, s = tid%8)
 * computes the scores of row r with keys s, s+8, ... of each tile (fmaf in
 * d order, the CPU's product for d <= 320) and the outputs of row r at
 * columns s, s+8, ... (fmaf in key order, the CPU's K blocks of kcs keys). */

#define MQ_R 32
#define MQ_K 32
#define MQ_MAXD 128

__global__ void __launch_bounds__(256) k_mqa(float *__restrict__ out, const float *__restrict__ q,
                                             const float *__restrict__ kt, const float *__restrict__ vt,
                                             int64_t rows, int nk, int d, float scale, int kcs)
{
	extern __shared__ float sm[];
	const int dp = d + 1;
	float *Qs = sm;                 /* [MQ_R][d+1] */
	float *Ks = Qs + MQ_R * dp;     /* [MQ_K][d+1] */
	float *Vs = Ks + MQ_K * dp;     /* [MQ_K][d] */
	float *Ps = Vs + MQ_K * d;      /* [MQ_R][MQ_K+1] */
	const int tid = threadIdx.x, r = tid >> 3, s = tid & 7;
	const int64_t r0 = (int64_t)blockIdx.x * MQ_R;
	for (int e = tid; e < MQ_R * d; e += 256) {
		int rr = e / d, cc = e - rr * d;
		Qs[rr * dp + cc] = r0 + rr < rows ? q[(r0 + rr) * d + cc] : 0.0f;
	}
	/* Pass 1: the row's largest score. */
	float mx = -INFINITY;
	for (int j0 = 0; j0 < nk; j0 += MQ_K) {
		__syncthreads();
		for (int e = tid; e < MQ_K * d; e += 256) {
			int jj = e / d, cc = e - jj * d;
			Ks[jj * dp + cc] = j0 + jj < nk ? kt[(int64_t)(j0 + jj) * d + cc] : 0.0f;
		}
		__syncthreads();
		float sc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
		for (int p = 0; p < d; p++) {
			float qv = Qs[r * dp + p];
#pragma unroll
			for (int u = 0; u < 4; u++)
				sc[u] = fmaf(qv, Ks[(s + 8 * u) * dp + p], sc[u]);
		}
#pragma unroll
		for (int u = 0; u < 4; u++)
			if (j0 + s + 8 * u < nk)
				mx = sc[u] > mx ? sc[u] : mx;
	}
	for (int o = 1; o < 8; o <<= 1) {
		float other = __shfl_xor_sync(0xffffffffu, mx, o);
		mx = other > mx ? other : mx;
	}
	const float ms = mx * scale;
	/* Pass 2: the exponentials, their sum, the products with v. */
	float acc[MQ_MAXD / 8], tot[MQ_MAXD / 8];
#pragma unroll
	for (int i = 0; i < MQ_MAXD / 8; i++)
		acc[i] = tot[i] = 0.0f;
	bool have = false;
	int next = kcs;
	float sum = 0.0f;
	for (int j0 = 0; j0 < nk; j0 += MQ_K) {
		__syncthreads();
		for (int e = tid; e < MQ_K * d; e += 256) {
			int jj = e / d, cc = e - jj * d;
			bool in = j0 + jj < nk;
			Ks[jj * dp + cc] = in ? kt[(int64_t)(j0 + jj) * d + cc] : 0.0f;
			Vs[jj * d + cc] = in ? vt[(int64_t)(j0 + jj) * d + cc] : 0.0f;
		}
		__syncthreads();
		float sc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
		for (int p = 0; p < d; p++) {
			float qv = Qs[r * dp + p];
#pragma unroll
			for (int u = 0; u < 4; u++)
				sc[u] = fmaf(qv, Ks[(s + 8 * u) * dp + p], sc[u]);
		}
#pragma unroll
		for (int u = 0; u < 4; u++) {
			float t = fmaf(sc[u], scale, -ms);
			Ps[r * (MQ_K + 1) + s + 8 * u] = j0 + s + 8 * u < nk && t >= -60.0f ? d_exp(t) : 0.0f;
		}
		__syncthreads();
		int kn = nk - j0 < MQ_K ? nk - j0 : MQ_K;
		if (s == 0)
			for (int jj = 0; jj < kn; jj++)
				sum += Ps[r * (MQ_K + 1) + jj];
		for (int jj = 0; jj < kn; jj++) {
			if (j0 + jj == next) {
#pragma unroll
				for (int i = 0; i < MQ_MAXD / 8; i++) {
					tot[i] = have ? tot[i] + acc[i] : acc[i];
					acc[i] = 0.0f;
				}
				have = true;
				next += kcs;
			}
			float pe = Ps[r * (MQ_K + 1) + jj];
#pragma unroll
			for (int i = 0; i < MQ_MAXD / 8; i++)
				if (s + 8 * i < d)
					acc[i] = fmaf(pe, Vs[jj * d + s + 8 * i], acc[i]);
		}
	}
	sum = __shfl_sync(0xffffffffu, sum, (int)(threadIdx.x & 31) & ~7); /* the row's thread s = 0 */
	if (r0 + r >= rows)
		return;
	float inv = 1.0f / sum;
#pragma unroll
	for (int i = 0; i < MQ_MAXD / 8; i++)
		if (s + 8 * i < d) {
			float o = have ? tot[i] + acc[i] : acc[i];
			out[(r0 + r) * d + s + 8 * i] = o * inv;
		}
}

int tow_mqa(const tow_ctx *c, vd_tensor out, vd_tensor q, vd_tensor k, vd_tensor v, int64_t heads, float scale)
{
	int64_t nq = q.rows, nk = k.rows, d = k.cols;
	if (nq <= 0 || heads <= 0 || nk <= 0 || d <= 0)
		return 0;
	if (!f32(out) || !f32(q) || !f32(k) || !f32(v))
		return TOW_EDTYPE;
	int64_t rows = nq * heads;
	if (d > MQ_MAXD || nk > (1 << 30))
		return TOW_ESHAPE;
	unsigned gr = grid1(rows, MQ_R);
	if (!gr)
		return TOW_ESHAPE;
	size_t smem = ((size_t)MQ_R * (d + 1) + (size_t)MQ_K * (d + 1) + (size_t)MQ_K * d +
	               (size_t)MQ_R * (MQ_K + 1)) * sizeof(float);
	if (smem > 48 * 1024) {
		cudaError_t e = cudaFuncSetAttribute(k_mqa, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
		if (e != cudaSuccess)
			return (int)e;
	}
	k_mqa<<<gr, 256, smem, c->st>>>((float *)out.data, (const float *)q.data, (const float *)k.data,
	                                (const float *)v.data, rows, (int)nk, (int)d, scale, (int)kc_step(nk));
	return launched();
}

/* ---- cum_group_norm_relu ---- */

#define CG 256 /* threads of the per-step sums */

/* tow_block_sum_d: the block's sum of v in a fixed tree (blockDim.x = CG). */
static __device__ double tow_block_sum_d(double v, double *red)
{
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	if (lane == 0)
		red[w] = v;
	__syncthreads();
	double r = lane < CG / 32 ? red[lane] : 0.0;
	for (int o = 16; o > 0; o >>= 1)
		r += __shfl_xor_sync(0xffffffffu, r, o);
	return r;
}

/* k_cgn_sum: acc[i] = Σ_j x[i, j] (pass 0) or Σ_j (x[i, j] − mean[i])²
 * (pass 1), in double; a block a step. */
__global__ void __launch_bounds__(CG) k_cgn_sum(double *acc, const float *__restrict__ x, const float *mean,
                                                int64_t fc, int pass)
{
	__shared__ double red[CG / 32];
	int64_t i = blockIdx.x;
	const float *xr = x + i * fc;
	double m = pass ? (double)mean[i] : 0.0, s = 0.0;
	for (int64_t j = threadIdx.x; j < fc; j += CG) {
		double dv = (double)xr[j] - m;
		s += pass ? dv * dv : dv;
	}
	s = tow_block_sum_d(s, red);
	if (threadIdx.x == 0)
		acc[i] = s;
}

/* k_cgn_stats: the cumulative statistics, in step order, by thread 0
 * (the block stages acc in shared memory, CG steps at a time): pass 0 the
 * means, pass 1 the reciprocal deviations (the CPU's arithmetic). */
__global__ void __launch_bounds__(CG) k_cgn_stats(const double *acc, float *mean, float *rstd, int64_t t,
                                                  int64_t fc, float eps, int pass)
{
	__shared__ double buf[CG];
	double cum = 0.0;
	for (int64_t i0 = 0; i0 < t; i0 += CG) {
		int64_t n = t - i0 < CG ? t - i0 : CG;
		if (threadIdx.x < n)
			buf[threadIdx.x] = acc[i0 + threadIdx.x];
		__syncthreads();
		if (threadIdx.x == 0)
			for (int64_t j = 0; j < n; j++) {
				int64_t i = i0 + j;
				cum += buf[j];
				float v = (float)(cum / ((double)(i + 1) * (double)fc));
				if (pass)
					rstd[i] = (float)(1.0 / sqrt((double)(v + eps)));
				else
					mean[i] = v;
			}
		__syncthreads();
	}
}

__global__ void k_cgn_apply(float *x, const float *__restrict__ w, const float *mean, const float *rstd,
                            int64_t n, int64_t fc, int64_t c)
{
	int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (e >= n)
		return;
	int64_t i = e / fc, ch = (e - i * fc) % c;
	float y = ((x[e] - mean[i]) * rstd[i]) * w[ch];
	x[e] = y > 0 ? y : 0;
}

int tow_cum_group_norm_relu(const tow_ctx *c, vd_tensor x, vd_tensor w, float eps)
{
	int64_t t = x.rows, fc = x.cols, ch = w.rows * w.cols;
	if (t <= 0 || fc <= 0)
		return 0;
	if (!f32(x) || !f32(w))
		return TOW_EDTYPE;
	if (ch <= 0 || fc % ch || t > MAXGRID)
		return TOW_ESHAPE;
	unsigned gr = grid1(t * fc, TB);
	if (!gr)
		return TOW_ESHAPE;
	size_t need = (size_t)t * (sizeof(double) + 2 * sizeof(float));
	double *acc = (double *)c->scratch(c->owner, need);
	if (!acc)
		return TOW_ESCRATCH;
	float *mean = (float *)(acc + t), *rstd = mean + t;
	float *xd = (float *)x.data;
	k_cgn_sum<<<(unsigned)t, CG, 0, c->st>>>(acc, xd, mean, fc, 0);
	k_cgn_stats<<<1, CG, 0, c->st>>>(acc, mean, rstd, t, fc, eps, 0);
	k_cgn_sum<<<(unsigned)t, CG, 0, c->st>>>(acc, xd, mean, fc, 1);
	k_cgn_stats<<<1, CG, 0, c->st>>>(acc, mean, rstd, t, fc, eps, 1);
	k_cgn_apply<<<gr, TB, 0, c->st>>>(xd, (const float *)w.data, mean, rstd, t * fc, fc, ch);
	return launched();
}

/* ---- local_attention: a warp per (query, head) ---- */

#define LA_W 4          /* warps a block */
#define LA_MAXWIN 3072  /* keys a query may see (shared memory: LA_W·win floats) */

__global__ void k_local_attn(float *__restrict__ out, const float *__restrict__ q, const float *__restrict__ k,
                             const float *__restrict__ v, const float *__restrict__ pos,
                             const int32_t *__restrict__ valid, int64_t t, int64_t heads, int64_t d, int64_t past,
                             int64_t future, float cap, int win)
{
	extern __shared__ float lsm[];
	int lane = threadIdx.x & 31, wi = threadIdx.x >> 5;
	float *lg = lsm + wi * win;
	int64_t gw = (int64_t)blockIdx.x * LA_W + wi;
	if (gw >= t * heads)
		return;
	int64_t i = gw / heads, h = gw - i * heads, hd = heads * d;
	int64_t j0 = i - past > 0 ? i - past : 0;
	int64_t j1 = i + future < t - 1 ? i + future : t - 1;
	const float *qi = q + i * hd + h * d;
	float *o = out + i * hd + h * d;
	float mx = -INFINITY;
	bool any = false;
	for (int64_t j = j0; j <= j1; j++) {
		if (!valid[j]) {
			if (lane == 0)
				lg[j - j0] = -INFINITY;
			continue;
		}
		const float *kj = k + j * hd + h * d, *pj = pos + (past - (i - j)) * hd + h * d;
		float ac = 0.0f, bd = 0.0f;
		for (int64_t cc = lane; cc < d; cc += 32) {
			float qv = qi[cc];
			ac = fmaf(qv, kj[cc], ac);
			bd = fmaf(qv, pj[cc], bd);
		}
		ac = warp_sum(ac);
		bd = warp_sum(bd);
		float l = cap * tanhf((ac + bd) / cap);
		if (lane == 0)
			lg[j - j0] = l;
		mx = l > mx ? l : mx;
		any = true;
	}
	__syncwarp();
	if (!any) {
		for (int64_t cc = lane; cc < d; cc += 32)
			o[cc] = 0.0f;
		return;
	}
	float sum = 0.0f;
	for (int64_t j = j0; j <= j1; j++)
		if (valid[j])
			sum += expf(lg[j - j0] - mx);
	for (int64_t cc = lane; cc < d; cc += 32) {
		float acc = 0.0f;
		for (int64_t j = j0; j <= j1; j++)
			if (valid[j])
				acc = fmaf(expf(lg[j - j0] - mx) / sum, v[j * hd + h * d + cc], acc);
		o[cc] = acc;
	}
}

int tow_local_attention(const tow_ctx *c, vd_tensor out, vd_tensor q, vd_tensor k, vd_tensor v, vd_tensor pos,
                        vd_tensor valid, int64_t heads, int64_t past, int64_t future, float cap)
{
	int64_t t = q.rows;
	if (t <= 0)
		return 0;
	if (!f32(out) || !f32(q) || !f32(k) || !f32(v) || !f32(pos) || valid.dtype != VD_I32 || !valid.data)
		return TOW_EDTYPE;
	if (heads <= 0 || q.cols % heads || past < 0 || future < 0 || past + future + 1 > LA_MAXWIN)
		return TOW_ESHAPE;
	int win = (int)(past + future + 1);
	unsigned gr = grid1(t * heads, LA_W);
	if (!gr)
		return TOW_ESHAPE;
	k_local_attn<<<gr, LA_W * 32, (size_t)LA_W * win * sizeof(float), c->st>>>(
	    (float *)out.data, (const float *)q.data, (const float *)k.data, (const float *)v.data,
	    (const float *)pos.data, (const int32_t *)valid.data, t, heads, q.cols / heads, past, future, cap, win);
	return launched();
}

/* ---- dwconv_causal, glu, silu, clip: a thread per output ---- */

__global__ void k_dwconv_causal(float *__restrict__ y, const float *__restrict__ x, const float *__restrict__ w,
                                int64_t n, int64_t d, int64_t k)
{
	int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (e >= n)
		return;
	int64_t i = e / d, c = e - i * d;
	float s = 0.0f;
	for (int64_t j = 0; j < k; j++) {
		int64_t src = i - (k - 1) + j;
		if (src < 0)
			continue;
		s += w[c * k + j] * x[src * d + c];
	}
	y[e] = s;
}

int tow_dwconv_causal(const tow_ctx *c, vd_tensor y, vd_tensor x, vd_tensor w)
{
	int64_t n = x.rows * x.cols;
	if (x.rows <= 0 || x.cols <= 0)
		return 0;
	if (!f32(y) || !f32(x) || !f32(w))
		return TOW_EDTYPE;
	unsigned gr = grid1(n, TB);
	if (!gr || w.cols <= 0)
		return TOW_ESHAPE;
	k_dwconv_causal<<<gr, TB, 0, c->st>>>((float *)y.data, (const float *)x.data, (const float *)w.data, n, x.cols,
	                                      w.cols);
	return launched();
}

__global__ void k_glu(float *__restrict__ y, const float *__restrict__ x, int64_t n, int64_t d)
{
	int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (e >= n)
		return;
	int64_t r = e / d, i = e - r * d;
	const float *xr = x + r * 2 * d;
	y[e] = xr[i] * (1.0f / (1.0f + expf(-xr[d + i])));
}

int tow_glu(const tow_ctx *c, vd_tensor y, vd_tensor x)
{
	int64_t n = y.rows * y.cols;
	if (y.rows <= 0 || y.cols <= 0)
		return 0;
	if (!f32(y) || !f32(x))
		return TOW_EDTYPE;
	unsigned gr = grid1(n, TB);
	if (!gr)
		return TOW_ESHAPE;
	k_glu<<<gr, TB, 0, c->st>>>((float *)y.data, (const float *)x.data, n, y.cols);
	return launched();
}

/* silu and clip: y may be x (in place). */
__global__ void k_silu(float *y, const float *x, int64_t n)
{
	int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (e >= n)
		return;
	float v = x[e];
	y[e] = v / (1.0f + expf(-v));
}

__global__ void k_clip(float *y, const float *x, int64_t n, float lim)
{
	int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (e >= n)
		return;
	float v = x[e];
	v = v < -lim ? -lim : v;
	y[e] = v > lim ? lim : v;
}

int tow_silu(const tow_ctx *c, vd_tensor y, vd_tensor x)
{
	int64_t n = y.rows * y.cols;
	if (n <= 0)
		return 0;
	if (!f32(y) || !f32(x))
		return TOW_EDTYPE;
	unsigned gr = grid1(n, TB);
	if (!gr)
		return TOW_ESHAPE;
	k_silu<<<gr, TB, 0, c->st>>>((float *)y.data, (const float *)x.data, n);
	return launched();
}

int tow_clip(const tow_ctx *c, vd_tensor y, vd_tensor x, float lim)
{
	int64_t n = y.rows * y.cols;
	if (n <= 0)
		return 0;
	if (!f32(y) || !f32(x))
		return TOW_EDTYPE;
	unsigned gr = grid1(n, TB);
	if (!gr)
		return TOW_ESHAPE;
	k_clip<<<gr, TB, 0, c->st>>>((float *)y.data, (const float *)x.data, n, lim);
	return launched();
}

/* ---- clamp (Gemma 4's clipped linears, ReLU): a thread per element ---- */

/* y = min(max(x, lo), hi), the CPU's comparisons (a NaN stays NaN); y may
 * be x. */
__global__ void k_clamp(float *y, const float *x, int64_t n, float lo, float hi)
{
	int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (e >= n)
		return;
	float v = x[e];
	v = v < lo ? lo : v;
	y[e] = v > hi ? hi : v;
}

int tow_clamp(const tow_ctx *c, vd_tensor y, vd_tensor x, float lo, float hi)
{
	int64_t n = y.rows * y.cols;
	if (n <= 0)
		return 0;
	if (!f32(y) || !f32(x))
		return TOW_EDTYPE;
	unsigned gr = grid1(n, TB);
	if (!gr)
		return TOW_ESHAPE;
	k_clamp<<<gr, TB, 0, c->st>>>((float *)y.data, (const float *)x.data, n, lo, hi);
	return launched();
}
