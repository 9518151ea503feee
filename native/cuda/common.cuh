/*
 * common.cuh: the CUDA backend's internals shared by its .cu files: the
 * device's and a stream's state, the error codes, the launch helpers, an
 * operation's entry (ENTER: its device and profile scope), the block
 * reductions, the tile sizes several families use, and the host functions
 * one file calls in another: every operation of the table (defined in its
 * family's file, gathered by cuda_backend.cu's table_template) and the
 * scratch buffers.
 *
 * The files are compiled apart with no relocatable device code, so no
 * kernel or __device__ function is called across files: each __global__
 * lives in one file beside its host launcher, and the __device__ helpers
 * here are static (a copy a file).
 */
#ifndef VERDICT_CUDA_COMMON_CUH
#define VERDICT_CUDA_COMMON_CUH

#include "../backend.h"
#include "device_math.cuh"
#include "env.h"
#include "pdl.cuh"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <utility>
#include <vector>

/* Error codes of the backend's own (cudaError_t values are below 1000). */
enum {
	VDC_EDTYPE = 1001,   /* an op over a dtype it does not take */
	VDC_EKEYS = 1002,    /* attention: a query sees more than max_keys keys */
	VDC_ESHARED = 1003,  /* (unused: attention needs no shared memory by keys now) */
	VDC_ESCRATCH = 1004, /* scratch allocation failed */
	VDC_EUNIMPL = VD_EUNIMPL, /* 1005: an operation not on the GPU (none now; the towers' before tower.cu) */
	VDC_ESHAPE = 1006,   /* a tower op's shape past its kernels' limits (tower.cu, TOW_ESHAPE) */
};

struct cuda_state {
	int device;
	int smem_optin; /* the largest dynamic shared memory a block may ask */
	int *dev_err;   /* device-side error flag (attention) */
	bool pdl;       /* launches use PDL (pdl.cuh): compute capability 9.0+, VERDICT_PDL not "0" */
	bool pdl_loop;  /* ... also inside a loop's body (VERDICT_PDL_LOOP not "0"; see pdl_of) */
};

struct vd_stream {
	vd_backend *b;
	cudaStream_t st;
	int dev;
	int err;
	void *scratch; /* per-stream device scratch (sparse_mlp counts) */
	size_t scratch_n;
	std::vector<float> host; /* sample's host copy of the logits */
	int32_t tok;
	bool recording; /* between graph_begin (or loop_begin) and graph_end */
	cudaGraph_t loop; /* loop_begin's graph, whose while node's body is being recorded */
	cudaGraphConditionalHandle cond; /* that node's condition */
	void *amax;     /* argmax partials: AP floats, AP int64s */
	void *apart;    /* attention partials */
	int *adone;     /* attention_dec.cu's counters of a query head's finished chunks (zeros between launches) */
	size_t apart_n;
	void *qpart;    /* the q4 products' scratch: quantised x, a split one's slice parts (q4_mma_scratch_bytes) */
	size_t qpart_n;
	/* Scratch outgrown: recorded graphs may still use it, so it is freed
	 * with the stream only. */
	std::vector<void *> retired;
	std::vector<struct prof_rec> pend; /* profiling: ops not yet summed */
	std::vector<cudaEvent_t> events;   /* profiling: free events */
	/* prefetch's branch (prefetch.cu): its kernels run on side, forked
	 * from st by fork and joined back by join_side before st is recorded,
	 * synchronised or freed, so that st's chain never waits for them. */
	cudaStream_t side;
	cudaEvent_t fork, join;
	bool forked;
};

static inline cuda_state *st_of(vd_backend *b) { return (cuda_state *)b->state; }

static inline void fail(vd_stream *s, int code)
{
	if (!s->err)
		s->err = code;
}

static inline void check(vd_stream *s, cudaError_t e)
{
	if (e != cudaSuccess)
		fail(s, (int)e);
}

static inline void launched(vd_stream *s) { check(s, cudaGetLastError()); }

/* pdl_of: whether s's launches may use programmatic dependent launch,
 * also while a loop's body is being captured (loop_begin: the body of a
 * conditional while node, by cudaStreamBeginCaptureToGraph) unless
 * VERDICT_PDL_LOOP=0. Programmatic edges inside a conditional node's body
 * are not among the documented contents of such a body; on the H200 the
 * catalog gates (a device loop = the host loop bit for bit, a replay = its
 * first run, grammar switches inside replays) pass with them, and a step
 * is about 0.5 ms shorter. */
