/*
 * cpu_audio.c: the audio tower's kernels (kernels_audio.h) on the CPU thread
 * pool. The dot products of the attention have an AVX2+FMA version chosen at
 * run time; everything else is plain C that the compiler vectorises.
 */
#include "cpu_internal.h"
#include "kernels_audio.h"

#include <math.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>

#if defined(__x86_64__) || defined(__i386__)
#define AU_X86 1
#include <immintrin.h>
#endif

/* ---------------------------------------------------------------- im2col */

typedef struct {
	float *dst;
	const float *src;
	int64_t t_in, f_in, c, t_out, f_out, kt, kf, st, sf, pad_t, pad_f;
} im2col_ctx;

static void im2col_task(void *p, int64_t to)
{
	const im2col_ctx *a = p;
	const int64_t row = a->kt * a->kf * a->c;
	for (int64_t fo = 0; fo < a->f_out; fo++) {
		float *d = a->dst + (to * a->f_out + fo) * row;
		for (int64_t i = 0; i < a->kt; i++) {
			const int64_t ti = to * a->st + i - a->pad_t;
			for (int64_t j = 0; j < a->kf; j++) {
				const int64_t fi = fo * a->sf + j - a->pad_f;
				float *o = d + (i * a->kf + j) * a->c;
				if (ti < 0 || ti >= a->t_in || fi < 0 || fi >= a->f_in)
					memset(o, 0, (size_t)a->c * sizeof(float));
				else
					memcpy(o, a->src + (ti * a->f_in + fi) * a->c,
					       (size_t)a->c * sizeof(float));
			}
		}
	}
}

void vk_audio_im2col(float *dst, const float *src, int64_t t_in, int64_t f_in,
                     int64_t c, int64_t t_out, int64_t f_out, int64_t kt,
                     int64_t kf, int64_t st, int64_t sf, int64_t pad_t,
                     int64_t pad_f)
{
	im2col_ctx a = {dst, src, t_in, f_in, c, t_out, f_out,
	                kt, kf, st, sf, pad_t, pad_f};
	vk_par(t_out, (double)(f_out * kt * kf * c) * (double)t_out, im2col_task,
	       &a);
}

/* ------------------------------------------------ cumulative group norm */

typedef struct {
	float *x;
	const float *w;
	const float *mean, *rstd; /* per step */
	double *acc;              /* per step: sum, then sum of squared deviation */
	int64_t fc, c;
} cgn_ctx;

static void cgn_sum_task(void *p, int64_t i)
{
	const cgn_ctx *a = p;
	const float *x = a->x + i * a->fc;
	double s = 0;
	for (int64_t j = 0; j < a->fc; j++)
		s += x[j];
	a->acc[i] = s;
}

static void cgn_sq_task(void *p, int64_t i)
{
	const cgn_ctx *a = p;
	const float *x = a->x + i * a->fc;
	const double m = a->mean[i];
	double s = 0;
	for (int64_t j = 0; j < a->fc; j++) {
		const double d = (double)x[j] - m;
		s += d * d;
	}
	a->acc[i] = s;
}

static void cgn_apply_task(void *p, int64_t i)
{
	const cgn_ctx *a = p;
	float *x = a->x + i * a->fc;
	const float m = a->mean[i], r = a->rstd[i];
	for (int64_t j = 0; j < a->fc; j += a->c)
		for (int64_t ch = 0; ch < a->c; ch++) {
			const float y = ((x[j + ch] - m) * r) * a->w[ch];
			x[j + ch] = y > 0 ? y : 0;
		}
}

void vk_audio_cum_group_norm_relu(float *x, int64_t t, int64_t fc, int64_t c,
                                  const float *w, float eps)
{
	if (t <= 0 || fc <= 0)
		return;
	float *mean = malloc((size_t)t * 2 * sizeof(float));
	double *acc = malloc((size_t)t * sizeof(double));
	if (!mean || !acc) {
		fprintf(stderr, "native: out of memory\n");
		abort();
	}
	float *rstd = mean + t;
	cgn_ctx a = {x, w, mean, rstd, acc, fc, c};
	const double work = (double)t * (double)fc;
	/* Statistics in double: the reference sums in float32, and the exact
	 * value is the closest common target for any summation order. */
	vk_par(t, work, cgn_sum_task, &a);
	double cum = 0;
	for (int64_t i = 0; i < t; i++) {
		cum += acc[i];
		mean[i] = (float)(cum / ((double)(i + 1) * (double)fc));
	}
	vk_par(t, work, cgn_sq_task, &a);
	cum = 0;
	for (int64_t i = 0; i < t; i++) {
		cum += acc[i];
		const float var = (float)(cum / ((double)(i + 1) * (double)fc));
		rstd[i] = (float)(1.0 / sqrt((double)(var + eps)));
	}
	vk_par(t, work, cgn_apply_task, &a);
	free(mean);
	free(acc);
}

