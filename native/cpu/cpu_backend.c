/*
 * cpu_backend.c: the CPU backend's function table (backend.h) over the
 * kernels of kernels.h.
 *
 * Memory is host memory: alloc maps anonymous pages (scratch committed at
 * once, the key/value pool when first written), bind uses the caller's
 * memory in place. A stream runs each
 * operation when it is enqueued, on the kernel thread pool; sync has
 * nothing to wait for.
 *
 * Exactness: every result is the kernels' (kernels.h): dot products summed
 * in 16 lanes with fresh lane sums per 512-column block and a fixed tree,
 * every output element computed by one thread in an order fixed by the
 * shapes, so results do not depend on the thread count, the SIMD level or
 * the batch a row sits in.
 */
#include "cpu_internal.h"

#include "../backend.h"
#include "cpu_tower.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

struct vd_stream {
	vd_backend *b;
};

static int64_t elems(vd_tensor t) { return t.rows * t.cols; }
static int lg2(int64_t g)
{
	int l = 0;
	while ((1LL << l) < g)
		l++;
	return l;
}

/* Allocations up to this size (scratch) are committed at once, so that no
 * forward pass pays for first touches; larger ones (the key/value pool) are
 * reserved and committed page by page as they are written. */
#define CPU_POPULATE_MAX ((size_t)1 << 30)

