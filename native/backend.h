/*
 * backend.h: Verdict's compute backend interface.
 *
 * A backend is a table of C functions (vd_backend) over memory it owns:
 * buffers it allocates or binds, tensors that point into them, and streams
 * that order its work. The engine calls nothing else, so a backend built as
 * a separate shared library (CUDA) and loaded at run time can stand in for
 * the CPU one compiled into the binary.
 *
 * Tensors are plain descriptors: the address of their first element in the
 * backend's memory (host or device), a second address for a q4 tensor's
 * scales and offsets, the element type and a row-major [rows, cols] shape.
 * Operations are enqueued on a stream, in order; their results are visible
 * to later operations of the same stream at once and to the host after
 * download and sync. Operations never allocate memory the caller can see
 * and keep no pointer after the stream has run them.
 *
 * The interface promises results to the accuracy of float32 arithmetic; how
 * each backend sums (and so whether two backends give the same bits) is
 * stated by that backend.
 */
#ifndef VERDICT_BACKEND_H
#define VERDICT_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* VD_ABI changes whenever the table below does. */
#define VD_ABI 8

enum { VD_F32 = 0, VD_BF16 = 1, VD_Q4 = 2, VD_I32 = 3 };

typedef struct {
	void *data;    /* first element */
	void *aux;     /* q4: scales and offsets [rows, cols/group, 2] */
	int32_t dtype; /* VD_* */
	int32_t group; /* q4: columns per group (a power of two >= 32) */
	int64_t rows, cols;
} vd_tensor;

typedef struct vd_stream vd_stream;
typedef struct vd_backend vd_backend;
typedef struct vd_grammar vd_grammar;   /* a compiled catalog, on the host */
typedef struct vd_gram vd_gram;         /* one bound to a backend */
typedef struct vd_cat_step vd_cat_step; /* a catalog step's operands */
typedef struct vd_loop_rows vd_loop_rows; /* a device-driven decode step's rows */
typedef struct vd_loop_emit vd_loop_emit; /* a greedy loop step's bookkeeping */

/* Paged attention over a pool of key/value blocks (see vk_paged_attention
 * in kernels.h for the rules): k and v are the layer's pool [blocks·block,
 * hkv·d]; q and out [nq, hq·d]; the int32 tensors describe the sequences. */
typedef struct {
	vd_tensor out, q, k, v;
	vd_tensor qpos, qseq, seq_ent, ent_blk, ent_pos, ent_len;
	int64_t hq, hkv, d, block, window, max_keys;
	float scale;
} vd_attn;

/* Elementwise operations (vd_backend.ew): y = f(a, b, c) over y's elements. */
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

/* A sampling request (vd_backend.sample): the token drawn from logits x
 * [1, vocab] scaled by inv_temp (1/temperature), then top-k and top-p (in
 * that order), with the uniform draw u in [0, 1); inv_temp 0 is the argmax
 * (temperature 0). */
typedef struct {
	float inv_temp;
	int64_t top_k;
	double top_p, u;
} vd_sampling;

/* The geometry of a 2-D convolution over a channels-last image (vd_backend
 * conv2d, dwconv2d): input [h, w, c], output [oh, ow, y.cols], a square
 * kernel k×k with stride and pad_t rows and pad_l columns of zeros before
 * the image (positions past its end read as zero too). */
typedef struct {
	int64_t h, w, c, oh, ow;
	int32_t k, stride, pad_t, pad_l;
} vd_conv;

/* sync's error for an operation the backend does not implement yet (the
 * towers' on a GPU backend that has not got them): the caller may run that
 * work on another backend. */
enum { VD_EUNIMPL = 1005 };

/* What a backend runs on (vd_backend.info). */
typedef struct {
	char name[96];               /* e.g. "NVIDIA H200"; "" where not known */
	int64_t mem_total, mem_free; /* bytes of device memory; 0: host memory */
	int32_t units;               /* multiprocessors, or threads */
	int32_t cc;                  /* compute capability ×10; 0 for the CPU */
} vd_info;

