/* cpu_conv_avx2.c: the AVX2+FMA inner loops of the convolution kernels
 * (cpu_conv.c selects them only when the CPU has both). */
#define VK_CONV_INTERNAL 1
#include "kernels_conv.h"

#include <stdint.h>

#if defined(__x86_64__) || defined(__i386__)

#include <math.h>

#pragma GCC target("avx2,fma")

#include <immintrin.h>

/* 6×16 micro-kernel: c[r·ldc + j] (+)= sum_p a[p·6 + r]·b[p·16 + j] for
 * r < mr, j < nr. a and b are packed panels of kc steps. */
static void ukr_avx2(int64_t kc, const float *a, const float *b, int64_t bs,
                     float *c, int64_t ldc, int acc, int mr, int nr)
{
	(void)bs;
	__m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps();
	__m256 c10 = _mm256_setzero_ps(), c11 = _mm256_setzero_ps();
	__m256 c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps();
	__m256 c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps();
	__m256 c40 = _mm256_setzero_ps(), c41 = _mm256_setzero_ps();
	__m256 c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();
#pragma GCC unroll 4
	for (int64_t p = 0; p < kc; p++) {
		__m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
		__m256 t;
		t = _mm256_broadcast_ss(a + 0);
		c00 = _mm256_fmadd_ps(t, b0, c00);
		c01 = _mm256_fmadd_ps(t, b1, c01);
		t = _mm256_broadcast_ss(a + 1);
		c10 = _mm256_fmadd_ps(t, b0, c10);
		c11 = _mm256_fmadd_ps(t, b1, c11);
		t = _mm256_broadcast_ss(a + 2);
		c20 = _mm256_fmadd_ps(t, b0, c20);
		c21 = _mm256_fmadd_ps(t, b1, c21);
		t = _mm256_broadcast_ss(a + 3);
		c30 = _mm256_fmadd_ps(t, b0, c30);
		c31 = _mm256_fmadd_ps(t, b1, c31);
		t = _mm256_broadcast_ss(a + 4);
		c40 = _mm256_fmadd_ps(t, b0, c40);
		c41 = _mm256_fmadd_ps(t, b1, c41);
		t = _mm256_broadcast_ss(a + 5);
		c50 = _mm256_fmadd_ps(t, b0, c50);
		c51 = _mm256_fmadd_ps(t, b1, c51);
		a += 6;
		b += 16;
	}
	if (mr == 6 && nr == 16) {
#define ROW(r, v0, v1)                                                         \
	do {                                                                   \
		float *cr = c + (r) * ldc;                                     \
		if (acc) {                                                     \
			v0 = _mm256_add_ps(_mm256_loadu_ps(cr), v0);           \
			v1 = _mm256_add_ps(_mm256_loadu_ps(cr + 8), v1);       \
		}                                                              \
		_mm256_storeu_ps(cr, v0);                                      \
		_mm256_storeu_ps(cr + 8, v1);                                  \
	} while (0)
		ROW(0, c00, c01);
		ROW(1, c10, c11);
		ROW(2, c20, c21);
		ROW(3, c30, c31);
		ROW(4, c40, c41);
		ROW(5, c50, c51);
#undef ROW
		return;
	}
	float t[6][16];
	_mm256_storeu_ps(t[0], c00);
	_mm256_storeu_ps(t[0] + 8, c01);
	_mm256_storeu_ps(t[1], c10);
	_mm256_storeu_ps(t[1] + 8, c11);
	_mm256_storeu_ps(t[2], c20);
	_mm256_storeu_ps(t[2] + 8, c21);
	_mm256_storeu_ps(t[3], c30);
	_mm256_storeu_ps(t[3] + 8, c31);
	_mm256_storeu_ps(t[4], c40);
	_mm256_storeu_ps(t[4] + 8, c41);
	_mm256_storeu_ps(t[5], c50);
	_mm256_storeu_ps(t[5] + 8, c51);
	for (int r = 0; r < mr; r++)
		for (int j = 0; j < nr; j++)
			c[r * ldc + j] = acc ? c[r * ldc + j] + t[r][j] : t[r][j];
}

