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

static __device__ __forceinline__ int64_t attn_keys(const vd_attn &a, int64_t i, int64_t *lo_out, int64_t *e0_out,
                                             int64_t *e1_out)
{
	const int32_t *qpos = (const int32_t *)a.qpos.data, *qseq = (const int32_t *)a.qseq.data;
	const int32_t *sent = (const int32_t *)a.seq_ent.data;
	const int32_t *epos = (const int32_t *)a.ent_pos.data, *elen = (const int32_t *)a.ent_len.data;
	int64_t pos = qpos[i], lo = 0, s = qseq[i], lim = attn_lim(a, i);
	if (a.window > 0 && pos - a.window + 1 > lo)
		lo = pos - a.window + 1;
	int64_t e0 = sent[s], e1 = sent[s + 1], nkeys = 0;
	for (int64_t e = e0; e < e1; e++) {
		int64_t p0 = epos[e], p1 = p0 + elen[e];
		int64_t first = p0 > lo ? p0 : lo, last = p1 < lim + 1 ? p1 : lim + 1;
		if (last > first)
			nkeys += last - first;
	}
	*lo_out = lo, *e0_out = e0, *e1_out = e1;
	return nkeys;
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

/* attn_tile_q: the queries a tile of attention_tile.cu takes for a's
 * shape (0: the shape is not one the tiles take, or VERDICT_ATTN_TILE is
 * not "1"). attn_tile: its kernel over nq queries, writing the partials of
 * k_attn_part for the queries of every even tile and even[t] (1 or 0) for
 * every tile t. */
int attn_tile_q(const vd_attn *a);
void attn_tile(vd_stream *s, const vd_attn &a, float *part, int *even, int64_t nch, int64_t nq);

#endif
