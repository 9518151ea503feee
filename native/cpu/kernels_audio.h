/*
 * kernels_audio.h: kernels of Gemma 3n's audio tower (engine/audio).
 *
 * Same conventions as kernels.h: row-major float32, no allocation visible to
 * the caller, nothing kept after return, results independent of the thread
 * count (every output element is computed by one thread in a fixed order).
 */
#ifndef VERDICT_KERNELS_AUDIO_H
#define VERDICT_KERNELS_AUDIO_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Patches of a channels-last image src [t_in, f_in, c] for a 2-D convolution
 * with kernel kt×kf, stride st×sf and pad_t/pad_f zero rows/columns before
 * the first (positions past the end read as zero too): dst [t_out·f_out,
 * kt·kf·c], row (to, fo), column (i·kf + j)·c + ch. */
void vk_audio_im2col(float *dst, const float *src, int64_t t_in, int64_t f_in,
                     int64_t c, int64_t t_out, int64_t f_out, int64_t kt,
                     int64_t kf, int64_t st, int64_t sf, int64_t pad_t,
                     int64_t pad_f);

/* Cumulative group norm over time then ReLU, in place: x [t, fc] with
 * channel = index % c. Mean and variance at step i are over all elements of
 * steps 0..i (the variance accumulates each step's squared deviation from
 * its own cumulative mean); y = relu((x - mean)·rsqrt(var + eps)·w[ch]). */
void vk_audio_cum_group_norm_relu(float *x, int64_t t, int64_t fc, int64_t c,
                                  const float *w, float eps);

/* Local self-attention with relative-position logits. q, k, v, out are
 * [t, heads·d]; pos is [past + future + 1, heads·d], row f for the
 * distance (query - key) = past - f. Query i sees keys j with
 * i - past <= j <= i + future, 0 <= j < t and valid[j] != 0; the logit is
 * q_i·k_j + q_i·pos[past - (i - j)], soft-capped cap·tanh(logit/cap), then a
 * softmax. A query that sees no key gets a zero output row. */
void vk_audio_local_attention(float *out, const float *q, const float *k,
                              const float *v, const float *pos,
                              const uint8_t *valid, int64_t t, int64_t heads,
                              int64_t d, int64_t past, int64_t future,
                              float cap);

/* Causal depthwise 1-D convolution over time: x, y [t, d], w [d, k];
 * y[i, c] = Σ_j w[c, j]·x[i - (k-1) + j, c], x before 0 read as zero.
 * y must not alias x. */
void vk_audio_dwconv_causal(float *y, const float *x, const float *w,
                            int64_t t, int64_t d, int64_t k);

/* vk_audio_simd selects the attention's dot products: 0 portable, 1 (or
 * -1 on first use) the best the CPU has; -1 later only reports. Returns the
 * active one: 0 portable, 1 x86 AVX2+FMA. */
int vk_audio_simd(int level);

/* x = x / (1 + exp(-x)) in place. */
void vk_audio_silu(float *x, int64_t n);

/* Gated linear unit over rows: x [rows, 2d], y [rows, d];
 * y[r, i] = x[r, i]·sigmoid(x[r, d + i]). */
void vk_audio_glu(float *y, const float *x, int64_t rows, int64_t d);

/* x = min(max(x, -lim), lim) in place. */
void vk_audio_clip(float *x, int64_t n, float lim);

#ifdef __cplusplus
}
#endif

#endif
