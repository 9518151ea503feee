/*
 * cpu_attention_impl.h: causal attention, included once per SIMD level
 * after cpu_linear_impl.h.
 *
 * A task is one query row and a few query heads sharing one key/value head.
 * Scores are dot products computed exactly like Linear's (lin_block over the
 * visible keys), then scaled, soft-maxed (max, exp, 8-lane sum, divide) and
 * applied to V with one fused multiply-add per key in key order. Nothing
 * depends on NQ, on the other rows or on the head grouping.
 */

#define ATT_KC 12 /* keys per chunk of the score pass */
#define ATT_PF 48 /* keys prefetched ahead */

/* att_prefetch asks for rows [a, b) (clipped to n) of len floats at p. */
VK_INLINE void att_prefetch(const float *p, int64_t ld, int64_t a, int64_t b,
                            int64_t n, int64_t len)
{
	if (b > n)
		b = n;
	for (int64_t j = a; j < b; j++)
		for (int64_t c = 0; c < len; c += 16)
			__builtin_prefetch(p + j * ld + c);
}

typedef struct {
	float *out;
	const float *q, *k, *v;
	const int32_t *qpos;
	int64_t nq, nk, hq, hkv, d, window;
	float scale;
	int64_t hc, nhc; /* heads per task, tasks per kv head */
} VK_ISA(att_ctx);

/* att_pv: o[h·d + c] += Σ_j p[h·ldp + j]·v[j·ldv + c] for c in [c0, c0+8W),
 * one fma per key in key order. */
VK_INLINE void VK_ISA(att_pv)(const int H, const int W, const int PF,
                              const float *p,
                              int64_t ldp, const float *v, int64_t ldv,
                              int64_t nkeys, float *o, int64_t d, int64_t c0)
{
	V acc[4][2];
#pragma GCC unroll 4
	for (int h = 0; h < H; h++)
#pragma GCC unroll 2
		for (int w = 0; w < W; w++)
			acc[h][w] = v_load(o + h * d + c0 + 8 * w);
	for (int64_t j = 0; j < nkeys; j++) {
		V vv[2];
		if (PF) {
			__builtin_prefetch(v + (j + 4) * ldv + c0);
			__builtin_prefetch(v + j * ldv + c0 + 8 * W + 16);
		}
#pragma GCC unroll 2
		for (int w = 0; w < W; w++)
			vv[w] = v_load(v + j * ldv + c0 + 8 * w);
#pragma GCC unroll 4
		for (int h = 0; h < H; h++) {
			V pw = v_set1(p[h * ldp + j]);
#pragma GCC unroll 2
			for (int w = 0; w < W; w++)
				acc[h][w] = v_fma(pw, vv[w], acc[h][w]);
		}
	}
#pragma GCC unroll 4
	for (int h = 0; h < H; h++)
#pragma GCC unroll 2
		for (int w = 0; w < W; w++)
			v_store(o + h * d + c0 + 8 * w, acc[h][w]);
}

/* att_pv_acc: o[h] += Σ_j p[h·ldp + j]·v_j, key blocks of ATT_JB keys
 * (kept in cache across the column chunks), the sums carried in o between
 * blocks: one fma per key, in key order, for every element; so keys split
 * into consecutive segments give the same bits as one call. */
#define ATT_JB 64
VK_INLINE void VK_ISA(att_pv_acc)(const int H, const int PF, const float *p,
                                  int64_t ldp,
                                  const float *v, int64_t ldv, int64_t nkeys,
                                  float *o, int64_t d)
{
	for (int64_t j0 = 0; j0 < nkeys; j0 += ATT_JB) {
		int64_t nj = nkeys - j0 < ATT_JB ? nkeys - j0 : ATT_JB;
		const float *pj = p + j0, *vj = v + j0 * ldv;
		int64_t c = 0;
		for (; c + 16 <= d; c += 16)
			VK_ISA(att_pv)(H, 2, PF, pj, ldp, vj, ldv, nj, o, d, c);
		for (; c + 8 <= d; c += 8)
			VK_ISA(att_pv)(H, 1, PF, pj, ldp, vj, ldv, nj, o, d, c);
		for (; c < d; c++)
			for (int h = 0; h < H; h++) {
				float s = o[h * d + c];
				for (int64_t j = 0; j < nj; j++)
					s = fmaf(pj[h * ldp + j], vj[j * ldv + c], s);
				o[h * d + c] = s;
			}
	}
}

