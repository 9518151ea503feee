/*
 * tf32.cuh: float32 products on the tensor cores in three TF32 parts, for
 * tower.cu's product.
 *
 * An operand a is split into hi = a rounded to TF32 (10 mantissa bits, to
 * nearest, ties away) and lo = (a − hi) rounded to TF32 (a − hi is exact in
 * float32); a·b is then summed as lo_a·hi_b + hi_a·lo_b + hi_a·hi_b by
 * three m16n8k8 mma's (mma3_chain below). The term left out, lo·lo,
 * and lo's own rounding are about 2^-22 of |a·b|: products of float32
 * accuracy at the tensor cores' rate (a plain TF32 product keeps 2^-11).
 *
 * Fragments of mma.m16n8k8 (g = lane / 4, t = lane % 4): A a0 (g, t), a1
 * (g + 8, t), a2 (g, t + 4), a3 (g + 8, t + 4); B b0 (k t, n g), b1 (k t +
 * 4, n g); C c0 (g, 2t), c1 (g, 2t + 1), c2 (g + 8, 2t), c3 (g + 8, 2t + 1).
 *
 * Off the device (build/cuda-syntax.sh's emulation) mma3_chain is a warp
 * exchange through memory, each output summing its products in k order in
 * float (a TF32 product is exact in float32); the hardware's order and
 * rounding within an mma are its own, so the emulation checks the
 * arithmetic's logic, not its bits.
 */
#ifndef VERDICT_TF32_CUH
#define VERDICT_TF32_CUH

#include <cstdint>

namespace tf32 {

/* rna: a rounded to TF32, to nearest with ties away from zero, the 13 low
 * bits cleared: half a unit added to the magnitude's bits, then cut (the
 * result of cvt.rna.tf32.f32, on the integer units, which run at four
 * times the conversions' rate). */
static __device__ __forceinline__ uint32_t rna(float a)
{
	return (__float_as_uint(a) + 0x1000u) & 0xffffe000u;
}

/* split: hi and lo parts of a (hi + lo = a within 2^-22·|a|). */
static __device__ __forceinline__ void split(float a, uint32_t &hi, uint32_t &lo)
{
	hi = rna(a);
	lo = rna(a - __uint_as_float(hi));
}

#if !defined(VERDICT_CUDA_STUB_H)
/* mma: d += a·b, m16n8k8, TF32 operands, float32 sums. */
static __device__ __forceinline__ void mma(float *d, const uint32_t *a, const uint32_t *b)
{
#if defined(__CUDA_ARCH__)
	asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
	    "{%0,%1,%2,%3};"
	    : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
	    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

/* mma3_chain: d += a·b in three parts, the small ones first (lo·hi,
 * hi·lo, hi·hi), by the tensor cores alone. Their float32 sums are
 * truncated: a long chain into one d drifts (2^-23 a step, 4.5e-5 of the
 * result after 6,144 columns on an H100), so the caller keeps d a short
 * chain's sum from 0 (a stage's) and adds it to the output on the float
 * cores. */
static __device__ __forceinline__ void mma3_chain(float *d, const uint32_t *ah, const uint32_t *al, const uint32_t *bh,
                                                  const uint32_t *bl)
{
	mma(d, al, bh);
	mma(d, ah, bl);
	mma(d, ah, bh);
}

/* ldm4: four 8×4-float matrices from shared memory by ldmatrix (b16
 * matrices of 8×8 are 8×4 floats): lane L gives the address of row L % 8
 * of matrix L / 8 (16 bytes, 16-byte aligned) and gets, of each matrix j,
 * the float of row L / 4 at column L % 4 in r[j]: an A fragment of
 * mma.m16n8k8 (matrices at rows 0 and 8, columns 0 and 4), or two B
 * fragments of w by rows. */
static __device__ __forceinline__ void ldm4(uint32_t *r, const float *p)
{
#if defined(__CUDA_ARCH__)
	unsigned a = (unsigned)__cvta_generic_to_shared(p);
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
	             : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
	             : "r"(a));
#endif
}
#else
/* The emulation's ldm4: each matrix's row addresses by the warp's
 * shuffles, then the lane's float of each. */
static inline void ldm4(uint32_t *r, const float *p)
{
	unsigned L = threadIdx.x & 31;
	for (int j = 0; j < 4; j++) {
		const float *row = __shfl_sync(0xffffffffu, p, 8 * j + (int)(L >> 2));
		r[j] = __float_as_uint(row[L & 3]);
	}
}

/* The emulation's mma3_chain: the warp's fragments of the three mma's through
 * memory in one exchange (blocks run one at a time; two slots by turns,
 * so one barrier a call: a slot is written again only after every lane
 * has passed the next call's barrier, its reads done), then each output's
 * three sums of eight products in k order, added to d in float (the
 * hardware sums into d itself, truncated). */
static inline void mma3_chain(float *d, const uint32_t *ah, const uint32_t *al, const uint32_t *bh,
                              const uint32_t *bl)
{
	static uint32_t ex[2][32][32][12];
	static thread_local unsigned turn;
	unsigned wi = threadIdx.x >> 5, me = threadIdx.x & 31, sl = turn++ & 1;
	uint32_t *mine = ex[sl][wi][me];
	for (int k = 0; k < 4; k++)
		mine[k] = ah[k], mine[4 + k] = al[k];
	mine[8] = bh[0], mine[9] = bh[1], mine[10] = bl[0], mine[11] = bl[1];
	__syncwarp();
	auto f = [](uint32_t r) { return __uint_as_float(r & 0xffffe000u); };
	unsigned g = me >> 2, t = me & 3;
	for (int i = 0; i < 4; i++) {
		unsigned row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
		/* A[row][k] from lane 4·(row % 8) + k % 4, register (row ≥ 8) + 2·(k ≥ 4);
		 * B[k][col] from lane 4·col + k % 4, register k ≥ 4 */
		auto A = [&](int part, int k) { return f(ex[sl][wi][4 * (row & 7) + (k & 3)][4 * part + (row >> 3) + 2 * (k >> 2)]); };
		auto B = [&](int part, int k) { return f(ex[sl][wi][4 * col + (k & 3)][8 + 2 * part + (k >> 2)]); };
		float acc = 0.0f;
		const int pa[3] = {1, 0, 0}, pb[3] = {0, 1, 0}; /* lo·hi, hi·lo, hi·hi */
		for (int u = 0; u < 3; u++)
			for (int k = 0; k < 8; k++)
				acc += A(pa[u], k) * B(pb[u], k);
		d[i] += acc;
	}
}

#endif

} // namespace tf32

#endif
