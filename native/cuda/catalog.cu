/*
 * catalog.cu: the CUDA backend's catalog step (backend.h, vd_cat_step),
 * compiled into libverdict_cuda.so beside cuda_backend.cu (build/cuda.sh),
 * whose table calls the cat_cuda_* entry points below.
 *
 * A bound grammar is its flat image (catalog_walk.h) in global memory;
 * when the image fits in CAT_CONST_BYTES it is also the owner of the
 * constant-memory copy c_trie, which its steps read (one broadcast read a
 * node for the whole block). One grammar owns c_trie at a time: a step of
 * another grammar re-binds it first (after the device has finished every
 * earlier reader), and a step enqueued while its stream is being captured
 * into a graph always enqueues the re-binding copy, so that replaying the
 * graph re-binds at launch (graph replay replays kernels and copies, not
 * host bookkeeping). c_trie's word 0 is its owner's id, and every launch
 * checks it: a launch that finds another grammar there (a graph replayed
 * since the last re-bind) reads global memory instead, so a stale c_trie
 * costs speed, never a walk over the wrong trie. Larger images are read
 * from global memory.
 *
 * A step is three launches of data-independent shape (the grid depends on
 * the number of sequences only, so it can be captured):
 *   k_cat_legal  one block of 256 threads a sequence, a thread an edge of
 *                its node: the legal set, compacted in edge (= token)
 *                order by a block scan;
 *   k_cat_head   a warp per candidate slot (256 a sequence, fixed): the dot
 *                product of the hidden row with that token's head row with
 *                exactly the dense linear kernel's arithmetic (lane l sums
 *                its columns in order with fmaf, then the warp's xor tree),
 *                then the dense path's soft-cap: sparse = dense, bit for bit;
 *   k_cat_pick   one block of 256 threads a sequence: the argmax by a fixed
 *                tree (ties: the lower index, which is the lower token),
 *                the winner's edge checked live again, the walk advanced
 *                and, in the counts form, the finished entry's path
 *                decremented by the block.
 * Every output is written by one thread in an order fixed by the shapes.
 */
#include "../backend.h"
#include "../catalog_walk.h"
#include "device_math.cuh"
#include "pdl.cuh"
#include "q4_mma.cuh"
#include "q4_mma.h"

#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <new>
#include <vector>

#define CAT_CONST_BYTES (63 * 1024) /* of the 64 KiB bank; the rest is left to others */
#define CAT_CONST_WORDS (CAT_CONST_BYTES / 4)
#define CAT_MAXDEV 64
#define CAT_EDTYPE 1001 /* VDC_EDTYPE: a head the dense linear does not take */
#define CAT_TB 256      /* threads of the legal and pick blocks */
#define CAT_HW 8        /* warps of a head block */

struct vd_gram {
	int dev;
	vd_gram_layout l;
	int32_t id;    /* the grammar's serial number, word 0 of dptr */
	int32_t *dptr; /* id, the image, then a counter of stale-constant launches */
	bool cnst;     /* its steps read c_trie */
};

static __constant__ int32_t c_trie[CAT_CONST_WORDS];

/* c_trie holds the owner's id, then its image. */
struct ConstTrie {
	__device__ __forceinline__ int32_t operator[](int64_t i) const { return c_trie[1 + i]; }
};
struct GlobalTrie {
	const int32_t *p;
	__device__ __forceinline__ int32_t operator[](int64_t i) const { return __ldg(p + i); }
};

/* Where a launch reads its grammar: from c_trie when the grammar is
 * constant-resident and c_trie holds it (its id in word 0), else from
 * global memory. The check makes a stale c_trie (a graph replay of another
 * grammar since the last re-bind) cost speed, never correctness; such
 * launches are counted (a block each) in the word after the image. */
struct Where {
	const int32_t *img; /* the image in global memory */
	int32_t id;
	int cnst;
	int *stale;
};

__device__ __forceinline__ bool cat_use_const(const Where &w)
{
	if (!w.cnst)
		return false;
	bool ok = c_trie[0] == w.id;
	if (!ok && threadIdx.x == 0)
		atomicAdd(w.stale, 1);
	return ok;
}

