/*
 * kernels.h: Verdict's compute-kernel interface.
 *
 * Plain functions over float pointers and element counts, row-major, no
 * allocation visible to the caller and no pointer kept after return. The CPU
 * implementation (cpu_*.c) runs them on a persistent thread pool; another
 * backend (e.g. CUDA over device pointers) can implement the same header.
 *
 * Results never depend on the thread count: every output element is computed
 * by exactly one thread, in an order fixed by the shapes alone. Linear and
 * Attention compute each output row exactly as they would for n == 1.
 */
#ifndef VERDICT_KERNELS_H
#define VERDICT_KERNELS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* vk_init selects the SIMD level and starts threads (n <= 0: keep one). */
void vk_init(int threads);
/* vk_set_threads resizes the pool (n >= 1, caller included). */
void vk_set_threads(int n);
int vk_threads(void);
/* vk_set_simd selects the kernel set: 0 portable, 1 best available. It
 * returns the active one: 0 portable, 1 x86 AVX2+FMA, 2 arm64 NEON. All
 * give bit-identical results. */
int vk_set_simd(int level);

/* y[t, r] = sum_c x[t, c] * w[r, c]; x [n, cols], w [rows, cols], y [n, rows].
 * The bf16 variant takes w as raw bfloat16 bits. */
void vk_linear_f32(float *y, const float *x, const float *w, int64_t n,
                   int64_t rows, int64_t cols);
void vk_linear_bf16(float *y, const float *x, const uint16_t *w, int64_t n,
                    int64_t rows, int64_t cols);

/* Causal (window > 0: sliding-window) attention. q, out [nq, hq, d];
 * k, v [nk, hkv, d]; query i sits at qpos[i]. */
void vk_attention(float *out, const float *q, const float *k, const float *v,
                  const int32_t *qpos, int64_t nq, int64_t nk, int64_t hq,
                  int64_t hkv, int64_t d, int64_t window, float scale);

/* Row ops over rows of width dim. w may be NULL in vk_rmsnorm. */
void vk_rmsnorm(float *y, const float *x, const float *w, int64_t rows,
                int64_t dim, float eps);
void vk_row_rms(float *out, const float *x, int64_t rows, int64_t dim,
                float floor);
void vk_scale_rows(float *x, const float *s, int64_t rows, int64_t dim);
void vk_mul_rows(float *x, const float *w, int64_t rows, int64_t dim);
void vk_sparse_gelu_mul(float *g, const float *u, int64_t rows, int64_t dim,
                        float z);
void vk_logsumexp(float *out, const float *x, int64_t rows, int64_t dim);
void vk_argmax(int32_t *out, const float *x, int64_t rows, int64_t dim);
void vk_rope(float *x, const int32_t *pos, int64_t n, int64_t heads,
             int64_t head_dim, const float *inv_freq);
void vk_altup_predict(float *pred, const float *h, const float *coef,
                      int64_t n, int64_t d);
void vk_altup_correct(float *out, const float *pred, const float *act,
                      const float *c, int64_t n, int64_t d);

/* Elementwise ops over n elements; outputs may alias inputs. */
void vk_gelu_tanh(float *x, int64_t n);
void vk_gelu_mul(float *g, const float *u, int64_t n);
void vk_softcap(float *x, int64_t n, float cap);
void vk_tanh(float *x, int64_t n);
void vk_exp(float *x, int64_t n);
void vk_add(float *y, const float *a, const float *b, int64_t n);
void vk_mul(float *y, const float *a, const float *b, int64_t n);
void vk_div(float *y, const float *a, const float *b, int64_t n);
void vk_add_const(float *x, int64_t n, float c);
void vk_scale(float *x, int64_t n, float s);
void vk_add_scaled(float *y, const float *a, int64_t n, float s);
void vk_bf16_to_f32(float *dst, const uint16_t *src, int64_t n);

#ifdef __cplusplus
}
#endif

#endif
