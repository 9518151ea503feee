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
 * returns the active one: 0 portable, 1 x86 AVX2+FMA, 2 arm64 NEON, 3 x86
 * AVX-512 (F, BW, DQ, VL). All give bit-identical results. The environment
 * variable VERDICT_SIMD (portable, avx2, avx512, neon), read by vk_init,
 * caps the choice. */
int vk_set_simd(int level);
/* vk_use_simd selects one kernel set by the numbers above; it returns 0
 * (and changes nothing) when this machine lacks it. */
int vk_use_simd(int set);
/* vk_simd_active reports the kernel set in use (numbers as above). */
int vk_simd_active(void);

/* y[t, r] = sum_c x[t, c] * w[r, c]; x [n, cols], w [rows, cols], y [n, rows].
 * The bf16 variant takes w as raw bfloat16 bits. */
void vk_linear_f32(float *y, const float *x, const float *w, int64_t n,
                   int64_t rows, int64_t cols);
void vk_linear_bf16(float *y, const float *x, const uint16_t *w, int64_t n,
                    int64_t rows, int64_t cols);

/* Packed 4-bit weights (q4). A q4 matrix of rows × cols (cols a multiple
 * of 32, groups of g = 1 << lg columns, g a multiple of 32) is two arrays:
 *   q  [rows, cols/2] bytes: in each block of 32 columns (16 bytes), byte b
 *      holds column b in its low nibble and column 16 + b in its high one;
 *   so [rows, cols/g, 2] floats: each group's scale and offset.
 * Weight (r, c) is fmaf(scale, nibble, offset), exactly, everywhere.
 * vk_linear_q4 is vk_linear_f32 over those weights, bit for bit. */
void vk_linear_q4(float *y, const float *x, const uint8_t *q, const float *so,
                  int64_t n, int64_t rows, int64_t cols, int lg);
/* vk_q4_dequant writes rows × cols weights of q4 rows into dst [rows, cols]
 * (q and so point at the first row). */
void vk_q4_dequant(float *dst, const uint8_t *q, const float *so,
                   int64_t rows, int64_t cols, int lg);
/* vk_q4_quantize packs w [rows, cols] into q and so: per group, offset and
 * scale from the group's minimum and maximum, refined by least squares
 * while that lowers the squared error. Deterministic (any thread count). */
void vk_q4_quantize(uint8_t *q, float *so, const float *w, int64_t rows,
                    int64_t cols, int lg);

/* vk_sparse_mlp_q4: Gemma 3n's MLP for a layer with activation sparsity,
 * over q4 weights, reading only the rows that survive the cutoff. Per token
 * t: cut = mean + population std · z of g_t (the gate outputs, [n, inter]);
 * for each i with g_ti − cut > 0 (in increasing i),
 *   h_i = gelu(g_ti − cut) · (x_t · up_i)  (up: q4 [inter, d]),
 * y_t = Σ_i h_i · dT_i (dT: down_proj transposed, q4 [inter, d]), one fused
 * multiply-add per survivor for each element, in increasing i; y [n, d].
 * up_i·x_t is the canonical dot product of vk_linear_q4. g is overwritten;
 * h and idx are scratch [n, inter], cnt [n] and off [n + 1] too. */
void vk_sparse_mlp_q4(float *y, float *g, float *h, int32_t *idx,
                      int32_t *cnt, int32_t *off, const float *x,
                      const uint8_t *uq, const float *uso, const uint8_t *dq,
                      const float *dso, int64_t n, int64_t inter, int64_t d,
                      float z, int lg);

/* Causal (window > 0: sliding-window) attention. q, out [nq, hq, d];
 * k, v [nk, hkv, d]; query i sits at qpos[i]. */
void vk_attention(float *out, const float *q, const float *k, const float *v,
                  const int32_t *qpos, int64_t nq, int64_t nk, int64_t hq,
                  int64_t hkv, int64_t d, int64_t window, float scale);

/* Paged attention: keys and values of a layer in a pool of blocks, k and v
 * [blocks, block, hkv, d]. Query i (position qpos[i]) belongs to sequence
 * qseq[i], whose keys are the entries seq_ent[s] .. seq_ent[s+1]-1: entry e
 * holds ent_len[e] keys at positions ent_pos[e].. in slots 0.. of block
 * ent_blk[e], entries in position order. The query sees its sequence's keys
 * at positions <= qpos[i] (qlim not NULL: <= qlim[i], which a caller sets at
 * qpos[i] or later, as for an image block that attends both ways), and
 * with window > 0 only those > qpos[i] - window (the window counts back
 * from the query's own position). Results equal vk_attention over the same
 * keys in one array, bit for bit. max_keys (a hint for threading) bounds
 * the keys any query sees. */
typedef struct {
	float *out;           /* [nq, hq, d] */
	const float *q;       /* [nq, hq, d] */
	const float *k, *v;   /* the pool */
	const int32_t *qpos, *qseq, *seq_ent, *ent_blk, *ent_pos, *ent_len;
	int64_t nq, hq, hkv, d, block, window, max_keys;
	float scale;
	const int32_t *qlim; /* [nq] or NULL */
} vk_paged_attn;
void vk_paged_attention(const vk_paged_attn *p);

/* Machine limits, for benchmarks: the read bandwidth of a multithreaded
 * streaming read over bytes bytes (GB/s), and the float32 FMA rate of
 * independent FMA chains on every pool thread (GFLOP/s, 2 flops an FMA). */
double vk_bench_read_bandwidth(int64_t bytes, int reps);
double vk_bench_fma_peak(double seconds);

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
