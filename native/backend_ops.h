/*
 * backend_ops.h: a backend's operations (part of backend.h): their
 * operand types and the table vd_ops, in which an entry may be NULL.
 *
 * A NULL entry is an operation the backend does not run: the caller runs
 * it on the CPU backend, with the copies that needs (package native's
 * Stream does it: the stream synchronised, the operation's tensors copied
 * to host memory, the CPU's operation, the tensors it writes copied back;
 * bound weights are read from the host memory they were bound from). So a
 * new backend can start with a few operations and add the rest one by
 * one. vd_supports (backend.h) says whether an entry is there; enum
 * vd_op names each entry by its index.
 *
 * The interface promises results to the accuracy of float32 arithmetic;
 * how each backend sums (and so whether two backends give the same bits)
 * is stated by that backend.
 */
#ifndef VERDICT_BACKEND_OPS_H
#define VERDICT_BACKEND_OPS_H

#include "backend_buffer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vd_grammar vd_grammar;     /* a compiled catalog, on the host */
typedef struct vd_gram vd_gram;           /* one bound to a backend */
typedef struct vd_cat_step vd_cat_step;   /* a catalog step's operands */
typedef struct vd_loop_rows vd_loop_rows; /* a device-driven decode step's rows */
typedef struct vd_loop_emit vd_loop_emit; /* a greedy loop step's bookkeeping */

/* vd_altup: the operands of AltUp's steps around a decoder layer
 * (altup_predict_step, altup_correct_step). The router reads x [n, dim]
 * (norm_w [dim], w [w.rows, dim], eps, scale; y [n, w.rows] its outputs,
 * f [n, dim] scratch); the coefficients are cy [n, cw.rows] = y · cwᵀ, + add
 * when has_add; h and pred are the streams and their prediction [4·n, dim];
 * out [n, dim] with out_w [dim] (NULL data: none) is the step's last
 * result. */
/* vd_norm_ropes: up to three norm_rope's of one batch's tokens in one
 * call (a layer's queries, keys and values): part i normalises x [n,
 * heads·head_dim] by w, rotates it by inv_freq and scatters it to y, as
 * norm_rope does, with pos, idx, eps and head_dim common. */
typedef struct {
	vd_tensor y, x, w, inv_freq;
	int64_t heads;
} vd_norm_rope_part;
typedef struct {
	vd_norm_rope_part part[3];
	int nparts;
	vd_tensor idx, pos;
	float eps;
	int64_t head_dim;
} vd_norm_ropes;

/* vd_linears: up to four products of one x [n, cols] (linears): part i is
 * y[i] = x·w[i]ᵀ with linear's bits (x: xs[i] where xs[i].data is set,
 * VD_ABI 19, of n rows too: a product of another input in the same
 * launch), then, when gelu_mul[i].data is set,
 * y[i] = gelu_tanh(y[i])·gelu_mul[i], or, with gelu_into[i] (VD_ABI 15),
 * gelu_mul[i] = gelu_tanh(gelu_mul[i])·y[i] (y[i] keeps the product: an
 * MLP's gate by its up product): ew gelu_mul's arithmetic on the stored
 * product; nparts of them (1 to 4), in part order (a gelu_mul may be an
 * earlier part's y: the MLP's gate, then its up product into it). */
typedef struct {
	vd_tensor x;
	vd_tensor y[4], w[4], gelu_mul[4];
	int gelu_into[4];
	int nparts;
	vd_tensor xs[4];
} vd_linears;

/* vd_prefetch: up to VD_PREFETCH_MAX tensors of immutable data (weights,
 * their q4 scales with them) that operations later on the stream will
 * read (prefetch). */
#define VD_PREFETCH_MAX 8
typedef struct {
	vd_tensor t[VD_PREFETCH_MAX];
	int n;
} vd_prefetch;

typedef struct {
	vd_tensor y, f, x, norm_w, w, cw, cy, h, pred, out, out_w;
	/* pre.data NULL: none. altup_correct_step: norm_add(x, pre, pre_w, x)
	 * first; altup_predict_step (VD_ABI 16): streams 1..3 of h +=
	 * rmsnorm(pre)·pre_w first (the previous layer's per-layer input). */
	vd_tensor pre, pre_w;
	float eps, scale, add;
	int has_add;
	int64_t n, dim;
} vd_altup;

