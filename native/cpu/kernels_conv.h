/*
 * kernels_conv.h: convolution, pooling and 2-D attention kernels (the
 * MobileNet-style vision encoder's operations).
 *
 * Activations are channels-last: an image of h×w pixels and c channels is
 * [h, w, c] row-major, so a 1×1 convolution is a matrix product over pixels.
 * The matrix products run on a packed weight layout (vk_conv_pack) through a
 * register-blocked AVX-512 or AVX2/FMA micro-kernel (portable C otherwise),
 * threaded on the pool of cpu_pool.c. Every output element is computed by
 * one thread in an order fixed by the shapes alone, so results do not depend
 * on the thread count. Denormal inputs and results are flushed to zero while these kernels
 * run (x86 FTZ/DAZ; the caller's floating-point mode is restored).
 */
#ifndef VERDICT_KERNELS_CONV_H
#define VERDICT_KERNELS_CONV_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* vk_conv_set_simd selects the kernel set of this file, the best the CPU
 * has up to level (0 portable, 1 AVX2+FMA, 2 AVX-512F), and returns it. The
 * default is the best, or the one VERDICT_SIMD caps it at (avx2,
 * portable). The matrix products give the same bits in every set. */
int vk_conv_set_simd(int level);

/* Packed B operand: a matrix B[n, k] (PyTorch's weight layout [out, in]) as
 * ceil(n/16) panels of k×16 floats, k-major, columns past n zero. */
int64_t vk_conv_packed_len(int64_t n, int64_t k);
/* vk_conv_pack packs w[n, k]; vk_conv_pack_t packs the transpose of w[k, n]
 * (B[j, p] = w[p·n + j]). dst holds vk_conv_packed_len(n, k) floats. */
void vk_conv_pack(float *dst, const float *w, int64_t n, int64_t k);
void vk_conv_pack_t(float *dst, const float *w, int64_t n, int64_t k);

/* y[i·ldy + j] = sum_p x[i·ldx + p]·B[j, p] for i < m, j < n. */
void vk_gemm_packed(float *y, int64_t ldy, const float *x, int64_t ldx,
                    const float *bp, int64_t m, int64_t n, int64_t k);

/* Full 2-D convolution (groups = 1), channels-last, zero padding:
 * y[oy, ox, o] = bias[o] + sum_{ky,kx,i} x[oy·s − pt + ky, ox·s − pl + kx, i]
 *                                          · W[o, ky, kx, i],
 * with W[cout, k, k, cin] packed by vk_conv_pack(n = cout, k = k·k·cin).
 * bias may be NULL. */
void vk_conv2d(float *y, const float *x, const float *bp, const float *bias,
               int64_t h, int64_t w, int64_t cin, int64_t cout, int64_t oh,
               int64_t ow, int k, int stride, int pad_t, int pad_l);

/* Depthwise convolution, channels-last, zero padding:
 * y[oy, ox, c] = sum_{ky,kx} x[oy·s − pt + ky, ox·s − pl + kx, c]·wt[ky·k + kx, c]. */
void vk_dwconv2d(float *y, const float *x, const float *wt, int64_t h,
                 int64_t w, int64_t c, int64_t oh, int64_t ow, int k,
                 int stride, int pad_t, int pad_l);

/* Average pooling with kernel = stride = k, no padding: [h, w, c] ->
 * [h/k, w/k, c]; each output is the in-order sum of its k·k inputs (rows
 * outer) divided by k·k. */
void vk_avgpool2d(float *y, const float *x, int64_t h, int64_t w, int64_t c,
                  int k);

/* y[p, 0:ca] = a[p, :]; y[p, ca:ca+cb] = b[nearest(p), :] where b is
 * [bh, bw, cb] upsampled to h×w by nearest neighbour (source index
 * floor(dst·bh/h), as PyTorch's 'nearest'). */
void vk_upsample_concat(float *y, const float *a, int64_t ca, const float *b,
                        int64_t cb, int64_t h, int64_t w, int64_t bh,
                        int64_t bw);

