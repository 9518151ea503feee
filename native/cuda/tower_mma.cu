/*
 * tower_mma.cu: the towers' product on the tensor cores (pointwise,
 * conv2d and tower_linear of tower.cu, unless VERDICT_TOWER_MMA=0), each
 * product in three TF32 parts (tf32.cuh): float32's accuracy, not the
 * CPU's bits (tower.cu's float-core product keeps those).
 *
 * A block of 256 threads takes BM×BN outputs (128×128, 128×64 or 64×64),
 * its eight warps WM × WN of them, a warp MT × NT fragments of 16×8: a
 * block of 128×128 a multiprocessor (up to 255 registers a thread), two of
 * the smaller tiles (held to 128). The operands stream through STAGES
 * shared buffers of BK columns by cp.async (zeros past the edges, the
 * im2col view of an image gathered on the way), STAGES − 1 of them in
 * flight while one is summed. A is kept by rows (BK + 4 floats a row: the
 * fragments' reads fall on 32 distinct banks) and read by ldmatrix, B by
 * rows too (ldmatrix) when it is w [n, k], or k-major (BN + 8 floats a row,
 * read a float at a time) when it is packed in panels of 16 rows. Each
 * output takes its stages in column order, a stage's four k8 steps (three
 * mma's each: tf32::mma3_chain) summed from 0 by the tensor cores and
 * added to the output by the float cores: the tensor cores' sums are
 * truncated, and a chain that starts from 0 each stage stays small. An
 * output's operations depend on k alone: never on the tiling or the batch.
 * Each of these choices was measured faster on an H100 (native/cuda/
 * README.md, stop 53) than two blocks of every tile held to 128 registers,
 * stages of 16 columns, a k8 step's chain and scalar fragment loads, and a
 * stage's chain is also the more accurate.
 */
#include "tower_mma.h"

#include "cp_async.cuh"
#include "tf32.cuh"

#include <cuda_runtime.h>

#include <cstdint>

