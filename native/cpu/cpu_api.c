/* cpu_api.c: the kernels.h entry points: pick a kernel set and call it. */
#include "cpu_internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

static const vk_ops *_Atomic cur = &vk_ops_scalar;

/* Kernel sets by number: 0 portable, 1 AVX2+FMA, 2 NEON, 3 AVX-512. */
#if defined(VK_HAVE_AVX512_BUILD)
static vk_ops ops_avx512;
static pthread_once_t avx512_once = PTHREAD_ONCE_INIT;
static void avx512_init(void) { vk_ops_avx512_fill(&ops_avx512); }
#endif

/* cap is the highest set vk_init may pick (VERDICT_SIMD). */
static int cap = 3;

static const vk_ops *set_ops(int set)
{
	switch (set) {
	case 0:
		return &vk_ops_scalar;
#if defined(VK_HAVE_AVX2_BUILD)
	case 1:
		__builtin_cpu_init();
		if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
			return &vk_ops_avx2;
		return NULL;
#endif
#if defined(VK_HAVE_AVX512_BUILD)
	case 3:
		__builtin_cpu_init();
		if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
		    __builtin_cpu_supports("avx512f") &&
		    __builtin_cpu_supports("avx512bw") &&
		    __builtin_cpu_supports("avx512dq") &&
		    __builtin_cpu_supports("avx512vl")) {
			pthread_once(&avx512_once, avx512_init);
			return &ops_avx512;
		}
		return NULL;
#endif
#if defined(VK_HAVE_NEON_BUILD)
	case 2:
		return &vk_ops_neon;
#endif
	}
	return NULL;
}

static const vk_ops *best(int *level)
{
	static const int order[] = {3, 1, 2};
	for (int i = 0; i < 3; i++) {
		int s = order[i];
		if (cap < 3 && (s == 3 || s > cap))
			continue;
		const vk_ops *o = set_ops(s);
		if (o) {
			*level = s;
			return o;
		}
	}
	*level = 0;
	return &vk_ops_scalar;
}

int vk_set_simd(int level)
{
	int got = 0;
	const vk_ops *o = level > 0 ? best(&got) : &vk_ops_scalar;
	atomic_store(&cur, o);
	return got;
}

int vk_simd_active(void)
{
	const vk_ops *o = atomic_load(&cur);
	if (o == &vk_ops_scalar)
		return 0;
#if defined(VK_HAVE_AVX512_BUILD)
	if (o == &ops_avx512)
		return 3;
#endif
#if defined(VK_HAVE_NEON_BUILD)
	if (o == &vk_ops_neon)
		return 2;
#endif
	return 1;
}

int vk_use_simd(int set)
{
	const vk_ops *o = set_ops(set);
	if (!o)
		return 0;
	atomic_store(&cur, o);
	return 1;
}

void vk_init(int threads)
{
	const char *e = getenv("VERDICT_SIMD");
	if (e) {
		if (!strcmp(e, "portable") || !strcmp(e, "scalar"))
			cap = 0;
		else if (!strcmp(e, "avx2"))
			cap = 1;
		else if (!strcmp(e, "neon"))
			cap = 2;
	}
	vk_set_simd(1);
	if (threads > 0)
		vk_pool_resize(threads);
}

void vk_set_threads(int n) { vk_pool_resize(n); }
int vk_threads(void) { return vk_pool_threads(); }

#define OPS atomic_load_explicit(&cur, memory_order_relaxed)

void vk_linear_f32(float *y, const float *x, const float *w, int64_t n,
                   int64_t rows, int64_t cols)
{
	OPS->linear(y, x, w, 0, n, rows, cols);
}

void vk_linear_bf16(float *y, const float *x, const uint16_t *w, int64_t n,
                    int64_t rows, int64_t cols)
{
	OPS->linear(y, x, w, 1, n, rows, cols);
}

void vk_linear_q4(float *y, const float *x, const uint8_t *q, const float *so,
                  int64_t n, int64_t rows, int64_t cols, int lg)
{
	OPS->linear_q4(y, x, q, so, n, rows, cols, lg);
}

void vk_q4_dequant(float *dst, const uint8_t *q, const float *so,
                   int64_t rows, int64_t cols, int lg)
{
	OPS->q4_dequant(dst, q, so, rows, cols, lg);
}

void vk_paged_attention(const vk_paged_attn *p) { OPS->paged_attention(p); }