/* y[p, c] = x[c, p] for p < hw (CHW -> HWC). */
void vk_chw_to_hwc(float *y, const float *x, int64_t c, int64_t hw);

/* Fused per-pixel norm: for each of rows rows of width c,
 * y = act(x / sqrt(mean(x²) + eps) · w) · gamma + res, where act is tanh-GELU
 * when gelu != 0 (else identity), gamma (NULL: 1) is a per-channel scale
 * and res (NULL: 0) a residual [rows, c]. y may alias x or res. */
void vk_rmsnorm_act(float *y, const float *x, const float *w,
                    const float *gamma, const float *res, int64_t rows,
                    int64_t c, float eps, int gelu);

/* Multi-query attention without mask: q [nq, heads, d], k and v [nk, d]
 * (one key/value head shared by all query heads), out [nq, heads, d]:
 * out[i, h] = softmax_j(scale · q[i, h]·k[j]) · v. Terms of the softmax
 * below e^-60 of the largest are dropped, and denormals are flushed. */
void vk_mqa(float *out, const float *q, const float *k, const float *v,
            int64_t nq, int64_t heads, int64_t nk, int64_t d, float scale);

/* Internal to cpu_conv*.c: the inner loops of one SIMD level. */
#ifdef VK_CONV_INTERNAL
/* Softmax terms exp(t) with t below this are taken as 0 (< 1e-26 of the
 * largest term; keeps denormals out of the attention products). */
#define SOFTMAX_CUT (-60.0f)
typedef struct {
	/* Rows (mr) and 16-column panels (np) of one micro-tile; mr divides
	 * MC (cpu_conv.c) and 48. A is packed in micro-panels of kc×mr. */
	int mr, np;
	/* Micro-kernel: c[r·ldc + j] (+)= sum_p a[p·mr + r]·B[p, j] for r < m,
	 * j < n (n <= np·16; acc: add to c, else overwrite), where B[p, j] is
	 * b[p·16 + j] for j < 16 and b[bs + p·16 + j − 16] after (the next
	 * panel, read only when n > 16). Each c is the sum over p in order,
	 * one fused multiply-add a step from 0, then added to c when acc: the
	 * bits do not depend on the tile or the SIMD level. */
	void (*ukr)(int64_t kc, const float *a, const float *b, int64_t bs,
	            float *c, int64_t ldc, int acc, int m, int n);
	/* As ukr with m = mr, but A read in place: a[r·lda + p]. */
	void (*ukr_rows)(int64_t kc, const float *a, int64_t lda,
	                 const float *b, int64_t bs, float *c, int64_t ldc,
	                 int acc, int n);
	/* One row of vk_rmsnorm_act. */
	void (*norm_row)(float *y, const float *x, const float *w,
	                 const float *gamma, const float *res, int64_t c,
	                 float eps, int gelu);
	/* One output row oy of vk_dwconv2d. */
	void (*dw_row)(float *y, const float *x, const float *wt, int64_t h,
	               int64_t w, int64_t c, int64_t ow, int k, int stride,
	               int pad_t, int pad_l, int64_t oy);
	/* s[j] = exp(scale·(s[j] − max s)) in place; returns the sum. */
	float (*softmax_row)(float *s, int64_t n, float scale);
} vk_conv_ops;
extern const vk_conv_ops vk_conv_ops_avx2;
/* The AVX-512 set: its own micro-kernels, the AVX2 set's row kernels. */
extern const vk_conv_ops vk_conv_ops_avx512;
void vk_conv_norm_row_avx2(float *y, const float *x, const float *w,
                           const float *gamma, const float *res, int64_t c,
                           float eps, int gelu);
void vk_conv_dw_row_avx2(float *y, const float *x, const float *wt, int64_t h,
                         int64_t w, int64_t c, int64_t ow, int k, int stride,
                         int pad_t, int pad_l, int64_t oy);
float vk_conv_softmax_row_avx2(float *s, int64_t n, float scale);
#endif

#ifdef __cplusplus
}
#endif

#endif