namespace {

constexpr int BK = 32;     /* columns a stage */
constexpr int STAGES = 4;  /* buffers: STAGES − 1 stages loading while one is summed */
constexpr int AP = BK + 4; /* floats a row of A (and of B by rows) in shared memory */
constexpr int QR = BK / 4; /* 16-byte copies a row of a stage */

/* shape: a block's BM×BN outputs. */
template <int BM, int BN, bool BP> struct shape {
	static constexpr int WM = BM == 128 && BN == 64 ? 4 : 2, WN = 8 / WM; /* the warps' grid */
	static constexpr int MT = BM / WM / 16, NT = BN / WN / 8;            /* a warp's fragments */
	static constexpr int ASZ = BM * AP;                                  /* floats of A a stage */
	static constexpr int BSZ = BP ? BK * (BN + 8) : BN * AP;             /* of B */
	static constexpr size_t smem = (size_t)STAGES * (ASZ + BSZ) * sizeof(float);
};

/* zero, add_into: a warp's MT × NT fragments of sums set to 0; s added to
 * d (the float cores). */
template <int MT, int NT> static __device__ __forceinline__ void zero(float (&t)[MT][NT][4])
{
#pragma unroll
	for (int i = 0; i < MT * NT * 4; i++)
		t[i / (NT * 4)][i / 4 % NT][i % 4] = 0.0f;
}

template <int MT, int NT>
static __device__ __forceinline__ void add_into(float (&d)[MT][NT][4], const float (&s)[MT][NT][4])
{
#pragma unroll
	for (int i = 0; i < MT * NT * 4; i++)
		d[i / (NT * 4)][i / 4 % NT][i % 4] += s[i / (NT * 4)][i / 4 % NT][i % 4];
}

/* k_mma: the product (tower_mma.h's mma_gemm). VA loads A 16 bytes at a
 * time (x's rows 16-byte aligned with k a multiple of 4, or an image of a
 * multiple of 4 channels); CONV reads A as the im2col view of the image x
 * (row = output pixel, column = (ky·k + kx)·c + channel); BP: B packed. */
template <int BM, int BN, bool CONV, bool VA, bool BP>
__global__ void __launch_bounds__(256, BM == 128 && BN == 128 ? 1 : 2)
	k_mma(float *__restrict__ y, int64_t ldy, const float *__restrict__ x, int64_t ldx, const float *__restrict__ b,
	      const float *__restrict__ bias, int64_t m, int64_t n, int64_t k, conv_geom g)
{
	using S = shape<BM, BN, BP>;
	constexpr int MT = S::MT, NT = S::NT, WM = S::WM, WN = S::WN;
	constexpr int NA = VA ? BM * BK / 4 / 256 : BM * BK / 256; /* A's copies a thread a stage */
	constexpr int NB = BN * BK / 4 / 256;                      /* B's (16 bytes each) */
	extern __shared__ __align__(16) float sm[];
	float *As = sm, *Bs = sm + STAGES * S::ASZ;
	const int tid = threadIdx.x, lane = tid & 31, wid = tid >> 5, g8 = lane >> 2, t4 = lane & 3;
	const int wm0 = wid % WM * (BM / WM), wn0 = wid / WM * (BN / WN);
	const int64_t m0 = (int64_t)blockIdx.x * BM, n0 = (int64_t)blockIdx.y * BN;
	const int64_t npad = (n + 15) / 16 * 16, nst = (k + BK - 1) / BK;
	/* This thread's rows of A: VA, row f / QR at columns 4·(f % QR)..+3;
	 * else row f / BK at column f % BK (f = tid + 256·l). */
	int64_t arow[NA];
	int iy0[NA], ix0[NA];
	bool aok[NA];
#pragma unroll
	for (int l = 0; l < NA; l++) {
		int f = tid + 256 * l;
		int64_t i = m0 + (VA ? f / QR : f / BK);
		aok[l] = i < m;
		arow[l] = i;
		iy0[l] = ix0[l] = 0;
		if (CONV && aok[l])
			conv_origin(g, i, &iy0[l], &ix0[l]);
	}
	auto load = [&](int64_t s, int slot) {
		int64_t k0 = s * BK;
		float *as = As + slot * S::ASZ, *bs = Bs + slot * S::BSZ;
#pragma unroll
		for (int l = 0; l < NA; l++) {
			int f = tid + 256 * l, r = VA ? f / QR : f / BK, c = VA ? 4 * (f % QR) : f % BK;
			int64_t p = k0 + c;
			bool ok = aok[l] && p < k;
			const float *src = x;
			if (ok) {
				if (CONV) {
					int tap = (int)(p / g.c), ci = (int)(p - (int64_t)tap * g.c);
					int ky = tap / g.k, kx = tap - ky * g.k, iy = iy0[l] + ky, ix = ix0[l] + kx;
					ok = iy >= 0 && iy < g.h && ix >= 0 && ix < g.w;
					if (ok)
						src = x + ((int64_t)iy * g.w + ix) * g.c + ci;
				} else {
					src = x + arow[l] * ldx + p;
				}
			}
			if constexpr (VA)
				cp16(as + r * AP + c, src, ok);
			else
				cp4(as + r * AP + c, src, ok);
		}
#pragma unroll
		for (int l = 0; l < NB; l++) {
			int f = tid + 256 * l;
			if constexpr (BP) { /* panel f / 4BK, its column k0 + (f % 4BK) / 4, quarter f % 4 */
				int q = f / (4 * BK), pr = (f % (4 * BK)) >> 2, h = f & 3;
				int64_t j = n0 + 16 * q, pp = k0 + pr;
				bool ok = j < npad && pp < k;
				cp16(bs + pr * (BN + 8) + 16 * q + 4 * h, ok ? b + (j >> 4) * 16 * k + pp * 16 + 4 * h : b, ok);
			} else { /* row f / QR, columns 4·(f % QR)..+3 */
				int r = f / QR, c = 4 * (f % QR);
				int64_t j = n0 + r, p = k0 + c;
				bool ok = j < n && p < k;
				cp16(bs + r * AP + c, ok ? b + j * k + p : b, ok);
			}
		}
	};
	float acc[MT][NT][4];
	zero(acc);
#pragma unroll
	for (int s = 0; s < STAGES - 1; s++) {
		if (s < nst)
			load(s, s);
		cp_commit();
	}
	for (int64_t s = 0; s < nst; s++) {
		cp_wait<STAGES - 2>(); /* stage s has landed (this thread's copies) */
		__syncthreads();       /* ... and everyone's; the slot refilled below was summed by all */
		int64_t nx = s + STAGES - 1;
		if (nx < nst)
			load(nx, (int)(nx % STAGES));
		cp_commit();
		const float *as = As + (int)(s % STAGES) * S::ASZ, *bs = Bs + (int)(s % STAGES) * S::BSZ;
		float pc[MT][NT][4]; /* the stage's sums, from 0 */
		zero(pc);
#pragma unroll
		for (int kk = 0; kk < BK; kk += 8) {
			uint32_t ah[MT][4], al[MT][4], bh[NT][2], bl[NT][2];
			/* A's fragments by ldmatrix: rows +8 for lanes 8-15 and 24-31, columns +4 from lane 16 */
#pragma unroll
			for (int a = 0; a < MT; a++) {
				uint32_t r[4];
				tf32::ldm4(r, as + (wm0 + 16 * a + (lane & 7) + 8 * ((lane >> 3) & 1)) * AP + kk + 4 * (lane >> 4));
#pragma unroll
				for (int e = 0; e < 4; e++)
					tf32::split(__uint_as_float(r[e]), ah[a][e], al[a][e]);
			}
			if constexpr (!BP) { /* w by rows, two fragments an ldmatrix: c + 1 from lane 16, columns +4 for lanes 8-15 and 24-31 */
#pragma unroll
				for (int c = 0; c < NT; c += 2) {
					uint32_t r[4];
					tf32::ldm4(r, bs + (wn0 + 8 * (c + (lane >> 4)) + (lane & 7)) * AP + kk + 4 * ((lane >> 3) & 1));
#pragma unroll
					for (int e = 0; e < 4; e++)
						tf32::split(__uint_as_float(r[e]), bh[c + (e >> 1)][e & 1], bl[c + (e >> 1)][e & 1]);
				}
			} else {
#pragma unroll
				for (int c = 0; c < NT; c++)
#pragma unroll
					for (int e = 0; e < 2; e++) /* packed: k-major, a float at a time */
						tf32::split(bs[(kk + t4 + 4 * e) * (BN + 8) + wn0 + 8 * c + g8], bh[c][e], bl[c][e]);
			}
#pragma unroll
			for (int a = 0; a < MT; a++)
#pragma unroll
				for (int c = 0; c < NT; c++)
					tf32::mma3_chain(pc[a][c], ah[a], al[a], bh[c], bl[c]);
		}
		add_into(acc, pc);
	}
	cp_wait<0>();
#pragma unroll
	for (int a = 0; a < MT; a++)
#pragma unroll
		for (int h = 0; h < 2; h++) {
			int64_t i = m0 + wm0 + 16 * a + g8 + 8 * h;
			if (i >= m)
				continue;
#pragma unroll
			for (int c = 0; c < NT; c++)
#pragma unroll
				for (int e = 0; e < 2; e++) {
					int64_t j = n0 + wn0 + 8 * c + 2 * t4 + e;
					if (j >= n)
						continue;
					float v = acc[a][c][2 * h + e];
					if (bias)
						v = v + bias[j];
					y[i * ldy + j] = v;
				}
		}
}

/* resident: the blocks of k_mma<...> a multiprocessor holds (at least
 * 1), asked once; its shared memory allowed first. */
template <int BM, int BN, bool CONV, bool VA, bool BP> int resident()
{
	static const int r = [] {
		constexpr size_t smem = shape<BM, BN, BP>::smem;
		auto kern = k_mma<BM, BN, CONV, VA, BP>;
		int n = 0;
		if (cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) != cudaSuccess ||
		    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kern, 256, smem) != cudaSuccess || n < 1)
			n = 1;
		return n;
	}();
	return r;
}

