/*
 * attention_dec.cu: a decode step's attention in one launch (k_attn_dec):
 * a block a (query head, chunk of AC keys), as attention.cu's k_attn_part
 * with one head a block, whose chunk's key and value rows are copied into
 * shared memory at once (cp.async: one round of loads, where k_attn_part
 * waits on a round every few keys and another every few values), and the
 * last of a query head's blocks to finish combines its chunks
 * (combine_chunks, k_attn_combine's arithmetic) in place of a second
 * launch. The same operations in the same order as those two kernels, so
 * the same bits.
 */
#include "attention.cuh"
#include "cp_async.cuh"

#include <cstdlib>
#include <cstring>

namespace {

/* DEC_HEADS: the query heads a launch may take (each a counter of its
 * finished chunks, zeros between launches: the last block sets its own
 * back). */
constexpr int64_t DEC_HEADS = 4096;

/* k_attn_dec: block (query·hq + head, chunk) for d = 32·DT. The query's
 * keys are counted and the chunk's key rows found as in k_attn_part; its
 * rows of K (one group) and V are copied into shared memory, K's and V's
 * as two groups of copies, so that the scores start when K's have come.
 * Each key's score is a warp's: lane l's fmaf chain over columns l, l +
 * 32, ... in order, warp_sum, times scale; the chunk's softmax is
 * chunk_softmax's (k_attn_part's block_max and block_sum bits); column c's
 * sum is the fmaf chain of e_j·v_j[c] over the chunk's keys in order. The
 * partials go where k_attn_part writes them; a block's threads make theirs
 * visible (__threadfence) before its first thread counts the block done,
 * and the block that counts last reads every chunk's from L2 and
 * combines them. Chunks past the query's keys do nothing (the combination
 * takes the chunks with keys only, as k_attn_combine adds only those);
 * without keys the output is zeros. */
template <int DT>
__global__ void __launch_bounds__(AB, 1) k_attn_dec(vd_attn a, float *part, int64_t nch, int *done, int *err)
{
	constexpr int D = 32 * DT, P = D / 4; /* P: a row's 16-byte pieces */
	extern __shared__ __align__(16) float kvs[]; /* the chunk's key rows [AC][D], then its value rows */
	__shared__ float ev[AC], wsh[AB], lsh[AB], red[32];
	__shared__ int64_t krow[AC];
	__shared__ int ecum[AB], ws[AB / 32];
	__shared__ long long kred[AB / 32];
	__shared__ float sm, sl;
	__shared__ int last;
	pdl_wait();
	pdl_launch();
	int64_t bq = blockIdx.x, ch = blockIdx.y, i = bq / a.hq, h = bq % a.hq;
	int64_t g = h / (a.hq / a.hkv), ldk = a.hkv * D;
	int64_t lo, e0, e1;
	int64_t nkeys = attn_keys_block(a, i, &lo, &e0, &e1, kred);
	if (nkeys > a.max_keys) {
		if (threadIdx.x == 0 && ch == 0)
			atomicExch(err, VDC_EKEYS);
		nkeys = 0;
	}
	float *out = (float *)a.out.data + bq * D;
	int64_t nc = (nkeys + AC - 1) / AC; /* the chunks with keys */
	if (ch >= nc) {
		if (nkeys == 0 && ch == 0)
			for (int e = threadIdx.x; e < D; e += AB)
				out[e] = 0.0f;
		return;
	}
	int64_t cs = ch * AC, ce = cs + AC < nkeys ? cs + AC : nkeys;
	key_rows(a, e0, e1, lo, attn_lim(a, i), cs, ce, krow, ecum, ws); /* the chunk's key rows, in key order */
	int cnt = (int)(ce - cs);
	float *Ks = kvs, *Vs = kvs + AC * D;
	const float *K = (const float *)a.k.data + g * D, *V = (const float *)a.v.data + g * D;
	for (int t = threadIdx.x; t < cnt * P; t += AB)
		cp16(Ks + t * 4, K + krow[t / P] * ldk + (t % P) * 4);
	cp_commit();
	for (int t = threadIdx.x; t < cnt * P; t += AB)
		cp16(Vs + t * 4, V + krow[t / P] * ldk + (t % P) * 4);
	cp_commit();
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
	const float *q = (const float *)a.q.data + bq * D;
	float qr[DT];
#pragma unroll
	for (int k = 0; k < DT; k++)
		qr[k] = q[lane + 32 * k];
	cp_wait<1>(); /* this thread's copies of K */
	__syncthreads();
	constexpr int NW = AB / 32, KU = 4; /* a warp's keys at once */
	for (int j0 = w; j0 < cnt; j0 += KU * NW) {
		float acc[KU];
#pragma unroll
		for (int u = 0; u < KU; u++)
			acc[u] = 0.0f;
#pragma unroll
		for (int k = 0; k < DT; k++)
#pragma unroll
			for (int u = 0; u < KU; u++)
				if (j0 + u * NW < cnt)
					acc[u] = fmaf(qr[k], Ks[(j0 + u * NW) * D + lane + 32 * k], acc[u]);
#pragma unroll
		for (int u = 0; u < KU; u++) {
			int j = j0 + u * NW;
			if (j >= cnt)
				break;
			float s = warp_sum(acc[u]);
			if (lane == 0)
				ev[j] = s * a.scale;
		}
	}
	__syncthreads();
	if (w == 0)
		chunk_softmax<1>(ev, cnt, lane, &sm, &sl);
	cp_wait<0>(); /* and of V */
	__syncthreads();
	float *pp = part + (bq * nch + ch) * (D + 2);
	for (int c = threadIdx.x; c < D; c += AB) {
		float acc = 0.0f;
#pragma unroll 8
		for (int j = 0; j < cnt; j++)
			acc = fmaf(ev[j], Vs[j * D + c], acc);
		pp[2 + c] = acc;
	}
	if (threadIdx.x == 0)
		pp[0] = sm, pp[1] = sl;
	__threadfence();
	__syncthreads();
	if (threadIdx.x == 0) {
		int n = atomicAdd(done + bq, 1);
		last = n == (int)nc - 1;
		if (last)
			done[bq] = 0; /* for the next launch */
	}
	__syncthreads();
	if (!last)
		return;
	__threadfence();
	combine_chunks(part + bq * nch * (D + 2), nc, D, out, wsh, lsh, red);
}

/* attn_dec_max: the most queries k_attn_dec takes: 1 by default, a
 * decode step of one sequence (VERDICT_ATTN_DEC=N for N, 0 never: the two
 * kernels, for comparisons). At batch 8 it measured slower than the two
 * kernels on an H100 (1,850 against 2,160 tokens/s): its blocks hold 128
 * KB of shared memory each, one a multiprocessor, and the chunks past a
 * query's keys (a recording's capacity) take their turns too. Read at
 * every call, so that the harnesses can compare the ways in one process. */
static int64_t attn_dec_max()
{
	const char *e = getenv("VERDICT_ATTN_DEC");
	if (!e || !*e)
		return 1;
	char *end = nullptr;
	long v = strtol(e, &end, 10);
	return *end || v < 0 ? 1 : (int64_t)v;
}

template <int DT> static bool dec_ready(size_t smem)
{
	static const bool ok = cudaFuncSetAttribute(k_attn_dec<DT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
	                                            (int)smem) == cudaSuccess;
	return ok;
}

template <int DT>
static bool dec_launch(vd_stream *s, const vd_attn &a, float *part, int64_t nch, int64_t nq)
{
	size_t smem = (size_t)2 * AC * 32 * DT * sizeof(float);
	cuda_state *cs = st_of(s->b);
	if (smem > (size_t)cs->smem_optin || !dec_ready<DT>(smem)) {
		cudaGetLastError();
		return false;
	}
	launch(s, k_attn_dec<DT>, dim3((unsigned)(nq * a.hq), (unsigned)nch), AB, smem, a, part, nch, s->adone,
	       cs->dev_err);
	return true;
}

} // namespace

bool attn_dec(vd_stream *s, const vd_attn &a, float *part, int64_t nch, int64_t nq)
{
	if (!s->adone || nq > attn_dec_max() || nq * a.hq > DEC_HEADS || a.hkv <= 0 || a.hq % a.hkv != 0 ||
	    a.d % 32 != 0)
		return false;
	switch (a.d / 32) {
	case 1: return dec_launch<1>(s, a, part, nch, nq);
	case 2: return dec_launch<2>(s, a, part, nch, nq);
	case 4: return dec_launch<4>(s, a, part, nch, nq);
	case 8: return dec_launch<8>(s, a, part, nch, nq);
	default: return false;
	}
}

size_t attn_dec_counters() { return (size_t)DEC_HEADS * sizeof(int); }
