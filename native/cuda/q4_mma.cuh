/*
 * q4_mma.cuh: the device side of the tensor-core q4 product (q4_mma.cu
 * describes its arithmetic), shared by q4_mma.cu's kernels and the
 * catalog step's head (catalog.cu), so that both give one row's bits.
 */
#ifndef VERDICT_CUDA_Q4_MMA_CUH
#define VERDICT_CUDA_Q4_MMA_CUH

#include "pdl.cuh"

#include <cstdint>

#if defined(VERDICT_CUDA_STUB_H)
#define Q4_STUB 1
#else
#define Q4_STUB 0
#endif

namespace q4mma {

/* bf2: lo and hi rounded to bf16 (to nearest, ties to even), lo in the
 * low half. */
static __device__ __forceinline__ uint32_t bf2(float lo, float hi)
{
#if defined(__CUDA_ARCH__)
	uint32_t r;
	asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
	return r;
#elif Q4_STUB
	auto rn = [](float f) {
		uint32_t u = __float_as_uint(f);
		return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
	};
	return rn(lo) | rn(hi) << 16;
#else
	return 0;
#endif
}

/* split3: the three bf16 parts of two columns' values (a in the low
 * halves): hi = bf16(v), mid = bf16(v − hi), lo = bf16(v − hi − mid). */
static __device__ __forceinline__ void split3(float a, float b, uint32_t &h, uint32_t &m, uint32_t &l)
{
	h = bf2(a, b);
	float ra = a - __uint_as_float(h << 16), rb = b - __uint_as_float(h & 0xffff0000u);
	m = bf2(ra, rb);
	float sa = ra - __uint_as_float(m << 16), sb = rb - __uint_as_float(m & 0xffff0000u);
	l = bf2(sa, sb);
}

/* nib2: the nibbles in bytes 0 and 1 (sel 0) or 2 and 3 (sel 1) of v
 * (one nibble a byte) as two bf16, exactly: (128 + n)·1 − 128. */
static __device__ __forceinline__ uint32_t nib2(uint32_t v, int sel)
{
#if defined(__CUDA_ARCH__)
	uint32_t p = __byte_perm(v, 0, sel ? 0x4342 : 0x4140) | 0x43004300u, r;
	asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(p), "r"(0x3f803f80u), "r"(0xc300c300u));
	return r;
#elif Q4_STUB
	uint32_t n0 = (v >> (sel ? 16 : 0)) & 15u, n1 = (v >> (sel ? 24 : 8)) & 15u;
	return bf2((float)n0, (float)n1);
#else
	return 0;
#endif
}

/* afrag: the A fragment of k16 step s (0..3) of a chunk from the 8 bytes
 * of rows g (wa) and g + 8 (wb): step s takes word s & 1, nibble half
 * s >> 1. */
static __device__ __forceinline__ void afrag(uint32_t *a, uint2 wa, uint2 wb, int s)
{
	int sh = 4 * (s >> 1);
	uint32_t va = (((s & 1) ? wa.y : wa.x) >> sh) & 0x0f0f0f0fu;
	uint32_t vb = (((s & 1) ? wb.y : wb.x) >> sh) & 0x0f0f0f0fu;
	a[0] = nib2(va, 0);
	a[1] = nib2(vb, 0);
	a[2] = nib2(va, 1);
	a[3] = nib2(vb, 1);
}

/* mma: d += a·b, m16n8k16, bf16 in, float32 accumulation. */
static __device__ __forceinline__ void mma(float *d, const uint32_t *a, uint32_t b0, uint32_t b1)
{
#if defined(__CUDA_ARCH__)
	asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
	    "{%0,%1,%2,%3};"
	    : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
	    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#elif Q4_STUB
	/* The stub: the warp's fragments through shared memory, summed in k
	 * order. */
	static uint32_t ex[32][32][6];
	unsigned wi = threadIdx.x >> 5, me = threadIdx.x & 31;
	for (int k = 0; k < 4; k++)
		ex[wi][me][k] = a[k];
	ex[wi][me][4] = b0;
	ex[wi][me][5] = b1;
	__syncwarp();
	auto val = [](uint32_t r, int e) { return __uint_as_float(e ? (r & 0xffff0000u) : (r << 16)); };
	float A[16][16], B[16][8];
	for (unsigned L = 0; L < 32; L++) {
		const uint32_t *r = ex[wi][L];
		unsigned g = L >> 2, t = L & 3;
		for (int e = 0; e < 2; e++) {
			A[g][2 * t + e] = val(r[0], e);
			A[g + 8][2 * t + e] = val(r[1], e);
			A[g][2 * t + 8 + e] = val(r[2], e);
			A[g + 8][2 * t + 8 + e] = val(r[3], e);
			B[2 * t + e][g] = val(r[4], e);
			B[2 * t + 8 + e][g] = val(r[5], e);
		}
	}
	__syncwarp();
	unsigned lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
	for (int i = 0; i < 4; i++) {
		unsigned row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
		float acc = d[i];
		for (int k = 0; k < 16; k++)
			acc += A[row][k] * B[k][col];
		d[i] = acc;
	}
#endif
}

