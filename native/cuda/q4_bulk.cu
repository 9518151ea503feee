/*
 * q4_bulk.cu: q4 products of one to eight tokens whose weights reach
 * shared memory by the copy engine (cp.async.bulk with an mbarrier,
 * compute capability 9.0), with q4_mma's arithmetic and so its bits.
 *
 * q4_mma's kernels of a few tokens load a warp's weights a chunk or two
 * at a time into registers and wait one memory latency a batch: too few
 * bytes in flight for the card's bandwidth (the head, 302 MB, at about
 * 1.9 TB/s on an H100; 2.2 here). Here a block stays resident for several units
 * (the grid is at most the blocks the multiprocessors hold at once) and
 * keeps NS units' rows on their way: a row's weights and its scales are
 * one bulk copy each, a stage's copies counted by its mbarrier. The first
 * NS units are asked before pdl_wait (weights only), so a product's
 * weights stream in while the operation before it still runs.
 *
 * A unit is 16 rows of a part (of a pair: the same 16 rows of both
 * matrices, gate then up). Warp w sums slice w of the 8 (a matrix of 8 or
 * more chunks) for the unit's rows exactly as q4_mma's few_block does
 * (chunk_mma_a, then combine, chunk by chunk in order); the slices'
 * partials meet in shared memory (two buffers); warp 0 refills the stage
 * just read, and one warp (each unit the next) adds the partials in slice
 * order and stores them (with the part's GELU product) while the others
 * go on to the next unit.
 *
 * Where a launch has four units or more for each warp the
 * multiprocessors hold (the head), a unit is a warp's instead
 * (k_q4_bulk_w): each warp has its own stage and mbarrier, asks for its
 * own units' rows, sums all 8 slices side by side (each slice's chunks in
 * order, in registers apart) and adds them in slice order itself, with no
 * block barrier: the same bits (the head 154 → 124 µs on an H100).
 *
 * In shared memory a row of weights is padded to 32 bytes past a multiple
 * of 128 and a row of scales to 16, so the eight rows a warp reads at once
 * fall on distinct banks.
 *
 * On the host emulation (and below sm_90, where q4_bulk_takes declines)
 * the copies are plain ones by the asking warp and a stage's wait is the
 * block's barrier (the warp's, for k_q4_bulk_w).
 */
#include "q4_mma.h"
#include "dev_props.h"
#include "env.h"
#include "device_math.cuh"
#include "q4_mma.cuh"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

using namespace q4mma;

namespace {

constexpr int BW = 8;      /* warps a block: one a slice */
constexpr int NS_MAX = 6;  /* the most units a block has on their way */
constexpr int BAR_B = 64;  /* bytes of the stages' mbarriers */
constexpr int WMAX = 12;   /* the most warps a block of k_q4_bulk_w (its registers' bound) */
constexpr int WDEF = 8;    /* the most its plan takes (VERDICT_Q4_WARP=W,S takes up to WMAX) */
constexpr int WNS_MAX = 4; /* the most stages a warp of it */
constexpr int WBAR_B = WMAX * WNS_MAX * 8; /* bytes of its mbarriers */

/* Bk: a launch's parts (part i's units b0[i] .. b0[i+1] − 1) and its
 * shared memory: stages of stage bytes from soff, a row of weights wp
 * bytes and of scales sp in them, the own x from xoff. */
struct Bk {
	q4_mma_part p[Q4_MMA_PARTS];
	int64_t b0[Q4_MMA_PARTS + 1];
	int np, ns;
	int64_t wp, sp, stage, xoff, soff;
};

static __device__ __forceinline__ unsigned sm_addr(const void *p)
{
#if defined(__CUDA_ARCH__)
	return (unsigned)__cvta_generic_to_shared(p);
#else
	(void)p;
	return 0;
#endif
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define Q4_BULK_TMA 1
#else
#define Q4_BULK_TMA 0
#endif

static __device__ __forceinline__ void bar_init(uint64_t *b)
{
#if Q4_BULK_TMA
	asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(sm_addr(b)) : "memory");
	asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#else
	(void)b;
#endif
}

/* bar_expect: the arrival of the stage's one producer, with the bytes its
 * copies will bring. */
static __device__ __forceinline__ void bar_expect(uint64_t *b, unsigned bytes)
{
#if Q4_BULK_TMA
	asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(sm_addr(b)), "r"(bytes) : "memory");
#else
	(void)b, (void)bytes;
#endif
}