/* ------------------------------------------------------ local attention */

static float dot_scalar(const float *a, const float *b, int64_t n)
{
	float s[8] = {0};
	int64_t i = 0;
	for (; i + 8 <= n; i += 8)
		for (int l = 0; l < 8; l++)
			s[l] += a[i + l] * b[i + l];
	float r = ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
	for (; i < n; i++)
		r += a[i] * b[i];
	return r;
}

static void axpy_scalar(float *y, float a, const float *x, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		y[i] += a * x[i];
}

#if AU_X86
__attribute__((target("avx2,fma"))) static float dot_avx2(const float *a,
                                                          const float *b,
                                                          int64_t n)
{
	__m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
	int64_t i = 0;
	for (; i + 16 <= n; i += 16) {
		s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
		s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8),
		                     _mm256_loadu_ps(b + i + 8), s1);
	}
	for (; i + 8 <= n; i += 8)
		s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
	s0 = _mm256_add_ps(s0, s1);
	__m128 h = _mm_add_ps(_mm256_castps256_ps128(s0),
	                      _mm256_extractf128_ps(s0, 1));
	h = _mm_add_ps(h, _mm_movehl_ps(h, h));
	h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
	float r = _mm_cvtss_f32(h);
	for (; i < n; i++)
		r = fmaf(a[i], b[i], r);
	return r;
}

__attribute__((target("avx2,fma"))) static void axpy_avx2(float *y, float a,
                                                          const float *x,
                                                          int64_t n)
{
	const __m256 av = _mm256_set1_ps(a);
	int64_t i = 0;
	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i),
		                                        _mm256_loadu_ps(y + i)));
	for (; i < n; i++)
		y[i] = fmaf(a, x[i], y[i]);
}
#endif

/* au_simd: -1 not yet chosen, 0 portable, 1 AVX2+FMA. */
static _Atomic int au_simd = -1;

int vk_audio_simd(int level)
{
	int cur = atomic_load(&au_simd);
	if (level < 0 && cur >= 0)
		return cur;
	int best = 0;
#if AU_X86
	__builtin_cpu_init();
	best = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
	cur = level == 0 ? 0 : best;
	atomic_store(&au_simd, cur);
	return cur;
}

typedef float (*dot_fn)(const float *, const float *, int64_t);
typedef void (*axpy_fn)(float *, float, const float *, int64_t);

typedef struct {
	float *out;
	const float *q, *k, *v, *pos;
	const uint8_t *valid;
	int64_t t, heads, d, past, future;
	float cap;
	dot_fn dot;
	axpy_fn axpy;
} attn_ctx;

/* One task: all heads of query i. */
static void attn_task(void *p, int64_t i)
{
	const attn_ctx *a = p;
	const int64_t hd = a->heads * a->d;
	const int64_t j0 = i - a->past > 0 ? i - a->past : 0;
	const int64_t j1 = i + a->future < a->t - 1 ? i + a->future : a->t - 1;
	float logit[j1 - j0 + 1 > 0 ? j1 - j0 + 1 : 1];
	for (int64_t h = 0; h < a->heads; h++) {
		const float *qi = a->q + i * hd + h * a->d;
		float *o = a->out + i * hd + h * a->d;
		memset(o, 0, (size_t)a->d * sizeof(float));
		float mx = -INFINITY;
		int any = 0;
		for (int64_t j = j0; j <= j1; j++) {
			float *l = &logit[j - j0];
			if (!a->valid[j]) {
				*l = -INFINITY;
				continue;
			}
			const float ac = a->dot(qi, a->k + j * hd + h * a->d, a->d);
			const float bd = a->dot(
			    qi, a->pos + (a->past - (i - j)) * hd + h * a->d, a->d);
			*l = a->cap * tanhf((ac + bd) / a->cap);
			if (*l > mx)
				mx = *l;
			any = 1;
		}
		if (!any)
			continue;
		float sum = 0;
		for (int64_t j = j0; j <= j1; j++) {
			float *l = &logit[j - j0];
			*l = a->valid[j] ? expf(*l - mx) : 0;
			sum += *l;
		}
		for (int64_t j = j0; j <= j1; j++)
			if (a->valid[j])
				a->axpy(o, logit[j - j0] / sum,
				        a->v + j * hd + h * a->d, a->d);
	}
}

