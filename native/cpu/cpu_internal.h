/* cpu_internal.h: shared declarations of the CPU backend. */
#ifndef VERDICT_CPU_INTERNAL_H
#define VERDICT_CPU_INTERNAL_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels.h"

/* No contraction of a*b+c into fused multiply-adds behind our back: the
 * kernels say where they fuse (v_fma, fmaf), so that every SIMD level gives
 * the same bits. GCC's -std=c11 implies -ffp-contract=off; Clang needs: */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#define VK_INLINE static inline __attribute__((always_inline))

/* Thread pool (cpu_pool.c). A task function is called once per task index
 * in [0, ntasks), by any thread, in any order; the call returns when all
 * tasks are done. */
typedef void (*vk_task_fn)(void *ctx, int64_t task);
void vk_pool_run(int64_t ntasks, vk_task_fn fn, void *ctx);
void vk_pool_resize(int n);
int vk_pool_threads(void);

/* vk_par runs fn over ntasks tasks, on the pool when work (a rough count of
 * flops) is large enough to pay for waking it, else on the caller. */
void vk_par(int64_t ntasks, double work, vk_task_fn fn, void *ctx);

/* vk_scratch returns a per-thread buffer of at least bytes bytes (64-byte
 * aligned, contents undefined). slot < VK_SCRATCH_SLOTS picks one of a few
 * independent buffers. */
#define VK_SCRATCH_SLOTS 8
void *vk_scratch(int slot, size_t bytes);

/* One kernel set per SIMD level, instantiated from the cpu_*_impl.h bodies. */
typedef struct {
	void (*linear)(float *y, const float *x, const void *w, int bf16,
	               int64_t n, int64_t rows, int64_t cols);
	void (*attention)(float *out, const float *q, const float *k,
	                  const float *v, const int32_t *qpos, int64_t nq,
	                  int64_t nk, int64_t hq, int64_t hkv, int64_t d,
	                  int64_t window, float scale);
	void (*rmsnorm)(float *y, const float *x, const float *w, int64_t rows,
	                int64_t dim, float eps);
	void (*row_rms)(float *out, const float *x, int64_t rows, int64_t dim,
	                float floor);
	void (*scale_rows)(float *x, const float *s, int64_t rows, int64_t dim);
	void (*mul_rows)(float *x, const float *w, int64_t rows, int64_t dim);
	void (*sparse_gelu_mul)(float *g, const float *u, int64_t rows,
	                        int64_t dim, float z);
	void (*logsumexp)(float *out, const float *x, int64_t rows, int64_t dim);
	void (*argmax)(int32_t *out, const float *x, int64_t rows, int64_t dim);
	void (*rope)(float *x, const int32_t *pos, int64_t n, int64_t heads,
	             int64_t head_dim, const float *inv_freq);
	void (*altup_predict)(float *pred, const float *h, const float *coef,
	                      int64_t n, int64_t d);
	void (*altup_correct)(float *out, const float *pred, const float *act,
	                      const float *c, int64_t n, int64_t d);
	/* ew runs elementwise op `op` (VK_EW_*) over n elements. */
	void (*ew)(int op, float *y, const float *a, const float *b, int64_t n,
	           float s);
	void (*bf16_to_f32)(float *dst, const uint16_t *src, int64_t n);
	void (*linear_q4)(float *y, const float *x, const uint8_t *q,
	                  const float *so, int64_t n, int64_t rows, int64_t cols,
	                  int lg);
	void (*q4_dequant)(float *dst, const uint8_t *q, const float *so,
	                   int64_t rows, int64_t cols, int lg);
	void (*paged_attention)(const vk_paged_attn *p);
	void (*sparse_mlp_q4)(float *y, float *g, float *h, int32_t *idx,
	                      int32_t *cnt, int32_t *off, const float *x,
	                      const uint8_t *uq, const float *uso,
	                      const uint8_t *dq, const float *dso, int64_t n,
	                      int64_t inter, int64_t d, float z, int lg);
} vk_ops;

enum {
	VK_EW_GELU,     /* y = gelu(a) */
	VK_EW_GELU_MUL, /* y = gelu(a)*b */
	VK_EW_SOFTCAP,  /* y = s*tanh(a/s) */
	VK_EW_TANH,     /* y = tanh(a) */
	VK_EW_EXP,      /* y = exp(a) */
	VK_EW_ADD,      /* y = a+b */
	VK_EW_MUL,      /* y = a*b */
	VK_EW_DIV,      /* y = a/b */
	VK_EW_ADD_CONST, /* y = a+s */
	VK_EW_SCALE,    /* y = a*s */
	VK_EW_ADD_SCALED /* y = (a+b)*s */
};

extern const vk_ops vk_ops_scalar;

#if defined(__x86_64__) || defined(__i386__)
#define VK_HAVE_AVX2_BUILD 1
extern const vk_ops vk_ops_avx2;
#endif
#if defined(VK_HAVE_AVX2_BUILD) && (defined(__GNUC__) || defined(__clang__))
#define VK_HAVE_AVX512_BUILD 1
/* vk_ops_avx512_fill: the AVX2 table with the AVX-512 linear kernels. */
void vk_ops_avx512_fill(vk_ops *o);
#endif
#if defined(__aarch64__) && defined(__ARM_NEON)
#define VK_HAVE_NEON_BUILD 1
extern const vk_ops vk_ops_neon;
#endif

/* Tuning: elements per task of elementwise ops, work below which an op
 * stays on the calling thread. */
#define VK_EW_GRAIN 32768
#define VK_PAR_MIN_WORK 60000.0

#endif