template <int BM, int BN, bool CONV, bool VA, bool BP>
cudaError_t launch(cudaStream_t st, float *y, int64_t ldy, const float *x, int64_t ldx, const float *b,
                   const float *bias, int64_t m, int64_t n, int64_t k, const conv_geom &g)
{
	constexpr size_t smem = shape<BM, BN, BP>::smem;
	auto kern = k_mma<BM, BN, CONV, VA, BP>;
	if (cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem))
		return e;
	dim3 grid((unsigned)((m + BM - 1) / BM), (unsigned)((n + BN - 1) / BN));
	kern<<<grid, 256, smem, st>>>(y, ldy, x, ldx, b, bias, m, n, k, g);
	return cudaGetLastError();
}

/* pick: the tile (88: 128×128, 84: 128×64, 44: 64×64) of the least
 * estimated time: the waves of blocks the multiprocessors run (resident
 * blocks each at once) times a wave's work, a smaller tile's outputs
 * dearer (more shared-memory reads a product: 1, 1.15, 1.3). A grid
 * that fills a last wave by a tenth pays a whole wave (144 blocks of
 * 128×128 on 132 multiprocessors: 12 of them alone in the second). */
template <bool CONV, bool VA, bool BP> int pick(int sms, int64_t m, int64_t n)
{
	const int tiles[3] = {88, 84, 44}, occ[3] = {resident<128, 128, CONV, VA, BP>(),
	                                             resident<128, 64, CONV, VA, BP>(),
	                                             resident<64, 64, CONV, VA, BP>()};
	const double dear[3] = {1.0, 1.15, 1.3};
	int best = 44;
	double least = 0;
	for (int i = 0; i < 3; i++) {
		int64_t bm = 16 * (tiles[i] / 10), bn = 16 * (tiles[i] % 10);
		int64_t blocks = ((m + bm - 1) / bm) * ((n + bn - 1) / bn), slots = (int64_t)(sms > 0 ? sms : 1) * occ[i];
		double t = (double)((blocks + slots - 1) / slots) * occ[i] * bm * bn * dear[i];
		if (i == 0 || t < least)
			least = t, best = tiles[i];
	}
	return best;
}

