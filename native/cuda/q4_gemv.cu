/*
 * q4_gemv.cu: the q4 product of one token (a decode step's) with
 * q4_mma's arithmetic on the integer cores: its bits, and its first
 * weights in registers before the kernel waits for the one before it.
 *
 * q4_mma (q4_mma.cu) holds the arithmetic: a chunk of 64 columns of x as
 * integers X = rint(x·2^(22−e)) in three byte limbs, the chunk's sums
 * D_L = Σ nib·limb_L exact integers, D = fmaf(D2, 2^16, fmaf(D1, 2^8,
 * D0))·xs, a slice's P = fmaf(sc, D, fmaf(off, Sx, P)) over its chunks in
 * order, y = ((0 + P_0) + P_1) + ... . Here the sums D_L are taken by
 * dp4a (four 8-bit products and their sum, exact) rather than by mma,
 * whose m16n8 tile holds 8 tokens where a decode step has one; the rest
 * is the same operations in the same order, so a row has q4_mma's bits
 * (q4_check compares them bit for bit).
 *
 * A block takes a unit of R rows of one product (R = 32, 16, 8 or 4: the
 * most rows that still give the grid two blocks a multiprocessor, so
 * that a product of 2,048 rows is not 64 blocks) and every chunk: warp w
 * the chunks w, w + 8, ..., the 32/R lanes of a row each 8R/32 of a
 * chunk's eight words, their integer sums added across those lanes
 * (exact). Before pdl_wait, which only weights may precede, each thread
 * loads its first chunks' words into registers (asks for the rest in L2)
 * and the scales its epilogue reads. After it: x quantised into shared
 * memory once a block (three byte planes in column order, each warp the
 * chunks it sums), the chunk sums (the lanes of a warp read the same x
 * words: broadcasts), the d's into shared memory, then a thread a (row,
 * slice) adds its slice in order and a thread a row its slices. Past two
 * blocks a multiprocessor (the head: 8,200 units) a block takes units
 * in turn, x quantised once, the next unit's first weights loaded while
 * this one's are summed. VERDICT_Q4_GEMV=0 sends one token to q4_mma's
 * kernels, =N only products of at most N rows, for comparisons.
 */
#include "q4_mma.h"
#include "dev_props.h"
#include "env.h"
#include "device_math.cuh"
#include "q4_mma.cuh"

#include <cstdint>
#include <cstdlib>
#include <cstring>

using namespace q4mma;

