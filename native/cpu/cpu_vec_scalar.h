/*
 * cpu_vec_scalar.h: the portable 8-lane vector, lane for lane the same
 * arithmetic as cpu_vec_avx2.h (fused multiply-add through fmaf, the same
 * horizontal-sum tree), so both kernel sets give bit-identical results.
 * Compilers vectorise the lane loops where they can (NEON on arm64).
 */
#include <math.h>

#define VK_ISA(f) f##_scalar

typedef union {
	float f[8];
	uint32_t u[8];
	int32_t i[8];
} V;
typedef V VI;
typedef struct {
	double d[8];
} VD;

#define VK_LANES for (int l = 0; l < 8; l++)

VK_INLINE V v_zero(void)
{
	V r;
	VK_LANES r.f[l] = 0.0f;
	return r;
}
VK_INLINE V v_set1(float a)
{
	V r;
	VK_LANES r.f[l] = a;
	return r;
}
VK_INLINE V v_load(const float *p)
{
	V r;
	memcpy(r.f, p, sizeof r.f);
	return r;
}
VK_INLINE void v_store(float *p, V a) { memcpy(p, a.f, sizeof a.f); }
VK_INLINE V v_load_bf16(const uint16_t *p)
{
	V r;
	VK_LANES r.u[l] = (uint32_t)p[l] << 16;
	return r;
}
/* v_q4_nibbles: the low (hi = 0) or high nibbles of p[0..8) as floats. */
VK_INLINE V v_q4_nibbles(const uint8_t *p, const int hi)
{
	V r;
	VK_LANES r.f[l] = (float)(hi ? p[l] >> 4 : p[l] & 15);
	return r;
}
VK_INLINE V v_add(V a, V b)
{
	VK_LANES a.f[l] = a.f[l] + b.f[l];
	return a;
}
VK_INLINE V v_sub(V a, V b)
{
	VK_LANES a.f[l] = a.f[l] - b.f[l];
	return a;
}
VK_INLINE V v_mul(V a, V b)
{
	VK_LANES a.f[l] = a.f[l] * b.f[l];
	return a;
}
VK_INLINE V v_div(V a, V b)
{
	VK_LANES a.f[l] = a.f[l] / b.f[l];
	return a;
}
/* v_fma returns a*b + c rounded once. */
VK_INLINE V v_fma(V a, V b, V c)
{
	VK_LANES c.f[l] = fmaf(a.f[l], b.f[l], c.f[l]);
	return c;
}
/* v_max and v_min follow x86: a > b ? a : b (b when unordered). */
VK_INLINE V v_max(V a, V b)
{
	VK_LANES a.f[l] = a.f[l] > b.f[l] ? a.f[l] : b.f[l];
	return a;
}
VK_INLINE V v_min(V a, V b)
{
	VK_LANES a.f[l] = a.f[l] < b.f[l] ? a.f[l] : b.f[l];
	return a;
}
/* Comparisons give all-ones lanes where true. */
VK_INLINE V v_lt(V a, V b)
{
	V r;
	VK_LANES r.u[l] = a.f[l] < b.f[l] ? 0xffffffffu : 0;
	return r;
}
VK_INLINE V v_eq(V a, V b)
{
	V r;
	VK_LANES r.u[l] = a.f[l] == b.f[l] ? 0xffffffffu : 0;
	return r;
}
VK_INLINE V v_ne_self(V a) /* lanes that are NaN */
{
	V r;
	VK_LANES r.u[l] = a.f[l] != a.f[l] ? 0xffffffffu : 0;
	return r;
}
VK_INLINE int v_mask(V m)
{
	int r = 0;
	VK_LANES r |= (int)(m.u[l] >> 31) << l;
	return r;
}
/* v_select returns m ? a : b lane by lane. */
VK_INLINE V v_select(V m, V a, V b)
{
	VK_LANES a.u[l] = (m.u[l] >> 31) ? a.u[l] : b.u[l];
	return a;
}
VK_INLINE V v_and(V a, V b)
{
	VK_LANES a.u[l] &= b.u[l];
	return a;
}
VK_INLINE V v_or(V a, V b)
{
	VK_LANES a.u[l] |= b.u[l];
	return a;
}
VK_INLINE V v_andnot(V a, V b) /* ~a & b */
{
	VK_LANES a.u[l] = ~a.u[l] & b.u[l];
	return a;
}
VK_INLINE VI v_asint(V a) { return a; }
VK_INLINE V vi_asfloat(VI a) { return a; }
VK_INLINE VI vi_set1(int32_t a)
{
	VI r;
	VK_LANES r.i[l] = a;
	return r;
}
VK_INLINE VI vi_add(VI a, VI b)
{
	VK_LANES a.u[l] = a.u[l] + b.u[l];
	return a;
}
VK_INLINE VI vi_sub(VI a, VI b)
{
	VK_LANES a.u[l] = a.u[l] - b.u[l];
	return a;
}
VK_INLINE VI vi_shl23(VI a)
{
	VK_LANES a.u[l] = a.u[l] << 23;
	return a;
}
VK_INLINE VI vi_sra1(VI a) /* arithmetic shift right by one */
{
	VK_LANES a.i[l] >>= 1; /* arithmetic in GCC and Clang */
	return a;
}
/* v_hsum adds the lanes as ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)). */
VK_INLINE float v_hsum(V a)
{
	float s0 = a.f[0] + a.f[4], s1 = a.f[1] + a.f[5];
	float s2 = a.f[2] + a.f[6], s3 = a.f[3] + a.f[7];
	return (s0 + s2) + (s1 + s3);
}
VK_INLINE float v_hmax(V a)
{
	float s0 = a.f[0] > a.f[4] ? a.f[0] : a.f[4];
	float s1 = a.f[1] > a.f[5] ? a.f[1] : a.f[5];
	float s2 = a.f[2] > a.f[6] ? a.f[2] : a.f[6];
	float s3 = a.f[3] > a.f[7] ? a.f[3] : a.f[7];
	s0 = s0 > s2 ? s0 : s2;
	s1 = s1 > s3 ? s1 : s3;
	return s0 > s1 ? s0 : s1;
}
VK_INLINE VD vd_zero(void)
{
	VD r;
	VK_LANES r.d[l] = 0;
	return r;
}
/* vd_add_f adds the lanes of b, widened, to a. */
VK_INLINE VD vd_add_f(VD a, V b)
{
	VK_LANES a.d[l] += (double)b.f[l];
	return a;
}
VK_INLINE double vd_hsum(VD a)
{
	double s0 = a.d[0] + a.d[4], s1 = a.d[1] + a.d[5];
	double s2 = a.d[2] + a.d[6], s3 = a.d[3] + a.d[7];
	return (s0 + s2) + (s1 + s3);
}