/* The micro-kernel with A in place: six rows a + r·lda (no packing). */
static void ukr_rows_avx2(int64_t kc, const float *a, int64_t lda,
                          const float *b, int64_t bs, float *c, int64_t ldc,
                          int acc, int nr)
{
	(void)bs;
	__m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps();
	__m256 c10 = _mm256_setzero_ps(), c11 = _mm256_setzero_ps();
	__m256 c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps();
	__m256 c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps();
	__m256 c40 = _mm256_setzero_ps(), c41 = _mm256_setzero_ps();
	__m256 c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();
	const float *a0 = a, *a1 = a + lda, *a2 = a + 2 * lda, *a3 = a + 3 * lda,
		    *a4 = a + 4 * lda, *a5 = a + 5 * lda;
	const int mr = 6;
#pragma GCC unroll 4
	for (int64_t p = 0; p < kc; p++) {
		__m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
		__m256 t;
		t = _mm256_broadcast_ss(a0 + p);
		c00 = _mm256_fmadd_ps(t, b0, c00);
		c01 = _mm256_fmadd_ps(t, b1, c01);
		t = _mm256_broadcast_ss(a1 + p);
		c10 = _mm256_fmadd_ps(t, b0, c10);
		c11 = _mm256_fmadd_ps(t, b1, c11);
		t = _mm256_broadcast_ss(a2 + p);
		c20 = _mm256_fmadd_ps(t, b0, c20);
		c21 = _mm256_fmadd_ps(t, b1, c21);
		t = _mm256_broadcast_ss(a3 + p);
		c30 = _mm256_fmadd_ps(t, b0, c30);
		c31 = _mm256_fmadd_ps(t, b1, c31);
		t = _mm256_broadcast_ss(a4 + p);
		c40 = _mm256_fmadd_ps(t, b0, c40);
		c41 = _mm256_fmadd_ps(t, b1, c41);
		t = _mm256_broadcast_ss(a5 + p);
		c50 = _mm256_fmadd_ps(t, b0, c50);
		c51 = _mm256_fmadd_ps(t, b1, c51);
		b += 16;
	}
	if (mr == 6 && nr == 16) {
#define ROW(r, v0, v1)                                                         \
	do {                                                                   \
		float *cr = c + (r) * ldc;                                     \
		if (acc) {                                                     \
			v0 = _mm256_add_ps(_mm256_loadu_ps(cr), v0);           \
			v1 = _mm256_add_ps(_mm256_loadu_ps(cr + 8), v1);       \
		}                                                              \
		_mm256_storeu_ps(cr, v0);                                      \
		_mm256_storeu_ps(cr + 8, v1);                                  \
	} while (0)
		ROW(0, c00, c01);
		ROW(1, c10, c11);
		ROW(2, c20, c21);
		ROW(3, c30, c31);
		ROW(4, c40, c41);
		ROW(5, c50, c51);
#undef ROW
		return;
	}
	float t[6][16];
	_mm256_storeu_ps(t[0], c00);
	_mm256_storeu_ps(t[0] + 8, c01);
	_mm256_storeu_ps(t[1], c10);
	_mm256_storeu_ps(t[1] + 8, c11);
	_mm256_storeu_ps(t[2], c20);
	_mm256_storeu_ps(t[2] + 8, c21);
	_mm256_storeu_ps(t[3], c30);
	_mm256_storeu_ps(t[3] + 8, c31);
	_mm256_storeu_ps(t[4], c40);
	_mm256_storeu_ps(t[4] + 8, c41);
	_mm256_storeu_ps(t[5], c50);
	_mm256_storeu_ps(t[5] + 8, c51);
	for (int r = 0; r < mr; r++)
		for (int j = 0; j < nr; j++)
			c[r * ldc + j] = acc ? c[r * ldc + j] + t[r][j] : t[r][j];
}