namespace {

constexpr int GV_W = 8;      /* warps a block */
constexpr int GV_SC = 16;    /* the most chunks a slice or a warp has (G ≤ 128) */
constexpr int GV_WORDS = 32; /* the weight words a lane holds ahead */

/* Gv: the products of one launch, part i's units b0[i] .. b0[i+1]−1. */
struct Gv {
	q4_mma_part p[Q4_MMA_PARTS];
	int64_t b0[Q4_MMA_PARTS + 1];
	int np;
};

/* Lay: a unit of R rows: L lanes a row, each WD of a chunk's eight words
 * (in NG groups of WG: words j..j+WG−1 of a half), UP chunks a warp held
 * ahead. */
template <int R> struct Lay {
	static constexpr int L = 32 / R, WD = 8 / L, NG = WD >= 4 ? WD / 4 : 1, WG = WD >= 4 ? 4 : WD,
	                     UP = GV_WORDS / WD;
};

/* dot4u, dot4s: c + the sum of the four byte products of a and b (bytes
 * unsigned; b's signed in dot4s, a's bytes nibbles, 0..15). */
static __device__ __forceinline__ int dot4u(uint32_t a, uint32_t b, int c)
{
#if defined(__CUDA_ARCH__)
	return (int)__dp4a(a, b, (unsigned)c);
#else
	for (int i = 0; i < 4; i++)
		c += (int)(a >> 8 * i & 255u) * (int)(b >> 8 * i & 255u);
	return c;
#endif
}

static __device__ __forceinline__ int dot4s(uint32_t a, uint32_t b, int c)
{
#if defined(__CUDA_ARCH__)
	return __dp4a((int)a, (int)b, c);
#else
	for (int i = 0; i < 4; i++)
		c += (int)(a >> 8 * i & 255u) * (int)(int8_t)(b >> 8 * i & 255u);
	return c;
#endif
}

/* ldw: WD words at p (4·WD-byte aligned). */
template <int WD> static __device__ __forceinline__ void ldw(uint32_t *w, const uint8_t *p)
{
	if constexpr (WD == 8) {
		uint4 a = __ldg((const uint4 *)p), b = __ldg((const uint4 *)(p + 16));
		w[0] = a.x, w[1] = a.y, w[2] = a.z, w[3] = a.w, w[4] = b.x, w[5] = b.y, w[6] = b.z, w[7] = b.w;
	} else if constexpr (WD == 4) {
		uint4 a = __ldg((const uint4 *)p);
		w[0] = a.x, w[1] = a.y, w[2] = a.z, w[3] = a.w;
	} else if constexpr (WD == 2) {
		uint2 a = __ldg((const uint2 *)p);
		w[0] = a.x, w[1] = a.y;
	} else {
		w[0] = __ldg((const uint32_t *)p);
	}
}

/* lds: WG words of shared memory at p (4·WG-byte aligned). */
template <int WG> static __device__ __forceinline__ void lds(uint32_t *w, const uint32_t *p)
{
	if constexpr (WG == 4) {
		uint4 a = *(const uint4 *)p;
		w[0] = a.x, w[1] = a.y, w[2] = a.z, w[3] = a.w;
	} else if constexpr (WG == 2) {
		uint2 a = *(const uint2 *)p;
		w[0] = a.x, w[1] = a.y;
	} else {
		w[0] = *p;
	}
}

/* smem_bytes: a block's shared memory for cols columns and units of R
 * rows: the three limb planes, (xs, Sx) a chunk, the d's [G][R] and the
 * slice sums [8][R]. */
static __host__ __device__ int64_t smem_bytes(int64_t cols, int R)
{
	int64_t G = cols >> 6;
	return 3 * cols + G * 8 + G * R * 4 + 8 * R * 4;
}

/* unit: the part k and first row r0 of unit u. */
static __device__ __forceinline__ void unit(const Gv &gv, int64_t u, int R, int &k, int64_t &r0)
{
	k = 0;
	while (k + 1 < gv.np && u >= gv.b0[k + 1])
		k++;
	r0 = (u - gv.b0[k]) * R;
}

/* k_q4_gemv: units blockIdx.x, + gridDim.x, ... of the launch's products
 * with x [1, cols]. */
template <int R>
__global__ void __launch_bounds__(32 * GV_W, 2) k_q4_gemv(Gv gv, const float *x, int64_t cols, int S, bool vec)
{
	using Y = Lay<R>;
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5, rl = lane / Y::L, sub = lane % Y::L, j0 = sub * Y::WD;
	int64_t G = cols >> 6, units = gv.b0[gv.np], u = blockIdx.x;
	int nu = (int)((G - w + GV_W - 1) / GV_W); /* the chunks this warp sums */
	int e = threadIdx.x, es = e / R, er = e % R; /* the epilogue's (slice es, row er) */
	bool ep = es < S;
	int64_t e0 = ep ? es * G / S : 0, e1 = ep ? (es + 1) * G / S : 0;
	int k;
	int64_t r0;
	unit(gv, u, R, k, r0);
	/* the_row: a row of part kk's to read (past its end: its last);
	 * row_q: this lane's words of row r0 + rl's chunks; at: of its chunk
	 * w + 8i; rest_l2: those past the first UP asked into L2. */
	auto the_row = [&](int kk, int64_t r) { return r < gv.p[kk].nout ? r : gv.p[kk].nout - 1; };
	auto row_q = [&](int kk, int64_t r) { return gv.p[kk].q + the_row(kk, r + rl) * (cols / 2) + 4 * j0; };
	auto at = [&](const uint8_t *q, int i) { return q + (w + GV_W * i) * 32; };
	auto rest_l2 = [&](const uint8_t *q) {
		for (int i = Y::UP; i < nu; i++)
			pdl_prefetch_l2(at(q, i));
	};
	const uint8_t *qr = row_q(k, r0);

	/* Before the wait: weights and scales only. */
	uint32_t wr[Y::UP][Y::WD];
#pragma unroll
	for (int i = 0; i < Y::UP; i++)
		if (i < nu)
			ldw<Y::WD>(wr[i], at(qr, i));
	rest_l2(qr);
	float2 sc[GV_SC];
	auto scales = [&](int kk, int64_t rr) {
		const q4_mma_part &p = gv.p[kk];
		const float *sr = p.so + the_row(kk, rr) * ((cols >> p.lg) * 2);
#pragma unroll
		for (int i = 0; i < GV_SC; i++)
			if (e0 + i < e1)
				sc[i] = __ldg((const float2 *)(sr + (((e0 + i) << 6) >> p.lg) * 2));
	};
	scales(k, r0 + er);
	pdl_wait();
	pdl_launch();

	extern __shared__ __align__(16) uint8_t gsm[];
	uint8_t *pl = gsm;                        /* limb planes [3][cols] */
	float2 *xsx = (float2 *)(gsm + 3 * cols); /* (xs, Sx) [G] */
	float *dsm = (float *)(xsx + G);          /* d [G][R] */
	float *psm = dsm + G * R;                 /* P [8][R] */

	/* x quantised: warp w the chunks w, w + 8, ... (those it sums below);
	 * lane l columns 2l, 2l + 1, every chunk's loaded first (one wait for
	 * them all, not one a chunk). */
	{
		float2 xv[GV_SC];
#pragma unroll
		for (int i = 0; i < GV_SC; i++) {
			int64_t c = w + GV_W * i;
			if (c < G) {
				const float *xc = x + c * 64 + 2 * lane;
				xv[i] = vec ? *(const float2 *)xc : float2{xc[0], xc[1]};
			}
		}
#pragma unroll
		for (int i = 0; i < GV_SC; i++) {
			int64_t c = w + GV_W * i;
			if (c >= G)
				break;
			float v0 = xv[i].x, v1 = xv[i].y;
			float a0 = fabsf(v0), a1 = fabsf(v1);
			int bad = !(a0 <= 3.402823466e38f) || !(a1 <= 3.402823466e38f);
			float m = fmaxf(fmaxf(0.0f, a0), a1);
#pragma unroll
			for (int o = 16; o > 0; o >>= 1) {
				m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
				bad |= __shfl_xor_sync(0xffffffffu, bad, o);
			}
			int ex;
			float s1, s2;
			chunk_exp(m, bad, ex, s1, s2);
			int X0 = bad ? 0 : rint_i(v0 * s1 * s2), X1 = bad ? 0 : rint_i(v1 * s1 * s2), sum = X0 + X1;
#pragma unroll
			for (int o = 16; o > 0; o >>= 1)
				sum += __shfl_xor_sync(0xffffffffu, sum, o);
#pragma unroll
			for (int L = 0; L < 3; L++)
				*(uint16_t *)(pl + L * cols + c * 64 + 2 * lane) =
				    (uint16_t)(((uint32_t)X0 >> 8 * L & 255u) | ((uint32_t)X1 >> 8 * L & 255u) << 8);
			if (lane == 0) {
				float xs = bad ? __int_as_float(0x7fc00000) : pow2f(ex - 22);
				xsx[c] = float2{xs, (float)sum * xs};
			}
		}
	}
	__syncwarp(); /* a warp quantises the chunks it sums: no block barrier */

	for (;;) {
		/* The next unit's weights, loaded during this one's last chunks. */
		int64_t un = u + gridDim.x;
		int kn = k;
		int64_t rn = 0;
		const uint8_t *qn = nullptr;
		if (un < units) {
			unit(gv, un, R, kn, rn);
			qn = row_q(kn, rn);
		}
		/* The chunk sums of this lane's row, UP chunks at a time, the next
		 * UP's weights on their way meanwhile: byte i of a half h holds
		 * column 32h + i (low nibble) and 32h + 16 + i (high), so word j
		 * of the chunk's eight pairs with limb words b = (j < 4 ? j : j +
		 * 4) and b + 4. */
		for (int base = 0; base < nu; base += Y::UP) {
			uint32_t cur[Y::UP][Y::WD];
			bool last = base + Y::UP >= nu;
#pragma unroll
			for (int i = 0; i < Y::UP; i++) {
#pragma unroll
				for (int j = 0; j < Y::WD; j++)
					cur[i][j] = wr[i][j];
				if (!last && base + Y::UP + i < nu)
					ldw<Y::WD>(wr[i], at(qr, base + Y::UP + i));
				else if (last && qn && i < nu)
					ldw<Y::WD>(wr[i], at(qn, i));
			}
#pragma unroll
			for (int i = 0; i < Y::UP; i++) {
				if (base + i >= nu)
					break;
				int64_t c = w + GV_W * (base + i);
				int D[3] = {0, 0, 0};
#pragma unroll
				for (int L = 0; L < 3; L++) {
					const uint32_t *lw = (const uint32_t *)(pl + L * cols + c * 64);
#pragma unroll
					for (int g = 0; g < Y::NG; g++) {
						int jj = j0 + 4 * g, b = (jj >> 2) * 8 + (jj & 3);
						uint32_t lo[Y::WG], hi[Y::WG];
						lds<Y::WG>(lo, lw + b);
						lds<Y::WG>(hi, lw + b + 4);
#pragma unroll
						for (int t = 0; t < Y::WG; t++) {
							uint32_t wv = cur[i][4 * g + t], l4 = wv & 0x0f0f0f0fu, h4 = wv >> 4 & 0x0f0f0f0fu;
							if (L == 2)
								D[L] = dot4s(h4, hi[t], dot4s(l4, lo[t], D[L]));
							else
								D[L] = dot4u(h4, hi[t], dot4u(l4, lo[t], D[L]));
						}
					}
				}
#pragma unroll
				for (int o = 1; o < Y::L; o <<= 1)
#pragma unroll
					for (int L = 0; L < 3; L++)
						D[L] += __shfl_xor_sync(0xffffffffu, D[L], o);
				if (sub == 0)
					dsm[c * R + rl] =
					    fmaf((float)D[2], 65536.0f, limbs01(D[0], D[1])) * xsx[c].x;
			}
		}
		if (qn)
			rest_l2(qn);
		__syncthreads();

		/* A slice's P in chunk order, then the row's slices in order. */
		if (ep) {
			float P = 0.0f;
#pragma unroll
			for (int i = 0; i < GV_SC; i++) {
				int64_t c = e0 + i;
				if (c < e1)
					P = fmaf(sc[i].x, dsm[c * R + er], fmaf(sc[i].y, xsx[c].y, P));
			}
			psm[es * R + er] = P;
		}
		__syncthreads();
		const q4_mma_part &p = gv.p[k];
		int64_t row = r0 + e;
		if (e < R && row < p.nout) {
			float v = 0.0f;
			for (int i = 0; i < S; i++)
				v = v + psm[i * R + e];
			if (p.mul && p.into)
				p.mul[row] = d_gelu(p.mul[row]) * v;
			p.y[row] = p.mul && !p.into ? d_gelu(v) * p.mul[row] : v;
		}
		if (!qn)
			break;
		u = un, k = kn, r0 = rn, qr = qn;
		if (ep)
			scales(k, r0 + er);
	}
}

} // namespace

