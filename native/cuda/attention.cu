/*
 * attention.cu: paged attention over the key/value pool (k_attn_part,
 * k_attn_combine), in chunks of keys combined in chunk order.
 */
#include "attention.cuh"

/* Paged attention in chunks of AC keys. A query's visible keys (in
 * position order, across its sequence's entries) are cut at fixed key
 * counts, AC each: block (query·head, c) takes chunk c, its scores (a warp a
 * key: lanes over d, the shuffle tree; times scale), their max m_c, e_j =
 * exp(s_j − m_c), l_c = Σ e_j and o_c = Σ e_j·v_j (a thread per output
 * element, keys in order), written as partials; a second kernel combines
 * them in chunk order: M = max m_c, w_c = exp(m_c − M), out = Σ w_c·o_c /
 * Σ w_c·l_c. Chunks past a query's keys are empty and add exact zeros, so
 * the result depends on the query's own keys only, never on the batch or
 * the grid (max_keys fixes only the number of chunk blocks launched). A
 * query's keys end at its own position, or at qlim[i] when qlim is given.
 * A prefill's queries go by tiles first where attention_tile.cu takes them
 * (the same partials, key rows read once for a tile); k_attn_part then
 * skips the queries of its even tiles. A few queries may go through
 * attention_one.cu instead: a block a query combines its own chunks, the
 * same bits in one launch. */

/* k_attn_part: chunk blockIdx.y of GH query heads (of one key/value
 * group) of query i: block x = i·(hq/GH) + h0/GH. The query's keys are
 * counted by the whole block (attn_keys_block), the chunk's key rows
 * found in parallel (a scan of the entries' visible keys, then each key's
 * entry by bisection) and its value rows asked into L2 before the scores
 * (rows_to_l2), every key row serves the GH heads, and each
 * head's scores, softmax and sums are those of a head alone. Where even
 * is given, a query of an even tile of tq queries (even[i / tq]) has its
 * partials from attn_tile already. */
template <int GH>
__global__ void __launch_bounds__(AB) k_attn_part(vd_attn a, float *part, int64_t nch, int *err, const int *even,
                                                  int64_t tq)
{
	__shared__ float sc[GH][AC];
	__shared__ int64_t krow[AC];
	__shared__ float red[32];
	__shared__ int ecum[AB], ws[AB / 32];
	__shared__ float smx[GH], sl[GH];
	__shared__ long long kred[AB / 32];
	pdl_wait();
	pdl_launch();
	int64_t per = a.hq / GH, bq = blockIdx.x, ch = blockIdx.y;
	int64_t i = bq / per, h0 = (bq % per) * GH;
	if (even && even[i / tq])
		return;
	int64_t d = a.d, G = a.hq / a.hkv, g = h0 / G, ldk = a.hkv * d;
	int64_t lo, e0, e1;
	int64_t nkeys = attn_keys_block(a, i, &lo, &e0, &e1, kred);
	if (nkeys > a.max_keys) {
		if (threadIdx.x == 0 && ch == 0)
			atomicExch(err, VDC_EKEYS);
		nkeys = 0;
	}
	auto pp = [&](int hh) { return part + ((i * a.hq + h0 + hh) * nch + ch) * (d + 2); };
	int64_t cs = ch * AC, ce = cs + AC < nkeys ? cs + AC : nkeys;
	if (cs >= ce) { /* empty: neutral in the combination */
		if (threadIdx.x < GH)
			pp(threadIdx.x)[0] = -INFINITY, pp(threadIdx.x)[1] = 0.0f;
		return;
	}
	key_rows(a, e0, e1, lo, attn_lim(a, i), cs, ce, krow, ecum, ws); /* the chunk's key rows, in key order */
	int cnt = (int)(ce - cs);
	const float *K = (const float *)a.k.data, *V = (const float *)a.v.data;
	const float *q = (const float *)a.q.data + (i * a.hq + h0) * d;
	rows_to_l2(V + g * d, ldk, krow, cnt, d); /* the values' rows on their way while the scores are made */
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = AB / 32;
	/* a warp's scores AK keys at a time (their loads in flight together),
	 * each key's sum in the order of a key alone */
	for (int pj0 = w; pj0 < GH * cnt; pj0 += AK * nw) {
		const float *kr[AK], *qh[AK];
		float acc[AK];
		bool on[AK];
#pragma unroll
		for (int u = 0; u < AK; u++) {
			int pj = pj0 + u * nw;
			on[u] = pj < GH * cnt; /* the same for the whole warp */
			int hh = on[u] ? pj / cnt : 0, j = on[u] ? pj % cnt : 0;
			kr[u] = K + krow[j] * ldk + g * d, qh[u] = q + hh * d;
			acc[u] = 0.0f;
		}
		for (int64_t c = lane; c < d; c += 32)
#pragma unroll
			for (int u = 0; u < AK; u++)
				if (on[u])
					acc[u] = fmaf(qh[u][c], kr[u][c], acc[u]);
#pragma unroll
		for (int u = 0; u < AK; u++) {
			if (!on[u])
				break;
			int pj = pj0 + u * nw;
			float sum = warp_sum(acc[u]);
			if (lane == 0)
				sc[pj / cnt][pj % cnt] = sum * a.scale;
		}
	}
	__syncthreads();
#pragma unroll
	for (int hh = 0; hh < GH; hh++) {
		float m = threadIdx.x < cnt ? sc[hh][threadIdx.x] : -INFINITY;
		float mx = block_max(m, red);
		float ev = threadIdx.x < cnt ? d_exp(sc[hh][threadIdx.x] - mx) : 0.0f;
		__syncthreads();
		if (threadIdx.x < cnt)
			sc[hh][threadIdx.x] = ev;
		float l = block_sum(ev, red);
		if (threadIdx.x == 0)
			smx[hh] = mx, sl[hh] = l;
		__syncthreads();
	}
	for (int64_t c = threadIdx.x; c < d; c += AB) {
		float acc[GH];
		chunk_values<GH>(
		    acc, cnt, [&](int hh, int j) { return sc[hh][j]; }, [&](int j) { return V[krow[j] * ldk + g * d + c]; });
#pragma unroll
		for (int hh = 0; hh < GH; hh++)
			pp(hh)[2 + c] = acc[hh];
	}
	if (threadIdx.x < GH)
		pp(threadIdx.x)[0] = smx[threadIdx.x], pp(threadIdx.x)[1] = sl[threadIdx.x];
}

