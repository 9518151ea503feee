/*
 * attention_tile.cu: attention.cu's chunk partials for a tile of a
 * prefill's queries at once (k_attn_tile), every key and value row of a
 * chunk read once for the tile, each query's bits those of k_attn_part.
 */
#include "attention.cuh"

#define TU (2 * AC) /* keys a tile's chunk may span */

/* load_g: G consecutive floats of shared memory (16-byte aligned for G
 * of 4 and 8, 8-byte for 2) in one or two loads. */
template <int G>
static __device__ __forceinline__ void load_g(float *e, const float *p)
{
	if constexpr (G >= 4) {
#pragma unroll
		for (int k = 0; k < G; k += 4) {
			float4 f = *(const float4 *)(p + k);
			e[k] = f.x, e[k + 1] = f.y, e[k + 2] = f.z, e[k + 3] = f.w;
		}
	} else if constexpr (G == 2) {
		float2 f = *(const float2 *)p;
		e[0] = f.x, e[1] = f.y;
	} else {
		e[0] = p[0];
	}
}

/* value_sums: a tile's value sums (TP query·head pairs), o[t, hh][c] = the
 * fmaf chain of e_j·v_j[c] over query t's chunk keys j in order
 * (k_attn_part's). A work item is 4 columns by TP/(4G) queries (TP/4
 * pairs, TP accumulators), the
 * column groups fastest, so a warp reads 512 contiguous bytes of a row and
 * one pair's exponentials together: an item reads each row of its
 * queries' span once (two rows ahead) and adds it into every query whose
 * chunk holds it. */
template <int G, int TP, typename PP>
static __device__ __forceinline__ void value_sums(const float *V, int64_t ldk, int64_t d, const int64_t *krow,
                                                   const float *ev, const int *qoff, const int *qn, PP pp)
{
	constexpr int TQ = TP / G, QI = TP / (4 * G), NG = TQ / QI;
	int64_t ncg = d / 4;
	bool al = ((uintptr_t)V & 15) == 0 && ldk % 4 == 0;
	for (int64_t it = threadIdx.x; it < ncg * NG; it += AB) {
		int qg = (int)(it / ncg);
		int64_t c = (it % ncg) * 4;
		int qo[QI], qc[QI], ulo = TU, uhi = 0;
#pragma unroll
		for (int i = 0; i < QI; i++) {
			qo[i] = qoff[qg * QI + i], qc[i] = qn[qg * QI + i];
			if (qc[i] > 0) {
				ulo = qo[i] < ulo ? qo[i] : ulo;
				uhi = qo[i] + qc[i] > uhi ? qo[i] + qc[i] : uhi;
			}
		}
		float acc[QI][G][4];
#pragma unroll
		for (int i = 0; i < QI; i++)
#pragma unroll
			for (int hh = 0; hh < G; hh++)
#pragma unroll
				for (int k = 0; k < 4; k++)
					acc[i][hh][k] = 0.0f;
		const float *Vc = V + c;
		auto row = [&](int u) {
			const float *p = Vc + krow[u] * ldk;
			return al ? *(const float4 *)p : make_float4(p[0], p[1], p[2], p[3]);
		};
		float4 v0 = make_float4(0.0f, 0.0f, 0.0f, 0.0f), v1 = v0;
		if (ulo < uhi)
			v0 = row(ulo);
		if (ulo + 1 < uhi)
			v1 = row(ulo + 1);
		for (int u = ulo; u < uhi; u++) {
			float vc[4] = {v0.x, v0.y, v0.z, v0.w};
			v0 = v1;
			if (u + 2 < uhi)
				v1 = row(u + 2);
#pragma unroll
			for (int i = 0; i < QI; i++) {
				unsigned j = (unsigned)(u - qo[i]);
				if (j < (unsigned)qc[i]) {
					float e[G];
					load_g<G>(e, ev + ((qg * QI + i) * AC + j) * G);
#pragma unroll
					for (int hh = 0; hh < G; hh++)
#pragma unroll
						for (int k = 0; k < 4; k++)
							acc[i][hh][k] = fmaf(e[hh], vc[k], acc[i][hh][k]);
				}
			}
		}
#pragma unroll
		for (int i = 0; i < QI; i++)
			if (qc[i] > 0)
#pragma unroll
				for (int hh = 0; hh < G; hh++) {
					float *o = pp(qg * QI + i, hh) + 2 + c;
#pragma unroll
					for (int k = 0; k < 4; k++)
						o[k] = acc[i][hh][k];
				}
	}
}