/* att_pv_all: o[h] = Σ_j p[h·ldp + j]·v_j (att_pv_acc from zero). */
VK_INLINE void VK_ISA(att_pv_all)(const int H, const int PF, const float *p,
                                  int64_t ldp, const float *v, int64_t ldv,
                                  int64_t nkeys, float *o, int64_t d)
{
	memset(o, 0, (size_t)(H * d) * sizeof(float));
	VK_ISA(att_pv_acc)(H, PF, p, ldp, v, ldv, nkeys, o, d);
}

/* att_softmax turns the scores s[0..n) into probabilities, in place. */
static void VK_ISA(att_softmax)(float *s, int64_t n, float scale)
{
	const V vs = v_set1(scale);
	int64_t n8 = n & ~(int64_t)7, j;
	V m = v_set1(-INFINITY);
	for (j = 0; j < n8; j += 8) {
		V x = v_mul(v_load(s + j), vs);
		v_store(s + j, x);
		m = v_max(x, m);
	}
	if (j < n) {
		V x = v_mul(v_load_part(s + j, n - j, 0), vs);
		v_store_part(s + j, n - j, x);
		m = v_max(v_load_part(s + j, n - j, -INFINITY), m);
	}
	V mx = v_set1(v_hmax(m)), sum = v_zero();
	for (j = 0; j < n8; j += 8) {
		V e = v_exp(v_sub(v_load(s + j), mx));
		v_store(s + j, e);
		sum = v_add(sum, e);
	}
	if (j < n) {
		V e = v_exp(v_sub(v_load_part(s + j, n - j, -INFINITY), mx));
		v_store_part(s + j, n - j, e);
		sum = v_add(sum, e); /* padding lanes add exp(-inf) = 0 */
	}
	V tot = v_set1(v_hsum(sum));
	for (j = 0; j < n8; j += 8)
		v_store(s + j, v_div(v_load(s + j), tot));
	if (j < n)
		v_store_part(s + j, n - j, v_div(v_load_part(s + j, n - j, 0), tot));
}

static void VK_ISA(att_task)(void *vc, int64_t task)
{
	const VK_ISA(att_ctx) *c = vc;
	int64_t d = c->d, G = c->hq / c->hkv, per = c->hkv * c->nhc;
	int64_t i = task / per, g = task % per / c->nhc, ci = task % c->nhc;
	int64_t h0 = g * G + ci * c->hc;
	int64_t H = (g + 1) * G - h0 < c->hc ? (g + 1) * G - h0 : c->hc;
	int64_t qp = c->qpos[i], lo = 0, hi = qp < c->nk - 1 ? qp : c->nk - 1;
	if (c->window > 0 && qp - c->window + 1 > lo)
		lo = qp - c->window + 1;
	float *o = c->out + (i * c->hq + h0) * d;
	if (hi < lo) {
		memset(o, 0, (size_t)(H * d) * sizeof(float));
		return;
	}
	int64_t nkeys = hi - lo + 1, ldk = c->hkv * d;
	float *sc = vk_scratch(1, (size_t)(H * nkeys) * sizeof(float));
	/* Prefetch when K and V are too big to stay in cache between calls. */
	int pf = nkeys * ldk > (1 << 18);
	const float *kb = c->k + (lo * c->hkv + g) * d;
	/* Keys in chunks, prefetching ahead: strided rows defeat the hardware
	 * prefetchers. Chunking changes no dot product. */
	for (int64_t j0 = 0; j0 < nkeys; j0 += ATT_KC) {
		int64_t nj = nkeys - j0 < ATT_KC ? nkeys - j0 : ATT_KC;
		if (pf)
			att_prefetch(kb, ldk, j0 + ATT_PF, j0 + ATT_PF + ATT_KC, nkeys, d);
		VK_ISA(lin_block_f32)(c->q + (i * c->hq + h0) * d, d, H, kb + j0 * ldk,
		                      ldk, nj, sc + j0, nkeys, d);
	}
	for (int64_t h = 0; h < H; h++)
		VK_ISA(att_softmax)(sc + h * nkeys, nkeys, c->scale);
	const float *vb = c->v + (lo * c->hkv + g) * d;
#define ATT_PV(h, f)                                                       \
	case 2 * h + f:                                                        \
		VK_ISA(att_pv_all)(h, f, sc, nkeys, vb, ldk, nkeys, o, d);         \
		break;
	switch (2 * H + pf) {
		ATT_PV(4, 1)
		ATT_PV(4, 0)
		ATT_PV(3, 1)
		ATT_PV(3, 0)
		ATT_PV(2, 1)
		ATT_PV(2, 0)
		ATT_PV(1, 1)
		ATT_PV(1, 0)
	}
#undef ATT_PV
}

