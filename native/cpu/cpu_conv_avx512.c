/* cpu_conv_avx512.c: the AVX-512 micro-kernels of the convolution kernels'
 * matrix product: 12 rows × 32 columns (two packed panels) in 24 zmm
 * accumulators, each A value broadcast from memory into its FMAs, so a
 * step of p loads two B vectors for 24 FMAs (the AVX2 tile: 2 for 12, and
 * 6 broadcasts). Every sum is the same chain of fused multiply-adds as the
 * other sets', so the bits are theirs. The row kernels (norm, depthwise,
 * softmax) are the AVX2 set's. cpu_conv.c selects this set only when the
 * CPU has AVX-512F, AVX2 and FMA. */
#include "cpu_internal.h"

#define VK_CONV_INTERNAL 1
#include "kernels_conv.h"

#if defined(VK_HAVE_AVX512_BUILD)

#pragma GCC target("avx512f,avx2,fma")

#include <immintrin.h>

#define ZR 12 /* rows of a micro-tile */

/* tile is both micro-kernels: np panels (1 or 2), A packed (a[p·ZR + r])
 * or, with lda > 0, read in place (a[r·lda + p]). See vk_conv_ops.ukr. */
VK_INLINE void tile(const int np, const int inplace, int64_t kc,
                    const float *a, int64_t lda, const float *b, int64_t bs,
                    float *c, int64_t ldc, int acc, int m, int n)
{
	/* The tile's rows of c are needed at the end: ask for them now. */
#pragma GCC unroll 12
	for (int r = 0; r < ZR; r++)
		if (r < m) {
			const char *cr = (const char *)(c + r * ldc);
			_mm_prefetch(cr, _MM_HINT_T0);
			_mm_prefetch(cr + 4 * 16 * np - 4, _MM_HINT_T0);
		}
	__m512 s[ZR][2];
#pragma GCC unroll 12
	for (int r = 0; r < ZR; r++)
		s[r][0] = s[r][1] = _mm512_setzero_ps();
	const float *b1 = b + bs;
	const float *ar[ZR];
#pragma GCC unroll 12
	for (int r = 0; r < ZR; r++)
		ar[r] = a + r * lda;
#pragma GCC unroll 2
	for (int64_t p = 0; p < kc; p++) {
		__m512 v0 = _mm512_loadu_ps(b + p * 16);
		__m512 v1 = np == 2 ? _mm512_loadu_ps(b1 + p * 16) : v0;
#pragma GCC unroll 12
		for (int r = 0; r < ZR; r++) {
			__m512 t = _mm512_set1_ps(inplace ? ar[r][p] : a[p * ZR + r]);
			s[r][0] = _mm512_fmadd_ps(t, v0, s[r][0]);
			if (np == 2)
				s[r][1] = _mm512_fmadd_ps(t, v1, s[r][1]);
		}
	}
	__mmask16 m0 = n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1);
	__mmask16 m1 = n >= 32   ? (__mmask16)0xFFFF
	               : n > 16 ? (__mmask16)((1u << (n - 16)) - 1)
	                        : (__mmask16)0;
#pragma GCC unroll 12
	for (int r = 0; r < ZR; r++) {
		if (r >= m)
			break;
		float *cr = c + r * ldc;
		__m512 v = s[r][0];
		if (acc)
			v = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, cr), v);
		_mm512_mask_storeu_ps(cr, m0, v);
		if (np == 2) {
			v = s[r][1];
			if (acc)
				v = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, cr + 16), v);
			_mm512_mask_storeu_ps(cr + 16, m1, v);
		}
	}
}

static void ukr_avx512(int64_t kc, const float *a, const float *b, int64_t bs,
                       float *c, int64_t ldc, int acc, int m, int n)
{
	if (n > 16)
		tile(2, 0, kc, a, 0, b, bs, c, ldc, acc, m, n);
	else
		tile(1, 0, kc, a, 0, b, bs, c, ldc, acc, m, n);
}

static void ukr_rows_avx512(int64_t kc, const float *a, int64_t lda,
                            const float *b, int64_t bs, float *c, int64_t ldc,
                            int acc, int n)
{
	if (n > 16)
		tile(2, 1, kc, a, lda, b, bs, c, ldc, acc, ZR, n);
	else
		tile(1, 1, kc, a, lda, b, bs, c, ldc, acc, ZR, n);
}

const vk_conv_ops vk_conv_ops_avx512 = {ZR,
                                        2,
                                        ukr_avx512,
                                        ukr_rows_avx512,
                                        vk_conv_norm_row_avx2,
                                        vk_conv_dw_row_avx2,
                                        vk_conv_softmax_row_avx2};

#else
typedef int vk_conv_no_avx512; /* not an x86 build */
#endif