/* A tile is TQ = TP/G consecutive queries (TP of 32 or 64 pairs) with the G query heads of one
 * key/value group (block x = tile·hkv + group, y = the chunk). It is even
 * when its queries share a sequence whose entries run in position order
 * (each starts at or after the end of the one before), so that a query's
 * visible keys are a run [a_t, a_t + n_t) of the sequence's keys in entry
 * order, and the runs start within TU − AC keys of each other: then chunk c
 * of every query lies in one span of at most TU keys, whose rows are found
 * once (a scan of the entries' lengths, each key's entry by bisection).
 * Each query's arithmetic is k_attn_part's, step for step:
 *
 *  - a score is a warp's sum over lanes of each lane's fmaf chain over
 *    d (c = lane + 32·k), summed in warp_sum's xor tree, times scale; a
 *    warp scores 32/G keys of a query for its G heads at once and sums the
 *    32 scores by halving (the lanes exchange half their sums at each of
 *    warp_sum's distances, so each score's additions are the tree's);
 *  - m = the max over the chunk (exact in any order), e_j = d_exp(s_j −
 *    m), l = the sum of lanes 0..31's e_j plus that of lanes 32..63's, each
 *    in warp_sum's tree (block_sum's result for 64 values over 256
 *    threads);
 *  - o[e] = the fmaf chain of e_j·v_j[e] over the chunk's keys in order.
 *
 * A tile that is not even (a sequence's boundary, entries out of order, a
 * window's runs too far apart) writes even[t] = 0 and leaves its queries to
 * k_attn_part. Two blocks a multiprocessor (128 registers, the scores'
 * loads partly spilled) measured faster than one of 255 registers on an
 * H100: 191 against 219 us for E2B's 512-query prefill. */