/* Paged attention over a pool of key/value blocks (see vk_paged_attention
 * in kernels.h for the rules): k and v are the layer's pool [blocks·block,
 * hkv·d]; q and out [nq, hq·d]; the int32 tensors describe the sequences.
 * qlim (VD_ABI 13), when its data is not NULL, is [nq] int32: the last key
 * position each query sees (at least its own; the window still counts back
 * from qpos); NULL: its own position, causal. */
typedef struct {
	vd_tensor out, q, k, v;
	vd_tensor qpos, qseq, seq_ent, ent_blk, ent_pos, ent_len;
	int64_t hq, hkv, d, block, window, max_keys;
	float scale;
	vd_tensor qlim;
} vd_attn;

/* Elementwise operations (vd_ops.ew): y = f(a, b, c) over y's elements. */
enum {
	VD_EW_GELU,      /* y = gelu_tanh(a) */
	VD_EW_GELU_MUL,  /* y = gelu_tanh(a)·b */
	VD_EW_SOFTCAP,   /* y = c·tanh(a/c) */
	VD_EW_TANH,      /* y = tanh(a) */
	VD_EW_ADD,       /* y = a + b */
	VD_EW_MUL,       /* y = a·b */
	VD_EW_DIV,       /* y = a/b */
	VD_EW_ADD_CONST, /* y = a + c */
	VD_EW_SCALE,     /* y = a·c */
	VD_EW_ADD_SCALED, /* y = (a + b)·c */
	VD_EW_ADD_REP,    /* y[i] = a[i] + b[i mod len(b)] */
	VD_EW_MUL_REP     /* y[i] = a[i]·b[i mod len(b)] */
};

/* A sampling request (vd_ops.sample): the token drawn from logits x
 * [1, vocab] scaled by inv_temp (1/temperature), then top-k and top-p (in
 * that order), with the uniform draw u in [0, 1); inv_temp 0 is the argmax
 * (temperature 0). */
typedef struct {
	float inv_temp;
	int64_t top_k;
	double top_p, u;
} vd_sampling;

/* The geometry of a 2-D convolution over a channels-last image (vd_ops
 * conv2d, dwconv2d): input [h, w, c], output [oh, ow, y.cols], a square
 * kernel k×k with stride and pad_t rows and pad_l columns of zeros before
 * the image (positions past its end read as zero too). */
typedef struct {
	int64_t h, w, c, oh, ow;
	int32_t k, stride, pad_t, pad_l;
} vd_conv;