enum { W_F32, W_BF16, W_BF16P, W_Q4, W_Q4MMA };

struct Args {
	const float *h;
	const void *w;
	const float *wso;
	int64_t D, vocab;
	int lg;
	float softcap;
	int counts;
	const int32_t *hrow, *slot, *k;
	int32_t *seq, *banned, *live, *emitted, *legal, *next;
	float *logits;
	int64_t kmax;
};

__device__ __forceinline__ int64_t cat_slot(const Args &a, int64_t i) { return a.slot ? a.slot[i] : i; }

/* cat_legal_edge: edge e of node n is in the walk's legal set (state.go's
 * Legal): a token edge with an unemitted entry below it; SEP at a node
 * ending an unspent entry while more are owed, STOP when none are. */
template <class T>
__device__ bool cat_legal_edge(const T &tr, const vd_gram_layout &l, const Args &a, int64_t sl,
                               const int32_t *sq, int32_t n, int32_t e)
{
	int32_t ch = tr[l.child + e];
	const int32_t *bn = a.banned + sl * 2 * l.words;
	if (ch >= 0) {
		if (a.counts)
			return a.live[sl * l.edges + e] > 0;
		for (int32_t w = 0; w < 2 * l.words; w++)
			if (tr[l.mask + 2 * (int64_t)e * l.words + w] & ~bn[w])
				return true;
		return false;
	}
	int32_t end = tr[l.ends + n];
	if (end < 0)
		return false;
	bool last = sq[VD_SEQ_NEMIT] + 1 == sq[VD_SEQ_K];
	bool spent = (bn[end / 32] >> (end % 32)) & 1;
	return !spent && (ch == VD_CHILD_STOP) == last;
}

template <class T>
__device__ __forceinline__ void cat_legal_body(const T &tr, const vd_gram_layout &l, const Args &a)
{
	__shared__ int wc[CAT_TB / 32];
	int64_t i = blockIdx.x, sl = cat_slot(a, i);
	int32_t *sq = a.seq + sl * VD_SEQ_FIELDS;
	int t = threadIdx.x, lane = t & 31, w = t >> 5;
	if (sq[VD_SEQ_DONE] || sq[VD_SEQ_ERR])
		return;
	int32_t node = sq[VD_SEQ_NODE];
	if (node < 0 || node >= l.nodes) {
		__syncthreads(); /* every thread has read the fields */
		if (t == 0) {
			sq[VD_SEQ_ERR] = VD_CAT_ETRIE;
			sq[VD_SEQ_ENODE] = node;
		}
		return;
	}
	int32_t e0 = tr[l.first + node], e1 = tr[l.first + node + 1];
	int32_t e = e0 + t;
	bool ok = e < e1 && cat_legal_edge(tr, l, a, sl, sq, node, e);
	int32_t tok = ok ? tr[l.token + e] : 0;
	unsigned m = __ballot_sync(0xffffffffu, ok);
	if (lane == 0)
		wc[w] = __popc(m);
	int bad = __syncthreads_or(ok && tok >= a.vocab);
	int before = 0, total = 0;
	for (int q = 0; q < CAT_TB / 32; q++) {
		before += q < w ? wc[q] : 0;
		total += wc[q];
	}
	int32_t *lg = a.legal + sl * 2 * VD_CAT_MAX_EDGES;
	if (ok) {
		int at = before + __popc(m & ((1u << lane) - 1u));
		lg[at] = tok;
		lg[VD_CAT_MAX_EDGES + at] = e;
	}
	if (t == 0) {
		sq[VD_SEQ_NLEGAL] = total;
		if (total == 0 || bad) {
			sq[VD_SEQ_ERR] = total == 0 ? VD_CAT_EEMPTY : VD_CAT_ETRIE;
			sq[VD_SEQ_ENODE] = node;
		}
	}
}

__global__ void __launch_bounds__(CAT_TB) k_cat_legal(Where wh, vd_gram_layout l, Args a)
{
	pdl_wait();
	pdl_launch();
	if (cat_use_const(wh))
		cat_legal_body(ConstTrie{}, l, a);
	else
		cat_legal_body(GlobalTrie{wh.img}, l, a);
}

