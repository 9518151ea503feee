/*
 * cpu_vec_neon.h: the 8-lane vector as two AArch64 NEON registers, with the
 * semantics of cpu_vec_scalar.h (x86-style max/min, the same horizontal-sum
 * tree), so results are bit-identical to the other kernel sets.
 */
#include <arm_neon.h>

#define VK_ISA(f) f##_neon

typedef struct {
	float32x4_t lo, hi;
} V;
typedef struct {
	int32x4_t lo, hi;
} VI;
typedef struct {
	float64x2_t d[4]; /* lanes 0-1, 2-3, 4-5, 6-7 */
} VD;

#define VK_F2(op) { op(a.lo, b.lo), op(a.hi, b.hi) }
#define VK_U2F(x) vreinterpretq_f32_u32(x)
#define VK_F2U(x) vreinterpretq_u32_f32(x)

VK_INLINE V v_zero(void)
{
	V r = {vdupq_n_f32(0), vdupq_n_f32(0)};
	return r;
}
VK_INLINE V v_set1(float a)
{
	V r = {vdupq_n_f32(a), vdupq_n_f32(a)};
	return r;
}
VK_INLINE V v_load(const float *p)
{
	V r = {vld1q_f32(p), vld1q_f32(p + 4)};
	return r;
}
VK_INLINE void v_store(float *p, V a)
{
	vst1q_f32(p, a.lo);
	vst1q_f32(p + 4, a.hi);
}
VK_INLINE V v_load_bf16(const uint16_t *p)
{
	uint16x8_t w = vld1q_u16(p);
	V r = {VK_U2F(vshll_n_u16(vget_low_u16(w), 16)),
	       VK_U2F(vshll_high_n_u16(w, 16))};
	return r;
}
/* v_q4_nibbles: the low (hi = 0) or high nibbles of p[0..8) as floats. */
VK_INLINE V v_q4_nibbles(const uint8_t *p, const int hi)
{
	uint8x8_t b = vld1_u8(p);
	b = hi ? vshr_n_u8(b, 4) : vand_u8(b, vdup_n_u8(15));
	uint16x8_t h = vmovl_u8(b);
	V r = {vcvtq_f32_u32(vmovl_u16(vget_low_u16(h))),
	       vcvtq_f32_u32(vmovl_high_u16(h))};
	return r;
}
VK_INLINE V v_add(V a, V b)
{
	V r = VK_F2(vaddq_f32);
	return r;
}
VK_INLINE V v_sub(V a, V b)
{
	V r = VK_F2(vsubq_f32);
	return r;
}
VK_INLINE V v_mul(V a, V b)
{
	V r = VK_F2(vmulq_f32);
	return r;
}
VK_INLINE V v_div(V a, V b)
{
	V r = VK_F2(vdivq_f32);
	return r;
}
VK_INLINE V v_fma(V a, V b, V c)
{
	V r = {vfmaq_f32(c.lo, a.lo, b.lo), vfmaq_f32(c.hi, a.hi, b.hi)};
	return r;
}
VK_INLINE V v_max(V a, V b) /* a > b ? a : b */
{
	V r = {vbslq_f32(vcgtq_f32(a.lo, b.lo), a.lo, b.lo),
	       vbslq_f32(vcgtq_f32(a.hi, b.hi), a.hi, b.hi)};
	return r;
}
VK_INLINE V v_min(V a, V b) /* a < b ? a : b */
{
	V r = {vbslq_f32(vcltq_f32(a.lo, b.lo), a.lo, b.lo),
	       vbslq_f32(vcltq_f32(a.hi, b.hi), a.hi, b.hi)};
	return r;
}
VK_INLINE V v_lt(V a, V b)
{
	V r = {VK_U2F(vcltq_f32(a.lo, b.lo)), VK_U2F(vcltq_f32(a.hi, b.hi))};
	return r;
}
VK_INLINE V v_eq(V a, V b)
{
	V r = {VK_U2F(vceqq_f32(a.lo, b.lo)), VK_U2F(vceqq_f32(a.hi, b.hi))};
	return r;
}
VK_INLINE V v_ne_self(V a)
{
	V r = {VK_U2F(vmvnq_u32(vceqq_f32(a.lo, a.lo))),
	       VK_U2F(vmvnq_u32(vceqq_f32(a.hi, a.hi)))};
	return r;
}
VK_INLINE int v_mask(V m)
{
	static const int32_t sh_lo[4] = {0, 1, 2, 3}, sh_hi[4] = {4, 5, 6, 7};
	uint32x4_t lo = vshlq_u32(vshrq_n_u32(VK_F2U(m.lo), 31), vld1q_s32(sh_lo));
	uint32x4_t hi = vshlq_u32(vshrq_n_u32(VK_F2U(m.hi), 31), vld1q_s32(sh_hi));
	return (int)vaddvq_u32(vorrq_u32(lo, hi));
}
/* Masks here are all-ones or zero lanes, so a bit select is blendv. */
VK_INLINE V v_select(V m, V a, V b)
{
	V r = {vbslq_f32(VK_F2U(m.lo), a.lo, b.lo),
	       vbslq_f32(VK_F2U(m.hi), a.hi, b.hi)};
	return r;
}
VK_INLINE V v_and(V a, V b)
{
	V r = {VK_U2F(vandq_u32(VK_F2U(a.lo), VK_F2U(b.lo))),
	       VK_U2F(vandq_u32(VK_F2U(a.hi), VK_F2U(b.hi)))};
	return r;
}
VK_INLINE V v_or(V a, V b)
{
	V r = {VK_U2F(vorrq_u32(VK_F2U(a.lo), VK_F2U(b.lo))),
	       VK_U2F(vorrq_u32(VK_F2U(a.hi), VK_F2U(b.hi)))};
	return r;
}
VK_INLINE V v_andnot(V a, V b) /* ~a & b */
{
	V r = {VK_U2F(vbicq_u32(VK_F2U(b.lo), VK_F2U(a.lo))),
	       VK_U2F(vbicq_u32(VK_F2U(b.hi), VK_F2U(a.hi)))};
	return r;
}
VK_INLINE VI v_asint(V a)
{
	VI r = {vreinterpretq_s32_f32(a.lo), vreinterpretq_s32_f32(a.hi)};
	return r;
}
VK_INLINE V vi_asfloat(VI a)
{
	V r = {vreinterpretq_f32_s32(a.lo), vreinterpretq_f32_s32(a.hi)};
	return r;
}
VK_INLINE VI vi_set1(int32_t a)
{
	VI r = {vdupq_n_s32(a), vdupq_n_s32(a)};
	return r;
}
VK_INLINE VI vi_add(VI a, VI b)
{
	VI r = VK_F2(vaddq_s32);
	return r;
}
VK_INLINE VI vi_sub(VI a, VI b)
{
	VI r = VK_F2(vsubq_s32);
	return r;
}
VK_INLINE VI vi_shl23(VI a)
{
	VI r = {vshlq_n_s32(a.lo, 23), vshlq_n_s32(a.hi, 23)};
	return r;
}
VK_INLINE VI vi_sra1(VI a)
{
	VI r = {vshrq_n_s32(a.lo, 1), vshrq_n_s32(a.hi, 1)};
	return r;
}
VK_INLINE float v_hsum(V a)
{
	float32x4_t s = vaddq_f32(a.lo, a.hi); /* l_i + l_{i+4} */
	float32x2_t t = vadd_f32(vget_low_f32(s), vget_high_f32(s));
	return vget_lane_f32(t, 0) + vget_lane_f32(t, 1);
}
VK_INLINE float v_hmax(V a)
{
	float32x4_t s = vbslq_f32(vcgtq_f32(a.lo, a.hi), a.lo, a.hi);
	float32x2_t l = vget_low_f32(s), h = vget_high_f32(s);
	float32x2_t t = vbsl_f32(vcgt_f32(l, h), l, h);
	float t0 = vget_lane_f32(t, 0), t1 = vget_lane_f32(t, 1);
	return t0 > t1 ? t0 : t1;
}
VK_INLINE VD vd_zero(void)
{
	VD r = {{vdupq_n_f64(0), vdupq_n_f64(0), vdupq_n_f64(0), vdupq_n_f64(0)}};
	return r;
}
VK_INLINE VD vd_add_f(VD a, V b)
{
	a.d[0] = vaddq_f64(a.d[0], vcvt_f64_f32(vget_low_f32(b.lo)));
	a.d[1] = vaddq_f64(a.d[1], vcvt_high_f64_f32(b.lo));
	a.d[2] = vaddq_f64(a.d[2], vcvt_f64_f32(vget_low_f32(b.hi)));
	a.d[3] = vaddq_f64(a.d[3], vcvt_high_f64_f32(b.hi));
	return a;
}
VK_INLINE double vd_hsum(VD a)
{
	float64x2_t e = vaddq_f64(a.d[0], a.d[2]); /* s0, s1 */
	float64x2_t f = vaddq_f64(a.d[1], a.d[3]); /* s2, s3 */
	float64x2_t g = vaddq_f64(e, f);           /* s0+s2, s1+s3 */
	return vgetq_lane_f64(g, 0) + vgetq_lane_f64(g, 1);
}