/* The operations. Every entry may be NULL (see above). */
typedef struct {
	/* Matrix products: y = x·wᵀ (w [out, in], f32, bf16 or q4). linear_rows
	 * takes rows ids (int32 [1, k]) of w only: y [x.rows, k]. */
	void (*linear)(vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor w);
	void (*linear_rows)(vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor w,
	                    vd_tensor ids);
	/* Gemma 3n's activation-sparse MLP over q4 up and transposed down
	 * weights: y [n, d] from x [n, d] and the gate outputs g [n, inter]
	 * (overwritten); h and idx are scratch like g. */
	void (*sparse_mlp)(vd_stream *s, vd_tensor y, vd_tensor g, vd_tensor h,
	                   vd_tensor idx, vd_tensor x, vd_tensor up,
	                   vd_tensor down_t, float z);

	/* Row operations over rows of width dim (the tensor's elements taken
	 * as rows of dim). */
	void (*rmsnorm)(vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor w,
	                int64_t dim, float eps); /* w.data NULL: no scale */
	void (*row_rms)(vd_stream *s, vd_tensor out, vd_tensor x, int64_t dim,
	                float floor);
	void (*scale_rows)(vd_stream *s, vd_tensor x, vd_tensor sc, int64_t dim);
	void (*mul_rows)(vd_stream *s, vd_tensor x, vd_tensor w);
	void (*sparse_gelu_mul)(vd_stream *s, vd_tensor g, vd_tensor u,
	                        int64_t dim, float z);
	void (*ew)(vd_stream *s, int op, vd_tensor y, vd_tensor a, vd_tensor b,
	           float c);
	void (*rope)(vd_stream *s, vd_tensor x, vd_tensor pos, int64_t heads,
	             int64_t head_dim, vd_tensor inv_freq);
	void (*altup_predict)(vd_stream *s, vd_tensor pred, vd_tensor h,
	                      vd_tensor coef, int64_t n, int64_t d);
	void (*altup_correct)(vd_stream *s, vd_tensor out, vd_tensor pred,
	                      vd_tensor act, vd_tensor c, int64_t n, int64_t d);
	void (*attention)(vd_stream *s, const vd_attn *a);

	/* Memory work. embed: y[i] = table[ids[i]]·scale (table f32, bf16 or
	 * q4, dequantised); gather: y[i] = x[idx[i]]; scatter: y[idx[i]] =
	 * x[i] (rows of x.cols elements, f32); copy2d: rows of cols elements
	 * from x (row stride xs) to y (row stride ys), in elements. */
	void (*embed)(vd_stream *s, vd_tensor y, vd_tensor table, vd_tensor ids,
	              float scale);
	void (*gather)(vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor idx);
	void (*scatter)(vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor idx);
	void (*copy2d)(vd_stream *s, vd_tensor y, int64_t ys, vd_tensor x,
	               int64_t xs, int64_t rows, int64_t cols);

	/* Reductions of the output side. logsumexp: out[r] = log Σ exp(x_r);
	 * argmax: out[r] = the index of x_r's largest value (lowest on ties);
	 * select: out[j] = x[row[j], col[j]]; sample: out[0] = the drawn
	 * token (x is overwritten). */
	void (*logsumexp)(vd_stream *s, vd_tensor out, vd_tensor x);
	void (*argmax)(vd_stream *s, vd_tensor out, vd_tensor x);
	void (*select)(vd_stream *s, vd_tensor out, vd_tensor x, vd_tensor row,
	               vd_tensor col);
	void (*sample)(vd_stream *s, vd_tensor out, vd_tensor x, vd_sampling p);

	/* Fused row operations (the same results as the operations they
	 * stand for, in that order). norm_add: x = rmsnorm(x)·w (in place),
	 * then y = a + x, then, when b.data is set, y = (y + b)·c. router:
	 * y = tanh(rmsnorm(x)·norm_w·scale · wᵀ) for w of few rows (AltUp's
	 * router), with f [x.rows, dim] as scratch. */
	void (*norm_add)(vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor w,
	                 vd_tensor a, vd_tensor b, int64_t dim, float eps, float c);
	void (*router)(vd_stream *s, vd_tensor y, vd_tensor f, vd_tensor x,
	               vd_tensor norm_w, vd_tensor w, int64_t dim, float eps,
	               float scale);

	/* norm_rope: rmsnorm, rope and scatter in one: x [n, heads·head_dim]
	 * normalised in place a head at a time (scaled by w; w.data NULL:
	 * none), rotated by pos [1, n] (inv_freq.data NULL: not rotated), and,
	 * when y.data is set, copied to y's rows idx [1, n] (a key/value
	 * pool's slots): the operations' arithmetic, so their bits. */
	void (*norm_rope)(vd_stream *s, vd_tensor y, vd_tensor idx, vd_tensor x,
	                  vd_tensor w, float eps, vd_tensor pos, int64_t heads,
	                  int64_t head_dim, vd_tensor inv_freq);
	/* router_coef: router (y from x), then AltUp's coefficients from it:
	 * cy = y · cwᵀ, then cy = cy + add when has_add (linear's and ew
	 * add_const's arithmetic, so their bits). */
	void (*router_coef)(vd_stream *s, vd_tensor y, vd_tensor f, vd_tensor x,
	                    vd_tensor norm_w, vd_tensor w, int64_t dim, float eps,
	                    float scale, vd_tensor cw, vd_tensor cy, float add,
	                    int has_add);

	/* The catalog decoder's step (engine/catalog), on the backend.
	 * grammar_bind copies a compiled catalog (vd_grammar) into the
	 * backend's memory, after checking its shape; it returns 0 and the
	 * handle in *out, or a VD_CAT_E* code. catalog_init starts the walks
	 * of a step's sequences; catalog_step chooses every sequence's next
	 * token (see vd_cat_step). Both are enqueued on the stream. */
	int (*grammar_bind)(vd_backend *b, const vd_grammar *g, vd_gram **out);
	void (*grammar_free)(vd_backend *b, vd_gram *g);
	void (*catalog_init)(vd_stream *s, vd_gram *g, const vd_cat_step *st);
	void (*catalog_step)(vd_stream *s, vd_gram *g, const vd_cat_step *st);

	/* The vision tower (MobileNet-style), channels-last images [h·w, c].
	 * A packed weight is an F32 tensor [out, in] in the panel layout of
	 * kernels_conv.h (vk_conv_pack: ceil(out/16) panels of in×16 floats,
	 * columns past out zero). pointwise: y = x·wᵀ over a packed w (a 1×1
	 * convolution). conv2d: the full convolution (groups = 1) of x by a
	 * packed w [cout, k·k·c] (columns in (ky, kx, c) order), plus bias
	 * [cout] when bias.data is set. dwconv2d: the depthwise convolution by
	 * w [k·k, c] (tap-major). norm_act: per row of width dim, y =
	 * act(x/sqrt(mean(x²) + eps)·w)·gamma + res, act the tanh-GELU when
	 * gelu != 0, gamma and res skipped when their data is NULL; y may alias
	 * x or res. avgpool2d: k×k blocks of x [h, w, c] averaged (stride k).
	 * upsample_concat: y [h·w, a.cols + b.cols] = a beside b [bh·bw,
	 * b.cols] resized to h×w by nearest neighbour (PyTorch's 'nearest').
	 * transpose: y [x.cols, x.rows] = xᵀ. mqa: unmasked multi-query
	 * attention, q and out [nq, heads·d], k and v [nk, d] (d = k.cols):
	 * out[i, h] = softmax_j(scale·q[i, h]·k[j])·v. */
	void (*pointwise)(vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor w);
	void (*conv2d)(vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor w,
	               vd_tensor bias, const vd_conv *g);
	void (*dwconv2d)(vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor w,
	                 const vd_conv *g);
	void (*norm_act)(vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor w,
	                 vd_tensor gamma, vd_tensor res, int64_t dim, float eps,
	                 int gelu);
	void (*avgpool2d)(vd_stream *s, vd_tensor y, vd_tensor x, int64_t h,
	                  int64_t w, int64_t c, int64_t k);
	void (*upsample_concat)(vd_stream *s, vd_tensor y, vd_tensor a,
	                        vd_tensor b, int64_t h, int64_t w, int64_t bh,
	                        int64_t bw);
	void (*transpose)(vd_stream *s, vd_tensor y, vd_tensor x);
	void (*mqa)(vd_stream *s, vd_tensor out, vd_tensor q, vd_tensor k,
	            vd_tensor v, int64_t heads, float scale);

	/* The audio tower (a conformer; kernels_audio.h states each exactly).
	 * im2col: the patches y [oh·ow, kh·kw·c] of a channels-last image x
	 * [h·w, c] (g: h, w, c, oh, ow, stride; kh, kw and stride_w as given;
	 * g->pad_t, g->pad_l zeros before). cum_group_norm_relu: Gemma 3n's
	 * cumulative group norm over time then ReLU, in place on x [t, fc],
	 * channel = column % w.cols. local_attention: q, k, v, out [t, heads·d],
	 * pos [past+future+1, heads·d], valid I32 [1, t] (nonzero: a real
	 * frame). dwconv_causal: y [t, d] = the causal depthwise 1-D convolution
	 * of x [t, d] by w [d, k]. glu: y [rows, d] = x[:, :d]·sigmoid(x[:, d:])
	 * for x [rows, 2d]. silu: y = x·sigmoid(x). clip: y = min(max(x, −lim),
	 * lim). */
	void (*im2col)(vd_stream *s, vd_tensor y, vd_tensor x, const vd_conv *g,
	               int64_t kh, int64_t kw, int64_t stride_w);
	void (*cum_group_norm_relu)(vd_stream *s, vd_tensor x, vd_tensor w,
	                            float eps);
	void (*local_attention)(vd_stream *s, vd_tensor out, vd_tensor q,
	                        vd_tensor k, vd_tensor v, vd_tensor pos,
	                        vd_tensor valid, int64_t heads, int64_t past,
	                        int64_t future, float cap);
	void (*dwconv_causal)(vd_stream *s, vd_tensor y, vd_tensor x,
	                      vd_tensor w);
	void (*glu)(vd_stream *s, vd_tensor y, vd_tensor x);
	void (*silu)(vd_stream *s, vd_tensor y, vd_tensor x);
	void (*clip)(vd_stream *s, vd_tensor y, vd_tensor x, float lim);

	/* The bookkeeping of a loop's body (backend_stream.h's loops; plain
	 * operations outside one): loop_rows sets up the rows of a decode step
	 * whose tokens the device chose (vd_loop_rows); loop_emit keeps a
	 * greedy step's tokens and ends the loop on stop tokens
	 * (vd_loop_emit). */
	void (*loop_rows)(vd_stream *s, const vd_loop_rows *r);
	void (*loop_emit)(vd_stream *s, const vd_loop_emit *e);

	/* A decoder layer's row operations in fewer passes (the results, bit
	 * for bit, of the operations they stand for, in this order; a backend
	 * without them gets those operations from the engine).
	 * altup_predict_step: with pre (VD_ABI 16), norm_add(h1, pre, pre_w,
	 * h1) then ew add_rep(h23, h23, pre) (h1, h23: h's rows n..2n and
	 * 2n..4n; the previous layer's per-layer input added to streams 1..3),
	 * then router_coef (x = h's first n rows), then
	 * altup_predict(pred, h, cy), then out = rmsnorm(pred's first n rows)·
	 * out_w. altup_correct_step: with pre, norm_add(x, pre, pre_w, x) (the
	 * layer's last norm-add: pre = rmsnorm(pre)·pre_w, x = x + pre), then
	 * router_coef (x = the layer's output), then
	 * altup_correct(h, pred, x, cy), then out = h's first n rows · out_w
	 * (ew mul_rep; out_w NULL: a copy). norm_add_more: when ba.data is set
	 * (VD_ABI 16), norm_add(b, b, bw, ba) first (b = ba + rmsnorm(b)·bw,
	 * in place: Laurel's norm-add before the attention's), then norm_add,
	 * then each block of x.rows rows of rep (rep.data NULL: none) += x (ew
	 * add_rep), then, when f.data is set, f = rmsnorm(y)·fw. norm_ropes:
	 * its parts' norm_rope's. */
	void (*altup_predict_step)(vd_stream *s, const vd_altup *a);
	void (*altup_correct_step)(vd_stream *s, const vd_altup *a);
	void (*norm_add_more)(vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor w,
	                      vd_tensor a, vd_tensor b, vd_tensor bw, vd_tensor ba,
	                      int64_t dim, float eps, float c, vd_tensor rep,
	                      vd_tensor f, vd_tensor fw);
	void (*norm_ropes)(vd_stream *s, const vd_norm_ropes *r);

	/* Gemma 4's towers (VD_ABI 12). clamp: y = min(max(x, lo), hi)
	 * elementwise, a NaN kept (the clipped linears' bounds; lo 0, hi +inf
	 * is a ReLU); y may be x. */
	void (*clamp)(vd_stream *s, vd_tensor y, vd_tensor x, float lo, float hi);

	/* linears (VD_ABI 14; gelu_into 15): the products of one x in one pass
	 * where the backend can (vd_linears; a decoder layer's q, k, v and
	 * Laurel's left matrix, the per-layer input's gate with its GELU
	 * product, the MLP's up product into its gate's GELU), each part's
	 * bits those of linear (and ew gelu_mul) alone. */
	void (*linears)(vd_stream *s, const vd_linears *l);

	/* prefetch (VD_ABI 17): a hint that the tensors (vd_prefetch) be
	 * brought nearer to the operations that read them next (a GPU: into
	 * its L2, while the operations before them run); no result changes,
	 * and a backend may do nothing (the CPU's). */
	void (*prefetch)(vd_stream *s, const vd_prefetch *p);

	/* tower_linear (VD_ABI 18): linear's y = x·wᵀ for a tower's batch
	 * (every row of an image or clip at once, never a row alone), which a
	 * backend may sum in another order of float32 accuracy (CUDA: on the
	 * tensor cores in three TF32 parts); each row's result still depends
	 * on that row alone. The CPU's is its linear. */
	void (*tower_linear)(vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor w);
} vd_ops;

