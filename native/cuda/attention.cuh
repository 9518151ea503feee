/*
 * attention.cuh: what attention.cu's per-query kernels and
 * attention_tile.cu's tiles share: the chunk sizes, a query's visible keys,
 * the block's prefix sum, and the tile kernel's host launcher.
 */
#ifndef VERDICT_CUDA_ATTENTION_CUH
#define VERDICT_CUDA_ATTENTION_CUH

#include "common.cuh"

#define AB 256
#define AC 64
#define AK 4 /* keys a warp scores at once */

/* attn_lim: the last key position query i sees: qlim[i] when given (an
 * image block's queries see their block's later keys), else its own. The
 * window still counts back from its own position. */
static __device__ __forceinline__ int64_t attn_lim(const vd_attn &a, int64_t i)
{
	return a.qlim.data ? ((const int32_t *)a.qlim.data)[i] : ((const int32_t *)a.qpos.data)[i];
}

/* attn_span: query i's first and last visible positions (*lo, *lim: the
 * window counts back from its own position) and its sequence's entries
 * [e0, e1). */
static __device__ __forceinline__ void attn_span(const vd_attn &a, int64_t i, int64_t *lo, int64_t *lim, int64_t *e0,
                                                 int64_t *e1)
{
	const int32_t *qpos = (const int32_t *)a.qpos.data, *qseq = (const int32_t *)a.qseq.data;
	const int32_t *sent = (const int32_t *)a.seq_ent.data;
	int64_t pos = qpos[i], s = qseq[i];
	*lo = a.window > 0 && pos - a.window + 1 > 0 ? pos - a.window + 1 : 0;
	*lim = attn_lim(a, i);
	*e0 = sent[s], *e1 = sent[s + 1];
}

/* ent_vis: the keys of entry e a query sees (positions lo..lim), and
 * the entry's first position (*p0). */
static __device__ __forceinline__ int64_t ent_vis(const vd_attn &a, int64_t e, int64_t lo, int64_t lim, int64_t *p0)
{
	int64_t p = ((const int32_t *)a.ent_pos.data)[e], p1 = p + ((const int32_t *)a.ent_len.data)[e];
	int64_t f = p > lo ? p : lo, last = p1 < lim + 1 ? p1 : lim + 1;
	*p0 = p;
	return last > f ? last - f : 0;
}

/* attn_keys: query i's first visible position (*lo_out) and its
 * sequence's entries [e0, e1) (*e0_out, *e1_out); returns the visible
 * keys of entries e0 + first, e0 + first + step, ... (by default all of
 * them: one thread's loop over the sequence's entries). */
static __device__ __forceinline__ int64_t attn_keys(const vd_attn &a, int64_t i, int64_t *lo_out, int64_t *e0_out,
                                                    int64_t *e1_out, int64_t first = 0, int64_t step = 1)
{
	int64_t lo, lim, e0, e1, nkeys = 0, p0;
	attn_span(a, i, &lo, &lim, &e0, &e1);
	for (int64_t e = e0 + first; e < e1; e += step)
		nkeys += ent_vis(a, e, lo, lim, &p0);
	*lo_out = lo, *e0_out = e0, *e1_out = e1;
	return nkeys;
}

/* attn_keys_block: attn_keys with the whole block: each thread counts
 * the visible keys of entries e0 + t, e0 + t + AB, ... and the block adds
 * the counts (integers: exact in any order), in one round of loads in
 * place of a thread's serial loop over the sequence's entries. Every
 * thread gets the count; the whole block calls it (red: AB/32 slots). */
static __device__ int64_t attn_keys_block(const vd_attn &a, int64_t i, int64_t *lo_out, int64_t *e0_out,
                                          int64_t *e1_out, long long *red)
{
	long long n = attn_keys(a, i, lo_out, e0_out, e1_out, threadIdx.x, AB);
	for (int o = 16; o > 0; o >>= 1)
		n += __shfl_xor_sync(0xffffffffu, n, o);
	if ((threadIdx.x & 31) == 0)
		red[threadIdx.x >> 5] = n;
	__syncthreads();
	long long t = 0;
	for (int k = 0; k < AB / 32; k++)
		t += red[k];
	__syncthreads(); /* red free again */
	return t;
}

/* rows_to_l2: asks the cnt rows krow[0..cnt) of X (n floats each from
 * X's first column, rows ldx apart) into L2, a 128-byte line a thread at a
 * time: for rows read later in the kernel (the values, while the scores
 * are made). */