template <int K>
__global__ void __launch_bounds__(32 * CAT_HW) k_cat_head(Args a)
{
	pdl_wait();
	pdl_launch();
	int lane = threadIdx.x & 31;
	int64_t j = (int64_t)blockIdx.x * CAT_HW + (threadIdx.x >> 5);
	int64_t i = blockIdx.y, sl = cat_slot(a, i);
	const int32_t *sq = a.seq + sl * VD_SEQ_FIELDS;
	if (sq[VD_SEQ_DONE] || sq[VD_SEQ_ERR] || j >= sq[VD_SEQ_NLEGAL])
		return; /* the whole warp */
	int64_t r = a.legal[sl * 2 * VD_CAT_MAX_EDGES + j];
	int64_t cols = a.D;
	const float *x = a.h + (a.hrow ? a.hrow[i] : i) * cols;
	float acc = 0.0f;
	if (K == W_F32) {
		const float *wr = (const float *)a.w + r * cols;
		for (int64_t c = lane; c < cols; c += 32)
			acc = fmaf(x[c], __ldg(wr + c), acc);
	} else if (K == W_BF16) {
		const uint16_t *wr = (const uint16_t *)a.w + r * cols;
		for (int64_t c = lane; c < cols; c += 32)
			acc = fmaf(x[c], __uint_as_float((uint32_t)__ldg(wr + c) << 16), acc);
	} else if (K == W_BF16P) {
		const uint32_t *wr = (const uint32_t *)((const uint16_t *)a.w + r * cols);
		for (int64_t c2 = lane; 2 * c2 < cols; c2 += 32) {
			uint32_t u = __ldg(wr + c2);
			float w0 = __uint_as_float(u << 16), w1 = __uint_as_float(u & 0xffff0000u);
			acc = fmaf(x[2 * c2], w0, acc);
			acc = fmaf(x[2 * c2 + 1], w1, acc);
		}
	} else { /* Q4: 32-column blocks lane, lane + 32, ... */
		q4_sums<1>(&acc, 1, [&](int, int64_t c) { return x[c]; }, (const uint8_t *)a.w, a.wso, r, cols, a.lg, lane);
	}
	acc = warp_sum(acc);
	if (lane == 0) {
		float v = acc;
		if (a.softcap > 0)
			v = a.softcap * d_tanh(v / a.softcap);
		a.logits[sl * VD_CAT_MAX_EDGES + j] = v;
	}
}

/* k_cat_head_mma: the q4 head on tensor cores with q4_mma's arithmetic,
 * the dense linear's for a matrix it takes (sparse = dense, bit for bit):
 * a block 16·(8/S) candidate slots of sequence blockIdx.y, warp w the
 * slice w % S of slot tile blockIdx.x·(8/S) + w/S, the sequence's hidden
 * row the mma's token 0, the slices added in slice order. */