/* bulk: bytes (a multiple of 16, both ends 16-byte aligned) from global
 * src to shared dst, counted on b. */
static __device__ __forceinline__ void bulk(void *dst, const void *src, unsigned bytes, uint64_t *b)
{
#if Q4_BULK_TMA
	asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
	                 sm_addr(dst)),
	             "l"(src), "r"(bytes), "r"(sm_addr(b))
	             : "memory");
#else
	(void)b;
	memcpy(dst, src, bytes);
#endif
}

/* bar_wait: until phase parity of b has completed (every thread of the
 * block calls it at the same point, or of the warp where WARP: on the
 * emulation it is their barrier). */
template <bool WARP>
static __device__ __forceinline__ void bar_wait(uint64_t *b, unsigned parity)
{
#if Q4_BULK_TMA
	unsigned done = 0;
	do
		asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
		             : "=r"(done)
		             : "r"(sm_addr(b)), "r"(parity)
		             : "memory");
	while (!done);
#else
	(void)b, (void)parity;
	if (WARP)
		__syncwarp();
	else
		__syncthreads();
#endif
}

/* part_of: the part of unit u. */
static __device__ __forceinline__ int part_of(const Bk &bk, int64_t u)
{
	int k = 0;
	while (k + 1 < bk.np && u >= bk.b0[k + 1])
		k++;
	return k;
}

/* fill: warp 0 asks for unit u's rows (R matrices: a pair's gate, then
 * its up) into stage dst, counted on b. */
template <int R>
static __device__ __forceinline__ void fill(const Bk &bk, uint64_t *b, uint8_t *dst, int64_t u, int64_t cols)
{
	int lane = threadIdx.x & 31;
	int k = part_of(bk, u);
	const q4_mma_part &p = bk.p[k];
	int64_t r0 = (u - bk.b0[k]) * 16, live = p.nout - r0 < 16 ? p.nout - r0 : 16;
	int64_t wrow = cols / 2, srow = (cols >> p.lg) * 2 * (int64_t)sizeof(float);
	if (lane == 0)
		bar_expect(b, (unsigned)(R * live * (wrow + srow)));
	__syncwarp();
#pragma unroll
	for (int kk = 0; kk < R; kk++) {
		int row = lane & 15;
		if (row >= live)
			continue;
		const uint8_t *q = R == 2 && kk == 0 ? p.q2 : p.q;
		const float *so = R == 2 && kk == 0 ? p.so2 : p.so;
		if (lane < 16)
			bulk(dst + (kk * 16 + row) * bk.wp, q + (r0 + row) * wrow, (unsigned)wrow, b);
		else
			bulk(dst + R * 16 * bk.wp + (kk * 16 + row) * bk.sp, (const uint8_t *)so + (r0 + row) * srow,
			     (unsigned)srow, b);
	}
}

/* chunk_sum: chunk ch of a unit's rows (weights in stage ws, scales in
 * ss) into a warp's partials P, as few_block's warp adds a chunk. */
