/*
 * device_math.cuh: the device functions the CUDA sources share: the CPU
 * kernels' exp, tanh and GELU operation for operation (cpu_math_impl.h;
 * built with -fmad=false, so only the written fmaf calls fuse), bf16
 * widening, the warp's fixed shuffle trees and the q4 row sums.
 */
#ifndef VERDICT_CUDA_DEVICE_MATH_CUH
#define VERDICT_CUDA_DEVICE_MATH_CUH

#include <cstdint>

static __device__ __forceinline__ float bf2f(uint16_t u)
{
	return __uint_as_float((uint32_t)u << 16);
}

static __device__ float d_exp(float x)
{
	if (x != x)
		return x;
	const float magic = 12582912.0f;
	x = fminf(88.8f, x);
	x = fmaxf(-104.0f, x);
	float t = fmaf(x, 1.44269504088896341f, magic);
	float n = t - magic;
	float r = fmaf(n, -0.693359375f, x);
	r = fmaf(n, 2.12194440e-4f, r);
	float p = 1.9875691500e-4f;
	p = fmaf(p, r, 1.3981999507e-3f);
	p = fmaf(p, r, 8.3334519073e-3f);
	p = fmaf(p, r, 4.1665795894e-2f);
	p = fmaf(p, r, 1.6666665459e-1f);
	p = fmaf(p, r, 5.0000001201e-1f);
	p = fmaf(p, r * r, r);
	p = p + 1.0f;
	int ni = __float_as_int(t) - __float_as_int(magic);
	int n1 = ni >> 1, n2 = ni - n1;
	float s1 = __int_as_float((n1 + 127) << 23);
	float s2 = __int_as_float((n2 + 127) << 23);
	return (p * s1) * s2;
}

static __device__ float d_tanh(float x)
{
	float ax = fabsf(x);
	float z = x * x;
	float p = -5.70498872745e-3f;
	p = fmaf(p, z, 2.06390887954e-2f);
	p = fmaf(p, z, -5.37397155531e-2f);
	p = fmaf(p, z, 1.33314422036e-1f);
	p = fmaf(p, z, -3.33332819422e-1f);
	float small = fmaf(p * z, ax, ax);
	float e = d_exp(ax + ax);
	float large = 1.0f - 2.0f / (e + 1.0f);
	float t = ax < 0.625f ? small : large;
	return __int_as_float(__float_as_int(t) | (__float_as_int(x) & (int)0x80000000));
}

static __device__ float d_gelu(float x)
{
	float c3 = ((0.044715f * x) * x) * x;
	float in = 0.7978845608028654f * (x + c3);
	float t = d_tanh(in);
	return (0.5f * x) * (1.0f + t);
}

static __device__ __forceinline__ float warp_sum(float v)
{
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

static __device__ __forceinline__ float warp_max(float v)
{
	for (int o = 16; o > 0; o >>= 1)
		v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

/* q4_nib: nibble k (0..7: bits 4k..4k+3) of word v as a float, the value
 * (float)((v >> 4k) & 15) gives, without that integer-to-float conversion
 * (a quarter-rate instruction, the bound of the one-token q4 products): the
 * nibble is or-ed into the mantissa of 2^23 (the upper half shifted down
 * first, so that it stays below bit 23), and one fmaf scales its position
 * out and subtracts 2^23; both steps are exact. k is a constant once the
 * callers' loops are unrolled, so this is a shift (k ≥ 4), a LOP3 and an
 * FFMA. */
static __device__ __forceinline__ float q4_nib(uint32_t v, int k)
{
	int p = 4 * k;
	if (p >= 16) {
		v >>= 16;
		p -= 16;
	}
	float f = __uint_as_float(0x4B000000u | (v & (0xFu << p)));
	return fmaf(f, 1.0f / (float)(1u << p), -(float)(1u << (23 - p)));
}

/* q4_wnib: nibble b (0..31) of a 32-column block held as four words: the
 * low nibbles of its 16 bytes, then their high nibbles. */
static __device__ __forceinline__ float q4_wnib(const uint32_t *q, int b)
{
	int byte = b & 15;
	return q4_nib(q[byte >> 2], 2 * (byte & 3) + (b >= 16));
}

/* q4_sums: lane's sums of q4 row r (w, so: the matrix's nibbles and
 * scales) into acc against nt ≤ NTMAX tokens, xv(t, c) giving x: its
 * 32-column blocks lane, lane + 32, ... in order, one fmaf a weight
 * (fmaf(scale, nibble, offset)) a token. Linear's and the catalog head's
 * q4 sums on the float32 cores. */
template <int NTMAX, class XV>
static __device__ __forceinline__ void q4_sums(float *acc, int nt, XV xv, const uint8_t *w, const float *so,
                                               int64_t r, int64_t cols, int lg, int lane)
{
	const uint8_t *qr = w + r * (cols / 2);
	const float *sr = so + r * ((cols >> lg) * 2);
	for (int64_t j = 32 * (int64_t)lane; j < cols; j += 32 * 32) {
		const uint32_t *p = (const uint32_t *)(qr + j / 2);
		uint32_t q[4] = {__ldg(p), __ldg(p + 1), __ldg(p + 2), __ldg(p + 3)};
		int64_t g2 = (j >> lg) * 2;
		float s = __ldg(sr + g2), off = __ldg(sr + g2 + 1);
#pragma unroll
		for (int b = 0; b < 32; b++) {
			float wv = fmaf(s, q4_wnib(q, b), off);
#pragma unroll
			for (int t = 0; t < NTMAX; t++)
				if (t < nt)
					acc[t] = fmaf(xv(t, j + b), wv, acc[t]);
		}
	}
}

#endif