__global__ void __launch_bounds__(32 * CAT_HW) k_cat_head_mma(Args a, int S)
{
	__shared__ float red[CAT_HW][4][32];
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
	int64_t i = blockIdx.y, sl = cat_slot(a, i);
	pdl_wait();
	const int32_t *sq = a.seq + sl * VD_SEQ_FIELDS;
	int per = CAT_HW / S, nl = sq[VD_SEQ_NLEGAL];
	if (sq[VD_SEQ_DONE] || sq[VD_SEQ_ERR] || (int64_t)blockIdx.x * per * 16 >= nl)
		return; /* the whole block */
	int s = w % S;
	int64_t j0 = ((int64_t)blockIdx.x * per + w / S) * 16, ja = j0 + g, jb = ja + 8;
	int64_t cols = a.D, G = cols >> 6;
	const float *x = a.h + (a.hrow ? a.hrow[i] : i) * cols;
	q4mma::Rows<1> rw; /* the slots' rows: the legal list's tokens */
	q4mma::rows_at<1>(rw, (const uint8_t *)a.w, a.wso, a.legal + sl * 2 * VD_CAT_MAX_EDGES, j0, nl, cols, a.lg);
	bool waited = true, vec = ((uintptr_t)x & 15) == 0;
	const float *xr = x + q4mma::xcol(t);
	float P1[1][1][4];
	/* the hidden row quantised in registers, as q4_mma's pre-pass does */
	auto bload = [&](q4mma::Bq &b, int, int64_t ch) {
		float4 xv[4];
		q4mma::load_x(xv, xr + ch * 64, g == 0, vec);
		q4mma::quant(b, xv);
	};
	q4mma::slice<1, 1, 4, true>(P1, rw, bload, s * G / S, (s + 1) * G / S, a.lg, waited);
	float *P = P1[0][0];
#pragma unroll
	for (int e = 0; e < 4; e++)
		red[w][e][lane] = P[e];
	__syncthreads();
	if (s == 0 && t == 0) /* token 0: c0 of row g, c2 of row g + 8 */
		for (int e = 0; e < 4; e += 2) {
			float v = 0.0f;
			for (int k = 0; k < S; k++)
				v = v + red[w + k][e][lane];
			int64_t j = e == 0 ? ja : jb;
			if (j < nl) {
				if (a.softcap > 0)
					v = a.softcap * d_tanh(v / a.softcap);
				a.logits[sl * VD_CAT_MAX_EDGES + j] = v;
			}
		}
}

template <class T>
__device__ __forceinline__ void cat_pick_body(const T &tr, const vd_gram_layout &l, const Args &a)
{
	__shared__ float bv[CAT_TB];
	__shared__ int bi[CAT_TB];
	__shared__ int32_t s_end;
	int64_t i = blockIdx.x, sl = cat_slot(a, i);
	int32_t *sq = a.seq + sl * VD_SEQ_FIELDS;
	int t = threadIdx.x;
	if (sq[VD_SEQ_DONE] || sq[VD_SEQ_ERR])
		return;
	int nl = sq[VD_SEQ_NLEGAL];
	int32_t node = sq[VD_SEQ_NODE];
	float v = t < nl ? a.logits[sl * VD_CAT_MAX_EDGES + t] : -INFINITY;
	if (__syncthreads_or(t < nl && v != v)) {
		if (t == 0) {
			sq[VD_SEQ_ERR] = VD_CAT_ENAN;
			sq[VD_SEQ_ENODE] = node;
		}
		return;
	}
	bv[t] = v;
	bi[t] = t < nl ? t : INT_MAX;
	__syncthreads();
	for (int st = CAT_TB / 2; st > 0; st >>= 1) {
		if (t < st) {
			float v2 = bv[t + st];
			int i2 = bi[t + st];
			if (v2 > bv[t] || (v2 == bv[t] && i2 < bi[t])) {
				bv[t] = v2;
				bi[t] = i2;
			}
		}
		__syncthreads();
	}
	if (t == 0) {
		s_end = -1;
		int best = bi[0];
		const int32_t *lg = a.legal + sl * 2 * VD_CAT_MAX_EDGES;
		int32_t e = lg[VD_CAT_MAX_EDGES + best], tok = lg[best];
		int32_t ch = tr[l.child + e];
		if (!cat_legal_edge(tr, l, a, sl, sq, node, e)) {
			sq[VD_SEQ_ERR] = VD_CAT_EEDGE;
			sq[VD_SEQ_ENODE] = node;
		} else {
			sq[VD_SEQ_BEST] = best;
			sq[VD_SEQ_STEP] += 1;
			a.next[sl] = tok;
			if (ch >= 0) {
				sq[VD_SEQ_NODE] = ch;
				sq[VD_SEQ_ENTRY] = -1;
			} else {
				int32_t end = tr[l.ends + node], ne = sq[VD_SEQ_NEMIT];
				if (ne >= a.kmax) {
					sq[VD_SEQ_ERR] = VD_CAT_EFULL;
					sq[VD_SEQ_ENODE] = node;
				} else {
					a.emitted[sl * a.kmax + ne] = end;
					sq[VD_SEQ_NEMIT] = ne + 1;
					a.banned[sl * 2 * l.words + end / 32] |= (int32_t)(1u << (end % 32));
					s_end = end;
					sq[VD_SEQ_ENTRY] = end;
					sq[VD_SEQ_NODE] = 0;
					sq[VD_SEQ_DONE] = ch == VD_CHILD_STOP;
				}
			}
		}
	}
	__syncthreads();
	int32_t end = s_end;
	if (a.counts && end >= 0) {
		int32_t p0 = tr[l.path_first + end], p1 = tr[l.path_first + end + 1];
		for (int32_t p = p0 + t; p < p1; p += CAT_TB)
			a.live[sl * l.edges + tr[l.path + p]] -= 1; /* a path's edges are distinct */
	}
}