static void VK_ISA(attention)(float *out, const float *q, const float *k,
                              const float *v, const int32_t *qpos, int64_t nq,
                              int64_t nk, int64_t hq, int64_t hkv, int64_t d,
                              int64_t window, float scale)
{
	VK_ISA(att_ctx) c = {out, q, k, v, qpos, nq, nk, hq, hkv, d, window, scale,
	                     0, 0};
	int64_t G = hq / hkv;
	/* Heads of a group share their K/V reads; when that leaves fewer tasks
	 * than threads (decode), split groups. Grouping changes no result. */
	c.hc = G < 4 ? G : 4;
	while (c.hc > 1 && nq * hkv * ((G + c.hc - 1) / c.hc) < vk_pool_threads())
		c.hc = (c.hc + 1) / 2;
	c.nhc = (G + c.hc - 1) / c.hc;
	double keys = window > 0 && window < nk ? (double)window : (double)nk;
	vk_par(nq * hkv * c.nhc, 4.0 * (double)(nq * hq) * keys * (double)d,
	       VK_ISA(att_task), &c);
}

typedef struct {
	const float *k, *v; /* the segment's first visible key (head g) */
	int64_t n, off;     /* visible keys; their offset among all */
} VK_ISA(battn_seg);

/* ---- paged attention ----
 *
 * Keys live in blocks of a pool; a sequence's keys are a list of entries
 * (block, first position, count) in position order. A query sees its
 * sequence's keys up to itself, or up to qlim[i] when qlim is given
 * (window > 0: from the last window positions before its own on).
 * Entries that sit back to back in the pool are read as one segment.
 * Scores, softmax and the weighted sum of values are computed over the
 * segments in position order with exactly the arithmetic of vk_attention
 * over the concatenated keys (chunking changes no dot product; att_pv_acc
 * carries its sums across segments): the same result, bit for bit. */

typedef struct {
	const vk_paged_attn *p;
	int64_t hc, nhc;
} VK_ISA(pattn_ctx);

