/*
 * cpu_catalog.c: the CPU backend's catalog step (backend.h, vd_cat_step).
 *
 * A bound grammar is its flat image (catalog_walk.h) in host memory. The
 * step runs sequence by sequence, in call order: the legal set of the
 * node, the logits of those tokens through the backend's own linear_rows
 * and softcap (each value the dense head's, bit for bit), the first
 * largest logit, the walk's advance. engine/catalog's State and Pick are
 * the reference; its tests compare the two on every step.
 */
#include "../backend.h"
#include "../catalog_walk.h"

#include <stdlib.h>
#include <string.h>

struct vd_gram {
	vd_gram_layout l;
	int32_t *img;
};

int vd_cpu_grammar_bind(vd_backend *b, const vd_grammar *g, vd_gram **out)
{
	(void)b;
	*out = NULL;
	int rc = vd_grammar_check(g);
	if (rc)
		return rc;
	vd_gram *h = calloc(1, sizeof *h);
	if (!h)
		return VD_CAT_EMEM;
	h->l = vd_gram_layout_of(g);
	h->img = malloc((size_t)(h->l.total + 1) * sizeof(int32_t));
	if (!h->img) {
		free(h);
		return VD_CAT_EMEM;
	}
	vd_gram_flatten(h->img, g, h->l);
	*out = h;
	return VD_CAT_OK;
}

void vd_cpu_grammar_free(vd_backend *b, vd_gram *g)
{
	(void)b;
	if (g) {
		free(g->img);
		free(g);
	}
}

static int64_t at(vd_tensor t, int64_t i)
{
	return t.data ? ((const int32_t *)t.data)[i] : i;
}

void vd_cpu_catalog_init(vd_stream *s, vd_gram *g, const vd_cat_step *c)
{
	(void)s;
	const vd_gram_layout *l = &g->l;
	for (int64_t i = 0; i < c->n; i++) {
		int64_t sl = at(c->slot, i);
		int32_t *sq = (int32_t *)c->seq.data + sl * VD_SEQ_FIELDS;
		memset(sq, 0, VD_SEQ_FIELDS * sizeof(int32_t));
		int32_t k = ((const int32_t *)c->k.data)[i];
		sq[VD_SEQ_K] = k;
		sq[VD_SEQ_BEST] = sq[VD_SEQ_ENTRY] = sq[VD_SEQ_ENODE] = -1;
		if (k < 1 || k > l->entries || k > c->emitted.cols)
			sq[VD_SEQ_ERR] = VD_CAT_EFULL;
		memset((int32_t *)c->banned.data + sl * 2 * l->words, 0, (size_t)(2 * l->words) * sizeof(int32_t));
		int32_t *em = (int32_t *)c->emitted.data + sl * c->emitted.cols;
		for (int64_t j = 0; j < c->emitted.cols; j++)
			em[j] = -1;
		if (c->counts)
			memcpy((int32_t *)c->live.data + sl * l->edges, g->img + l->count, (size_t)l->edges * sizeof(int32_t));
		((int32_t *)c->next.data)[sl] = -1;
	}
}

/* live_edge: token edge e has an unemitted entry below it. */
static int live_edge(const vd_gram *g, const vd_cat_step *c, int64_t sl, int32_t e)
{
	const vd_gram_layout *l = &g->l;
	if (c->counts)
		return ((const int32_t *)c->live.data)[sl * l->edges + e] > 0;
	const int32_t *m = g->img + l->mask + 2 * (int64_t)e * l->words;
	const int32_t *bn = (const int32_t *)c->banned.data + sl * 2 * l->words;
	for (int32_t w = 0; w < 2 * l->words; w++)
		if (m[w] & ~bn[w])
			return 1;
	return 0;
}

static int spent(const vd_gram *g, const vd_cat_step *c, int64_t sl, int32_t end)
{
	const int32_t *bn = (const int32_t *)c->banned.data + sl * 2 * g->l.words;
	return (bn[end / 32] >> (end % 32)) & 1;
}

/* legal_edge: edge e of node n is in the walk's legal set. */
static int legal_edge(const vd_gram *g, const vd_cat_step *c, int64_t sl, const int32_t *sq, int32_t n, int32_t e)
{
	const vd_gram_layout *l = &g->l;
	int32_t ch = g->img[l->child + e];
	if (ch >= 0)
		return live_edge(g, c, sl, e);
	int32_t end = g->img[l->ends + n];
	int last = sq[VD_SEQ_NEMIT] + 1 == sq[VD_SEQ_K];
	return end >= 0 && !spent(g, c, sl, end) && (ch == VD_CHILD_STOP) == last;
}

