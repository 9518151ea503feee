/*
 * attention_one.cu: a few queries' attention in one launch (k_attn_one): a
 * block a query head takes every chunk of the query's keys
 * and combines them itself, with the bits of attention.cu's k_attn_part and
 * k_attn_combine, without their partials or the second launch.
 */
#include "attention.cuh"

#define OC (ATTN_ONE_KEYS / AC) /* chunks a block may take */

/* k_attn_one: block x = query·(hq/G) + h0/G takes query heads h0..h0+G−1
 * (of one key/value group: G divides gq = hq/hkv). The query's visible keys' rows
 * (attention.cu's scan of the entries' visible keys), their scores for the
 * group's G heads (score_keys: the warps take the keys 32/G at a time in
 * turn), each chunk's softmax (chunk_softmax: m_c, e_j, l_c), then
 * k_attn_combine's arithmetic, chunk by chunk in order: M = max m_c, L =
 * Σ d_exp(m_c − M)·l_c and out[e] = Σ d_exp(m_c − M)·o_c[e] / L, where
 * o_c[e] is the fmaf chain of e_j·v_j[e] over the chunk's keys, as
 * k_attn_part writes it (a chunk with l_c not above 0 adds nothing; no
 * keys: zeros). */
template <int G, int DT>
__global__ void __launch_bounds__(AB) k_attn_one(vd_attn a, int64_t gq, int *err)
{
	__shared__ float ev[ATTN_ONE_KEYS * G]; /* [j][hh]: the scores, then their exponentials */
	__shared__ int64_t krow[ATTN_ONE_KEYS];
	__shared__ int ecum[AB], ws[AB / 32];
	__shared__ float cm[OC][G], cl[OC][G];
	__shared__ int64_t s_n, s_lo, s_e0, s_e1;
	pdl_wait();
	pdl_launch();
	int64_t per = a.hq / G, i = blockIdx.x / per, h0 = blockIdx.x % per * G, g = h0 / gq, d = a.d, ldk = a.hkv * d;
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = AB / 32;
	if (threadIdx.x == 0) {
		int64_t lo, e0, e1, n = attn_keys(a, i, &lo, &e0, &e1);
		if (n > a.max_keys || n > ATTN_ONE_KEYS) {
			if (h0 == 0)
				atomicExch(err, VDC_EKEYS);
			n = 0;
		}
		s_n = n, s_lo = lo, s_e0 = e0, s_e1 = e1;
	}
	__syncthreads();
	int nkeys = (int)s_n;
	float *out = (float *)a.out.data + (i * a.hq + h0) * d;
	if (nkeys == 0) {
		for (int64_t e = threadIdx.x; e < G * d; e += AB)
			out[e] = 0.0f;
		return;
	}
	key_rows(a, s_e0, s_e1, s_lo, attn_lim(a, i), 0, nkeys, krow, ecum, ws); /* the keys' rows, in key order */
	const float *K = (const float *)a.k.data + g * d, *V = (const float *)a.v.data + g * d;
	score_keys<G, DT>((const float *)a.q.data + (i * a.hq + h0) * d, d, K, ldk, krow, nkeys, a.scale, ev, lane,
	                  w * (32 / G), nw * (32 / G));
	__syncthreads();
	int nch = (nkeys + AC - 1) / AC;
	for (int p = w; p < nch * G; p += nw) {
		int c = p / G, hh = p % G, cnt = nkeys - c * AC < AC ? nkeys - c * AC : AC;
		chunk_softmax<G>(ev + c * AC * G + hh, cnt, lane, &cm[c][hh], &cl[c][hh]);
	}
	__syncthreads();
	float M[G], L[G];
#pragma unroll
	for (int hh = 0; hh < G; hh++) {
		M[hh] = -INFINITY;
		for (int c = 0; c < nch; c++)
			if (cl[c][hh] > 0.0f)
				M[hh] = fmaxf(M[hh], cm[c][hh]);
		L[hh] = 0.0f;
		for (int c = 0; c < nch; c++)
			if (cl[c][hh] > 0.0f)
				L[hh] = fmaf(d_exp(cm[c][hh] - M[hh]), cl[c][hh], L[hh]);
	}
	for (int64_t e = threadIdx.x; e < d; e += AB) {
		float acc[G];
#pragma unroll
		for (int hh = 0; hh < G; hh++)
			acc[hh] = 0.0f;
		for (int c = 0; c < nch; c++) {
			int j1 = nkeys < (c + 1) * AC ? nkeys : (c + 1) * AC;
			float o[G];
#pragma unroll
			for (int hh = 0; hh < G; hh++)
				o[hh] = 0.0f;
			for (int j = c * AC; j < j1; j++) {
				float vv = V[krow[j] * ldk + e];
#pragma unroll
				for (int hh = 0; hh < G; hh++)
					o[hh] = fmaf(ev[j * G + hh], vv, o[hh]);
			}
#pragma unroll
			for (int hh = 0; hh < G; hh++)
				if (cl[c][hh] > 0.0f)
					acc[hh] = fmaf(d_exp(cm[c][hh] - M[hh]), o[hh], acc[hh]);
		}
#pragma unroll
		for (int hh = 0; hh < G; hh++)
			out[hh * d + e] = L[hh] > 0.0f ? acc[hh] / L[hh] : 0.0f;
	}
}

/* attn_one_on: VERDICT_ATTN_ONE=1 (off by default: decode measured slower with
 * it on an H100, 242 against 301 tokens/s; native/cuda/README.md). Read
 * at every call, so that the harnesses can compare the ways in one
 * process. */
static bool attn_one_on()
{
	return env_is("VERDICT_ATTN_ONE", "1");
}

bool attn_one_fits(const vd_attn *a, int64_t nq, int64_t max_keys)
{
	return attn_one_on() && nq > 0 && nq < 16 && max_keys <= ATTN_ONE_KEYS && attn_tiles_take(a);
}

/* attn_one: a block a query head (8 blocks a query for E2B, each with its
 * own chunk loop: more blocks than a block a key/value group, each head's
 * bits its own either way). */
void attn_one(vd_stream *s, const vd_attn &a, int64_t nq)
{
	unsigned blocks = (unsigned)(nq * a.hq);
	int64_t gq = a.hq / a.hkv;
	int *err = st_of(s->b)->dev_err;
	switch (a.d / 32) {
	case 1: launch(s, k_attn_one<1, 1>, blocks, AB, 0, a, gq, err); break;
	case 2: launch(s, k_attn_one<1, 2>, blocks, AB, 0, a, gq, err); break;
	case 4: launch(s, k_attn_one<1, 4>, blocks, AB, 0, a, gq, err); break;
	case 8: launch(s, k_attn_one<1, 8>, blocks, AB, 0, a, gq, err); break;
	case 16: launch(s, k_attn_one<1, 16>, blocks, AB, 0, a, gq, err); break;
	default: break;
	}
}
