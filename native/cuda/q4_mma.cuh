/*
 * q4_mma.cuh: the device side of the tensor-core q4 product (q4_mma.cu
 * describes its arithmetic), shared by q4_mma.cu's kernels and the
 * catalog step's head (catalog.cu), so that both give one row's bits.
 */
#ifndef VERDICT_CUDA_Q4_MMA_CUH
#define VERDICT_CUDA_Q4_MMA_CUH

#include "pdl.cuh"

#include <cmath>
#include <cstdint>

#if defined(VERDICT_CUDA_STUB_H)
#define Q4_STUB 1
#else
#define Q4_STUB 0
#endif

namespace q4mma {

/* The arithmetic (q4_mma.cu says why): a chunk of 64 columns of one
 * token's x is held as integers X = rint(x·2^(22−e)), e the exponent of
 * the chunk's largest |x| (2^(e−1) ≤ max < 2^e, so |X| ≤ 2^22), cut into
 * three byte limbs X = b0 + 2^8·b1 + 2^16·b2 (b0, b1 unsigned, b2 signed).
 * A chunk's sums of nib·limb are integers, exact in any order (8-bit
 * tensor-core products, int32 sums); D = fmaf(D2, 2^16, fmaf(D1, 2^8, D0))
 * (the inner one by limbs01) scaled by xs = 2^(e−22) is its sum of nib·x,
 * Sx = float(ΣX)·xs its sum of x. */

/* pow2f: 2^k as a float (0 below the subnormals). */
static __device__ __forceinline__ float pow2f(int k)
{
	if (k > 127)
		return __int_as_float(0x7f800000);
	if (k >= -126)
		return __int_as_float((k + 127) << 23);
	if (k >= -149)
		return __int_as_float(1 << (k + 149));
	return 0.0f;
}

static __device__ __forceinline__ int rint_i(float v)
{
#if defined(__CUDA_ARCH__)
	return __float2int_rn(v);
#else
	return (int)lrintf(v);
#endif
}

/* pack: byte L of each of four integers, in order, as one word. */
static __device__ __forceinline__ uint32_t pack(int a, int b, int c, int d, int L)
{
	int s = 8 * L;
	return ((uint32_t)a >> s & 255u) | ((uint32_t)b >> s & 255u) << 8 | ((uint32_t)c >> s & 255u) << 16 |
	       ((uint32_t)d >> s & 255u) << 24;
}

static __device__ __forceinline__ float4 ld4(const float *p)
{
	float4 v = {__ldg(p), __ldg(p + 1), __ldg(p + 2), __ldg(p + 3)};
	return v;
}

/* slices: the S of a matrix of G chunks. */
static __host__ __device__ __forceinline__ int slices(int64_t G)
{
	return G >= 8 ? 8 : G >= 4 ? 4 : G >= 2 ? 2 : 1;
}

/* xcol: this lane's first column of a chunk (base_t). */
static __device__ __forceinline__ int64_t xcol(int t) { return 32 * (t >> 1) + 8 * (t & 1); }

/* load_x: this lane's 16 values of a chunk from xr (its first column), or
 * zeros when not xl; vec: 16-byte loads. */
static __device__ __forceinline__ void load_x(float4 *xv, const float *xr, bool xl, bool vec)
{
#pragma unroll
	for (int u = 0; u < 4; u++) {
		const float *p = xr + 16 * (u >> 1) + 4 * (u & 1);
		if (!xl)
			xv[u].x = xv[u].y = xv[u].z = xv[u].w = 0.0f;
		else if (vec)
			xv[u] = __ldg((const float4 *)p);
		else
			xv[u] = ld4(p);
	}
}

/* Bq: the B side of a chunk for this lane: the limbs of token g's columns
 * as the k32 steps' fragments (b[limb][step][register]), and xs, Sx of
 * the lane's output tokens 2t (xs0, sx0) and 2t + 1 (xs1, sx1). */
struct Bq {
	uint32_t b[3][2][2];
	float xs0, sx0, xs1, sx1;
};

/* chunk_exp: for a chunk whose largest |x| is m (nb: a value is not
 * finite), e with 2^(e−1) ≤ m < 2^e (0 for m = 0 or nb) and 2^(22 − e)
 * in two factors s1, s2, each a float (e from −148 to 128): X =
 * rint(x·s1·s2). */
static __device__ __forceinline__ void chunk_exp(float m, int nb, int &e, float &s1, float &s2)
{
	e = 0;
	if (m > 0.0f && !nb) {
		int eb = (__float_as_int(m) >> 23) & 255;
		if (eb > 0)
			e = eb - 126;
		else
			frexpf(m, &e);
	}
	int k = 22 - e, k1 = k > 127 ? k - 64 : k < -126 ? k + 64 : k, k2 = k - k1;
	s1 = pow2f(k1), s2 = pow2f(k2);
}

/* quant: Bq from this lane's 16 values of token g's chunk, xv[u] the
 * columns xcol(t) + 16(u >> 1) + 4(u & 1) + 0..3 (the four lanes of a
 * group hold the chunk); own gets the token's xs and Sx. Any column that
 * is not finite makes xs NaN (the chunk's sums NaN). */
static __device__ __forceinline__ void quant(Bq &o, const float4 *xv, float *own = nullptr)
{
	int t = threadIdx.x & 3;
	float m = 0.0f;
	bool bad = false;
#pragma unroll
	for (int u = 0; u < 4; u++) {
		float v[4] = {xv[u].x, xv[u].y, xv[u].z, xv[u].w};
#pragma unroll
		for (int i = 0; i < 4; i++) {
			float a = fabsf(v[i]);
			bad |= !(a <= 3.402823466e38f);
			m = fmaxf(m, a);
		}
	}
	m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
	m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
	int nb = bad;
	nb |= __shfl_xor_sync(0xffffffffu, nb, 1);
	nb |= __shfl_xor_sync(0xffffffffu, nb, 2);
	int e;
	float s1, s2;
	chunk_exp(m, nb, e, s1, s2);
	int X[4][4], sum = 0;
#pragma unroll
	for (int u = 0; u < 4; u++) {
		float v[4] = {xv[u].x, xv[u].y, xv[u].z, xv[u].w};
#pragma unroll
		for (int i = 0; i < 4; i++) {
			X[u][i] = nb ? 0 : rint_i(v[i] * s1 * s2);
			sum += X[u][i];
		}
	}
	sum += __shfl_xor_sync(0xffffffffu, sum, 1);
	sum += __shfl_xor_sync(0xffffffffu, sum, 2);
#pragma unroll
	for (int L = 0; L < 3; L++) {
		/* step 0: columns +0..3 (b0), +16..19 (b1); step 1: +4..7, +20..23 */
		o.b[L][0][0] = pack(X[0][0], X[0][1], X[0][2], X[0][3], L);
		o.b[L][0][1] = pack(X[2][0], X[2][1], X[2][2], X[2][3], L);
		o.b[L][1][0] = pack(X[1][0], X[1][1], X[1][2], X[1][3], L);
		o.b[L][1][1] = pack(X[3][0], X[3][1], X[3][2], X[3][3], L);
	}
	float xs = nb ? __int_as_float(0x7fc00000) : pow2f(e - 22), sx = (float)sum * xs;
	if (own)
		own[0] = xs, own[1] = sx;
	o.xs0 = __shfl_sync(0xffffffffu, xs, 8 * t);
	o.sx0 = __shfl_sync(0xffffffffu, sx, 8 * t);
	o.xs1 = __shfl_sync(0xffffffffu, xs, 8 * t + 4);
	o.sx1 = __shfl_sync(0xffffffffu, sx, 8 * t + 4);
}

/* The quantised x of q4_mma: fragments [token][chunk][limb][t] as uint4
 * (step 0's b0, b1, step 1's b0, b1), then (xs, Sx) pairs [chunk][token]
 * for n8 tokens (a multiple of 8) and G chunks; the fragments of tokens
 * from nlive on are zeros (not stored). In global memory from the
 * pre-pass (k_q4_quant; nlive = n8, the tokens past n quantised zeros),
 * or in a block's shared memory (k_q4_mma_few's own quantisation; nlive
 * = n). */
struct Xq {
	const uint4 *frag;
	const float2 *xsx;
	int64_t n8, G, nlive;
	int pf; /* the products ask for their rows' scales and weights ahead (q4_mma.cu, prefetch_rows) */
};

/* quant_pair: quantises chunk ch of token tok of x (rows of cols) with
 * this lane's group (live: a real pair; tokens ≥ n are zeros), writing
 * its fragments and (xs, Sx) into frag and xsx laid out as Xq's. */
static __device__ __forceinline__ void quant_pair(uint4 *frag, float2 *xsx, const float *x, int64_t tok, int64_t ch,
                                                  bool live, int64_t n, int64_t n8, int64_t G, int64_t cols, bool vec)
{
	int t = threadIdx.x & 3;
	float4 xv[4];
	bool xl = live && tok < n;
	load_x(xv, x + (xl ? tok : 0) * cols + ch * 64 + xcol(t), xl, vec);
	Bq b;
	float own[2];
	quant(b, xv, own);
	if (!live)
		return;
	uint4 *f = frag + (tok * G + ch) * 12 + t;
#pragma unroll
	for (int L = 0; L < 3; L++)
		f[4 * L] = uint4{b.b[L][0][0], b.b[L][0][1], b.b[L][1][0], b.b[L][1][1]};
	if (t == 0)
		xsx[ch * n8 + tok] = float2{own[0], own[1]};
}

/* quant_block: the block's warps (warps of them) quantise the n tokens
 * (up to 8) of x into xf, shared memory laid out as Xq's (fragments, then
 * (xs, Sx) pairs for n8 = 8), a pair (token, chunk) a lane group, then
 * the block's barrier; xq then reads them. */
static __device__ __forceinline__ void quant_block(Xq &xq, uint4 *xf, const float *x, int64_t n, int64_t G,
                                                   int64_t cols, bool vec, int warps)
{
	int w = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2;
	int64_t pairs = n * G;
	float2 *xsx = (float2 *)(xf + pairs * 12);
	for (int64_t base = w * 8; base < pairs; base += warps * 8) {
		int64_t p = base + g;
		quant_pair(xf, xsx, x, p / G, p % G, p < pairs, n, 8, G, cols, vec);
	}
	__syncthreads();
	xq.frag = xf, xq.xsx = xsx, xq.n8 = 8, xq.G = G, xq.nlive = n;
}

/* load_bq: Bq of chunk ch for token tile tok0 (tok0 + g this lane's B
 * token) from xq (after pdl_wait, or the block's barrier). */
static __device__ __forceinline__ void load_bq(Bq &o, const Xq &xq, int64_t tok0, int64_t ch)
{
	int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
	if (tok0 + g < xq.nlive) {
		const uint4 *f = xq.frag + ((tok0 + g) * xq.G + ch) * 12 + t;
#pragma unroll
		for (int L = 0; L < 3; L++) {
			uint4 v = f[4 * L];
			o.b[L][0][0] = v.x, o.b[L][0][1] = v.y, o.b[L][1][0] = v.z, o.b[L][1][1] = v.w;
		}
	} else {
#pragma unroll
		for (int L = 0; L < 3; L++)
			o.b[L][0][0] = o.b[L][0][1] = o.b[L][1][0] = o.b[L][1][1] = 0u;
	}
	float4 s = *(const float4 *)(xq.xsx + ch * xq.n8 + tok0 + 2 * t);
	o.xs0 = s.x, o.sx0 = s.y, o.xs1 = s.z, o.sx1 = s.w;
}

/* limbs01: fmaf(D1, 2^8, D0) for a chunk's limb sums (0 ≤ D0, D1 < 2^18):
 * D0 + 2^8·D1 is an exact int32, and its conversion rounds it once to
 * nearest as fmaf does, so the bits are fmaf's with one conversion and
 * no float multiply-add (2-3% faster products of 40 and 512 tokens on an
 * H100, 2026-12-06). */
static __device__ __forceinline__ float limbs01(int D0, int D1) { return (float)(D0 + (D1 << 8)); }

/* imma: d += a·b, m16n8k32, u8 A (the nibbles), B u8 (sgn false) or s8,
 * int32 sums: exact. */
static __device__ __forceinline__ void imma(int *d, const uint32_t *a, uint32_t b0, uint32_t b1, bool sgn)
{
#if defined(__CUDA_ARCH__)
	if (sgn)
		asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
		    "{%0,%1,%2,%3};"
		    : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
		    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
	else
		asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.u8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
		    "{%0,%1,%2,%3};"
		    : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
		    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#elif Q4_STUB
	/* The stub: the warp's fragments through shared memory. */
	static uint32_t ex[32][32][6];
	unsigned wi = threadIdx.x >> 5, me = threadIdx.x & 31;
	for (int k = 0; k < 4; k++)
		ex[wi][me][k] = a[k];
	ex[wi][me][4] = b0;
	ex[wi][me][5] = b1;
	__syncwarp();
	auto ub = [](uint32_t r, int e) { return (int)(r >> (8 * e) & 255u); };
	auto sb = [](uint32_t r, int e) { return (int)(int8_t)(r >> (8 * e) & 255u); };
	int A[16][32], B[32][8];
	for (unsigned L = 0; L < 32; L++) {
		const uint32_t *r = ex[wi][L];
		unsigned g = L >> 2, t = L & 3;
		for (int e = 0; e < 4; e++) {
			A[g][4 * t + e] = ub(r[0], e);
			A[g + 8][4 * t + e] = ub(r[1], e);
			A[g][16 + 4 * t + e] = ub(r[2], e);
			A[g + 8][16 + 4 * t + e] = ub(r[3], e);
			B[4 * t + e][g] = sgn ? sb(r[4], e) : ub(r[4], e);
			B[16 + 4 * t + e][g] = sgn ? sb(r[5], e) : ub(r[5], e);
		}
	}
	__syncwarp();
	unsigned lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
	for (int i = 0; i < 4; i++) {
		unsigned row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
		int acc = d[i];
		for (int k = 0; k < 32; k++)
			acc += A[row][k] * B[k][col];
		d[i] = acc;
	}
#endif
}

/* afrags: a chunk's A fragments (k32 steps 0, 1) from the 8 bytes of rows
 * g (wa) and g + 8 (wb): step s takes word s, low nibbles then high. */
static __device__ __forceinline__ void afrags(uint32_t (*a)[4], uint2 wa, uint2 wb)
{
	const uint32_t M = 0x0f0f0f0fu;
	a[0][0] = wa.x & M, a[0][1] = wb.x & M, a[0][2] = wa.x >> 4 & M, a[0][3] = wb.x >> 4 & M;
	a[1][0] = wa.y & M, a[1][1] = wb.y & M, a[1][2] = wa.y >> 4 & M, a[1][3] = wb.y >> 4 & M;
}

/* chunk_mma_a: d = a chunk's sum of nib·x for rows g, g + 8 (d[0], d[1]
 * tokens 2t, 2t + 1 of row g; d[2], d[3] of row g + 8); ONE: only the
 * even tokens' (a product of one token: d[1], d[3] are left unset). */
template <bool ONE = false>
static __device__ __forceinline__ void chunk_mma_a(float *d, const uint32_t (*a)[4], const Bq &b)
{
	int D[3][4] = {};
#pragma unroll
	for (int L = 0; L < 3; L++) {
		imma(D[L], a[0], b.b[L][0][0], b.b[L][0][1], L == 2);
		imma(D[L], a[1], b.b[L][1][0], b.b[L][1][1], L == 2);
	}
#pragma unroll
	for (int i = 0; i < 4; i++)
		if (!ONE || !(i & 1))
			d[i] = fmaf((float)D[2][i], 65536.0f, limbs01(D[0][i], D[1][i])) * ((i & 1) ? b.xs1 : b.xs0);
}

/* Rows: a warp's R row tiles' weights (this lane's rows g and g + 8 of
 * each: q4 bytes at its 8t offset, scales). */
template <int R> struct Rows {
	const uint8_t *qa[R], *qb[R];
	const float *sa[R], *sb[R];
};

template <int R> struct Wchunk {
	uint2 wa[R], wb[R];
	float sca[R], ofa[R], scb[R], ofb[R];
};

/* rows_at: the Rows of R tiles from row r0 on (rows past nout read the
 * last one; ids, when given, maps a row's position to its row), for this
 * lane (g, t). */
template <int R>
static __device__ __forceinline__ void rows_at(Rows<R> &rw, const uint8_t *q, const float *so, const int32_t *ids,
                                               int64_t r0, int64_t nout, int64_t cols, int lg)
{
	int g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
	int64_t gpr = (cols >> lg) * 2;
#pragma unroll
	for (int k = 0; k < R; k++) {
		int64_t ra = r0 + 16 * k + g, rb = ra + 8;
		ra = ra < nout ? ra : nout - 1;
		rb = rb < nout ? rb : nout - 1;
		if (ids) {
			ra = ids[ra];
			rb = ids[rb];
		}
		rw.qa[k] = q + ra * (cols / 2) + 8 * t, rw.qb[k] = q + rb * (cols / 2) + 8 * t;
		rw.sa[k] = so + ra * gpr, rw.sb[k] = so + rb * gpr;
	}
}

template <int R>
static __device__ __forceinline__ void load_w(Wchunk<R> &o, const Rows<R> &r, int64_t ch, int lg)
{
	int64_t gi = ((ch << 6) >> lg) * 2;
#pragma unroll
	for (int k = 0; k < R; k++) {
		o.wa[k] = __ldg((const uint2 *)(r.qa[k] + ch * 32));
		o.wb[k] = __ldg((const uint2 *)(r.qb[k] + ch * 32));
		float2 sa = __ldg((const float2 *)(r.sa[k] + gi)), sb = __ldg((const float2 *)(r.sb[k] + gi));
		o.sca[k] = sa.x, o.ofa[k] = sa.y, o.scb[k] = sb.x, o.ofb[k] = sb.y;
	}
}

/* combine: tile k's chunk sum d into its partials p (rows g, g + 8 ×
 * tokens 2t, 2t + 1): p = fmaf(sc, d, fmaf(off, Sx, p)); ONE: the even
 * tokens' only. */
template <int R, bool ONE = false>
static __device__ __forceinline__ void combine(float *p, const Wchunk<R> &w, int k, const float *d, const Bq &b)
{
	p[0] = fmaf(w.sca[k], d[0], fmaf(w.ofa[k], b.sx0, p[0]));
	p[2] = fmaf(w.scb[k], d[2], fmaf(w.ofb[k], b.sx0, p[2]));
	if (ONE)
		return;
	p[1] = fmaf(w.sca[k], d[1], fmaf(w.ofa[k], b.sx1, p[1]));
	p[3] = fmaf(w.scb[k], d[3], fmaf(w.ofb[k], b.sx1, p[3]));
}

/* slice: a warp's partials over chunks [c0, c1) for its R row tiles and NT
 * token tiles (P[k][j] as combine's p for row tile k, token tile j), the
 * B side of chunk ch, tile j from bload(Bq &, j, ch) (after pdl_wait).
 * FB chunks' weights are requested at once (the first batch before
 * pdl_wait), so that a warp waits one memory latency a batch. (Loading a
 * batch's B sides before its products, ahead of the interleaved order
 * here, measured slower on the H200: more registers, fewer warps.) ONE:
 * one token (token 0), P's odd tokens left zeros. */
template <int R, int NT, int FB, bool ONE = false, class BL>
static __device__ __forceinline__ void slice(float (*P)[NT][4], const Rows<R> &r, BL bload, int64_t c0, int64_t c1,
                                             int lg, bool &waited)
{
#pragma unroll
	for (int k = 0; k < R; k++)
#pragma unroll
		for (int j = 0; j < NT; j++)
			P[k][j][0] = P[k][j][1] = P[k][j][2] = P[k][j][3] = 0.0f;
	for (int64_t ch = c0; ch < c1; ch += FB) {
		int nb = c1 - ch < FB ? (int)(c1 - ch) : FB;
		Wchunk<R> wc[FB];
#pragma unroll
		for (int i = 0; i < FB; i++)
			if (i < nb)
				load_w(wc[i], r, ch + i, lg);
		if (!waited) { /* the first weights are on their way */
			pdl_wait();
			pdl_launch();
			waited = true;
		}
#pragma unroll
		for (int i = 0; i < FB; i++) {
			if (i >= nb)
				break;
			uint32_t a[R][2][4];
#pragma unroll
			for (int k = 0; k < R; k++)
				afrags(a[k], wc[i].wa[k], wc[i].wb[k]);
#pragma unroll
			for (int j = 0; j < NT; j++) {
				Bq bq;
				bload(bq, j, ch + i);
#pragma unroll
				for (int k = 0; k < R; k++) {
					float d[4];
					chunk_mma_a<ONE>(d, a[k], bq);
					combine<R, ONE>(P[k][j], wc[i], k, d, bq);
				}
			}
		}
	}
}

} // namespace q4mma

/* q4_mma_prepass enqueues the pre-pass that quantises the n tokens of x
 * (rows of cols floats) into scratch (at least q4_mma_scratch_bytes(n, 0,
 * cols, true)) and sets *xq to read them (q4_mma.cu). */
cudaError_t q4_mma_prepass(cudaStream_t st, bool pdl, q4mma::Xq *xq, const float *x, int64_t n, int64_t cols,
                           void *scratch, size_t scratch_bytes);

/* q4_mma_own_max: the most shared memory a block of a few tokens' product
 * takes to quantise x itself (q4_mma_set_own_max, VERDICT_Q4_OWN). */
int64_t q4_mma_own_max();

#endif