/* One output row of a depthwise convolution (see vk_dwconv2d). */
void vk_conv_dw_row_avx2(float *y, const float *x, const float *wt, int64_t h,
                         int64_t w, int64_t c, int64_t ow, int k, int stride,
                         int pad_t, int pad_l, int64_t oy)
{
	int64_t iy0 = oy * stride - pad_t;
	int ky0 = iy0 < 0 ? (int)-iy0 : 0;
	int ky1 = iy0 + k > h ? (int)(h - iy0) : k;
	for (int64_t ox = 0; ox < ow; ox++) {
		int64_t ix0 = ox * stride - pad_l;
		int kx0 = ix0 < 0 ? (int)-ix0 : 0;
		int kx1 = ix0 + k > w ? (int)(w - ix0) : k;
		float *yo = y + ox * c;
		int64_t c0 = 0;
		for (; c0 + 32 <= c; c0 += 32) {
			__m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
			__m256 a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
			for (int ky = ky0; ky < ky1; ky++) {
				const float *xr = x + ((iy0 + ky) * w + ix0) * c + c0;
				const float *wr = wt + (int64_t)ky * k * c + c0;
				for (int kx = kx0; kx < kx1; kx++) {
					const float *xp = xr + kx * c, *wp = wr + kx * c;
					a0 = _mm256_fmadd_ps(_mm256_loadu_ps(xp), _mm256_loadu_ps(wp), a0);
					a1 = _mm256_fmadd_ps(_mm256_loadu_ps(xp + 8), _mm256_loadu_ps(wp + 8), a1);
					a2 = _mm256_fmadd_ps(_mm256_loadu_ps(xp + 16), _mm256_loadu_ps(wp + 16), a2);
					a3 = _mm256_fmadd_ps(_mm256_loadu_ps(xp + 24), _mm256_loadu_ps(wp + 24), a3);
				}
			}
			_mm256_storeu_ps(yo + c0, a0);
			_mm256_storeu_ps(yo + c0 + 8, a1);
			_mm256_storeu_ps(yo + c0 + 16, a2);
			_mm256_storeu_ps(yo + c0 + 24, a3);
		}
		for (; c0 + 8 <= c; c0 += 8) {
			__m256 a0 = _mm256_setzero_ps();
			for (int ky = ky0; ky < ky1; ky++) {
				const float *xr = x + ((iy0 + ky) * w + ix0) * c + c0;
				const float *wr = wt + (int64_t)ky * k * c + c0;
				for (int kx = kx0; kx < kx1; kx++)
					a0 = _mm256_fmadd_ps(_mm256_loadu_ps(xr + kx * c),
					                     _mm256_loadu_ps(wr + kx * c), a0);
			}
			_mm256_storeu_ps(yo + c0, a0);
		}
		for (; c0 < c; c0++) {
			float s = 0;
			for (int ky = ky0; ky < ky1; ky++)
				for (int kx = kx0; kx < kx1; kx++)
					s = fmaf(x[((iy0 + ky) * w + ix0 + kx) * c + c0],
					         wt[((int64_t)ky * k + kx) * c + c0], s);
			yo[c0] = s;
		}
	}
}

/* exp for x <= 0 (and moderately positive x): Cephes-style range reduction
 * and degree-5 polynomial, about 1 ulp. */
static inline __m256 exp_avx2(__m256 x)
{
	const __m256 hi = _mm256_set1_ps(88.3762626647949f);
	const __m256 lo = _mm256_set1_ps(-87.0f);
	x = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
	__m256 fx = _mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f),
	                            _mm256_set1_ps(0.5f));
	fx = _mm256_floor_ps(fx);
	x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
	x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), x);
	__m256 z = _mm256_mul_ps(x, x);
	__m256 y = _mm256_set1_ps(1.9875691500e-4f);
	y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507e-3f));
	y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073e-3f));
	y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894e-2f));
	y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459e-1f));
	y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201e-1f));
	y = _mm256_fmadd_ps(y, z, x);
	y = _mm256_add_ps(y, _mm256_set1_ps(1.0f));
	__m256i e = _mm256_add_epi32(_mm256_cvttps_epi32(fx), _mm256_set1_epi32(127));
	e = _mm256_slli_epi32(e, 23);
	return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

/* s[j] = exp(scale·(s[j] − max s)) in place (0 below SOFTMAX_CUT); returns
 * the sum. */