template <int R, bool ONE>
static __device__ __forceinline__ void chunk_sum(float (&P)[R][4], const Bk &bk, const uint8_t *ws, const uint8_t *ss,
                                                 const Xq &xq, int lg, int64_t ch)
{
	int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
	Bq bq;
	load_bq(bq, xq, 0, ch);
	int64_t gi = ((ch << 6) >> lg) * 2 * (int64_t)sizeof(float);
#pragma unroll
	for (int kk = 0; kk < R; kk++) {
		const uint8_t *ra = ws + (kk * 16 + g) * bk.wp + ch * 32 + 8 * t, *rb = ra + 8 * bk.wp;
		uint2 wa = *(const uint2 *)ra, wb = *(const uint2 *)rb;
		float2 sa = *(const float2 *)(ss + (kk * 16 + g) * bk.sp + gi);
		float2 sb = *(const float2 *)(ss + (kk * 16 + g + 8) * bk.sp + gi);
		uint32_t a[2][4];
		afrags(a, wa, wb);
		float d[4];
		chunk_mma_a<ONE>(d, a, bq);
		P[kk][0] = fmaf(sa.x, d[0], fmaf(sa.y, bq.sx0, P[kk][0]));
		P[kk][2] = fmaf(sb.x, d[2], fmaf(sb.y, bq.sx0, P[kk][2]));
		if (!ONE) {
			P[kk][1] = fmaf(sa.x, d[1], fmaf(sa.y, bq.sx1, P[kk][1]));
			P[kk][3] = fmaf(sb.x, d[3], fmaf(sb.y, bq.sx1, P[kk][3]));
		}
	}
}

/* unit_sums: a warp's partials P of chunks c0 .. c1 − 1 (its slice) of
 * a unit's rows, chunk by chunk in order. */
template <int R, bool ONE>
static __device__ __forceinline__ void unit_sums(float (&P)[R][4], const Bk &bk, const uint8_t *ws, const uint8_t *ss,
                                                 const Xq &xq, int lg, int64_t c0, int64_t c1)
{
#pragma unroll
	for (int kk = 0; kk < R; kk++)
		P[kk][0] = P[kk][1] = P[kk][2] = P[kk][3] = 0.0f;
	for (int64_t ch = c0; ch < c1; ch++)
		chunk_sum<R, ONE>(P, bk, ws, ss, xq, lg, ch);
}

/* unit_sums_all: the partials P[i] of every slice i of a unit's rows,
 * each slice's chunks in order as unit_sums adds them, the slices' c-th
 * chunks side by side (8 independent sums); EVEN: slices of G / 8 chunks
 * each. */
template <int R, bool ONE, bool EVEN>
static __device__ __forceinline__ void unit_sums_all(float (&P)[BW][R][4], const Bk &bk, const uint8_t *ws,
                                                     const uint8_t *ss, const Xq &xq, int lg, int64_t G)
{
#pragma unroll
	for (int i = 0; i < BW; i++)
#pragma unroll
		for (int kk = 0; kk < R; kk++)
			P[i][kk][0] = P[i][kk][1] = P[i][kk][2] = P[i][kk][3] = 0.0f;
	int64_t len = (G + BW - 1) / BW;
	for (int64_t c = 0; c < len; c++)
#pragma unroll
		for (int i = 0; i < BW; i++) {
			int64_t c0 = i * G / BW;
			if (EVEN || c0 + c < (i + 1) * G / BW)
				chunk_sum<R, ONE>(P[i], bk, ws, ss, xq, lg, c0 + c);
		}
}

/* unit_store: a warp stores unit u's rows (of part k) over n tokens, each
 * value sum(kk, e) (the slices' partials added in slice order), with the
 * part's GELU product. */