/* The machine's ceilings, measured (vd_backend.limits): bytes read per
 * second from device memory, and multiply-adds (counted as two operations)
 * per second on float32 units and on tensor cores (bf16 and tf32 inputs,
 * float32 sums); 0 where not measured. */
typedef struct {
	double read_gbs, fp32_tflops, bf16_tc_tflops, tf32_tc_tflops;
} vd_limits;

struct vd_backend {
	int abi;          /* VD_ABI */
	const char *name; /* e.g. "cpu" */
	void *state;      /* the backend's own */

	/* Memory. alloc returns NULL when out of memory; bind makes host memory
	 * (weights: a mapped file, a packed arena) usable by operations,
	 * without a copy where the backend can read host memory. */
	void *(*alloc)(vd_backend *b, size_t bytes);
	void (*release)(vd_backend *b, void *p, size_t bytes);
	void *(*bind)(vd_backend *b, void *host, size_t bytes);
	void (*unbind)(vd_backend *b, void *p, void *host, size_t bytes);

	/* Streams and transfers (asynchronous on the stream); sync waits for
	 * the stream and returns 0, or a backend error code. */
	vd_stream *(*stream_new)(vd_backend *b);
	void (*stream_free)(vd_stream *s);
	void (*upload)(vd_stream *s, void *dst, const void *host, size_t bytes);
	void (*download)(vd_stream *s, void *host, const void *src, size_t bytes);
	void (*copy)(vd_stream *s, void *dst, const void *src, size_t bytes);
	int (*sync)(vd_stream *s);

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

	/* The device (0, or nonzero where nothing is known) and its measured
	 * limits (0, or nonzero where the backend does not measure: the CPU's
	 * are measured by the host). */
	int (*info)(vd_backend *b, vd_info *out);
	int (*limits)(vd_backend *b, vd_limits *out);

	/* Graphs: a stream's operations recorded once and replayed. Between
	 * graph_begin (0, or nonzero where the backend cannot record, as the
	 * CPU's) and graph_end the stream's operations are recorded, not run;
	 * graph_end returns the recording, or NULL when recording failed (an
	 * operation that must wait for the host, say): nothing ran and the
	 * stream's error is as before graph_begin. graph_run replays it on the
	 * stream with the tensors it was recorded with, reading their contents
	 * at replay time: a caller changes a replay's inputs by writing the
	 * same buffers. */
	int (*graph_begin)(vd_stream *s);
	void *(*graph_end)(vd_stream *s);
	void (*graph_run)(vd_stream *s, void *g);
	void (*graph_free)(vd_backend *b, void *g);

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

	/* Loops: a body of operations recorded once and run on the device
	 * until a condition clears, with no host work between iterations.
	 * loop_begin starts recording the body as graph_begin does (0, or
	 * nonzero where the backend cannot record: the CPU's); the body ends
	 * with loop_while; graph_end returns the loop, and one graph_run of it
	 * runs the body, then runs it again while cond[0] != 0 and iter[0] <
	 * limit (I32 [1, 1] each, read after every run). Outside a loop's
	 * recording loop_while does nothing. loop_rows sets up the rows of a
	 * decode step whose tokens the device chose (vd_loop_rows); loop_emit
	 * keeps a greedy step's tokens and ends the loop on stop tokens
	 * (vd_loop_emit). */
	int (*loop_begin)(vd_stream *s);
	void (*loop_while)(vd_stream *s, vd_tensor cond, vd_tensor iter,
	                   int64_t limit);
	void (*loop_rows)(vd_stream *s, const vd_loop_rows *r);
	void (*loop_emit)(vd_stream *s, const vd_loop_emit *e);

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
};

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

/* vd_cpu_backend returns the CPU backend (compiled into the binary). */
vd_backend *vd_cpu_backend(void);

#ifdef __cplusplus
}
#endif

#endif