static inline bool pdl_of(vd_stream *s)
{
	cuda_state *c = st_of(s->b);
	return c->pdl && (!s->loop || c->pdl_loop);
}

/* launch: k<<<grid, block, smem, s->st>>>(args...) by launch_pdl
 * (pdl.cuh), with PDL where pdl_of allows it; a failed launch is the
 * stream's error (as is any earlier one launched(s) finds). */
template <typename... P, typename... A>
static void launch(vd_stream *s, void (*k)(P...), dim3 grid, dim3 block, size_t smem, A &&...args)
{
	check(s, launch_pdl(pdl_of(s), k, grid, block, smem, s->st, std::forward<A>(args)...));
}

/* prof_rec: one operation's events and host time (profiling: the
 * scope below records them, cuda_backend.cu sums them). */
struct prof_rec {
	const char *name;
	cudaEvent_t a, b;
	double host_us;
};

/* profiling: whether VERDICT_CUDA_PROFILE asks for the table;
 * prof_event: a free event of the stream's (cuda_backend.cu). */
bool profiling();
cudaEvent_t prof_event(vd_stream *s);
/* op_skipped: whether VERDICT_CUDA_SKIP (a comma-separated list of the
 * profile's operation names) names this operation: its launch_pdl
 * kernels are then not launched, so that a recorded step's time without them shows what
 * they cost inside it (their results are garbage: for measuring only). */
bool op_skipped(const char *name);

/* prof_scope times the operation it lives in, and leaves its launches
 * out when op_skipped. */
struct prof_scope {
	vd_stream *s = nullptr;
	const char *name;
	cudaEvent_t a = nullptr;
	bool skip;
	std::chrono::steady_clock::time_point t0;
	prof_scope(vd_stream *st, const char *n) : name(n), skip(op_skipped(n))
	{
		pdl_skip_depth += skip;
		if (!profiling() || st->recording || !(a = prof_event(st)))
			return;
		s = st;
		t0 = std::chrono::steady_clock::now();
		cudaEventRecord(a, s->st);
	}
	~prof_scope()
	{
		pdl_skip_depth -= skip;
		if (!s)
			return;
		cudaEvent_t b = prof_event(s);
		if (!b) {
			s->events.push_back(a);
			return;
		}
		cudaEventRecord(b, s->st);
		double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
		s->pend.push_back({name, a, b, us});
	}
};

/* EW: threads a block of the elementwise kernels. ENTER: an operation's
 * start (its device, and its profile scope named after the function,
 * c_ dropped). */
#define EW 256
#define ENTER(s) ENTER_AS(s, __func__ + 2)
#define ENTER_AS(s, name)         \
	cudaSetDevice((s)->dev);  \
	prof_scope prof_ {(s), (name)}

/* name_listed: whether list (names separated by commas) holds name. */
static inline bool name_listed(const char *list, const char *name)
{
	size_t n = strlen(name);
	for (const char *p = list; (p = strstr(p, name)) != nullptr; p += n)
		if ((p == list || p[-1] == ',') && (p[n] == 0 || p[n] == ','))
			return true;
	return false;
}

static inline int64_t elems(vd_tensor t) { return t.rows * t.cols; }

static inline int lg2(int64_t g)
{
	int l = 0;
	while ((1LL << l) < g)
		l++;
	return l;
}

static inline unsigned blocks_for(int64_t n, int per)
{
	int64_t b = (n + per - 1) / per;
	return (unsigned)(b < 1 ? 1 : b);
}

/* ---- block reductions (device_math.cuh has the warp ones) ---- */

/* block_sum: the sum of every thread's v (blockDim.x a multiple of 32, at
 * most 1024), in a fixed tree; every thread gets it. red: 32 floats. */
static __device__ inline float block_sum(float v, float *red)
{
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
	v = warp_sum(v);
	__syncthreads();
	if (lane == 0)
		red[w] = v;
	__syncthreads();
	float r = lane < nw ? red[lane] : 0.0f;
	return warp_sum(r);
}