__global__ void __launch_bounds__(CAT_TB) k_cat_pick(Where wh, vd_gram_layout l, Args a)
{
	pdl_wait();
	pdl_launch();
	if (cat_use_const(wh))
		cat_pick_body(ConstTrie{}, l, a);
	else
		cat_pick_body(GlobalTrie{wh.img}, l, a);
}

__global__ void k_cat_init(const int32_t *img, vd_gram_layout l, Args a)
{
	pdl_wait();
	pdl_launch();
	int64_t i = blockIdx.x, sl = cat_slot(a, i);
	int32_t *sq = a.seq + sl * VD_SEQ_FIELDS;
	int t = threadIdx.x;
	int32_t k = a.k[i];
	if (t < VD_SEQ_FIELDS) {
		int32_t v = 0;
		if (t == VD_SEQ_K)
			v = k;
		else if (t == VD_SEQ_BEST || t == VD_SEQ_ENTRY || t == VD_SEQ_ENODE)
			v = -1;
		else if (t == VD_SEQ_ERR && (k < 1 || k > l.entries || k > a.kmax))
			v = VD_CAT_EFULL;
		sq[t] = v;
	}
	for (int32_t w = t; w < 2 * l.words; w += blockDim.x)
		a.banned[sl * 2 * l.words + w] = 0;
	for (int64_t j = t; j < a.kmax; j += blockDim.x)
		a.emitted[sl * a.kmax + j] = -1;
	if (a.counts)
		for (int32_t e = t; e < l.edges; e += blockDim.x)
			a.live[sl * l.edges + e] = img[l.count + e];
	if (t == 0)
		a.next[sl] = -1;
}

static std::mutex cat_mu;
static vd_gram *cat_owner[CAT_MAXDEV];
static long cat_rebinds;
static int32_t cat_serial;

static Args args_of(const vd_cat_step *c)
{
	Args a;
	a.h = (const float *)c->h.data;
	a.w = c->w.data;
	a.wso = (const float *)c->w.aux;
	a.D = c->h.cols;
	a.vocab = c->w.rows;
	a.lg = 0;
	if (c->w.dtype == VD_Q4)
		while ((1LL << a.lg) < c->w.group)
			a.lg++;
	a.softcap = c->softcap;
	a.counts = c->counts;
	a.hrow = (const int32_t *)c->hrow.data;
	a.slot = (const int32_t *)c->slot.data;
	a.k = (const int32_t *)c->k.data;
	a.seq = (int32_t *)c->seq.data;
	a.banned = (int32_t *)c->banned.data;
	a.live = (int32_t *)c->live.data;
	a.emitted = (int32_t *)c->emitted.data;
	a.legal = (int32_t *)c->legal.data;
	a.next = (int32_t *)c->next.data;
	a.logits = (float *)c->logits.data;
	a.kmax = c->emitted.cols;
	return a;
}