/* vd_op: an entry of vd_ops by its index, in the table's order. */
enum vd_op {
	VD_OP_LINEAR,
	VD_OP_LINEAR_ROWS,
	VD_OP_SPARSE_MLP,
	VD_OP_RMSNORM,
	VD_OP_ROW_RMS,
	VD_OP_SCALE_ROWS,
	VD_OP_MUL_ROWS,
	VD_OP_SPARSE_GELU_MUL,
	VD_OP_EW,
	VD_OP_ROPE,
	VD_OP_ALTUP_PREDICT,
	VD_OP_ALTUP_CORRECT,
	VD_OP_ATTENTION,
	VD_OP_EMBED,
	VD_OP_GATHER,
	VD_OP_SCATTER,
	VD_OP_COPY2D,
	VD_OP_LOGSUMEXP,
	VD_OP_ARGMAX,
	VD_OP_SELECT,
	VD_OP_SAMPLE,
	VD_OP_NORM_ADD,
	VD_OP_ROUTER,
	VD_OP_NORM_ROPE,
	VD_OP_ROUTER_COEF,
	VD_OP_GRAMMAR_BIND,
	VD_OP_GRAMMAR_FREE,
	VD_OP_CATALOG_INIT,
	VD_OP_CATALOG_STEP,
	VD_OP_POINTWISE,
	VD_OP_CONV2D,
	VD_OP_DWCONV2D,
	VD_OP_NORM_ACT,
	VD_OP_AVGPOOL2D,
	VD_OP_UPSAMPLE_CONCAT,
	VD_OP_TRANSPOSE,
	VD_OP_MQA,
	VD_OP_IM2COL,
	VD_OP_CUM_GROUP_NORM_RELU,
	VD_OP_LOCAL_ATTENTION,
	VD_OP_DWCONV_CAUSAL,
	VD_OP_GLU,
	VD_OP_SILU,
	VD_OP_CLIP,
	VD_OP_LOOP_ROWS,
	VD_OP_LOOP_EMIT,
	VD_OP_ALTUP_PREDICT_STEP,
	VD_OP_ALTUP_CORRECT_STEP,
	VD_OP_NORM_ADD_MORE,
	VD_OP_NORM_ROPES,
	VD_OP_CLAMP,
	VD_OP_LINEARS,
	VD_OP_PREFETCH,
	VD_OP_TOWER_LINEAR,
	VD_OP_COUNT
};