void vk_sparse_mlp_q4(float *y, float *g, float *h, int32_t *idx,
                      int32_t *cnt, int32_t *off, const float *x,
                      const uint8_t *uq, const float *uso, const uint8_t *dq,
                      const float *dso, int64_t n, int64_t inter, int64_t d,
                      float z, int lg)
{
	OPS->sparse_mlp_q4(y, g, h, idx, cnt, off, x, uq, uso, dq, dso, n, inter, d,
	                   z, lg);
}

void vk_attention(float *out, const float *q, const float *k, const float *v,
                  const int32_t *qpos, int64_t nq, int64_t nk, int64_t hq,
                  int64_t hkv, int64_t d, int64_t window, float scale)
{
	OPS->attention(out, q, k, v, qpos, nq, nk, hq, hkv, d, window, scale);
}

void vk_rmsnorm(float *y, const float *x, const float *w, int64_t rows,
                int64_t dim, float eps)
{
	OPS->rmsnorm(y, x, w, rows, dim, eps);
}

void vk_row_rms(float *out, const float *x, int64_t rows, int64_t dim,
                float floor)
{
	OPS->row_rms(out, x, rows, dim, floor);
}

void vk_scale_rows(float *x, const float *s, int64_t rows, int64_t dim)
{
	OPS->scale_rows(x, s, rows, dim);
}

void vk_mul_rows(float *x, const float *w, int64_t rows, int64_t dim)
{
	OPS->mul_rows(x, w, rows, dim);
}

void vk_sparse_gelu_mul(float *g, const float *u, int64_t rows, int64_t dim,
                        float z)
{
	OPS->sparse_gelu_mul(g, u, rows, dim, z);
}

void vk_logsumexp(float *out, const float *x, int64_t rows, int64_t dim)
{
	OPS->logsumexp(out, x, rows, dim);
}

void vk_argmax(int32_t *out, const float *x, int64_t rows, int64_t dim)
{
	OPS->argmax(out, x, rows, dim);
}

void vk_rope(float *x, const int32_t *pos, int64_t n, int64_t heads,
             int64_t head_dim, const float *inv_freq)
{
	OPS->rope(x, pos, n, heads, head_dim, inv_freq);
}

void vk_altup_predict(float *pred, const float *h, const float *coef,
                      int64_t n, int64_t d)
{
	OPS->altup_predict(pred, h, coef, n, d);
}

void vk_altup_correct(float *out, const float *pred, const float *act,
                      const float *c, int64_t n, int64_t d)
{
	OPS->altup_correct(out, pred, act, c, n, d);
}

void vk_gelu_tanh(float *x, int64_t n) { OPS->ew(VK_EW_GELU, x, x, NULL, n, 0); }
void vk_gelu_mul(float *g, const float *u, int64_t n)
{
	OPS->ew(VK_EW_GELU_MUL, g, g, u, n, 0);
}
void vk_softcap(float *x, int64_t n, float cap)
{
	OPS->ew(VK_EW_SOFTCAP, x, x, NULL, n, cap);
}
void vk_tanh(float *x, int64_t n) { OPS->ew(VK_EW_TANH, x, x, NULL, n, 0); }
void vk_exp(float *x, int64_t n) { OPS->ew(VK_EW_EXP, x, x, NULL, n, 0); }
void vk_add(float *y, const float *a, const float *b, int64_t n)
{
	OPS->ew(VK_EW_ADD, y, a, b, n, 0);
}
void vk_mul(float *y, const float *a, const float *b, int64_t n)
{
	OPS->ew(VK_EW_MUL, y, a, b, n, 0);
}
void vk_div(float *y, const float *a, const float *b, int64_t n)
{
	OPS->ew(VK_EW_DIV, y, a, b, n, 0);
}
void vk_add_const(float *x, int64_t n, float c)
{
	OPS->ew(VK_EW_ADD_CONST, x, x, NULL, n, c);
}
void vk_scale(float *x, int64_t n, float s)
{
	OPS->ew(VK_EW_SCALE, x, x, NULL, n, s);
}
void vk_add_scaled(float *y, const float *a, int64_t n, float s)
{
	OPS->ew(VK_EW_ADD_SCALED, y, y, a, n, s);
}
void vk_bf16_to_f32(float *dst, const uint16_t *src, int64_t n)
{
	OPS->bf16_to_f32(dst, src, n);
}
