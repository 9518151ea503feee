/*
 * cpu_math_impl.h: exp, tanh and GELU over the 8-lane vector V, and partial
 * loads for row tails. Included once per SIMD level after its cpu_vec_*.h.
 */

/* v_load_part loads p[0..n) (n < 8) and fills the other lanes. */
VK_INLINE V v_load_part(const float *p, int64_t n, float fill)
{
	float t[8];
	for (int l = 0; l < 8; l++)
		t[l] = l < n ? p[l] : fill;
	return v_load(t);
}
VK_INLINE void v_store_part(float *p, int64_t n, V a)
{
	float t[8];
	v_store(t, a);
	for (int l = 0; l < n; l++)
		p[l] = t[l];
}

/* v_exp: Cephes-style expf, about 1 ulp. Range reduction x = n·ln2 + r
 * with |r| <= ln2/2, a degree-7 polynomial, and 2^n applied in two halves
 * so that subnormal results round correctly. NaN stays NaN. */
VK_INLINE V v_exp(V x)
{
	const V magic = v_set1(12582912.0f); /* 1.5·2^23 */
	x = v_min(v_set1(88.8f), x);          /* NaN passes through */
	x = v_max(v_set1(-104.0f), x);
	V t = v_fma(x, v_set1(1.44269504088896341f), magic);
	V n = v_sub(t, magic); /* round(x·log2 e) */
	V r = v_fma(n, v_set1(-0.693359375f), x);
	r = v_fma(n, v_set1(2.12194440e-4f), r);
	V p = v_set1(1.9875691500e-4f);
	p = v_fma(p, r, v_set1(1.3981999507e-3f));
	p = v_fma(p, r, v_set1(8.3334519073e-3f));
	p = v_fma(p, r, v_set1(4.1665795894e-2f));
	p = v_fma(p, r, v_set1(1.6666665459e-1f));
	p = v_fma(p, r, v_set1(5.0000001201e-1f));
	p = v_fma(p, v_mul(r, r), r);
	p = v_add(p, v_set1(1.0f));
	VI ni = vi_sub(v_asint(t), v_asint(magic)); /* n as an integer */
	VI n1 = vi_sra1(ni);
	VI n2 = vi_sub(ni, n1);
	V s1 = vi_asfloat(vi_shl23(vi_add(n1, vi_set1(127))));
	V s2 = vi_asfloat(vi_shl23(vi_add(n2, vi_set1(127))));
	return v_mul(v_mul(p, s1), s2);
}

/* v_tanh: Cephes tanhf, about 2 ulp. |x| < 0.625: odd polynomial; else
 * 1 − 2/(exp(2|x|)+1); then x's sign. */
VK_INLINE V v_tanh(V x)
{
	const V sign = v_set1(-0.0f);
	V ax = v_andnot(sign, x);
	V z = v_mul(x, x);
	V p = v_set1(-5.70498872745e-3f);
	p = v_fma(p, z, v_set1(2.06390887954e-2f));
	p = v_fma(p, z, v_set1(-5.37397155531e-2f));
	p = v_fma(p, z, v_set1(1.33314422036e-1f));
	p = v_fma(p, z, v_set1(-3.33332819422e-1f));
	V small = v_fma(v_mul(p, z), ax, ax);
	V e = v_exp(v_add(ax, ax));
	V large = v_sub(v_set1(1.0f), v_div(v_set1(2.0f), v_add(e, v_set1(1.0f))));
	V t = v_select(v_lt(ax, v_set1(0.625f)), small, large);
	return v_or(t, v_and(sign, x)); /* tanh(|x|) >= 0: copy x's sign */
}

/* v_gelu: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), operations in the
 * reference's order. */
VK_INLINE V v_gelu(V x)
{
	V c3 = v_mul(v_mul(v_mul(v_set1(0.044715f), x), x), x);
	V in = v_mul(v_set1(0.7978845608028654f), v_add(x, c3));
	V t = v_tanh(in);
	return v_mul(v_mul(v_set1(0.5f), x), v_add(v_set1(1.0f), t));
}