/* block_sum2: block_sum of two values at once, each summed as block_sum
 * sums it (the same trees, the same bits), one pair of barriers for both.
 * red2: 32 float2. */
static __device__ inline float2 block_sum2(float a, float b, float2 *red2)
{
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
	a = warp_sum(a);
	b = warp_sum(b);
	__syncthreads();
	if (lane == 0)
		red2[w] = make_float2(a, b);
	__syncthreads();
	float2 r = lane < nw ? red2[lane] : make_float2(0.0f, 0.0f);
	return make_float2(warp_sum(r.x), warp_sum(r.y));
}

/* altup_pred_elem: AltUp's prediction of one element of the four streams
 * hv from a token's 16 coefficients a (the CPU kernel's order). */
static __device__ __forceinline__ void altup_pred_elem(float o[4], const float hv[4], const float *a)
{
	for (int j = 0; j < 4; j++) {
		const float *c = a + 4 * j;
		float s = hv[j];
		s = s + c[0] * hv[0];
		s = s + c[1] * hv[1];
		s = s + c[2] * hv[2];
		s = s + c[3] * hv[3];
		o[j] = s;
	}
}

/* altup_corr_elem: AltUp's correction of one element: p the first
 * stream's prediction (the others nd apart), act the layer's output, cf a
 * token's 4 coefficients. */
static __device__ __forceinline__ void altup_corr_elem(float o[4], const float *p, int64_t nd, float act, const float *cf)
{
	float in = act - p[0];
	for (int k = 0; k < 4; k++)
		o[k] = p[k * nd] + cf[k] * in;
}

static __device__ inline float block_max(float v, float *red)
{
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
	v = warp_max(v);
	__syncthreads();
	if (lane == 0)
		red[w] = v;
	__syncthreads();
	float r = lane < nw ? red[lane] : -INFINITY;
	return warp_max(r);
}

static __device__ inline double block_sum_d(double v, double *red)
{
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	__syncthreads();
	if (lane == 0)
		red[w] = v;
	__syncthreads();
	double r = lane < nw ? red[lane] : 0.0;
	for (int o = 16; o > 0; o >>= 1)
		r += __shfl_xor_sync(0xffffffffu, r, o);
	return r;
}

/* Tiles of the products (linear.cu, q4_linear.cu; LT and LW also the
 * sparse MLP's and the router's): tokens a tile (LT), warps a block (LW),
 * and for the tiled and staged products tokens a tile (QT), columns of x
 * staged at a time (QK) and rows a warp (RW). */
#define LT 4
#define LW 8 /* warps per block */
#define QT 8    /* tokens a tile of the tiled and staged products */
#define QK 1024 /* columns of x staged at a time */
#define RW 8    /* rows a warp in the tiled products */

/* SMALL_ROWS: the most rows of an f32 matrix k_linear_small takes
 * (linear.cu), and of a router in one launch (norm.cu). */
#define SMALL_ROWS 16

/* Row operations' block (RB threads; also logsumexp's and argmax's). */
#define RB 256

/* The row kernels hold a thread's first RN values in registers, loaded
 * together before the sum (the loads overlap; the sum's order is the
 * plain loop's), and reuse them for the output. */
#define RN 8

/* AP: the blocks of a long row's argmax (sampling.cu's argmax1), whose
 * partials every stream keeps (amax: AP floats, AP int64s). */
#define AP 128

/* ---- scratch (cuda_backend.cu) ---- */

bool grow_scratch(vd_stream *s, void **p, size_t *n, size_t bytes, size_t cap);
void *scratch(vd_stream *s, size_t bytes);

/* ---- the table's operations, by file (gathered by table_template) ---- */

/* linear.cu */
void c_linear(vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor w);
void c_linear_rows(vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor w, vd_tensor ids);

/* q4_linear.cu (not table entries: linear.cu's q4 case, and vd_cuda_backend's set-up) */
void linear_q4(vd_stream *s, float *yd, const float *xd, vd_tensor w, const int32_t *ids, int64_t n, int64_t nout,
               dim3 grid, dim3 block);
void q4_linear_init(int smem_optin);
void c_linears(vd_stream *s, const vd_linears *l); /* the table's linears */

/* prefetch.cu (join_side: st waits for the prefetch branch; free_side:
 * its stream and events, with the stream's) */