/* bind_const makes g the owner of c_trie, on stream st. */
static int bind_const(cudaStream_t st, vd_gram *g)
{
	std::lock_guard<std::mutex> lock(cat_mu);
	cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
	cudaError_t e = cudaStreamIsCapturing(st, &cap);
	if (e != cudaSuccess)
		return (int)e;
	bool capturing = cap != cudaStreamCaptureStatusNone;
	if (!capturing && cat_owner[g->dev] == g)
		return 0;
	/* Every earlier reader of the old contents, on any stream, is done. */
	if (!capturing && (e = cudaDeviceSynchronize()) != cudaSuccess)
		return (int)e;
	e = cudaMemcpyToSymbolAsync(c_trie, g->dptr, (size_t)(1 + g->l.total) * sizeof(int32_t), 0,
	                            cudaMemcpyDeviceToDevice, st);
	if (e != cudaSuccess)
		return (int)e;
	/* ... and every later reader, on any stream, sees the new ones. */
	if (!capturing && (e = cudaStreamSynchronize(st)) != cudaSuccess)
		return (int)e;
	cat_owner[g->dev] = capturing ? nullptr : g; /* a graph's replays own it */
	cat_rebinds++;
	return 0;
}

int cat_cuda_bind(int dev, const vd_grammar *g, vd_gram **out)
{
	*out = nullptr;
	if (dev < 0 || dev >= CAT_MAXDEV)
		return VD_CAT_ESHAPE;
	int rc = vd_grammar_check(g);
	if (rc)
		return rc;
	vd_gram *h = new (std::nothrow) vd_gram();
	if (!h)
		return VD_CAT_EMEM;
	h->dev = dev;
	h->l = vd_gram_layout_of(g);
	std::vector<int32_t> img((size_t)h->l.total + 2);
	vd_gram_flatten(img.data() + 1, g, h->l);
	{
		std::lock_guard<std::mutex> lock(cat_mu);
		h->id = ++cat_serial;
	}
	img[0] = h->id;
	img[(size_t)h->l.total + 1] = 0;
	if (cudaMalloc(&h->dptr, img.size() * sizeof(int32_t)) != cudaSuccess) {
		cudaGetLastError();
		delete h;
		return VD_CAT_EMEM;
	}
	if (cudaMemcpy(h->dptr, img.data(), img.size() * sizeof(int32_t), cudaMemcpyHostToDevice) != cudaSuccess) {
		cudaGetLastError();
		cudaFree(h->dptr);
		delete h;
		return VD_CAT_EMEM;
	}
	h->cnst = (size_t)(1 + h->l.total) * sizeof(int32_t) <= CAT_CONST_BYTES;
	*out = h;
	return VD_CAT_OK;
}

void cat_cuda_free(int dev, vd_gram *g)
{
	(void)dev;
	if (!g)
		return;
	{
		std::lock_guard<std::mutex> lock(cat_mu);
		if (cat_owner[g->dev] == g)
			cat_owner[g->dev] = nullptr;
	}
	cudaFree(g->dptr);
	delete g;
}

/* k_cat_running: how many of the step's n walks are neither done nor
 * failed (one block; a fixed tree over the threads' counts). */
__global__ void __launch_bounds__(CAT_TB) k_cat_running(Args a, int64_t n, int32_t *out)
{
	__shared__ int32_t part[CAT_TB];
	pdl_wait();
	pdl_launch();
	int32_t c = 0;
	for (int64_t i = threadIdx.x; i < n; i += CAT_TB) {
		const int32_t *sq = a.seq + cat_slot(a, i) * VD_SEQ_FIELDS;
		c += !sq[VD_SEQ_DONE] && !sq[VD_SEQ_ERR];
	}
	part[threadIdx.x] = c;
	__syncthreads();
	for (int w = CAT_TB / 2; w > 0; w /= 2) {
		if ((int)threadIdx.x < w)
			part[threadIdx.x] += part[threadIdx.x + w];
		__syncthreads();
	}
	if (threadIdx.x == 0)
		out[0] = part[0];
}

/* first_error: the first of a step's launch errors, else the runtime's
 * last one. */
static int first_error(cudaError_t e)
{
	cudaError_t last = cudaGetLastError();
	return (int)(e != cudaSuccess ? e : last);
}

/* The entry points take pdl: whether their launches use programmatic
 * dependent launch (pdl.cuh; the backend's choice for the stream). */