template <int R, bool ONE, class S>
static __device__ __forceinline__ void unit_store(const Bk &bk, int k, int64_t u, int64_t n, S sum)
{
	int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
	const q4_mma_part &p = bk.p[k];
	int64_t r0 = (u - bk.b0[k]) * 16;
#pragma unroll
	for (int e = 0; e < 4; e++) {
		if (ONE && (e & 1))
			continue;
		int64_t row = r0 + g + 8 * (e >> 1), tk = 2 * t + (e & 1);
		if (row >= p.nout || tk >= n)
			continue;
		int64_t i = tk * p.nout + row;
		float v = sum(R - 1, e);
		if (R == 2) { /* a pair: up's product, times the GELU of gate's */
			p.mul[i] = d_gelu(sum(0, e)) * v;
			p.y[i] = v;
		} else {
			if (p.mul && p.into)
				p.mul[i] = d_gelu(p.mul[i]) * v;
			p.y[i] = p.mul && !p.into ? d_gelu(v) * p.mul[i] : v;
		}
	}
}

/* k_q4_bulk: the launch's units, block b the units b, b + grid, ...; R 2
 * for a pair. OWN: x quantised by each block into its shared memory (as
 * few_block's), else xq is the pre-pass's. ONE: one token. */
template <int R, bool OWN, bool ONE>
__global__ void __launch_bounds__(32 * BW, 2) k_q4_bulk(Bk bk, Xq xq, const float *x, int64_t n, int64_t cols, bool vec)
{
	extern __shared__ __align__(128) uint8_t bsm[];
	uint64_t *bar = (uint64_t *)bsm;
	float *red = (float *)(bsm + BAR_B);
	uint8_t *stg = bsm + bk.soff;
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
	int64_t G = cols >> 6;
	int64_t units = bk.b0[bk.np], grid = gridDim.x;
	int64_t mine = units > (int64_t)blockIdx.x ? (units - 1 - blockIdx.x) / grid + 1 : 0;
	int ns = bk.ns;
	if (threadIdx.x == 0)
		for (int s = 0; s < ns; s++)
			bar_init(&bar[s]);
	__syncthreads();
	if (w == 0) /* weights only: before the wait */
		for (int64_t j = 0; j < ns && j < mine; j++)
			fill<R>(bk, &bar[j], stg + j * bk.stage, blockIdx.x + j * grid, cols);
	pdl_wait();
	pdl_launch();
	if (OWN)
		quant_block(xq, (uint4 *)(bsm + bk.xoff), x, n, G, cols, vec, BW);
	constexpr int RED = BW * R * 4 * 32; /* floats of a buffer of partials */
	for (int64_t j = 0; j < mine; j++) {
		int64_t u = blockIdx.x + j * grid;
		int s = (int)(j % ns);
		bar_wait<false>(&bar[s], (unsigned)((j / ns) & 1));
		int k = part_of(bk, u);
		const uint8_t *ws = stg + s * bk.stage;
		float P[R][4];
		unit_sums<R, ONE>(P, bk, ws, ws + R * 16 * bk.wp, xq, bk.p[k].lg, w * G / BW, (w + 1) * G / BW);
		float *rbuf = red + (j & 1) * RED;
#pragma unroll
		for (int kk = 0; kk < R; kk++)
#pragma unroll
			for (int e = 0; e < 4; e++)
				rbuf[((w * R + kk) * 4 + e) * 32 + lane] = P[kk][e];
		__syncthreads(); /* the stage read, the partials written */
		if (w == 0 && j + ns < mine)
			fill<R>(bk, &bar[s], stg + s * bk.stage, u + ns * grid, cols);
		if (w != (int)(j % BW)) /* the units' sums and stores by the warps in turn */
			continue;
		unit_store<R, ONE>(bk, k, u, n, [&](int kk, int e) { /* the slices' partials in slice order */
			float v = 0.0f;
			for (int i = 0; i < BW; i++)
				v = v + rbuf[((i * R + kk) * 4 + e) * 32 + lane];
			return v;
		});
	}
}

/* k_q4_bulk_w: k_q4_bulk with a whole unit a warp. Each warp (of
 * blockDim.x / 32) has ns stages and mbarriers of its own and asks for
 * its own units' rows (warp gw of the grid's tw: units gw, gw + tw, ...);
 * it sums all 8 slices of a unit, each slice's partials apart in
 * registers as k_q4_bulk's warp of that slice sums them, and adds them in
 * slice order itself: the same bits, and no block barrier after the
 * first (x's own quantisation). */