static __device__ __forceinline__ void rows_to_l2(const float *X, int64_t ldx, const int64_t *krow, int cnt, int64_t n)
{
	int lines = (int)((n + 31) / 32);
	for (int t = threadIdx.x; t < cnt * lines; t += AB)
		pdl_prefetch_l2(X + krow[t / lines] * ldx + (int64_t)(t % lines) * 32);
}

/* block_scan: the inclusive prefix sum of v over the block's AB threads
 * (integers: any order is exact). */
static __device__ int block_scan(int v, int *ws)
{
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
	for (int o = 1; o < 32; o <<= 1) {
		int u = __shfl_up_sync(0xffffffffu, v, o);
		if (lane >= o)
			v += u;
	}
	if (lane == 31)
		ws[w] = v;
	__syncthreads();
	int before = 0;
	for (int k = 0; k < w; k++)
		before += ws[k];
	__syncthreads();
	return v + before;
}

/* first_above: the first of the AB entries of the block's inclusive sums
 * ecum above r (the entry that holds key r of the batch of entries). */
static __device__ __forceinline__ int first_above(const int *ecum, int r)
{
	int l0 = 0, l1 = AB - 1;
	while (l0 < l1) {
		int mid = (l0 + l1) / 2;
		if (ecum[mid] > r)
			l1 = mid;
		else
			l0 = mid + 1;
	}
	return l0;
}

/* rows_of: the pool rows of keys [k0, k1) that fall in a batch of AB
 * entries from t0 (base keys before it; ecum the batch's inclusive sums
 * of visible keys) into krow[k − k0], each key's entry by bisection. */
static __device__ __forceinline__ void rows_of(const vd_attn &a, int64_t t0, int64_t base, int64_t k0, int64_t k1,
                                               int64_t lo, int64_t *krow, const int *ecum)
{
	const int32_t *eblk = (const int32_t *)a.ent_blk.data, *epos = (const int32_t *)a.ent_pos.data;
	int64_t total = ecum[AB - 1], from = base > k0 ? base : k0, to = base + total < k1 ? base + total : k1;
	for (int64_t kk = from + threadIdx.x; kk < to; kk += AB) {
		int r = (int)(kk - base), l0 = first_above(ecum, r);
		int64_t ee = t0 + l0, p0 = epos[ee], first = p0 > lo ? p0 : lo;
		krow[kk - k0] = eblk[ee] * a.block + (first - p0) + (r - (l0 ? ecum[l0 - 1] : 0));
	}
}

/* key_rows: the pool rows of keys [k0, k1) of a query's visible keys (its
 * sequence's entries e0..e1 from position lo to lim, in entry order) into
 * krow[k − k0]: a block scan of the entries' visible counts, AB entries at
 * a time, each key's entry by bisection. The whole block calls it (ecum:
 * AB ints, ws: AB/32). */
static __device__ void key_rows(const vd_attn &a, int64_t e0, int64_t e1, int64_t lo, int64_t lim, int64_t k0,
                                int64_t k1, int64_t *krow, int *ecum, int *ws)
{
	int64_t base = 0;
	for (int64_t t0 = e0; t0 < e1 && base < k1; t0 += AB) {
		int64_t e = t0 + threadIdx.x, p0;
		int vis = e < e1 ? (int)ent_vis(a, e, lo, lim, &p0) : 0;
		int incl = block_scan(vis, ws);
		ecum[threadIdx.x] = incl;
		__syncthreads();
		int64_t total = ecum[AB - 1];
		rows_of(a, t0, base, k0, k1, lo, krow, ecum);
		base += total;
		__syncthreads();
	}
}

/* score_keys: a warp's scores of the cnt keys at rows krow[0..cnt) of K
 * (K at the group's first column, rows ldk apart) for the G query heads
 * whose rows start at q (d apart), into ev[j·G + hh]: 32/G keys by G heads
 * at a time, each lane's fmaf chain over its columns (lane + 32·k), the 32
 * sums added by halving (at each of warp_sum's distances a lane keeps the
 * half its bit picks and adds its partner's of that half, so each score's
 * additions are warp_sum's tree), times scale: k_attn_part's scores. The
 * warp takes the keys from first on, stride keys apart (a multiple of 32/G;
 * by default all of them). */
