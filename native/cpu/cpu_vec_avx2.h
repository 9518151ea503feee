/*
 * cpu_vec_avx2.h: the 8-lane vector as an AVX2 register. Include only after
 * "#pragma GCC target("avx2,fma")": every function of the translation unit
 * then carries the avx2,fma target and is only called after
 * __builtin_cpu_supports said yes. Semantics match cpu_vec_scalar.h exactly.
 */
#include <immintrin.h>

#define VK_ISA(f) f##_avx2

typedef __m256 V;
typedef __m256i VI;
typedef struct {
	__m256d lo, hi;
} VD;

VK_INLINE V v_zero(void) { return _mm256_setzero_ps(); }
VK_INLINE V v_set1(float a) { return _mm256_set1_ps(a); }
VK_INLINE V v_load(const float *p) { return _mm256_loadu_ps(p); }
VK_INLINE void v_store(float *p, V a) { _mm256_storeu_ps(p, a); }
VK_INLINE V v_load_bf16(const uint16_t *p)
{
	__m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
	return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
/* v_q4_nibbles: the low (hi = 0) or high nibbles of p[0..8) as floats. */
VK_INLINE V v_q4_nibbles(const uint8_t *p, const int hi)
{
	__m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
	b = hi ? _mm256_srli_epi32(b, 4) : _mm256_and_si256(b, _mm256_set1_epi32(15));
	return _mm256_cvtepi32_ps(b);
}
VK_INLINE V v_add(V a, V b) { return _mm256_add_ps(a, b); }
VK_INLINE V v_sub(V a, V b) { return _mm256_sub_ps(a, b); }
VK_INLINE V v_mul(V a, V b) { return _mm256_mul_ps(a, b); }
VK_INLINE V v_div(V a, V b) { return _mm256_div_ps(a, b); }
VK_INLINE V v_fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
VK_INLINE V v_max(V a, V b) { return _mm256_max_ps(a, b); }
VK_INLINE V v_min(V a, V b) { return _mm256_min_ps(a, b); }
VK_INLINE V v_lt(V a, V b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
VK_INLINE V v_eq(V a, V b) { return _mm256_cmp_ps(a, b, _CMP_EQ_OQ); }
VK_INLINE V v_ne_self(V a) { return _mm256_cmp_ps(a, a, _CMP_UNORD_Q); }
VK_INLINE int v_mask(V m) { return _mm256_movemask_ps(m); }
VK_INLINE V v_select(V m, V a, V b) { return _mm256_blendv_ps(b, a, m); }
VK_INLINE V v_and(V a, V b) { return _mm256_and_ps(a, b); }
VK_INLINE V v_or(V a, V b) { return _mm256_or_ps(a, b); }
VK_INLINE V v_andnot(V a, V b) { return _mm256_andnot_ps(a, b); }
VK_INLINE VI v_asint(V a) { return _mm256_castps_si256(a); }
VK_INLINE V vi_asfloat(VI a) { return _mm256_castsi256_ps(a); }
VK_INLINE VI vi_set1(int32_t a) { return _mm256_set1_epi32(a); }
VK_INLINE VI vi_add(VI a, VI b) { return _mm256_add_epi32(a, b); }
VK_INLINE VI vi_sub(VI a, VI b) { return _mm256_sub_epi32(a, b); }
VK_INLINE VI vi_shl23(VI a) { return _mm256_slli_epi32(a, 23); }
VK_INLINE VI vi_sra1(VI a) { return _mm256_srai_epi32(a, 1); }
VK_INLINE float v_hsum(V a)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	return _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)));
}
VK_INLINE float v_hmax(V a)
{
	__m128 s = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
	s = _mm_max_ps(s, _mm_movehl_ps(s, s));
	return _mm_cvtss_f32(_mm_max_ss(s, _mm_shuffle_ps(s, s, 1)));
}
VK_INLINE VD vd_zero(void)
{
	VD r = {_mm256_setzero_pd(), _mm256_setzero_pd()};
	return r;
}
VK_INLINE VD vd_add_f(VD a, V b)
{
	a.lo = _mm256_add_pd(a.lo, _mm256_cvtps_pd(_mm256_castps256_ps128(b)));
	a.hi = _mm256_add_pd(a.hi, _mm256_cvtps_pd(_mm256_extractf128_ps(b, 1)));
	return a;
}
VK_INLINE double vd_hsum(VD a)
{
	__m256d s = _mm256_add_pd(a.lo, a.hi);
	__m128d t = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
	return _mm_cvtsd_f64(_mm_add_sd(t, _mm_unpackhi_pd(t, t)));
}