template <int R, bool OWN, bool ONE>
__global__ void __launch_bounds__(32 * WMAX, 1) k_q4_bulk_w(Bk bk, Xq xq, const float *x, int64_t n, int64_t cols,
                                                            bool vec)
{
	extern __shared__ __align__(128) uint8_t bsm[];
	uint64_t *bar = (uint64_t *)bsm;
	int wb = (int)(blockDim.x >> 5), w = (int)(threadIdx.x >> 5);
	int64_t G = cols >> 6;
	int64_t units = bk.b0[bk.np], tw = (int64_t)gridDim.x * wb, gw = (int64_t)blockIdx.x * wb + w;
	int64_t mine = units > gw ? (units - 1 - gw) / tw + 1 : 0;
	int ns = bk.ns;
	uint64_t *mb = bar + w * ns;
	uint8_t *stg = bsm + bk.soff + (int64_t)w * ns * bk.stage;
	if (threadIdx.x == 0)
		for (int s = 0; s < wb * ns; s++)
			bar_init(&bar[s]);
	__syncthreads();
	for (int64_t j = 0; j < ns && j < mine; j++) /* weights only: before the wait */
		fill<R>(bk, &mb[j], stg + j * bk.stage, gw + j * tw, cols);
	pdl_wait();
	pdl_launch();
	if (OWN)
		quant_block(xq, (uint4 *)(bsm + bk.xoff), x, n, G, cols, vec, wb);
	for (int64_t j = 0; j < mine; j++) {
		int64_t u = gw + j * tw;
		int s = (int)(j % ns);
		bar_wait<true>(&mb[s], (unsigned)((j / ns) & 1));
		int k = part_of(bk, u);
		const uint8_t *ws = stg + s * bk.stage;
		float P[BW][R][4];
		if (G % BW == 0)
			unit_sums_all<R, ONE, true>(P, bk, ws, ws + R * 16 * bk.wp, xq, bk.p[k].lg, G);
		else
			unit_sums_all<R, ONE, false>(P, bk, ws, ws + R * 16 * bk.wp, xq, bk.p[k].lg, G);
		__syncwarp(); /* the stage read */
		if (j + ns < mine)
			fill<R>(bk, &mb[s], stg + s * bk.stage, u + ns * tw, cols);
		unit_store<R, ONE>(bk, k, u, n, [&](int kk, int e) { /* the slices' partials in slice order */
			float v = 0.0f;
#pragma unroll
			for (int i = 0; i < BW; i++)
				v = v + P[i][kk][e];
			return v;
		});
	}
}

/* mode: 0 never, 1 products of one token, 2 of up to 8 tokens
 * (VERDICT_Q4_BULK=0 or 1; q4_bulk_set). */
static int mode = [] {
	if (env_is("VERDICT_Q4_BULK", "0"))
		return 0;
	return env_is("VERDICT_Q4_BULK", "1") ? 2 : 1;
}();

/* warp_mode: whether a unit is a warp's (k_q4_bulk_w): -1 where the
 * launch has units enough, 0 never, 1 wherever it fits (VERDICT_Q4_WARP=0
 * or 1; q4_bulk_set_warp); VERDICT_Q4_WARP=W,S also sets W warps a block
 * of S stages each (warp_wb, warp_ns; 0: the plan's), for comparisons. */
static int warp_wb = 0, warp_ns = 0;
static int warp_mode = [] {
	const char *e = getenv("VERDICT_Q4_WARP");
	if (!e)
		return -1;
	if (strcmp(e, "0") == 0)
		return 0;
	int w = 0, s = 0;
	if (sscanf(e, "%d,%d", &w, &s) == 2 && w >= 1 && w <= WMAX && s >= 1 && s <= WNS_MAX)
		warp_wb = w, warp_ns = s;
	return 1;
}();