/* k_attn_combine: a query head's chunks in chunk order (combine_chunks,
 * attention.cuh). */
__global__ void __launch_bounds__(AB) k_attn_combine(vd_attn a, const float *part, int64_t nch)
{
	__shared__ float wsh[AB], lsh[AB], ms[1];
	pdl_wait();
	pdl_launch();
	int64_t bq = blockIdx.x;
	combine_chunks(part + bq * nch * (a.d + 2), 0, nch, a.d, (float *)a.out.data + bq * a.d, wsh, lsh, ms);
}

/* c_attention: the chunked kernels over the stream's partials buffer,
 * queries in groups whose partials fit in APART_MAX bytes (a group's bits
 * are each query's own). The buffer grows between recordings only, and
 * an outgrown one lives on for the graphs recorded with it. */
#define APART_MAX ((size_t)256 << 20)

void c_attention(vd_stream *s, const vd_attn *a)
{
	ENTER(s);
	int64_t nq = a->q.rows;
	if (nq <= 0 || a->hq <= 0)
		return;
	int64_t mk = a->max_keys > 0 ? a->max_keys : 1;
	if (attn_one_fits(a, nq, mk)) { /* a few queries, each in one block (attention_one.cu) */
		vd_attn c = *a;
		c.max_keys = mk;
		attn_one(s, c, nq);
		launched(s);
		return;
	}
	int64_t nch = (mk + AC - 1) / AC;
	size_t per = (size_t)a->hq * (size_t)nch * (size_t)(a->d + 2) * sizeof(float); /* one query's partials */
	int64_t group = (int64_t)(APART_MAX / per);
	if (group < 1)
		group = 1;
	if (group > nq)
		group = nq;
	/* a prefill's queries by tiles first, their even flags after the
	 * partials; not where the queries are many short sequences (a
	 * scorer's branch rows: fewer queries than a tile a sequence), whose
	 * tiles would all be uneven */
	int64_t tq = nq >= 16 ? attn_tile_q(a, nq) : 0, nseq = a->seq_ent.cols - 1;
	if (tq > 0 && nseq > 0 && nq < tq * nseq && !attn_tile_forced())
		tq = 0;
	size_t need = per * (size_t)group, flags = (need + 255) & ~(size_t)255;
	if (tq > 0)
		need = flags + (size_t)((group + tq - 1) / tq) * sizeof(int);
	if (!grow_scratch(s, &s->apart, &s->apart_n, need, APART_MAX))
		return;
	cuda_state *cs = st_of(s->b);
	float *part = (float *)s->apart;
	for (int64_t q0 = 0; q0 < nq; q0 += group) {
		int64_t g = nq - q0 < group ? nq - q0 : group;
		vd_attn c = *a;
		c.max_keys = mk;
		c.q.data = (float *)a->q.data + q0 * a->hq * a->d;
		c.out.data = (float *)a->out.data + q0 * a->hq * a->d;
		c.qpos.data = (int32_t *)a->qpos.data + q0;
		c.qseq.data = (int32_t *)a->qseq.data + q0;
		if (a->qlim.data)
			c.qlim.data = (int32_t *)a->qlim.data + q0;
		int *even = nullptr;
		if (tq > 0 && g >= 16) {
			even = (int *)((char *)s->apart + flags);
			attn_tile(s, c, part, even, nch, g, tq);
		}
		/* the query heads of a key/value group in one block (up to 8)
		 * once there are queries enough to fill the device; a head a
		 * block for a few (decode steps: more blocks, shorter ones) */
		if (!even && attn_dec(s, c, part, nch, g)) { /* a few queries: one launch */
			launched(s);
			continue;
		}
		int64_t G = a->hkv > 0 && a->hq % a->hkv == 0 && g >= 16 ? a->hq / a->hkv : 1;
		auto kp = G == 8 ? k_attn_part<8> : G == 4 ? k_attn_part<4> : G == 2 ? k_attn_part<2> : k_attn_part<1>;
		int64_t gh = G == 8 || G == 4 || G == 2 ? G : 1;
		launch(s, kp, dim3((unsigned)(g * (a->hq / gh)), (unsigned)nch), AB, 0, c, part, nch, cs->dev_err,
		       (const int *)even, tq > 0 ? tq : (int64_t)1);
		launch(s, k_attn_combine, (unsigned)(g * a->hq), AB, 0, c, (const float *)part, nch);
		launched(s);
	}
}