float vk_conv_softmax_row_avx2(float *s, int64_t n, float scale)
{
	int64_t j = 0;
	float m = -INFINITY;
	if (n >= 8) {
		__m256 mv = _mm256_loadu_ps(s);
		for (j = 8; j + 8 <= n; j += 8)
			mv = _mm256_max_ps(mv, _mm256_loadu_ps(s + j));
		__m128 q = _mm_max_ps(_mm256_castps256_ps128(mv), _mm256_extractf128_ps(mv, 1));
		q = _mm_max_ps(q, _mm_movehl_ps(q, q));
		q = _mm_max_ss(q, _mm_shuffle_ps(q, q, 1));
		m = _mm_cvtss_f32(q);
	}
	for (; j < n; j++)
		m = s[j] > m ? s[j] : m;
	const __m256 sc = _mm256_set1_ps(scale), ms = _mm256_set1_ps(m * scale);
	const __m256 cut = _mm256_set1_ps(SOFTMAX_CUT);
	__m256 acc = _mm256_setzero_ps();
	for (j = 0; j + 8 <= n; j += 8) {
		__m256 t = _mm256_fmsub_ps(_mm256_loadu_ps(s + j), sc, ms);
		__m256 e = _mm256_and_ps(exp_avx2(t), _mm256_cmp_ps(t, cut, _CMP_GE_OQ));
		_mm256_storeu_ps(s + j, e);
		acc = _mm256_add_ps(acc, e);
	}
	__m128 q = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
	q = _mm_add_ps(q, _mm_movehl_ps(q, q));
	q = _mm_add_ss(q, _mm_shuffle_ps(q, q, 1));
	float sum = _mm_cvtss_f32(q);
	for (; j < n; j++) {
		float t = s[j] * scale - m * scale;
		s[j] = t >= SOFTMAX_CUT ? expf(t) : 0.0f;
		sum += s[j];
	}
	return sum;
}

/* tanh-GELU: 0.5·x·(1 + tanh(u)) = x − x/(exp(2u) + 1),
 * u = √(2/π)·(x + 0.044715·x³). */
static inline __m256 gelu_avx2(__m256 x)
{
	const __m256 k0 = _mm256_set1_ps(2.0f * 0.7978845608028654f);
	const __m256 k1 = _mm256_set1_ps(2.0f * 0.7978845608028654f * 0.044715f);
	__m256 x2 = _mm256_mul_ps(x, x);
	__m256 u2 = _mm256_mul_ps(x, _mm256_fmadd_ps(k1, x2, k0));
	u2 = _mm256_min_ps(u2, _mm256_set1_ps(80.0f));
	__m256 e = exp_avx2(u2);
	__m256 d = _mm256_add_ps(e, _mm256_set1_ps(1.0f));
	return _mm256_sub_ps(x, _mm256_div_ps(x, d));
}

void vk_conv_norm_row_avx2(float *y, const float *x, const float *w,
                           const float *gamma, const float *res, int64_t c,
                           float eps, int gelu)
{
	__m256 acc = _mm256_setzero_ps();
	int64_t i = 0;
	for (; i + 8 <= c; i += 8) {
		__m256 v = _mm256_loadu_ps(x + i);
		acc = _mm256_fmadd_ps(v, v, acc);
	}
	__m128 q = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
	q = _mm_add_ps(q, _mm_movehl_ps(q, q));
	q = _mm_add_ss(q, _mm_shuffle_ps(q, q, 1));
	float ss = _mm_cvtss_f32(q);
	for (; i < c; i++)
		ss = fmaf(x[i], x[i], ss);
	float inv = 1.0f / sqrtf(ss / (float)c + eps);
	const __m256 vi = _mm256_set1_ps(inv);
	for (i = 0; i + 8 <= c; i += 8) {
		__m256 v = _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), vi),
		                         _mm256_loadu_ps(w + i));
		if (gelu)
			v = gelu_avx2(v);
		if (gamma)
			v = _mm256_mul_ps(v, _mm256_loadu_ps(gamma + i));
		if (res)
			v = _mm256_add_ps(v, _mm256_loadu_ps(res + i));
		_mm256_storeu_ps(y + i, v);
	}
	for (; i < c; i++) {
		float v = x[i] * inv * w[i];
		if (gelu)
			v = 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
		if (gamma)
			v *= gamma[i];
		if (res)
			v += res[i];
		y[i] = v;
	}
}

const vk_conv_ops vk_conv_ops_avx2 = {6,
                                      1,
                                      ukr_avx2,
                                      ukr_rows_avx2,
                                      vk_conv_norm_row_avx2,
                                      vk_conv_dw_row_avx2,
                                      vk_conv_softmax_row_avx2};

#else
typedef int vk_conv_no_avx2; /* not an x86 build */
#endif