/* Plan: a launch's shape (grid 0: not taken). */
struct Plan {
	Bk bk;
	int R, wb; /* wb: warps a block of k_q4_bulk_w, 0 for k_q4_bulk */
	bool own;
	unsigned grid;
	size_t smem;
};

static int64_t up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

/* plan: the launch of parts (as q4_mma_group's) over n tokens of x, or
 * grid 0 where q4_bulk does not take them. */
static Plan plan(const q4_mma_part *parts, int np, const float *x, int64_t n, int64_t cols)
{
	Plan pl = {};
	if (mode == 0 || (mode == 1 && n != 1) || np < 1 || np > Q4_MMA_PARTS || n < 1 || n > 8 || cols % 64 != 0)
		return pl;
	int64_t G = cols >> 6;
	if (G < 8 || G % 4 != 0 || cols / 2 > (1 << 16))
		return pl;
	const dev_props &dv = current_dev();
	if (dv.major < 9)
		return pl;
	bool pair = parts[0].q2 != nullptr;
	if (pair && (np != 1 || !parts[0].mul || !parts[0].into || !parts[0].so2))
		return pl;
	auto al = [](const void *v) { return ((uintptr_t)v & 15) == 0; };
	int64_t srow = 0;
	Bk &bk = pl.bk;
	bk.np = np;
	bk.b0[0] = 0;
	for (int i = 0; i < np; i++) {
		const q4_mma_part &p = parts[i];
		if (p.nout <= 0 || (p.x && (p.x != x || p.cols != cols)) || p.lg < 6 || (cols >> p.lg) % 2 != 0 ||
		    !al(p.q) || !al(p.so) || (pair && (!al(p.q2) || !al(p.so2))))
			return pl;
		int64_t sr = (cols >> p.lg) * 2 * (int64_t)sizeof(float);
		srow = sr > srow ? sr : srow;
		bk.p[i] = p;
		bk.b0[i + 1] = bk.b0[i] + (p.nout + 15) / 16;
	}
	int R = pair ? 2 : 1;
	bk.wp = cols / 2 % 128 == 0 ? cols / 2 + 32 : up(cols / 2, 16);
	bk.sp = up(srow, 16) % 128 == 0 ? up(srow, 16) + 16 : up(srow, 16);
	bk.stage = up(R * 16 * (bk.wp + bk.sp), 128);
	int64_t red = 2 * BW * R * 4 * 32 * (int64_t)sizeof(float), own = n * G * 12 * 16 + G * 8 * 8;
	pl.own = own <= q4_mma_own_max();
	int64_t units = bk.b0[np];
	pl.R = R;
	/* A unit a warp (k_q4_bulk_w): one block a multiprocessor of as many
	 * warps as fit (at most WDEF) of one stage each, where the launch has
	 * at least four units a warp. (On an H100 the head took 123.6 µs with
	 * 8 warps of one stage, 129.1 with 9, 126.6 with 10, all compiled for
	 * up to 12 warps (170 registers); 132.7 with 8 compiled for 8 (255
	 * registers); before the slices were summed side by side 145 with 8,
	 * 173 with 6, 197 with 5 of two stages: native/cuda/README.md, stop 55.) */
	if (warp_mode != 0) {
		int64_t xo = up(WBAR_B, 128), so = up(xo + (pl.own ? own : 0), 128);
		int64_t slots = (dv.smem_block - so) / bk.stage;
		int64_t wn = warp_ns ? warp_ns : 1;
		int64_t wb = warp_wb ? warp_wb : std::min<int64_t>(WDEF, slots / wn);
		if (wb >= 1 && wb * wn <= slots && (warp_mode == 1 || units >= 4 * wb * dv.sms)) {
			bk.ns = (int)wn;
			bk.xoff = xo, bk.soff = so;
			pl.wb = (int)wb;
			pl.smem = (size_t)(so + wb * wn * bk.stage);
			int64_t grid = std::min<int64_t>(dv.sms, (units + wb - 1) / wb);
			pl.grid = (unsigned)grid;
			return pl;
		}
	}
	bk.xoff = up(BAR_B + red, 128);
	bk.soff = up(bk.xoff + (pl.own ? own : 0), 128);
	/* Two blocks a multiprocessor with at least two units (or all of a
	 * block's) on their way where they fit, else one. (On an H100 the
	 * head took 152 µs at two blocks of 4 stages, 180 at two of 2, 254 at
	 * one of 4, 8 or 12: native/cuda/README.md, stop 54.) */
	int bps = 0, ns = 0;
	for (int b = 2; b >= 1 && !bps; b--) {
		int64_t cap = (b == 2 ? dv.smem_sm / 2 - 1024 : dv.smem_block) - bk.soff;
		int64_t per = (units + (int64_t)b * dv.sms - 1) / ((int64_t)b * dv.sms), fit = cap / bk.stage;
		int64_t want = per < NS_MAX ? per : NS_MAX;
		if (fit >= (want < 2 ? want : 2) || (b == 1 && fit >= 1))
			bps = b, ns = (int)(fit < want ? fit : want);
	}
	if (!bps || ns < 1)
		return pl;
	bk.ns = ns;
	pl.smem = (size_t)(bk.soff + ns * bk.stage);
	int64_t grid = (int64_t)bps * dv.sms;
	pl.grid = (unsigned)(units < grid ? units : grid);
	return pl;
}