#ifdef __cplusplus
static_assert(sizeof(vd_ops) == VD_OP_COUNT * sizeof(void (*)(void)), "vd_op: one name an entry of vd_ops");
#else
_Static_assert(sizeof(vd_ops) == VD_OP_COUNT * sizeof(void (*)(void)), "vd_op: one name an entry of vd_ops");
#endif

/* vd_loop_rows: step t = iter[0] of a decode of n rows (a sequence each)
 * whose tokens ids [1, n] the device chose: pos[i] = pos0[i] + t,
 * slot0[i] = slots0[i·steps + t] and slot1[i] = slots1[i·steps + t] (the
 * key/value slots reserved for the step; t past steps − 1 reads the
 * last), row[i] = lut[ids[i]] (0 for an id outside lut: a table row of
 * the token); then iter[0] = t + 1. All I32. */
struct vd_loop_rows {
	int64_t n, steps;
	vd_tensor iter, ids, lut, row, pos0, pos, slots0, slots1, slot0, slot1;
};

/* vd_loop_emit: the bookkeeping of step t = iter[0] − 1 of a loop of n
 * rows (after loop_rows advanced iter) whose chosen tokens are ids [1, n]:
 * out[i·steps + t] = ids[i] (nothing for t outside 0..steps − 1); a row
 * whose token is one of stop [1, nstop] (−1 pads it) is done (done[i] = 1,
 * and stays 1); then cond[0] = the rows not done. All I32. */