void c_prefetch(vd_stream *s, const vd_prefetch *p);
void join_side(vd_stream *s);
void free_side(vd_stream *s);

/* sparse_mlp.cu */
void c_sparse_mlp(vd_stream *s, vd_tensor y, vd_tensor g, vd_tensor h, vd_tensor idx, vd_tensor x, vd_tensor up,
                  vd_tensor dt, float z);
void c_sparse_gelu_mul(vd_stream *s, vd_tensor g, vd_tensor u, int64_t dim, float z);

/* norm.cu */
void c_rmsnorm(vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor w, int64_t dim, float eps);
void c_row_rms(vd_stream *s, vd_tensor out, vd_tensor x, int64_t dim, float floor);
void c_scale_rows(vd_stream *s, vd_tensor x, vd_tensor sc, int64_t dim);
void c_mul_rows(vd_stream *s, vd_tensor x, vd_tensor w);
void c_norm_add(vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor w, vd_tensor a, vd_tensor b, int64_t dim, float eps,
                float c);
void c_router(vd_stream *s, vd_tensor y, vd_tensor f, vd_tensor x, vd_tensor nw, vd_tensor w, int64_t dim, float eps,
              float scale);
void c_norm_add_more(vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor w, vd_tensor a, vd_tensor b, vd_tensor bw,
                     vd_tensor ba, int64_t dim, float eps, float c, vd_tensor rep, vd_tensor f, vd_tensor fw);
void c_altup_predict_step(vd_stream *s, const vd_altup *a);
void c_norm_ropes(vd_stream *s, const vd_norm_ropes *r);
/* layer_step_on: whether the layer step name (altup_predict_step,
 * altup_correct_step, norm_add_more, norm_ropes) runs as its own kernel:
 * always unless VERDICT_LAYER_STEPS is 0 (none) or a comma-separated list
 * of the ones that do; the others run as the operations they stand for,
 * for comparisons. */
bool layer_step_on(const char *name);
void c_altup_correct_step(vd_stream *s, const vd_altup *a);
void c_router_coef(vd_stream *s, vd_tensor y, vd_tensor f, vd_tensor x, vd_tensor nw, vd_tensor w, int64_t dim,
                   float eps, float scale, vd_tensor cw, vd_tensor cy, float add, int has_add);

/* elementwise.cu */
void c_ew(vd_stream *s, int op, vd_tensor y, vd_tensor a, vd_tensor b, float c);
void c_altup_predict(vd_stream *s, vd_tensor pred, vd_tensor h, vd_tensor coef, int64_t n, int64_t d);
void c_altup_correct(vd_stream *s, vd_tensor out, vd_tensor pred, vd_tensor act, vd_tensor c, int64_t n, int64_t d);

/* rope.cu */
void c_rope(vd_stream *s, vd_tensor x, vd_tensor pos, int64_t heads, int64_t head_dim, vd_tensor inv_freq);
void c_norm_rope(vd_stream *s, vd_tensor y, vd_tensor idx, vd_tensor x, vd_tensor w, float eps, vd_tensor pos,
                 int64_t heads, int64_t head_dim, vd_tensor inv_freq);

/* attention.cu; attention_dec.cu's counters' bytes (vd_stream adone) */
void c_attention(vd_stream *s, const vd_attn *a);
size_t attn_dec_counters();

/* gather.cu */
void c_embed(vd_stream *s, vd_tensor y, vd_tensor t, vd_tensor ids, float scale);
void c_gather(vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor idx);
void c_scatter(vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor idx);
void c_copy2d(vd_stream *s, vd_tensor y, int64_t ys, vd_tensor x, int64_t xs, int64_t rows, int64_t cols);

/* sampling.cu */
void c_logsumexp(vd_stream *s, vd_tensor out, vd_tensor x);
void c_argmax(vd_stream *s, vd_tensor out, vd_tensor x);
void c_select(vd_stream *s, vd_tensor out, vd_tensor x, vd_tensor row, vd_tensor col);
void c_sample(vd_stream *s, vd_tensor out, vd_tensor x, vd_sampling p);

/* limits.cu */
int c_info(vd_backend *b, vd_info *out);
int c_limits(vd_backend *b, vd_limits *out);

#endif