/* gemv_rows: the most rows of a product q4_gemv takes: none by default
 * (its 32-row blocks measured slower than the mma kernels on the H200,
 * its units of 4 to 32 rows too on an H100: native/cuda/README.md);
 * VERDICT_Q4_GEMV=1 every product, with
 * VERDICT_Q4_GEMV_ROWS=N those of at most N rows; q4_gemv_set for the
 * harness. force_r, force_grid: q4_gemv_shape's. */
static int64_t gemv_rows = [] {
	const char *r = getenv("VERDICT_Q4_GEMV_ROWS");
	if (!env_is("VERDICT_Q4_GEMV", "1"))
		return (int64_t)0;
	return r ? (int64_t)atoll(r) : INT64_MAX;
}();
static int force_r, force_grid;

void q4_gemv_set(bool on) { gemv_rows = on ? INT64_MAX : 0; }

void q4_gemv_shape(int rows, int grid) { force_r = rows, force_grid = grid; }

bool q4_gemv_takes(int64_t n, int64_t nout, int64_t cols)
{
	return nout <= gemv_rows && n == 1 && cols >= 64 && cols % 64 == 0 && (cols >> 6) <= 8 * GV_SC &&
	       smem_bytes(cols, 32) <= (48 << 10);
}

cudaError_t q4_gemv(cudaStream_t st, bool pdl, const q4_mma_part *parts, int np, const float *x, int64_t cols)
{
	if (np < 1 || np > Q4_MMA_PARTS)
		return cudaErrorInvalidValue;
	/* Rows a unit: the most that still gives two blocks a multiprocessor
	 * (at least 4). */
	int64_t rows = 0, want = 2 * (int64_t)current_dev().sms;
	for (int i = 0; i < np; i++)
		rows += parts[i].nout > 0 ? parts[i].nout : 0;
	int R = force_r ? force_r : rows >= 32 * want ? 32 : rows >= 16 * want ? 16 : rows >= 8 * want ? 8 : 4;
	Gv gv;
	gv.np = np;
	gv.b0[0] = 0;
	for (int i = 0; i < np; i++) {
		gv.p[i] = parts[i];
		gv.b0[i + 1] = gv.b0[i] + (parts[i].nout + R - 1) / R;
	}
	int64_t units = gv.b0[np];
	if (units <= 0 || units > 0x7fffffff)
		return units <= 0 ? cudaSuccess : cudaErrorInvalidValue;
	int64_t cap = force_grid ? force_grid : want;
	unsigned grid = (unsigned)(units < cap ? units : cap);
	bool vec = ((uintptr_t)x & 7) == 0;
	size_t smem = (size_t)smem_bytes(cols, R);
	int S = slices(cols >> 6);
	void (*k)(Gv, const float *, int64_t, int, bool) = R == 4    ? k_q4_gemv<4>
	                                                   : R == 8  ? k_q4_gemv<8>
	                                                   : R == 16 ? k_q4_gemv<16>
	                                                   : R == 32 ? k_q4_gemv<32>
	                                                             : nullptr;
	if (!k)
		return cudaErrorInvalidValue;
	return launch_pdl(pdl, k, dim3(grid), dim3(32 * GV_W), smem, st, gv, x, cols, S, vec);
}