template <int G, int DT>
static __device__ __forceinline__ void score_keys(const float *q, int64_t d, const float *K, int64_t ldk,
                                                  const int64_t *krow, int cnt, float scale, float *ev, int lane,
                                                  int first = 0, int stride = 32 / G)
{
	constexpr int KB = 32 / G;
	float qr[G][DT];
#pragma unroll
	for (int hh = 0; hh < G; hh++)
#pragma unroll
		for (int k = 0; k < DT; k++)
			qr[hh][k] = q[hh * d + lane + 32 * k];
	for (int j0 = first; j0 < cnt; j0 += stride) {
		float v[32];
		const float *kr[KB];
#pragma unroll
		for (int kb = 0; kb < KB; kb++) {
			int j = j0 + kb < cnt ? j0 + kb : cnt - 1;
			kr[kb] = K + krow[j] * ldk + lane;
		}
#pragma unroll
		for (int s = 0; s < 32; s++)
			v[s] = 0.0f;
#pragma unroll
		for (int k = 0; k < DT; k++)
#pragma unroll
			for (int kb = 0; kb < KB; kb++) {
				float kv = kr[kb][32 * k];
#pragma unroll
				for (int hh = 0; hh < G; hh++)
					v[kb * G + hh] = fmaf(qr[hh][k], kv, v[kb * G + hh]);
			}
#pragma unroll
		for (int n = 16, o = 16; o > 0; o >>= 1, n >>= 1) {
			bool up = lane & o;
#pragma unroll
			for (int s = 0; s < n; s++) {
				float send = up ? v[s] : v[s + n], keep = up ? v[s + n] : v[s];
				v[s] = keep + __shfl_xor_sync(0xffffffffu, send, o);
			}
		}
		if (j0 + lane / G < cnt)
			ev[j0 * G + lane] = v[0] * scale;
	}
}

/* chunk_values: a thread's column of GH heads' value sums over a chunk's
 * cnt keys, each head's fmaf chain of e(hh, j)·v(j) in key order into
 * acc[hh] (from zeros): k_attn_part's and k_attn_dec's. */
template <int GH, class E, class V>
static __device__ __forceinline__ void chunk_values(float *acc, int cnt, E e, V v)
{
#pragma unroll
	for (int hh = 0; hh < GH; hh++)
		acc[hh] = 0.0f;
#pragma unroll 8
	for (int j = 0; j < cnt; j++) {
		float vj = v(j);
#pragma unroll
		for (int hh = 0; hh < GH; hh++)
			acc[hh] = fmaf(e(hh, j), vj, acc[hh]);
	}
}

/* chunk_softmax: a warp's softmax of one head's scores in a chunk of cnt
 * (at most AC) keys, e[j·G]: their max m, e_j = d_exp(s_j − m) in place and
 * l = the sum of lanes 0..31's e_j plus that of lanes 32..63's, each in
 * warp_sum's tree: k_attn_part's block_max and block_sum over 256 threads
 * (exact zeros past cnt) give these bits. Lane 0 writes *m and *l. */
template <int G>
static __device__ __forceinline__ void chunk_softmax(float *e, int cnt, int lane, float *m, float *l)
{
	float s0 = lane < cnt ? e[lane * G] : -INFINITY, s1 = lane + 32 < cnt ? e[(lane + 32) * G] : -INFINITY;
	float mx = warp_max(fmaxf(fmaxf(-INFINITY, s0), s1));
	float e0 = lane < cnt ? d_exp(s0 - mx) : 0.0f, e1 = lane + 32 < cnt ? d_exp(s1 - mx) : 0.0f;
	float sum = warp_sum(e0) + warp_sum(e1);
	if (lane < cnt)
		e[lane * G] = e0;
	if (lane + 32 < cnt)
		e[(lane + 32) * G] = e1;
	if (lane == 0)
		*m = mx, *l = sum;
}

/* combine_chunks: the nc chunks' partials of NH query heads (head hh's
 * at pp + hh·hs: m_c, l_c, o_c[0..d) a chunk, d + 2 floats apart), each
 * head's in chunk order, those with keys (l_c > 0): M = max m_c, w_c =
 * d_exp(m_c − M), out = Σ w_c·o_c / Σ w_c·l_c (no keys: zeros), head hh's
 * into o + hh·d. Warp hh finds head hh's M (a max: exact in any order);
 * then the chunks go AB/NH at a time: each (head, chunk)'s w_c made once
 * into shared memory by a thread, then every thread adds them into L and
 * its column of each head in chunk order, the rows' loads independent of
 * each other. The partials are read from L2 (__ldcg: other blocks may
 * have written them in the same launch). The whole block calls it (wsh,
 * lsh: AB floats; ms: NH). */
