/* backend_call.h: calls through a backend's table, for cgo (which cannot
 * call C function pointers itself). */
#ifndef VERDICT_BACKEND_CALL_H
#define VERDICT_BACKEND_CALL_H

#include "backend.h"

static inline void *vdc_alloc(vd_backend *b, size_t n) { return b->buffer.alloc(b, n); }
static inline void vdc_release(vd_backend *b, void *p, size_t n) { b->buffer.release(b, p, n); }
static inline void *vdc_bind(vd_backend *b, void *h, size_t n) { return b->buffer.bind(b, h, n); }
static inline void vdc_unbind(vd_backend *b, void *p, void *h, size_t n) { b->buffer.unbind(b, p, h, n); }
static inline vd_stream *vdc_stream_new(vd_backend *b) { return b->stream.stream_new(b); }
static inline void vdc_stream_free(vd_backend *b, vd_stream *s) { b->stream.stream_free(s); }
static inline void vdc_upload(vd_backend *b, vd_stream *s, void *d, const void *h, size_t n) { b->stream.upload(s, d, h, n); }
static inline void vdc_download(vd_backend *b, vd_stream *s, void *h, const void *d, size_t n) { b->stream.download(s, h, d, n); }
static inline void vdc_copy(vd_backend *b, vd_stream *s, void *d, const void *x, size_t n) { b->stream.copy(s, d, x, n); }
static inline int vdc_sync(vd_backend *b, vd_stream *s) { return b->stream.sync(s); }
static inline void vdc_linear(vd_backend *b, vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor w) { b->op.linear(s, y, x, w); }
static inline void vdc_linear_rows(vd_backend *b, vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor w, vd_tensor ids) { b->op.linear_rows(s, y, x, w, ids); }
static inline void vdc_sparse_mlp(vd_backend *b, vd_stream *s, vd_tensor y, vd_tensor g, vd_tensor h, vd_tensor idx, vd_tensor x, vd_tensor up, vd_tensor dt, float z) { b->op.sparse_mlp(s, y, g, h, idx, x, up, dt, z); }
static inline void vdc_rmsnorm(vd_backend *b, vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor w, int64_t dim, float eps) { b->op.rmsnorm(s, y, x, w, dim, eps); }
static inline void vdc_row_rms(vd_backend *b, vd_stream *s, vd_tensor o, vd_tensor x, int64_t dim, float fl) { b->op.row_rms(s, o, x, dim, fl); }
static inline void vdc_scale_rows(vd_backend *b, vd_stream *s, vd_tensor x, vd_tensor sc, int64_t dim) { b->op.scale_rows(s, x, sc, dim); }
static inline void vdc_mul_rows(vd_backend *b, vd_stream *s, vd_tensor x, vd_tensor w) { b->op.mul_rows(s, x, w); }
static inline void vdc_sparse_gelu_mul(vd_backend *b, vd_stream *s, vd_tensor g, vd_tensor u, int64_t dim, float z) { b->op.sparse_gelu_mul(s, g, u, dim, z); }
static inline void vdc_ew(vd_backend *b, vd_stream *s, int op, vd_tensor y, vd_tensor a, vd_tensor x, float c) { b->op.ew(s, op, y, a, x, c); }
static inline void vdc_rope(vd_backend *b, vd_stream *s, vd_tensor x, vd_tensor pos, int64_t h, int64_t hd, vd_tensor f) { b->op.rope(s, x, pos, h, hd, f); }
static inline void vdc_altup_predict(vd_backend *b, vd_stream *s, vd_tensor p, vd_tensor h, vd_tensor c, int64_t n, int64_t d) { b->op.altup_predict(s, p, h, c, n, d); }
static inline void vdc_altup_correct(vd_backend *b, vd_stream *s, vd_tensor o, vd_tensor p, vd_tensor a, vd_tensor c, int64_t n, int64_t d) { b->op.altup_correct(s, o, p, a, c, n, d); }
static inline void vdc_attention(vd_backend *b, vd_stream *s, vd_attn a) { b->op.attention(s, &a); }
static inline void vdc_embed(vd_backend *b, vd_stream *s, vd_tensor y, vd_tensor t, vd_tensor ids, float sc) { b->op.embed(s, y, t, ids, sc); }
static inline void vdc_gather(vd_backend *b, vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor idx) { b->op.gather(s, y, x, idx); }
static inline void vdc_scatter(vd_backend *b, vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor idx) { b->op.scatter(s, y, x, idx); }
static inline void vdc_copy2d(vd_backend *b, vd_stream *s, vd_tensor y, int64_t ys, vd_tensor x, int64_t xs, int64_t r, int64_t c) { b->op.copy2d(s, y, ys, x, xs, r, c); }
static inline void vdc_logsumexp(vd_backend *b, vd_stream *s, vd_tensor o, vd_tensor x) { b->op.logsumexp(s, o, x); }
static inline void vdc_argmax(vd_backend *b, vd_stream *s, vd_tensor o, vd_tensor x) { b->op.argmax(s, o, x); }
static inline void vdc_select(vd_backend *b, vd_stream *s, vd_tensor o, vd_tensor x, vd_tensor r, vd_tensor c) { b->op.select(s, o, x, r, c); }
static inline void vdc_sample(vd_backend *b, vd_stream *s, vd_tensor o, vd_tensor x, vd_sampling p) { b->op.sample(s, o, x, p); }
static inline void vdc_norm_add(vd_backend *b, vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor w, vd_tensor a, vd_tensor bb, int64_t dim, float eps, float c) { b->op.norm_add(s, y, x, w, a, bb, dim, eps, c); }
static inline void vdc_router(vd_backend *b, vd_stream *s, vd_tensor y, vd_tensor f, vd_tensor x, vd_tensor nw, vd_tensor w, int64_t dim, float eps, float sc) { b->op.router(s, y, f, x, nw, w, dim, eps, sc); }
static inline int vdc_info(vd_backend *b, vd_info *o) { return b->device.info(b, o); }
static inline int vdc_limits(vd_backend *b, vd_limits *o) { return b->device.limits(b, o); }
static inline int vdc_graph_begin(vd_backend *b, vd_stream *s) { return b->stream.graph_begin(s); }
static inline void *vdc_graph_end(vd_backend *b, vd_stream *s) { return b->stream.graph_end(s); }
static inline void vdc_graph_run(vd_backend *b, vd_stream *s, void *g) { b->stream.graph_run(s, g); }
static inline void vdc_graph_free(vd_backend *b, void *g) { b->stream.graph_free(b, g); }
static inline int vdc_grammar_bind(vd_backend *b, const vd_grammar *g, vd_gram **o) { return b->op.grammar_bind(b, g, o); }
static inline void vdc_grammar_free(vd_backend *b, vd_gram *g) { b->op.grammar_free(b, g); }
static inline void vdc_catalog_init(vd_backend *b, vd_stream *s, vd_gram *g, vd_cat_step c) { b->op.catalog_init(s, g, &c); }
static inline void vdc_catalog_step(vd_backend *b, vd_stream *s, vd_gram *g, vd_cat_step c) { b->op.catalog_step(s, g, &c); }
static inline int vdc_loop_begin(vd_backend *b, vd_stream *s) { return b->stream.loop_begin(s); }
static inline void vdc_loop_while(vd_backend *b, vd_stream *s, vd_tensor c, vd_tensor it, int64_t lim) { b->stream.loop_while(s, c, it, lim); }
static inline void vdc_loop_rows(vd_backend *b, vd_stream *s, vd_loop_rows r) { b->op.loop_rows(s, &r); }
static inline void vdc_loop_emit(vd_backend *b, vd_stream *s, vd_loop_emit e) { b->op.loop_emit(s, &e); }
static inline void vdc_altup_predict_step(vd_backend *b, vd_stream *s, vd_altup a) { b->op.altup_predict_step(s, &a); }
static inline void vdc_altup_correct_step(vd_backend *b, vd_stream *s, vd_altup a) { b->op.altup_correct_step(s, &a); }
static inline void vdc_norm_ropes(vd_backend *b, vd_stream *s, vd_norm_ropes r) { b->op.norm_ropes(s, &r); }
static inline void vdc_norm_add_more(vd_backend *b, vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor w, vd_tensor a, vd_tensor bb, vd_tensor bw, vd_tensor ba, int64_t dim, float eps, float c, vd_tensor rep, vd_tensor f, vd_tensor fw) { b->op.norm_add_more(s, y, x, w, a, bb, bw, ba, dim, eps, c, rep, f, fw); }
static inline void vdc_router_coef(vd_backend *b, vd_stream *s, vd_tensor y, vd_tensor f, vd_tensor x, vd_tensor nw, vd_tensor w, int64_t dim, float eps, float sc, vd_tensor cw, vd_tensor cy, float add, int has) { b->op.router_coef(s, y, f, x, nw, w, dim, eps, sc, cw, cy, add, has); }
static inline void vdc_norm_rope(vd_backend *b, vd_stream *s, vd_tensor y, vd_tensor idx, vd_tensor x, vd_tensor w, float eps, vd_tensor pos, int64_t h, int64_t hd, vd_tensor f) { b->op.norm_rope(s, y, idx, x, w, eps, pos, h, hd, f); }
static inline void vdc_pointwise(vd_backend *b, vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor w) { b->op.pointwise(s, y, x, w); }
static inline void vdc_conv2d(vd_backend *b, vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor w, vd_tensor bias, vd_conv g) { b->op.conv2d(s, y, x, w, bias, &g); }
static inline void vdc_dwconv2d(vd_backend *b, vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor w, vd_conv g) { b->op.dwconv2d(s, y, x, w, &g); }
static inline void vdc_norm_act(vd_backend *b, vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor w, vd_tensor g, vd_tensor r, int64_t dim, float eps, int gelu) { b->op.norm_act(s, y, x, w, g, r, dim, eps, gelu); }
static inline void vdc_avgpool2d(vd_backend *b, vd_stream *s, vd_tensor y, vd_tensor x, int64_t h, int64_t w, int64_t c, int64_t k) { b->op.avgpool2d(s, y, x, h, w, c, k); }
static inline void vdc_upsample_concat(vd_backend *b, vd_stream *s, vd_tensor y, vd_tensor a, vd_tensor x, int64_t h, int64_t w, int64_t bh, int64_t bw) { b->op.upsample_concat(s, y, a, x, h, w, bh, bw); }
static inline void vdc_transpose(vd_backend *b, vd_stream *s, vd_tensor y, vd_tensor x) { b->op.transpose(s, y, x); }
static inline void vdc_mqa(vd_backend *b, vd_stream *s, vd_tensor o, vd_tensor q, vd_tensor k, vd_tensor v, int64_t h, float sc) { b->op.mqa(s, o, q, k, v, h, sc); }
static inline void vdc_im2col(vd_backend *b, vd_stream *s, vd_tensor y, vd_tensor x, vd_conv g, int64_t kh, int64_t kw, int64_t sw) { b->op.im2col(s, y, x, &g, kh, kw, sw); }
static inline void vdc_cum_group_norm_relu(vd_backend *b, vd_stream *s, vd_tensor x, vd_tensor w, float eps) { b->op.cum_group_norm_relu(s, x, w, eps); }
static inline void vdc_local_attention(vd_backend *b, vd_stream *s, vd_tensor o, vd_tensor q, vd_tensor k, vd_tensor v, vd_tensor pos, vd_tensor valid, int64_t h, int64_t past, int64_t fut, float cap) { b->op.local_attention(s, o, q, k, v, pos, valid, h, past, fut, cap); }
static inline void vdc_dwconv_causal(vd_backend *b, vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor w) { b->op.dwconv_causal(s, y, x, w); }
static inline void vdc_glu(vd_backend *b, vd_stream *s, vd_tensor y, vd_tensor x) { b->op.glu(s, y, x); }
static inline void vdc_silu(vd_backend *b, vd_stream *s, vd_tensor y, vd_tensor x) { b->op.silu(s, y, x); }
static inline void vdc_clip(vd_backend *b, vd_stream *s, vd_tensor y, vd_tensor x, float lim) { b->op.clip(s, y, x, lim); }
static inline void vdc_clamp(vd_backend *b, vd_stream *s, vd_tensor y, vd_tensor x, float lo, float hi) { b->op.clamp(s, y, x, lo, hi); }
static inline void vdc_linears(vd_backend *b, vd_stream *s, vd_linears l) { b->op.linears(s, &l); }
static inline void vdc_tower_linear(vd_backend *b, vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor w) { b->op.tower_linear(s, y, x, w); }
static inline void vdc_prefetch(vd_backend *b, vd_stream *s, vd_prefetch p) { b->op.prefetch(s, &p); }

#endif