using BulkK = void (*)(Bk, Xq, const float *, int64_t, int64_t, bool);

template <int R, bool OWN, bool ONE> static BulkK pick(bool warp)
{
	return warp ? k_q4_bulk_w<R, OWN, ONE> : k_q4_bulk<R, OWN, ONE>;
}

static BulkK kernel(int R, bool own, bool one, bool warp)
{
	if (R == 2)
		return own ? (one ? pick<2, true, true>(warp) : pick<2, true, false>(warp))
		           : (one ? pick<2, false, true>(warp) : pick<2, false, false>(warp));
	return own ? (one ? pick<1, true, true>(warp) : pick<1, true, false>(warp))
	           : (one ? pick<1, false, true>(warp) : pick<1, false, false>(warp));
}

} // namespace

void q4_bulk_set(int m) { mode = m; }

void q4_bulk_set_warp(int m) { warp_mode = m; }

bool q4_bulk_takes(const q4_mma_part *parts, int np, const float *x, int64_t n, int64_t cols)
{
	return plan(parts, np, x, n, cols).grid > 0;
}

cudaError_t q4_bulk(cudaStream_t st, bool pdl, const q4_mma_part *parts, int np, const float *x, int64_t n,
                    int64_t cols, void *scratch, size_t scratch_bytes)
{
	Plan pl = plan(parts, np, x, n, cols);
	if (!pl.grid)
		return cudaErrorInvalidValue;
	Xq xq = {};
	if (!pl.own)
		if (cudaError_t e = q4_mma_prepass(st, pdl, &xq, x, n, cols, scratch, scratch_bytes))
			return e;
	BulkK k = kernel(pl.R, pl.own, n == 1, pl.wb > 0);
	if (cudaError_t e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)pl.smem))
		return e;
	/* the grid no larger than the blocks that are resident at once */
	int occ = 0, threads = 32 * (pl.wb ? pl.wb : BW);
	if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, k, threads, pl.smem) == cudaSuccess && occ >= 1) {
		int64_t cap = (int64_t)occ * current_dev().sms;
		if (pl.grid > cap)
			pl.grid = (unsigned)cap;
	}
	return launch_pdl(pdl, k, dim3(pl.grid), dim3(threads), pl.smem, st, pl.bk, xq, x, n, cols,
	                  ((uintptr_t)x & 15) == 0);
}