template <int NH = 1>
static __device__ void combine_chunks(const float *pp, int64_t hs, int64_t nc, int64_t d, float *o, float *wsh,
                                      float *lsh, float *ms)
{
	constexpr int SEG = AB / NH;
	int64_t ld = d + 2;
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
	if (w < NH) {
		float m = -INFINITY;
		for (int64_t c = lane; c < nc; c += 32)
			if (__ldcg(pp + w * hs + c * ld + 1) > 0.0f)
				m = fmaxf(m, __ldcg(pp + w * hs + c * ld));
		m = warp_max(m);
		if (lane == 0)
			ms[w] = m;
	}
	int hm = threadIdx.x / SEG, km = threadIdx.x % SEG; /* the (head, chunk) whose weight this thread makes */
	for (int64_t e0 = 0; e0 < d; e0 += AB) {
		int64_t e = e0 + threadIdx.x, ec = e < d ? e : 0;
		float L[NH], acc[NH];
#pragma unroll
		for (int hh = 0; hh < NH; hh++)
			L[hh] = acc[hh] = 0.0f;
		for (int64_t c0 = 0; c0 < nc; c0 += SEG) {
			int n = nc - c0 < SEG ? (int)(nc - c0) : SEG;
			__syncthreads(); /* ms written, the last segment's weights read */
			if (km < n) {
				const float *pc = pp + hm * hs + (c0 + km) * ld;
				float l = __ldcg(pc + 1);
				wsh[threadIdx.x] = l > 0.0f ? d_exp(__ldcg(pc) - ms[hm]) : 0.0f;
				lsh[threadIdx.x] = l > 0.0f ? l : -1.0f; /* −1: no keys, left out */
			}
			__syncthreads();
#pragma unroll 4
			for (int k = 0; k < n; k++)
#pragma unroll
				for (int hh = 0; hh < NH; hh++)
					if (lsh[hh * SEG + k] > 0.0f) {
						float wc = wsh[hh * SEG + k];
						L[hh] = fmaf(wc, lsh[hh * SEG + k], L[hh]);
						acc[hh] = fmaf(wc, __ldcg(pp + hh * hs + 2 + ec + (c0 + k) * ld), acc[hh]);
					}
		}
		if (e < d)
#pragma unroll
			for (int hh = 0; hh < NH; hh++)
				o[hh * d + e] = L[hh] > 0.0f ? acc[hh] / L[hh] : 0.0f; /* no keys: 0 */
	}
}

/* attn_one_fits: whether attention_one.cu takes a's nq queries in one
 * launch (a few queries of at most ATTN_ONE_KEYS keys, a shape the tiles
 * take, VERDICT_ATTN_ONE "1"); attn_one: that launch. */
#define ATTN_ONE_KEYS 1024
bool attn_one_fits(const vd_attn *a, int64_t nq, int64_t max_keys);
void attn_one(vd_stream *s, const vd_attn &a, int64_t nq);

/* attn_dec: a few queries' attention in one launch of attention_dec.cu
 * (the bits of k_attn_part with one head a block and k_attn_combine), its
 * partials in part (nch chunks a query head); false where it does not
 * take the shape (d past 256 or not a multiple of 32, more queries than
 * VERDICT_ATTN_DEC allows, 8 by default) and nothing was launched. */
bool attn_dec(vd_stream *s, const vd_attn &a, float *part, int64_t nch, int64_t nq);

/* attn_tiles_take: whether a's shape is one the tiles' kernels take (and
 * attention_one.cu's): G of 1, 2, 4 or 8, d of 32 to 512, a power of two,
 * G·d/32 at most 64. */
bool attn_tiles_take(const vd_attn *a);

/* attn_tile_q: the queries a tile of attention_tile.cu takes for a's
 * shape and nq queries (0: the shape is not one the tiles take, or
 * VERDICT_ATTN_TILE is "0"). attn_tile: its kernel over nq queries by
 * tiles of tq (attn_tile_q's), writing the partials of k_attn_part for the
 * queries of every even tile and even[t] (1 or 0) for every tile t. */
int attn_tile_q(const vd_attn *a, int64_t nq);
bool attn_tile_forced(); /* VERDICT_ATTN_TILE=1: wherever the shape allows */
void attn_tile(vd_stream *s, const vd_attn &a, float *part, int *even, int64_t nch, int64_t nq, int64_t tq);

#endif