static void set_err(int32_t *sq, int code, int32_t node)
{
	sq[VD_SEQ_ERR] = code;
	sq[VD_SEQ_ENODE] = node;
}

void vd_cpu_catalog_step(vd_stream *s, vd_gram *g, const vd_cat_step *c)
{
	const vd_gram_layout *l = &g->l;
	vd_backend *b = vd_cpu_backend();
	int64_t D = c->h.cols;
	for (int64_t i = 0; i < c->n; i++) {
		int64_t sl = at(c->slot, i), hr = at(c->hrow, i);
		int32_t *sq = (int32_t *)c->seq.data + sl * VD_SEQ_FIELDS;
		if (sq[VD_SEQ_DONE] || sq[VD_SEQ_ERR])
			continue;
		int32_t node = sq[VD_SEQ_NODE];
		if (node < 0 || node >= l->nodes) {
			set_err(sq, VD_CAT_ETRIE, node);
			continue;
		}
		int32_t *tok = (int32_t *)c->legal.data + sl * 2 * VD_CAT_MAX_EDGES;
		int32_t *edg = tok + VD_CAT_MAX_EDGES;
		int32_t nl = 0, bad = 0;
		for (int32_t e = g->img[l->first + node]; e < g->img[l->first + node + 1]; e++)
			if (legal_edge(g, c, sl, sq, node, e)) {
				tok[nl] = g->img[l->token + e];
				edg[nl++] = e;
				bad |= tok[nl - 1] >= c->w.rows;
			}
		sq[VD_SEQ_NLEGAL] = nl;
		if (nl == 0) {
			set_err(sq, VD_CAT_EEMPTY, node);
			continue;
		}
		if (bad) {
			set_err(sq, VD_CAT_ETRIE, node);
			continue;
		}
		/* The sparse head: the dense head's arithmetic on the legal rows. */
		float *lg = (float *)c->logits.data + sl * VD_CAT_MAX_EDGES;
		vd_tensor y = {lg, NULL, VD_F32, 0, 1, nl};
		vd_tensor x = c->h;
		x.data = (float *)c->h.data + hr * D;
		x.rows = 1;
		vd_tensor ids = {tok, NULL, VD_I32, 0, 1, nl};
		b->op.linear_rows(s, y, x, c->w, ids);
		if (c->softcap > 0)
			b->op.ew(s, VD_EW_SOFTCAP, y, y, y, c->softcap);
		int32_t best = 0, nan = 0;
		for (int32_t j = 0; j < nl; j++) {
			nan |= lg[j] != lg[j];
			if (lg[j] > lg[best])
				best = j;
		}
		if (nan) {
			set_err(sq, VD_CAT_ENAN, node);
			continue;
		}
		int32_t e = edg[best], ch = g->img[l->child + e];
		if (!legal_edge(g, c, sl, sq, node, e)) {
			set_err(sq, VD_CAT_EEDGE, node);
			continue;
		}
		sq[VD_SEQ_BEST] = best;
		sq[VD_SEQ_STEP]++;
		((int32_t *)c->next.data)[sl] = tok[best];
		if (ch >= 0) {
			sq[VD_SEQ_NODE] = ch;
			sq[VD_SEQ_ENTRY] = -1;
			continue;
		}
		int32_t end = g->img[l->ends + node];
		if (sq[VD_SEQ_NEMIT] >= c->emitted.cols) {
			set_err(sq, VD_CAT_EFULL, node);
			continue;
		}
		((int32_t *)c->emitted.data)[sl * c->emitted.cols + sq[VD_SEQ_NEMIT]++] = end;
		((int32_t *)c->banned.data)[sl * 2 * l->words + end / 32] |= (int32_t)(1u << (end % 32));
		if (c->counts) {
			int32_t *lv = (int32_t *)c->live.data + sl * l->edges;
			for (int32_t p = g->img[l->path_first + end]; p < g->img[l->path_first + end + 1]; p++)
				lv[g->img[l->path + p]]--;
		}
		sq[VD_SEQ_ENTRY] = end;
		sq[VD_SEQ_NODE] = 0;
		sq[VD_SEQ_DONE] = ch == VD_CHILD_STOP;
	}
	if (c->running.data) {
		int32_t n = 0;
		for (int64_t i = 0; i < c->n; i++) {
			const int32_t *sq = (const int32_t *)c->seq.data + at(c->slot, i) * VD_SEQ_FIELDS;
			n += !sq[VD_SEQ_DONE] && !sq[VD_SEQ_ERR];
		}
		*(int32_t *)c->running.data = n;
	}
}