template <bool CONV, bool VA, bool BP>
cudaError_t by_tile(int tile, int sms, cudaStream_t st, float *y, int64_t ldy, const float *x, int64_t ldx,
                    const float *b, const float *bias, int64_t m, int64_t n, int64_t k, const conv_geom &g)
{
	if (tile != 88 && tile != 84 && tile != 44)
		tile = pick<CONV, VA, BP>(sms, m, n);
	if (tile == 88)
		return launch<128, 128, CONV, VA, BP>(st, y, ldy, x, ldx, b, bias, m, n, k, g);
	if (tile == 84)
		return launch<128, 64, CONV, VA, BP>(st, y, ldy, x, ldx, b, bias, m, n, k, g);
	return launch<64, 64, CONV, VA, BP>(st, y, ldy, x, ldx, b, bias, m, n, k, g);
}

} // namespace

int mma_gemm(cudaStream_t st, int sms, int tile, bool vec, bool packed, float *y, int64_t ldy, const float *x,
             int64_t ldx, const float *b, const float *bias, int64_t m, int64_t n, int64_t k, const conv_geom *g)
{
	if (m <= 0 || n <= 0)
		return 0;
	conv_geom cg = g ? *g : conv_geom{};
	if (!packed) /* w by rows: tower_linear has checked the alignment */
		return (int)by_tile<false, true, false>(tile, sms, st, y, ldy, x, ldx, b, bias, m, n, k, cg);
	bool va = vec && ((uintptr_t)x & 15) == 0 && (g ? cg.c % 4 == 0 : ldx % 4 == 0 && k % 4 == 0);
	if (g)
		return (int)(va ? by_tile<true, true, true>(tile, sms, st, y, ldy, x, ldx, b, bias, m, n, k, cg)
		                : by_tile<true, false, true>(tile, sms, st, y, ldy, x, ldx, b, bias, m, n, k, cg));
	return (int)(va ? by_tile<false, true, true>(tile, sms, st, y, ldy, x, ldx, b, bias, m, n, k, cg)
	                : by_tile<false, false, true>(tile, sms, st, y, ldy, x, ldx, b, bias, m, n, k, cg));
}
