/*
 * catalog_walk.h: what every backend's catalog step shares (backend.h,
 * vd_cat_step): the shape check of a compiled catalog before it is bound,
 * and the size of its flat image. Plain C, header only, so that the CUDA
 * library (built without the CPU sources) uses the same rules.
 */
#ifndef VERDICT_CATALOG_WALK_H
#define VERDICT_CATALOG_WALK_H

#include "backend.h"

#include <stddef.h>
#include <stdint.h>

/* vd_grammar_check returns VD_CAT_OK when g is a well-formed trie: sizes
 * that agree (words = ⌈entries/64⌉), first rising from 0 to edges with at
 * most VD_CAT_MAX_EDGES edges a node, children in range or a control
 * sentinel only at a node that ends an entry, tokens >= 0, ends and paths
 * naming entries and edges that exist; else VD_CAT_ESHAPE or VD_CAT_ETRIE.
 * Counts and masks are not checked against the paths: a trie whose counts
 * lie (a planted broken trie) binds, and its walks fail when they reach
 * the lie (VD_CAT_EEMPTY). */
static inline int vd_grammar_check(const vd_grammar *g)
{
	if (!g || g->nodes < 1 || g->edges < 0 || g->entries < 1 ||
	    g->words != (g->entries + 63) / 64 || !g->first || !g->ends ||
	    !g->path_first || (g->edges > 0 && (!g->token || !g->child || !g->count || !g->mask)))
		return VD_CAT_ESHAPE;
	if (g->first[0] != 0 || g->first[g->nodes] != g->edges)
		return VD_CAT_ESHAPE;
	for (int32_t n = 0; n < g->nodes; n++) {
		int32_t d = g->first[n + 1] - g->first[n];
		if (d < 0 || d > VD_CAT_MAX_EDGES)
			return VD_CAT_ESHAPE;
		if (g->ends[n] < -1 || g->ends[n] >= g->entries)
			return VD_CAT_ETRIE;
		for (int32_t e = g->first[n]; e < g->first[n + 1]; e++) {
			int32_t c = g->child[e];
			if (g->token[e] < 0 || c < VD_CHILD_STOP || c >= g->nodes)
				return VD_CAT_ETRIE;
			if (c < 0 && g->ends[n] < 0)
				return VD_CAT_ETRIE;
		}
	}
	if (g->path_first[0] != 0)
		return VD_CAT_ESHAPE;
	for (int32_t i = 0; i < g->entries; i++)
		if (g->path_first[i + 1] < g->path_first[i])
			return VD_CAT_ESHAPE;
	int32_t np = g->path_first[g->entries];
	if (np > 0 && !g->path)
		return VD_CAT_ESHAPE;
	for (int32_t p = 0; p < np; p++)
		if (g->path[p] < 0 || g->path[p] >= g->edges || g->child[g->path[p]] < 0)
			return VD_CAT_ETRIE;
	return VD_CAT_OK;
}

/* The flat image of a grammar: int32 words, the arrays one after another
 * (mask 8-byte aligned, as pairs of words: low, high). */
typedef struct {
	int32_t nodes, edges, entries, words;
	int64_t first, token, child, ends, count, mask, path_first, path, total;
} vd_gram_layout;

static inline vd_gram_layout vd_gram_layout_of(const vd_grammar *g)
{
	vd_gram_layout l;
	l.nodes = g->nodes;
	l.edges = g->edges;
	l.entries = g->entries;
	l.words = g->words;
	int64_t at = 0;
	l.first = at;
	at += g->nodes + 1;
	l.token = at;
	at += g->edges;
	l.child = at;
	at += g->edges;
	l.ends = at;
	at += g->nodes;
	l.count = at;
	at += g->edges;
	at += at & 1;
	l.mask = at;
	at += 2 * (int64_t)g->edges * g->words;
	l.path_first = at;
	at += g->entries + 1;
	l.path = at;
	at += g->path_first[g->entries];
	l.total = at;
	return l;
}

/* vd_gram_flatten writes g's image (l.total words) to dst. */
static inline void vd_gram_flatten(int32_t *dst, const vd_grammar *g, vd_gram_layout l)
{
	for (int64_t i = 0; i < l.total; i++)
		dst[i] = 0;
	for (int32_t i = 0; i <= g->nodes; i++)
		dst[l.first + i] = g->first[i];
	for (int32_t e = 0; e < g->edges; e++) {
		dst[l.token + e] = g->token[e];
		dst[l.child + e] = g->child[e];
		dst[l.count + e] = g->count[e];
	}
	for (int32_t n = 0; n < g->nodes; n++)
		dst[l.ends + n] = g->ends[n];
	for (int64_t w = 0; w < (int64_t)g->edges * g->words; w++) {
		dst[l.mask + 2 * w] = (int32_t)(uint32_t)(g->mask[w] & 0xffffffffu);
		dst[l.mask + 2 * w + 1] = (int32_t)(uint32_t)(g->mask[w] >> 32);
	}
	for (int32_t i = 0; i <= g->entries; i++)
		dst[l.path_first + i] = g->path_first[i];
	for (int32_t p = 0; p < g->path_first[g->entries]; p++)
		dst[l.path + p] = g->path[p];
}

#endif