void vk_audio_local_attention(float *out, const float *q, const float *k,
                              const float *v, const float *pos,
                              const uint8_t *valid, int64_t t, int64_t heads,
                              int64_t d, int64_t past, int64_t future,
                              float cap)
{
	if (t <= 0)
		return;
	attn_ctx a = {out, q, k, v, pos, valid, t, heads, d, past, future, cap,
	              dot_scalar, axpy_scalar};
#if AU_X86
	if (vk_audio_simd(-1) == 1) {
		a.dot = dot_avx2;
		a.axpy = axpy_avx2;
	}
#endif
	vk_par(t, (double)t * (double)(heads * d) * 6.0 * (double)(past + future + 1),
	       attn_task, &a);
}

/* ---------------------------------------------------------- light conv */

typedef struct {
	float *y;
	const float *x, *w;
	int64_t t, d, k, rows;
} dw_ctx;

static void dw_task(void *p, int64_t task)
{
	const dw_ctx *a = p;
	const int64_t i0 = task * a->rows;
	const int64_t i1 = i0 + a->rows < a->t ? i0 + a->rows : a->t;
	for (int64_t i = i0; i < i1; i++) {
		float *y = a->y + i * a->d;
		for (int64_t c = 0; c < a->d; c++)
			y[c] = 0;
		for (int64_t j = 0; j < a->k; j++) {
			const int64_t src = i - (a->k - 1) + j;
			if (src < 0)
				continue;
			const float *x = a->x + src * a->d;
			for (int64_t c = 0; c < a->d; c++)
				y[c] += a->w[c * a->k + j] * x[c];
		}
	}
}

void vk_audio_dwconv_causal(float *y, const float *x, const float *w,
                            int64_t t, int64_t d, int64_t k)
{
	if (t <= 0 || d <= 0)
		return;
	const int64_t rows = 8;
	dw_ctx a = {y, x, w, t, d, k, rows};
	vk_par((t + rows - 1) / rows, (double)t * (double)d * (double)k, dw_task,
	       &a);
}

/* ----------------------------------------------------------- elementwise */

#define AU_GRAIN 16384

typedef struct {
	float *y;
	const float *x;
	int64_t n, d;
	float s;
} ew_ctx;

static void silu_task(void *p, int64_t task)
{
	const ew_ctx *a = p;
	const int64_t i0 = task * AU_GRAIN;
	const int64_t i1 = i0 + AU_GRAIN < a->n ? i0 + AU_GRAIN : a->n;
	for (int64_t i = i0; i < i1; i++)
		a->y[i] = a->y[i] / (1.0f + expf(-a->y[i]));
}

void vk_audio_silu(float *x, int64_t n)
{
	ew_ctx a = {x, x, n, 0, 0};
	vk_par((n + AU_GRAIN - 1) / AU_GRAIN, (double)n * 20, silu_task, &a);
}

static void glu_task(void *p, int64_t r)
{
	const ew_ctx *a = p;
	const float *x = a->x + r * 2 * a->d;
	float *y = a->y + r * a->d;
	for (int64_t i = 0; i < a->d; i++)
		y[i] = x[i] * (1.0f / (1.0f + expf(-x[a->d + i])));
}

void vk_audio_glu(float *y, const float *x, int64_t rows, int64_t d)
{
	ew_ctx a = {y, x, rows, d, 0};
	vk_par(rows, (double)rows * (double)d * 20, glu_task, &a);
}

static void clip_task(void *p, int64_t task)
{
	const ew_ctx *a = p;
	const int64_t i0 = task * AU_GRAIN;
	const int64_t i1 = i0 + AU_GRAIN < a->n ? i0 + AU_GRAIN : a->n;
	const float lim = a->s;
	for (int64_t i = i0; i < i1; i++) {
		float v = a->y[i];
		v = v < -lim ? -lim : v;
		a->y[i] = v > lim ? lim : v;
	}
}

void vk_audio_clip(float *x, int64_t n, float lim)
{
	ew_ctx a = {x, x, n, 0, lim};
	vk_par((n + AU_GRAIN - 1) / AU_GRAIN, (double)n, clip_task, &a);
}