struct vd_loop_emit {
	int64_t n, steps;
	vd_tensor iter, ids, stop, out, done, cond;
};

/* ---- the catalog decoder ----
 *
 * A compiled catalog is a trie over token ids in compressed sparse rows:
 * node n's edges are first[n] <= e < first[n+1], sorted by token; child[e]
 * is the child node, or VD_CHILD_SEP / VD_CHILD_STOP for the control edges
 * of a node that ends an entry (ends[n] >= 0). count[e] is the number of
 * entries below token edge e, mask[e·words .. (e+1)·words) their bit set;
 * path[path_first[i] .. path_first[i+1]) are entry i's token edges from
 * the root. A node has at most VD_CAT_MAX_EDGES edges. */
#define VD_CAT_MAX_EDGES 256
enum { VD_CHILD_SEP = -1, VD_CHILD_STOP = -2 };

struct vd_grammar {
	int32_t nodes, edges, entries, words;
	const int32_t *first, *token, *child, *ends, *count;
	const uint64_t *mask;
	const int32_t *path_first, *path;
};

/* Errors: grammar_bind's return value, and a walk's VD_SEQ_ERR field. */
enum {
	VD_CAT_OK = 0,
	VD_CAT_EEMPTY = 1, /* a step's legal set is empty (the mask left nothing) */
	VD_CAT_EEDGE = 2,  /* the winner sits on no live edge */
	VD_CAT_ENAN = 3,   /* a legal token's logit is NaN */
	VD_CAT_ETRIE = 4,  /* a malformed trie: a child, token or entry out of range */
	VD_CAT_EFULL = 5,  /* more entries than the emitted buffer holds */
	VD_CAT_ESHAPE = 6, /* grammar_bind: inconsistent sizes, a node over 256 edges */
	VD_CAT_EMEM = 7,   /* grammar_bind: out of memory */
};