template <int G, int DT, int TP>
__global__ void __launch_bounds__(AB, 2) k_attn_tile(vd_attn a, float *part, int *even, int64_t nch, int64_t nq,
                                                  int *err)
{
	constexpr int TQ = TP / G;
	__shared__ __align__(16) float ev[TP * AC]; /* [t][j][hh]: the scores, then their exponentials */
	__shared__ int64_t krow[TU];
	__shared__ int ecum[AB], ws[AB / 32];
	__shared__ int64_t qbef[TQ], qfirst[TQ]; /* keys before a query's run; its chunk's first key */
	__shared__ int qn[TQ], qseq_s[TQ], qok[TQ];
	__shared__ int qoff[TQ];                 /* the chunk's first key in the span */
	__shared__ float sm[TP], sl[TP];
	__shared__ int even_s;
	__shared__ int64_t span0, spann, se0, se1;
	pdl_wait();
	pdl_launch();
	int64_t g = blockIdx.x % a.hkv, tile = blockIdx.x / a.hkv, ch = blockIdx.y;
	int64_t i0 = tile * TQ, d = a.d, ldk = a.hkv * d;
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = AB / 32;
	const int32_t *epos = (const int32_t *)a.ent_pos.data, *elen = (const int32_t *)a.ent_len.data;
	if (threadIdx.x < TQ) {
		int t = threadIdx.x;
		int64_t i = i0 + t;
		qseq_s[t] = -1, qn[t] = 0, qok[t] = 1, qbef[t] = 0, qfirst[t] = 0;
		if (i < nq) {
			int64_t lo, e0, e1;
			int64_t nkeys = attn_keys(a, i, &lo, &e0, &e1);
			if (nkeys > a.max_keys) {
				if (ch == 0)
					atomicExch(err, VDC_EKEYS);
				nkeys = 0;
			}
			int64_t bef = 0, end = INT64_MIN;
			int ok = 1;
			for (int64_t e = e0; e < e1; e++) {
				int64_t p0 = epos[e], p1 = p0 + elen[e];
				if (p0 < end)
					ok = 0;
				end = p1 > end ? p1 : end;
				if (lo > p0)
					bef += (lo < p1 ? lo : p1) - p0;
			}
			int64_t cnt = nkeys - ch * AC;
			qseq_s[t] = ((const int32_t *)a.qseq.data)[i];
			qok[t] = ok, qbef[t] = bef, qfirst[t] = bef + ch * AC;
			qn[t] = cnt <= 0 ? 0 : cnt < AC ? (int)cnt : AC;
			if (t == 0)
				se0 = e0, se1 = e1;
		}
	}
	__syncthreads();
	if (threadIdx.x == 0) {
		/* The bounds start at the first query (and the first with keys in
		 * this chunk), never at sentinels: a difference of INT64_MIN and
		 * INT64_MAX overflows, and the compiler may take B > A for
		 * B − A > 0 (it did: an empty chunk got a span of one unwritten
		 * row, read past the value pool on the card). */
		int ok = 1, any = 0;
		int64_t bmin = qbef[0], bmax = qbef[0], A = 0, B = 0;
		for (int t = 0; t < TQ; t++) {
			if (qseq_s[t] < 0)
				continue;
			if (qseq_s[t] != qseq_s[0] || !qok[t])
				ok = 0;
			bmin = qbef[t] < bmin ? qbef[t] : bmin;
			bmax = qbef[t] > bmax ? qbef[t] : bmax;
			if (qn[t] > 0) {
				int64_t f = qfirst[t], e = qfirst[t] + qn[t];
				A = !any || f < A ? f : A;
				B = !any || e > B ? e : B;
				any = 1;
			}
		}
		if (bmax - bmin > TU - AC)
			ok = 0;
		even_s = ok;
		span0 = A, spann = any ? B - A : 0;
		if (g == 0 && ch == 0)
			even[tile] = ok;
	}
	__syncthreads();
	if (!even_s)
		return;
	auto pp = [&](int t, int hh) { return part + (((i0 + t) * a.hq + g * G + hh) * nch + ch) * (d + 2); };
	if (threadIdx.x < TQ) {
		int t = threadIdx.x;
		qoff[t] = (int)(qfirst[t] - span0);
		if (qseq_s[t] >= 0 && qn[t] == 0) /* empty: neutral in the combination */
			for (int hh = 0; hh < G; hh++)
				pp(t, hh)[0] = -INFINITY, pp(t, hh)[1] = 0.0f;
	}
	int64_t A = span0, U = spann;
	if (U == 0)
		return;
	/* the span's rows: keys [A, A + U) of all the sequence's keys in entry
	 * order (no position bound) */
	key_rows(a, se0, se1, INT64_MIN, INT64_MAX - 1, A, A + U, krow, ecum, ws);
	const float *K = (const float *)a.k.data + g * d, *V = (const float *)a.v.data + g * d;
	/* scores: a warp a query, KB keys by G heads at a time */
	for (int t = w; t < TQ; t += nw) {
		int cnt = qn[t], off = qoff[t];
		if (cnt == 0)
			continue;
		score_keys<G, DT>((const float *)a.q.data + ((i0 + t) * a.hq + g * G) * d, d, K, ldk, krow + off, cnt, a.scale,
		                  ev + t * AC * G, lane);
	}
	__syncthreads();
	/* each pair's max, exponentials and their sum */
	for (int p = w; p < TP; p += nw) {
		int t = p / G, hh = p % G, cnt = qn[t];
		if (cnt == 0)
			continue;
		chunk_softmax<G>(ev + t * AC * G + hh, cnt, lane, &sm[p], &sl[p]);
	}
	__syncthreads();
	/* the value sums */
	value_sums<G, TP>(V, ldk, d, krow, ev, qoff, qn, pp);
	if (threadIdx.x < TP) {
		int t = threadIdx.x / G, hh = threadIdx.x % G;
		if (qn[t] > 0)
			pp(t, hh)[0] = sm[threadIdx.x], pp(t, hh)[1] = sl[threadIdx.x];
	}
}

/* attn_tile_mode: VERDICT_ATTN_TILE=0 turns the tiles off (for
 * comparisons: the same bits), =1 takes them wherever the shape allows
 * (the harnesses); by default (2) c_attention leaves out batches of many
 * short sequences. */