/* chunk_mma_a: d = a chunk's sum of nib·x over rows g, g + 8 from its A
 * fragments a[step] and the B fragments b[part][step][2]: two chains from
 * 0, one a column half (its steps 2h, 2h + 1), each taking the parts lo,
 * mid, hi, each part its two steps; d = half 0 + half 1. */
static __device__ __forceinline__ void chunk_mma_a(float *d, const uint32_t (*a)[4], const uint32_t (*b)[4][2])
{
	float e0[4] = {0.0f, 0.0f, 0.0f, 0.0f}, e1[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
	for (int p = 0; p < 3; p++) {
		mma(e0, a[0], b[p][0][0], b[p][0][1]);
		mma(e1, a[2], b[p][2][0], b[p][2][1]);
		mma(e0, a[1], b[p][1][0], b[p][1][1]);
		mma(e1, a[3], b[p][3][0], b[p][3][1]);
	}
#pragma unroll
	for (int i = 0; i < 4; i++)
		d[i] = e0[i] + e1[i];
}

/* afrags: a chunk's four A fragments from the 8 bytes of rows g (wa) and
 * g + 8 (wb). */
static __device__ __forceinline__ void afrags(uint32_t (*a)[4], uint2 wa, uint2 wb)
{
#pragma unroll
	for (int k = 0; k < 4; k++)
		afrag(a[k], wa, wb, k);
}

/* chunk_mma: chunk_mma_a from the rows' bytes wa, wb. */
static __device__ __forceinline__ void chunk_mma(float *d, uint2 wa, uint2 wb, const uint32_t (*b)[4][2])
{
	uint32_t a[4][4];
	afrags(a, wa, wb);
	chunk_mma_a(d, a, b);
}

static __device__ __forceinline__ float sum8(float4 p, float4 q)
{
	return ((((((p.x + p.y) + p.z) + p.w) + q.x) + q.y) + q.z) + q.w;
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

/* The B side of a chunk for this lane's token: its 16 values (four float4,
 * steps 0..3), their parts as B fragments and the chunk's Sx for the
 * lane's output tokens 2t (sx0) and 2t + 1 (sx1). */
struct Bside {
	uint32_t b[3][4][2];
	float sx0, sx1;
};

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

static __device__ __forceinline__ void bside(Bside &o, const float4 *xv)
{
	int t = threadIdx.x & 3;
#pragma unroll
	for (int u = 0; u < 4; u++) {
		split3(xv[u].x, xv[u].y, o.b[2][u][0], o.b[1][u][0], o.b[0][u][0]);
		split3(xv[u].z, xv[u].w, o.b[2][u][1], o.b[1][u][1], o.b[0][u][1]);
	}
	float sx = sum8(xv[0], xv[1]) + sum8(xv[2], xv[3]);
	sx = sx + __shfl_xor_sync(0xffffffffu, sx, 1);
	sx = sx + __shfl_xor_sync(0xffffffffu, sx, 2);
	o.sx0 = __shfl_sync(0xffffffffu, sx, 8 * t);
	o.sx1 = __shfl_sync(0xffffffffu, sx, 8 * t + 4);
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
		o.sca[k] = __ldg(r.sa[k] + gi), o.ofa[k] = __ldg(r.sa[k] + gi + 1);
		o.scb[k] = __ldg(r.sb[k] + gi), o.ofb[k] = __ldg(r.sb[k] + gi + 1);
	}
}

/* combine: tile k's chunk sum d into its partials p (rows g, g + 8 ×
 * tokens 2t, 2t + 1): p = fmaf(sc, d, fmaf(off, Sx, p)). */
template <int R>
static __device__ __forceinline__ void combine(float *p, const Wchunk<R> &w, int k, const float *d, float sx0,
                                               float sx1)
{
	p[0] = fmaf(w.sca[k], d[0], fmaf(w.ofa[k], sx0, p[0]));
	p[1] = fmaf(w.sca[k], d[1], fmaf(w.ofa[k], sx1, p[1]));
	p[2] = fmaf(w.scb[k], d[2], fmaf(w.ofb[k], sx0, p[2]));
	p[3] = fmaf(w.scb[k], d[3], fmaf(w.ofb[k], sx1, p[3]));
}

/* chunks: FB chunks from ch on (their loads all issued before any is
 * used, so a warp waits one memory latency a batch), into P in chunk
 * order. */
template <int R, int FB>
static __device__ __forceinline__ void chunks(float (*P)[4], const Rows<R> &r, const float *xr, bool xl, bool vec,
                                              int64_t ch, int lg, bool &waited)
{
	Wchunk<R> wc[FB];
	float4 xv[FB][4];
#pragma unroll
	for (int i = 0; i < FB; i++)
		load_w(wc[i], r, ch + i, lg);
	if (!waited) { /* the first weights are on their way */
		pdl_wait();
		pdl_launch();
		waited = true;
	}
#pragma unroll
	for (int i = 0; i < FB; i++)
		load_x(xv[i], xr + (ch + i) * 64, xl, vec);
#pragma unroll
	for (int i = 0; i < FB; i++) {
		Bside bs;
		bside(bs, xv[i]);
#pragma unroll
		for (int k = 0; k < R; k++) {
			float d[4];
			chunk_mma(d, wc[i].wa[k], wc[i].wb[k], bs.b);
			combine(P[k], wc[i], k, d, bs.sx0, bs.sx1);
		}
	}
}

/* slice_rows: a warp's partials P[k][0..3] over chunks [c0, c1) for its R
 * row tiles and the token whose x row (at this lane's first column) is
 * xr, live for this lane when xl: P[k][0], P[k][1] row g, tokens 2t and
 * 2t + 1; P[k][2], P[k][3] row g + 8. Batches of four chunks (R = 1) or
 * two, then single chunks; the first batch's weights are requested
 * before pdl_wait. */
template <int R>
static __device__ __forceinline__ void slice_rows(float (*P)[4], const Rows<R> &r, const float *xr, bool xl,
                                                  bool vec, int64_t c0, int64_t c1, int lg, bool &waited)
{
	constexpr int FB = R == 1 ? 4 : 2;
#pragma unroll
	for (int k = 0; k < R; k++)
		P[k][0] = P[k][1] = P[k][2] = P[k][3] = 0.0f;
	int64_t ch = c0;
	for (; ch + FB <= c1; ch += FB)
		chunks<R, FB>(P, r, xr, xl, vec, ch, lg, waited);
	for (; ch < c1; ch++)
		chunks<R, 1>(P, r, xr, xl, vec, ch, lg, waited);
}

/* slice_tiles: slice_rows for NT token tiles at once (tile j's x row
 * xr[j], live xl[j]): a chunk at a time, the next chunk's weights
 * requested before this one's products, its A fragments converted once
 * for every tile; P[k][j] as slice_rows' P[k] for tile j. The first
 * chunk's weights are requested before pdl_wait. */
template <int R, int NT>
static __device__ __forceinline__ void slice_tiles(float (*P)[NT][4], const Rows<R> &r, const float *const *xr,
                                                   const bool *xl, bool vec, int64_t c0, int64_t c1, int lg,
                                                   bool &waited)
{
#pragma unroll
	for (int k = 0; k < R; k++)
#pragma unroll
		for (int j = 0; j < NT; j++)
			P[k][j][0] = P[k][j][1] = P[k][j][2] = P[k][j][3] = 0.0f;
	Wchunk<R> wc, wn;
	load_w(wc, r, c0, lg);
	if (!waited) {
		pdl_wait();
		pdl_launch();
		waited = true;
	}
	for (int64_t ch = c0; ch < c1; ch++) {
		float4 xv[NT][4];
#pragma unroll
		for (int j = 0; j < NT; j++)
			load_x(xv[j], xr[j] + ch * 64, xl[j], vec);
		if (ch + 1 < c1)
			load_w(wn, r, ch + 1, lg);
		uint32_t a[R][4][4];
#pragma unroll
		for (int k = 0; k < R; k++)
			afrags(a[k], wc.wa[k], wc.wb[k]);
#pragma unroll
		for (int j = 0; j < NT; j++) {
			Bside bs;
			bside(bs, xv[j]);
#pragma unroll
			for (int k = 0; k < R; k++) {
				float d[4];
				chunk_mma_a(d, a[k], bs.b);
				combine(P[k][j], wc, k, d, bs.sx0, bs.sx1);
			}
		}
		wc = wn;
	}
}

} // namespace q4mma

#endif