int cat_cuda_init(cudaStream_t st, bool pdl, vd_gram *g, const vd_cat_step *c)
{
	if (c->n <= 0)
		return 0;
	Args a = args_of(c);
	return first_error(launch_pdl(pdl, k_cat_init, (unsigned)c->n, CAT_TB, 0, st, g->dptr + 1, g->l, a));
}

int cat_cuda_step_pdl(cudaStream_t st, bool pdl, vd_gram *g, const vd_cat_step *c)
{
	if (c->n <= 0)
		return 0;
	Args a = args_of(c);
	int64_t cols = c->w.cols;
	int kind;
	switch (c->w.dtype) {
	case VD_F32:
		kind = W_F32;
		break;
	case VD_BF16:
		kind = cols % 2 == 0 && ((uintptr_t)c->w.data & 3) == 0 ? W_BF16P : W_BF16;
		break;
	case VD_Q4:
		if (((uintptr_t)c->w.data & 3) != 0 || cols % 32 != 0)
			return CAT_EDTYPE;
		kind = q4_mma_fits(c->w.data, cols, c->w.group) ? W_Q4MMA : W_Q4;
		break;
	default:
		return CAT_EDTYPE;
	}
	unsigned n = (unsigned)c->n;
	if (g->cnst)
		if (int rc = bind_const(st, g))
			return rc;
	Where wh{g->dptr + 1, g->id, g->cnst ? 1 : 0, (int *)(g->dptr + 1 + g->l.total)};
	cudaError_t e = cudaSuccess;
	auto keep = [&e](cudaError_t r) {
		if (e == cudaSuccess)
			e = r;
	};
	keep(launch_pdl(pdl, k_cat_legal, n, CAT_TB, 0, st, wh, g->l, a));
	dim3 hg(VD_CAT_MAX_EDGES / CAT_HW, n);
	switch (kind) {
	case W_F32:
		keep(launch_pdl(pdl, k_cat_head<W_F32>, hg, 32 * CAT_HW, 0, st, a));
		break;
	case W_BF16:
		keep(launch_pdl(pdl, k_cat_head<W_BF16>, hg, 32 * CAT_HW, 0, st, a));
		break;
	case W_BF16P:
		keep(launch_pdl(pdl, k_cat_head<W_BF16P>, hg, 32 * CAT_HW, 0, st, a));
		break;
	case W_Q4MMA: {
		int S = q4mma::slices(cols >> 6), per = CAT_HW / S;
		dim3 mg((VD_CAT_MAX_EDGES / 16 + per - 1) / per, n);
		keep(launch_pdl(pdl, k_cat_head_mma, mg, 32 * CAT_HW, 0, st, a, S));
		break;
	}
	default:
		keep(launch_pdl(pdl, k_cat_head<W_Q4>, hg, 32 * CAT_HW, 0, st, a));
		break;
	}
	keep(launch_pdl(pdl, k_cat_pick, n, CAT_TB, 0, st, wh, g->l, a));
	if (c->running.data)
		keep(launch_pdl(pdl, k_cat_running, 1, CAT_TB, 0, st, a, c->n, (int32_t *)c->running.data));
	return first_error(e);
}

/* cat_cuda_step: cat_cuda_step_pdl with the device's PDL setting (the
 * harness's entry, on a stream of its own). */
bool cuda_pdl_device(int dev);
int cat_cuda_step(cudaStream_t st, vd_gram *g, const vd_cat_step *c)
{
	return cat_cuda_step_pdl(st, cuda_pdl_device(g->dev), g, c);
}

/* For the harness: whether g is constant-resident, how many of its
 * launches found c_trie holding another grammar (and read global memory),
 * and how many times c_trie has been (re-)bound. */
int cat_cuda_resident(const vd_gram *g) { return g && g->cnst; }
long cat_cuda_stale(const vd_gram *g)
{
	int v = 0;
	if (cudaMemcpy(&v, g->dptr + 1 + g->l.total, sizeof v, cudaMemcpyDeviceToHost) != cudaSuccess)
		return -1;
	return v;
}
long cat_cuda_rebinds(void)
{
	std::lock_guard<std::mutex> lock(cat_mu);
	return cat_rebinds;
}