/* A walk's fields: row slot of the I32 tensor seq [slots, VD_SEQ_FIELDS]. */
enum {
	VD_SEQ_NODE,   /* the trie node it is at */
	VD_SEQ_K,      /* the entries it must emit */
	VD_SEQ_NEMIT,  /* the entries emitted so far */
	VD_SEQ_STEP,   /* tokens chosen so far */
	VD_SEQ_DONE,   /* 1 once STOP is chosen */
	VD_SEQ_ERR,    /* a VD_CAT_E* code; the walk stops */
	VD_SEQ_NLEGAL, /* the last step's legal tokens */
	VD_SEQ_BEST,   /* the last step's winner: its index in the legal set */
	VD_SEQ_ENTRY,  /* the entry the last step completed, or -1 */
	VD_SEQ_ENODE,  /* the node where an error arose */
	VD_SEQ_FIELDS = 16
};

/* vd_cat_step: one step of n sequences of one grammar. Sequence i reads
 * hidden row hrow[i] of h (nil: i) and keeps its walk in row slot[i] (nil:
 * i) of every per-slot tensor. The step, per sequence: the legal tokens of
 * its node (token edges with a live entry below: live counts > 0 in the
 * counts form, mask minus banned non-empty in the mask form; SEP at a node
 * ending an unspent entry while more are owed, STOP when none are), written
 * ascending to legal[slot, 0..nlegal) and their edges to legal[slot,
 * 256..); the logits of those tokens only, each the dense head's value bit
 * for bit (this backend's linear of h's row by w's rows, then softcap·
 * tanh(x/softcap) when softcap > 0), into logits[slot, 0..nlegal); the
 * argmax, ties to the lower token; then the walk advances: a token edge
 * moves to its child, SEP or STOP completes the node's entry (emitted,
 * banned, and in the counts form its path's live counts decremented) and
 * returns to the root, STOP sets done. next[slot] is the chosen token.
 * A walk that is done or has an error is left as it is. */
struct vd_cat_step {
	vd_tensor h;       /* F32 [rows, D] */
	vd_tensor w;       /* the output head [vocab, D]: F32, BF16 or Q4 */
	float softcap;     /* 0: none */
	int32_t counts;    /* 1: the counts form (live), 0: the mask form */
	int64_t n;         /* sequences */
	vd_tensor hrow;    /* I32 [1, n] or nil */
	vd_tensor slot;    /* I32 [1, n] or nil */
	vd_tensor k;       /* catalog_init: I32 [1, n], each walk's k */
	vd_tensor seq;     /* I32 [slots, VD_SEQ_FIELDS] */
	vd_tensor banned;  /* I32 [slots, 2·words]: emitted entries, uint64 words */
	vd_tensor live;    /* I32 [slots, edges]: the counts form's live counts */
	vd_tensor emitted; /* I32 [slots, kmax]: the entries in emission order */
	vd_tensor legal;   /* I32 [slots, 2·VD_CAT_MAX_EDGES] */
	vd_tensor logits;  /* F32 [slots, VD_CAT_MAX_EDGES] */
	vd_tensor next;    /* I32 [1, slots] */
	vd_tensor running; /* catalog_step: I32 [1, 1] or nil: how many of the
	                    * n walks are neither done nor failed after it */
};

#ifdef __cplusplus
}
#endif

#endif