static void *cpu_alloc(vd_backend *b, size_t bytes)
{
	(void)b;
	if (bytes == 0)
		bytes = 64;
	int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
#ifdef MAP_POPULATE
	if (bytes <= CPU_POPULATE_MAX)
		flags |= MAP_POPULATE;
#endif
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, flags, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

static void cpu_release(vd_backend *b, void *p, size_t bytes)
{
	(void)b;
	if (p)
		munmap(p, bytes ? bytes : 64);
}

static void *cpu_bind(vd_backend *b, void *host, size_t bytes)
{
	(void)b;
	(void)bytes;
	return host;
}

static void cpu_unbind(vd_backend *b, void *p, void *host, size_t bytes)
{
	(void)b;
	(void)p;
	(void)host;
	(void)bytes;
}

static vd_stream *cpu_stream_new(vd_backend *b)
{
	vd_stream *s = calloc(1, sizeof *s);
	if (s)
		s->b = b;
	return s;
}

static void cpu_stream_free(vd_stream *s) { free(s); }

static void cpu_move(vd_stream *s, void *dst, const void *src, size_t n)
{
	(void)s;
	if (n)
		memmove(dst, src, n);
}

static int cpu_sync(vd_stream *s)
{
	(void)s;
	return 0;
}

static void cpu_linear(vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor w)
{
	(void)s;
	switch (w.dtype) {
	case VD_F32:
		vk_linear_f32(y.data, x.data, w.data, x.rows, w.rows, w.cols);
		break;
	case VD_BF16:
		vk_linear_bf16(y.data, x.data, w.data, x.rows, w.rows, w.cols);
		break;
	case VD_Q4:
		vk_linear_q4(y.data, x.data, w.data, w.aux, x.rows, w.rows, w.cols,
		             lg2(w.group));
		break;
	}
}

/* cpu_linear_rows gathers the rows into per-thread scratch and runs Linear
 * over them: each value is Linear's at that row, bit for bit. */
static void cpu_linear_rows(vd_stream *s, vd_tensor y, vd_tensor x,
                            vd_tensor w, vd_tensor ids)
{
	int64_t k = elems(ids), C = w.cols;
	const int32_t *r = ids.data;
	vd_tensor sub = w;
	sub.rows = k;
	switch (w.dtype) {
	case VD_F32: {
		float *d = vk_scratch(4, (size_t)(k * C) * sizeof(float));
		for (int64_t j = 0; j < k; j++)
			memcpy(d + j * C, (const float *)w.data + r[j] * C,
			       (size_t)C * sizeof(float));
		sub.data = d;
		break;
	}
	case VD_BF16: {
		uint16_t *d = vk_scratch(4, (size_t)(k * C) * sizeof(uint16_t));
		for (int64_t j = 0; j < k; j++)
			memcpy(d + j * C, (const uint16_t *)w.data + r[j] * C,
			       (size_t)C * sizeof(uint16_t));
		sub.data = d;
		break;
	}
	case VD_Q4: {
		int64_t qb = C / 2, sf = 2 * (C / w.group);
		uint8_t *q = vk_scratch(4, (size_t)(k * qb));
		float *so = vk_scratch(5, (size_t)(k * sf) * sizeof(float));
		for (int64_t j = 0; j < k; j++) {
			memcpy(q + j * qb, (const uint8_t *)w.data + r[j] * qb, (size_t)qb);
			memcpy(so + j * sf, (const float *)w.aux + r[j] * sf,
			       (size_t)sf * sizeof(float));
		}
		sub.data = q;
		sub.aux = so;
		break;
	}
	}
	cpu_linear(s, y, x, sub);
}

static void cpu_sparse_mlp(vd_stream *s, vd_tensor y, vd_tensor g, vd_tensor h,
                           vd_tensor idx, vd_tensor x, vd_tensor up,
                           vd_tensor dt, float z)
{
	(void)s;
	int64_t n = x.rows;
	int32_t *cnt = vk_scratch(6, (size_t)(2 * n + 1) * sizeof(int32_t));
	vk_sparse_mlp_q4(y.data, g.data, h.data, idx.data, cnt, cnt + n, x.data,
	                 up.data, up.aux, dt.data, dt.aux, n, up.rows, up.cols, z,
	                 lg2(up.group));
}

static void cpu_rmsnorm(vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor w,
                        int64_t dim, float eps)
{
	(void)s;
	vk_rmsnorm(y.data, x.data, w.data, elems(x) / dim, dim, eps);
}

static void cpu_row_rms(vd_stream *s, vd_tensor out, vd_tensor x, int64_t dim,
                        float floor)
{
	(void)s;
	vk_row_rms(out.data, x.data, elems(out), dim, floor);
}

static void cpu_scale_rows(vd_stream *s, vd_tensor x, vd_tensor sc, int64_t dim)
{
	(void)s;
	vk_scale_rows(x.data, sc.data, elems(sc), dim);
}

static void cpu_mul_rows(vd_stream *s, vd_tensor x, vd_tensor w)
{
	(void)s;
	vk_mul_rows(x.data, w.data, elems(x) / elems(w), elems(w));
}

static void cpu_sparse_gelu_mul(vd_stream *s, vd_tensor g, vd_tensor u,
                                int64_t dim, float z)
{
	(void)s;
	vk_sparse_gelu_mul(g.data, u.data, elems(g) / dim, dim, z);
}

static void cpu_ew(vd_stream *s, int op, vd_tensor y, vd_tensor a, vd_tensor b,
                   float c)
{
	(void)s;
	int64_t n = elems(y);
	float *yd = y.data;
	const float *ad = a.data, *bd = b.data;
	switch (op) {
	case VD_EW_GELU:
		if (yd != ad)
			memmove(yd, ad, (size_t)n * sizeof(float));
		vk_gelu_tanh(yd, n);
		break;
	case VD_EW_GELU_MUL:
		if (yd != ad)
			memmove(yd, ad, (size_t)n * sizeof(float));
		vk_gelu_mul(yd, bd, n);
		break;
	case VD_EW_SOFTCAP:
		if (yd != ad)
			memmove(yd, ad, (size_t)n * sizeof(float));
		vk_softcap(yd, n, c);
		break;
	case VD_EW_TANH:
		if (yd != ad)
			memmove(yd, ad, (size_t)n * sizeof(float));
		vk_tanh(yd, n);
		break;
	case VD_EW_ADD:
		vk_add(yd, ad, bd, n);
		break;
	case VD_EW_MUL:
		vk_mul(yd, ad, bd, n);
		break;
	case VD_EW_DIV:
		vk_div(yd, ad, bd, n);
		break;
	case VD_EW_ADD_CONST:
		if (yd != ad)
			memmove(yd, ad, (size_t)n * sizeof(float));
		vk_add_const(yd, n, c);
		break;
	case VD_EW_SCALE:
		if (yd != ad)
			memmove(yd, ad, (size_t)n * sizeof(float));
		vk_scale(yd, n, c);
		break;
	case VD_EW_ADD_SCALED:
		if (yd != ad)
			memmove(yd, ad, (size_t)n * sizeof(float));
		vk_add_scaled(yd, bd, n, c);
		break;
	case VD_EW_ADD_REP:
	case VD_EW_MUL_REP: {
		int64_t nb = elems(b);
		for (int64_t i0 = 0; i0 < n; i0 += nb) {
			int64_t m = n - i0 < nb ? n - i0 : nb;
			if (op == VD_EW_ADD_REP)
				vk_add(yd + i0, ad + i0, bd, m);
			else
				vk_mul(yd + i0, ad + i0, bd, m);
		}
		break;
	}
	}
}

static void cpu_rope(vd_stream *s, vd_tensor x, vd_tensor pos, int64_t heads,
                     int64_t head_dim, vd_tensor inv_freq)
{
	(void)s;
	vk_rope(x.data, pos.data, elems(pos), heads, head_dim, inv_freq.data);
}

static void cpu_altup_predict(vd_stream *s, vd_tensor pred, vd_tensor h,
                              vd_tensor coef, int64_t n, int64_t d)
{
	(void)s;
	vk_altup_predict(pred.data, h.data, coef.data, n, d);
}

static void cpu_altup_correct(vd_stream *s, vd_tensor out, vd_tensor pred,
                              vd_tensor act, vd_tensor c, int64_t n, int64_t d)
{
	(void)s;
	vk_altup_correct(out.data, pred.data, act.data, c.data, n, d);
}

static void cpu_attention(vd_stream *s, const vd_attn *a)
{
	(void)s;
	vk_paged_attn p = {a->out.data,     a->q.data,       a->k.data,
	                   a->v.data,       a->qpos.data,    a->qseq.data,
	                   a->seq_ent.data, a->ent_blk.data, a->ent_pos.data,
	                   a->ent_len.data, a->q.rows,       a->hq,
	                   a->hkv,          a->d,            a->block,
	                   a->window,       a->max_keys,     a->scale,
	                   a->qlim.data};
	vk_paged_attention(&p);
}

static void cpu_embed(vd_stream *s, vd_tensor y, vd_tensor t, vd_tensor ids,
                      float scale)
{
	(void)s;
	int64_t n = elems(ids), C = t.cols;
	const int32_t *r = ids.data;
	float *out = y.data;
	for (int64_t i = 0; i < n; i++) {
		float *row = out + i * C;
		switch (t.dtype) {
		case VD_F32:
			memcpy(row, (const float *)t.data + r[i] * C, (size_t)C * sizeof(float));
			break;
		case VD_BF16:
			vk_bf16_to_f32(row, (const uint16_t *)t.data + r[i] * C, C);
			break;
		case VD_Q4: {
			int64_t ng = C / t.group;
			vk_q4_dequant(row, (const uint8_t *)t.data + r[i] * (C / 2),
			              (const float *)t.aux + r[i] * ng * 2, 1, C, lg2(t.group));
			break;
		}
		}
	}
	vk_scale(out, n * C, scale);
}

static void cpu_gather(vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor idx)
{
	(void)s;
	int64_t n = elems(idx), C = x.cols;
	const int32_t *r = idx.data;
	for (int64_t i = 0; i < n; i++)
		memcpy((float *)y.data + i * C, (const float *)x.data + r[i] * C,
		       (size_t)C * sizeof(float));
}

static void cpu_scatter(vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor idx)
{
	(void)s;
	int64_t n = elems(idx), C = x.cols;
	const int32_t *r = idx.data;
	for (int64_t i = 0; i < n; i++)
		memcpy((float *)y.data + r[i] * C, (const float *)x.data + i * C,
		       (size_t)C * sizeof(float));
}

static void cpu_copy2d(vd_stream *s, vd_tensor y, int64_t ys, vd_tensor x,
                       int64_t xs, int64_t rows, int64_t cols)
{
	(void)s;
	for (int64_t r = 0; r < rows; r++)
		memmove((float *)y.data + r * ys, (const float *)x.data + r * xs,
		        (size_t)cols * sizeof(float));
}

static void cpu_logsumexp(vd_stream *s, vd_tensor out, vd_tensor x)
{
	(void)s;
	vk_logsumexp(out.data, x.data, x.rows, x.cols);
}

static void cpu_argmax(vd_stream *s, vd_tensor out, vd_tensor x)
{
	(void)s;
	vk_argmax(out.data, x.data, x.rows, x.cols);
}

static void cpu_select(vd_stream *s, vd_tensor out, vd_tensor x, vd_tensor row,
                       vd_tensor col)
{
	(void)s;
	int64_t n = elems(row);
	const int32_t *r = row.data, *c = col.data;
	const float *xd = x.data;
	float *o = out.data;
	for (int64_t j = 0; j < n; j++)
		o[j] = xd[r[j] * x.cols + c[j]];
}

/* Sampling: candidates ordered by logit (ties: lower id first). */
static const float *cmp_logits;
static int cmp_desc(const void *a, const void *b)
{
	int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
	float x = cmp_logits[i], y = cmp_logits[j];
	if (x != y)
		return x > y ? -1 : 1;
	return i < j ? -1 : i > j;
}

/* select_k moves the k best of idx[0..n) to the front (quickselect). */
static void select_k(int32_t *idx, int64_t n, int64_t k)
{
	int64_t lo = 0, hi = n - 1;
	while (lo < hi) {
		int32_t p = idx[(lo + hi) / 2];
		int64_t i = lo, j = hi;
		while (i <= j) {
			while (cmp_desc(&idx[i], &p) < 0)
				i++;
			while (cmp_desc(&p, &idx[j]) < 0)
				j--;
			if (i <= j) {
				int32_t t = idx[i];
				idx[i] = idx[j];
				idx[j] = t;
				i++;
				j--;
			}
		}
		if (k - 1 <= j)
			hi = j;
		else if (k - 1 >= i)
			lo = i;
		else
			break;
	}
}

static void cpu_sample(vd_stream *s, vd_tensor out, vd_tensor x, vd_sampling p)
{
	(void)s;
	int64_t V = x.cols;
	float *l = x.data;
	int32_t *o = out.data;
	if (p.inv_temp == 0) {
		vk_argmax(o, l, 1, V);
		return;
	}
	vk_scale(l, V, p.inv_temp);
	int32_t *idx = vk_scratch(4, (size_t)V * sizeof(int32_t));
	for (int64_t i = 0; i < V; i++)
		idx[i] = (int32_t)i;
	int64_t k = V;
	if (p.top_k > 0 && p.top_k < k)
		k = p.top_k;
	/* The sampler is not reentrant across threads (cmp_logits); streams of
	 * one backend sample one at a time. */
	static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
	pthread_mutex_lock(&mu);
	cmp_logits = l;
	if (k < V)
		select_k(idx, V, k);
	qsort(idx, (size_t)k, sizeof(int32_t), cmp_desc);
	pthread_mutex_unlock(&mu);
	double *pr = vk_scratch(5, (size_t)k * sizeof(double));
	double mx = (double)l[idx[0]], sum = 0;
	for (int64_t i = 0; i < k; i++) {
		pr[i] = exp((double)l[idx[i]] - mx);
		sum += pr[i];
	}
	if (p.top_p > 0 && p.top_p < 1) {
		double cum = 0;
		for (int64_t i = 0; i < k; i++) {
			cum += pr[i] / sum;
			if (cum >= p.top_p) {
				k = i + 1;
				break;
			}
		}
		sum = 0;
		for (int64_t i = 0; i < k; i++)
			sum += pr[i];
	}
	double r = p.u * sum;
	for (int64_t i = 0; i < k; i++) {
		r -= pr[i];
		if (r < 0) {
			o[0] = idx[i];
			return;
		}
	}
	o[0] = idx[k - 1];
}

/* The fused row operations: the operations they stand for, one by one. */
static void cpu_norm_add(vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor w,
                         vd_tensor a, vd_tensor b, int64_t dim, float eps, float c)
{
	cpu_rmsnorm(s, x, x, w, dim, eps);
	cpu_ew(s, VD_EW_ADD, y, a, x, 0);
	if (b.data)
		cpu_ew(s, VD_EW_ADD_SCALED, y, y, b, c);
}

static void cpu_router(vd_stream *s, vd_tensor y, vd_tensor f, vd_tensor x,
                       vd_tensor norm_w, vd_tensor w, int64_t dim, float eps,
                       float scale)
{
	cpu_rmsnorm(s, f, x, norm_w, dim, eps);
	cpu_ew(s, VD_EW_SCALE, f, f, (vd_tensor){0}, scale);
	cpu_linear(s, y, f, w);
	cpu_ew(s, VD_EW_TANH, y, y, (vd_tensor){0}, 0);
}

/* The host describes and measures itself (native.HostProcessor, the
 * bench's limits): nothing here. */
static int cpu_info(vd_backend *b, vd_info *out)
{
	(void)b;
	memset(out, 0, sizeof *out);
	return 1;
}

static int cpu_limits(vd_backend *b, vd_limits *out)
{
	(void)b;
	memset(out, 0, sizeof *out);
	return 1;
}

/* The CPU runs operations as they are issued: nothing to record. */
static int cpu_graph_begin(vd_stream *s)
{
	(void)s;
	return -1;
}

static void *cpu_graph_end(vd_stream *s)
{
	(void)s;
	return NULL;
}

static void cpu_graph_run(vd_stream *s, void *g)
{
	(void)s;
	(void)g;
}

static void cpu_graph_free(vd_backend *b, void *g)
{
	(void)b;
	(void)g;
}
/* The CPU cannot record a loop: its caller runs the body from the host. */
static int cpu_loop_begin(vd_stream *s)
{
	(void)s;
	return -1;
}

static void cpu_loop_while(vd_stream *s, vd_tensor cond, vd_tensor iter, int64_t limit)
{
	(void)s;
	(void)cond;
	(void)iter;
	(void)limit;
}

static void cpu_loop_rows(vd_stream *s, const vd_loop_rows *r)
{
	(void)s;
	int32_t *it = (int32_t *)r->iter.data;
	const int32_t *ids = r->ids.data, *lut = r->lut.data, *pos0 = r->pos0.data;
	const int32_t *s0 = r->slots0.data, *s1 = r->slots1.data;
	int32_t *row = r->row.data, *pos = r->pos.data, *d0 = r->slot0.data, *d1 = r->slot1.data;
	int64_t t = it[0], ts = t < r->steps ? t : r->steps - 1, nl = r->lut.rows * r->lut.cols;
	for (int64_t i = 0; i < r->n; i++) {
		pos[i] = pos0[i] + (int32_t)t;
		d0[i] = s0[i * r->steps + ts];
		d1[i] = s1[i * r->steps + ts];
		row[i] = ids[i] >= 0 && ids[i] < nl ? lut[ids[i]] : 0;
	}
	it[0] = (int32_t)(t + 1);
}

static void cpu_loop_emit(vd_stream *s, const vd_loop_emit *e)
{
	(void)s;
	int64_t t = (int64_t)((const int32_t *)e->iter.data)[0] - 1, ns = e->stop.rows * e->stop.cols;
	const int32_t *ids = e->ids.data, *stop = e->stop.data;
	int32_t *out = e->out.data, *done = e->done.data, left = 0;
	for (int64_t i = 0; i < e->n; i++) {
		if (t >= 0 && t < e->steps)
			out[i * e->steps + t] = ids[i];
		for (int64_t k = 0; k < ns && !done[i]; k++)
			if (stop[k] >= 0 && stop[k] == ids[i])
				done[i] = 1;
		left += !done[i];
	}
	((int32_t *)e->cond.data)[0] = left;
}

static void cpu_norm_rope(vd_stream *s, vd_tensor y, vd_tensor idx, vd_tensor x, vd_tensor w, float eps,
                          vd_tensor pos, int64_t heads, int64_t head_dim, vd_tensor inv_freq)
{
	vd_tensor v = x;
	v.rows = elems(pos), v.cols = heads * head_dim;
	cpu_rmsnorm(s, v, v, w, head_dim, eps);
	if (inv_freq.data)
		cpu_rope(s, v, pos, heads, head_dim, inv_freq);
	if (y.data)
		cpu_scatter(s, y, v, idx);
}

static void cpu_router_coef(vd_stream *s, vd_tensor y, vd_tensor f, vd_tensor x, vd_tensor norm_w, vd_tensor w,
                            int64_t dim, float eps, float scale, vd_tensor cw, vd_tensor cy, float add, int has_add)
{
	cpu_router(s, y, f, x, norm_w, w, dim, eps, scale);
	cpu_linear(s, cy, y, cw);
	if (has_add)
		cpu_ew(s, VD_EW_ADD_CONST, cy, cy, (vd_tensor){0}, add);
}

/* A layer's row operations in fewer passes: the operations they stand
 * for, one by one (backend_ops.h). */
static vd_tensor rows_of(vd_tensor t, int64_t n, int64_t dim)
{
	t.rows = n, t.cols = dim;
	return t;
}

static void cpu_altup_predict_step(vd_stream *s, const vd_altup *a)
{
	if (a->pre.data) { /* the previous layer's per-layer input, to streams 1..3 */
		vd_tensor h1 = rows_of(a->h, a->n, a->dim), h23 = rows_of(a->h, 2 * a->n, a->dim);
		h1.data = (float *)a->h.data + a->n * a->dim;
		h23.data = (float *)a->h.data + 2 * a->n * a->dim;
		cpu_norm_add(s, h1, a->pre, a->pre_w, h1, (vd_tensor){0}, a->dim, a->eps, 0);
		cpu_ew(s, VD_EW_ADD_REP, h23, h23, a->pre, 0);
	}
	cpu_router_coef(s, a->y, a->f, a->x, a->norm_w, a->w, a->dim, a->eps, a->scale, a->cw, a->cy, a->add, a->has_add);
	cpu_altup_predict(s, a->pred, a->h, a->cy, a->n, a->dim);
	cpu_rmsnorm(s, rows_of(a->out, a->n, a->dim), rows_of(a->pred, a->n, a->dim), a->out_w, a->dim, a->eps);
}

static void cpu_altup_correct_step(vd_stream *s, const vd_altup *a)
{
	if (a->pre.data)
		cpu_norm_add(s, a->x, a->pre, a->pre_w, a->x, (vd_tensor){0}, a->dim, a->eps, 0);
	cpu_router_coef(s, a->y, a->f, a->x, a->norm_w, a->w, a->dim, a->eps, a->scale, a->cw, a->cy, a->add, a->has_add);
	cpu_altup_correct(s, a->h, a->pred, a->x, a->cy, a->n, a->dim);
	vd_tensor out = rows_of(a->out, a->n, a->dim), h0 = rows_of(a->h, a->n, a->dim);
	if (a->out_w.data)
		cpu_ew(s, VD_EW_MUL_REP, out, h0, rows_of(a->out_w, 1, a->dim), 0);
	else
		cpu_move(s, out.data, h0.data, (size_t)(a->n * a->dim) * sizeof(float));
}

static void cpu_norm_add_more(vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor w, vd_tensor a, vd_tensor b,
                              vd_tensor bw, vd_tensor ba, int64_t dim, float eps, float c, vd_tensor rep, vd_tensor f,
                              vd_tensor fw)
{
	if (ba.data)
		cpu_norm_add(s, b, b, bw, ba, (vd_tensor){0}, dim, eps, 0);
	cpu_norm_add(s, y, x, w, a, b, dim, eps, c);
	if (rep.data)
		cpu_ew(s, VD_EW_ADD_REP, rep, rep, x, 0);
	if (f.data)
		cpu_rmsnorm(s, f, y, fw, dim, eps);
}

static void cpu_norm_ropes(vd_stream *s, const vd_norm_ropes *r)
{
	for (int i = 0; i < r->nparts; i++) {
		const vd_norm_rope_part *p = &r->part[i];
		cpu_norm_rope(s, p->y, r->idx, p->x, p->w, r->eps, r->pos, p->heads, r->head_dim, p->inv_freq);
	}
}

static void cpu_linears(vd_stream *s, const vd_linears *l)
{
	for (int i = 0; i < l->nparts; i++) {
		cpu_linear(s, l->y[i], l->xs[i].data ? l->xs[i] : l->x, l->w[i]);
		if (l->gelu_mul[i].data && l->gelu_into[i])
			cpu_ew(s, VD_EW_GELU_MUL, l->gelu_mul[i], l->gelu_mul[i], l->y[i], 0);
		else if (l->gelu_mul[i].data)
			cpu_ew(s, VD_EW_GELU_MUL, l->y[i], l->y[i], l->gelu_mul[i], 0);
	}
}

/* cpu_prefetch: nothing (the weights are in host memory already). */
static void cpu_prefetch(vd_stream *s, const vd_prefetch *p)
{
	(void)s;
	(void)p;
}

/* The catalog step (cpu_catalog.c). */
int vd_cpu_grammar_bind(vd_backend *b, const vd_grammar *g, vd_gram **out);
void vd_cpu_grammar_free(vd_backend *b, vd_gram *g);
void vd_cpu_catalog_init(vd_stream *s, vd_gram *g, const vd_cat_step *c);
void vd_cpu_catalog_step(vd_stream *s, vd_gram *g, const vd_cat_step *c);

static vd_backend cpu = {
	.abi = VD_ABI,
	.name = "cpu",
	.buffer.alloc = cpu_alloc,
	.buffer.release = cpu_release,
	.buffer.bind = cpu_bind,
	.buffer.unbind = cpu_unbind,
	.stream.stream_new = cpu_stream_new,
	.stream.stream_free = cpu_stream_free,
	.stream.upload = cpu_move,
	.stream.download = cpu_move,
	.stream.copy = cpu_move,
	.stream.sync = cpu_sync,
	.op.linear = cpu_linear,
	.op.linear_rows = cpu_linear_rows,
	.op.sparse_mlp = cpu_sparse_mlp,
	.op.rmsnorm = cpu_rmsnorm,
	.op.row_rms = cpu_row_rms,
	.op.scale_rows = cpu_scale_rows,
	.op.mul_rows = cpu_mul_rows,
	.op.sparse_gelu_mul = cpu_sparse_gelu_mul,
	.op.ew = cpu_ew,
	.op.rope = cpu_rope,
	.op.altup_predict = cpu_altup_predict,
	.op.altup_correct = cpu_altup_correct,
	.op.attention = cpu_attention,
	.op.embed = cpu_embed,
	.op.gather = cpu_gather,
	.op.scatter = cpu_scatter,
	.op.copy2d = cpu_copy2d,
	.op.logsumexp = cpu_logsumexp,
	.op.argmax = cpu_argmax,
	.op.select = cpu_select,
	.op.sample = cpu_sample,
	.op.norm_add = cpu_norm_add,
	.op.router = cpu_router,
	.device.info = cpu_info,
	.device.limits = cpu_limits,
	.stream.graph_begin = cpu_graph_begin,
	.stream.graph_end = cpu_graph_end,
	.stream.graph_run = cpu_graph_run,
	.stream.graph_free = cpu_graph_free,
	.op.grammar_bind = vd_cpu_grammar_bind,
	.op.grammar_free = vd_cpu_grammar_free,
	.op.catalog_init = vd_cpu_catalog_init,
	.op.catalog_step = vd_cpu_catalog_step,
	.op.pointwise = vd_cpu_pointwise,
	.op.conv2d = vd_cpu_conv2d,
	.op.dwconv2d = vd_cpu_dwconv2d,
	.op.norm_act = vd_cpu_norm_act,
	.op.avgpool2d = vd_cpu_avgpool2d,
	.op.upsample_concat = vd_cpu_upsample_concat,
	.op.transpose = vd_cpu_transpose,
	.op.mqa = vd_cpu_mqa,
	.op.im2col = vd_cpu_im2col,
	.op.cum_group_norm_relu = vd_cpu_cum_group_norm_relu,
	.op.local_attention = vd_cpu_local_attention,
	.op.dwconv_causal = vd_cpu_dwconv_causal,
	.op.glu = vd_cpu_glu,
	.op.silu = vd_cpu_silu,
	.op.clip = vd_cpu_clip,
	.stream.loop_begin = cpu_loop_begin,
	.stream.loop_while = cpu_loop_while,
	.op.loop_rows = cpu_loop_rows,
	.op.loop_emit = cpu_loop_emit,
	.op.norm_rope = cpu_norm_rope,
	.op.router_coef = cpu_router_coef,
	.op.altup_predict_step = cpu_altup_predict_step,
	.op.altup_correct_step = cpu_altup_correct_step,
	.op.norm_add_more = cpu_norm_add_more,
	.op.norm_ropes = cpu_norm_ropes,
	.op.clamp = vd_cpu_clamp,
	.op.linears = cpu_linears,
	.op.prefetch = cpu_prefetch,
	.op.tower_linear = cpu_linear, /* the CPU's tower products are its linear */
};

vd_backend *vd_cpu_backend(void) { return &cpu; }