static int attn_tile_mode()
{
	static const int m = env_is("VERDICT_ATTN_TILE", "0") ? 0 : env_is("VERDICT_ATTN_TILE", "1") ? 1 : 2;
	return m;
}

bool attn_tile_forced() { return attn_tile_mode() == 1; }

/* The tiles take G of 1, 2, 4 or 8 query heads a key/value head and d of
 * 32, 64, 128, 256 or 512 with G·d/32 at most 64 (the registers of a
 * query's G heads). */
bool attn_tiles_take(const vd_attn *a)
{
	if (a->hkv <= 0 || a->hq % a->hkv != 0)
		return false;
	int64_t G = a->hq / a->hkv, dt = a->d / 32;
	return (G == 1 || G == 2 || G == 4 || G == 8) && a->d % 32 == 0 && (dt & (dt - 1)) == 0 && dt >= 1 &&
	       dt <= 16 && G * dt <= 64;
}

/* tile_pairs: a tile's query·head pairs for nq queries: 32 up to
 * TP_SMALL_MAX queries (twice the blocks of 64, so that fewer
 * multiprocessors idle in the last wave), 64 past it; VERDICT_ATTN_TP=32
 * or 64 takes that one (for comparisons: a query's bits are the same in
 * any tile). Measured on an H100, 2026-12-07 (ncu, a 521-token prefill,
 * k_attn_tile over its 20 calls): 2,889 to 2,926 us with 32, 2,981 and
 * 2,988 with 64; k_attn_combine took 24 us more with 32. */
#define TP_SMALL_MAX 1024

static int tile_pairs(int64_t nq)
{
	static const int forced = env_is("VERDICT_ATTN_TP", "32") ? 32 : env_is("VERDICT_ATTN_TP", "64") ? 64 : 0;
	return forced ? forced : nq <= TP_SMALL_MAX ? 32 : 64;
}

int attn_tile_q(const vd_attn *a, int64_t nq)
{
	return attn_tile_mode() != 0 && attn_tiles_take(a) ? (int)(tile_pairs(nq) / (a->hq / a->hkv)) : 0;
}

template <int G, int TP>
static void tile_of_d(vd_stream *s, const vd_attn &a, dim3 grid, float *part, int *even, int64_t nch, int64_t nq,
                      int *err)
{
	switch (a.d / 32) {
	case 1: launch(s, k_attn_tile<G, 1, TP>, grid, AB, 0, a, part, even, nch, nq, err); break;
	case 2: launch(s, k_attn_tile<G, 2, TP>, grid, AB, 0, a, part, even, nch, nq, err); break;
	case 4: launch(s, k_attn_tile<G, 4, TP>, grid, AB, 0, a, part, even, nch, nq, err); break;
	case 8: launch(s, k_attn_tile<G, 8, TP>, grid, AB, 0, a, part, even, nch, nq, err); break;
	case 16: if constexpr (G <= 4) launch(s, k_attn_tile<G, 16, TP>, grid, AB, 0, a, part, even, nch, nq, err); break;
	default: break;
	}
}

template <int G>
static void tile_of_g(vd_stream *s, const vd_attn &a, dim3 grid, float *part, int *even, int64_t nch, int64_t nq,
                      int64_t tq, int *err)
{
	if (tq * G == 32)
		tile_of_d<G, 32>(s, a, grid, part, even, nch, nq, err);
	else
		tile_of_d<G, 64>(s, a, grid, part, even, nch, nq, err);
}

void attn_tile(vd_stream *s, const vd_attn &a, float *part, int *even, int64_t nch, int64_t nq, int64_t tq)
{
	int64_t G = a.hq / a.hkv, nt = (nq + tq - 1) / tq;
	dim3 grid((unsigned)(nt * a.hkv), (unsigned)nch);
	int *err = st_of(s->b)->dev_err;
	switch (G) {
	case 1: tile_of_g<1>(s, a, grid, part, even, nch, nq, tq, err); break;
	case 2: tile_of_g<2>(s, a, grid, part, even, nch, nq, tq, err); break;
	case 4: tile_of_g<4>(s, a, grid, part, even, nch, nq, tq, err); break;
	default: tile_of_g<8>(s, a, grid, part, even, nch, nq, tq, err); break;
	}
}