static void VK_ISA(pattn_task)(void *vc, int64_t task)
{
	const VK_ISA(pattn_ctx) *c = vc;
	const vk_paged_attn *p = c->p;
	int64_t d = p->d, G = p->hq / p->hkv, per = p->hkv * c->nhc;
	int64_t i = task / per, g = task % per / c->nhc, ci = task % c->nhc;
	int64_t h0 = g * G + ci * c->hc;
	int64_t H = (g + 1) * G - h0 < c->hc ? (g + 1) * G - h0 : c->hc;
	int64_t ldk = p->hkv * d;
	int64_t pos = p->qpos[i], lo = 0, s = p->qseq[i];
	int64_t lim = p->qlim ? p->qlim[i] : pos;
	if (p->window > 0 && pos - p->window + 1 > lo)
		lo = pos - p->window + 1;
	float *o = p->out + (i * p->hq + h0) * d;
	int64_t e0 = p->seq_ent[s], e1 = p->seq_ent[s + 1];
	VK_ISA(battn_seg) *seg =
		vk_scratch(2, (size_t)(e1 - e0 + 1) * sizeof(VK_ISA(battn_seg)));
	int64_t ns = 0, nkeys = 0;
	for (int64_t e = e0; e < e1; e++) {
		int64_t a = p->ent_pos[e], b = a + p->ent_len[e];
		int64_t first = a > lo ? a : lo, last = b < lim + 1 ? b : lim + 1;
		if (last <= first)
			continue;
		const float *kp =
			p->k + (p->ent_blk[e] * p->block + (first - a)) * ldk + g * d;
		const float *vp =
			p->v + (p->ent_blk[e] * p->block + (first - a)) * ldk + g * d;
		if (ns > 0 && seg[ns - 1].k + seg[ns - 1].n * ldk == kp &&
		    seg[ns - 1].v + seg[ns - 1].n * ldk == vp) {
			seg[ns - 1].n += last - first;
		} else {
			seg[ns].k = kp;
			seg[ns].v = vp;
			seg[ns].n = last - first;
			seg[ns].off = nkeys;
			ns++;
		}
		nkeys += last - first;
	}
	if (nkeys == 0) {
		memset(o, 0, (size_t)(H * d) * sizeof(float));
		return;
	}
	float *sc = vk_scratch(1, (size_t)(H * nkeys) * sizeof(float));
	int pf = nkeys * ldk > (1 << 18);
	const float *qv = p->q + (i * p->hq + h0) * d;
	for (int64_t t = 0; t < ns; t++) {
		for (int64_t j0 = 0; j0 < seg[t].n; j0 += ATT_KC) {
			int64_t nj = seg[t].n - j0 < ATT_KC ? seg[t].n - j0 : ATT_KC;
			if (pf)
				att_prefetch(seg[t].k, ldk, j0 + ATT_PF, j0 + ATT_PF + ATT_KC,
				             seg[t].n, d);
			VK_ISA(lin_block_f32)(qv, d, H, seg[t].k + j0 * ldk, ldk, nj,
			                      sc + seg[t].off + j0, nkeys, d);
		}
	}
	for (int64_t h = 0; h < H; h++)
		VK_ISA(att_softmax)(sc + h * nkeys, nkeys, p->scale);
	memset(o, 0, (size_t)(H * d) * sizeof(float));
	for (int64_t t = 0; t < ns; t++) {
		const float *ps = sc + seg[t].off;
#define PATT_PV(h, f)                                                      \
	case 2 * h + f:                                                        \
		VK_ISA(att_pv_acc)(h, f, ps, nkeys, seg[t].v, ldk, seg[t].n, o, d);  \
		break;
		switch (2 * H + pf) {
			PATT_PV(4, 1)
			PATT_PV(4, 0)
			PATT_PV(3, 1)
			PATT_PV(3, 0)
			PATT_PV(2, 1)
			PATT_PV(2, 0)
			PATT_PV(1, 1)
			PATT_PV(1, 0)
		}
#undef PATT_PV
	}
}

static void VK_ISA(paged_attention)(const vk_paged_attn *p)
{
	VK_ISA(pattn_ctx) c = {p, 0, 0};
	int64_t G = p->hq / p->hkv;
	c.hc = G < 4 ? G : 4;
	while (c.hc > 1 &&
	       p->nq * p->hkv * ((G + c.hc - 1) / c.hc) < vk_pool_threads())
		c.hc = (c.hc + 1) / 2;
	c.nhc = (G + c.hc - 1) / c.hc;
	double keys = (double)p->max_keys;
	if (p->window > 0 && (double)p->window < keys)
		keys = (double)p->window;
	vk_par(p->nq * p->hkv * c.nhc, 4.0 * (double)(p->nq * p->hq) * keys * (double)p->d,
	       VK_ISA(pattn_task), &c);
}
