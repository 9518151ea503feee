/*
 * sampling.cu: the output side's reductions: logsumexp, argmax (one launch
 * a row, or two for one long row), select and sample (greedy and top-k on
 * the device, other settings on a host copy of the row).
 */
#include "common.cuh"

__global__ void k_logsumexp(float *out, const float *x, int64_t dim)
{
	__shared__ float red[32];
	__shared__ double redd[32];
	pdl_wait();
	pdl_launch();
	int64_t r = blockIdx.x;
	const float *xr = x + r * dim;
	float m = -INFINITY;
	for (int64_t i = threadIdx.x; i < dim; i += RB)
		m = fmaxf(m, xr[i]);
	float mx = block_max(m, red);
	double s = 0.0;
	for (int64_t i = threadIdx.x; i < dim; i += RB)
		s += (double)d_exp(xr[i] - mx);
	double tot = block_sum_d(s, redd);
	if (threadIdx.x == 0)
		out[r] = mx + (float)log(tot);
}

/* k_argmax: the lowest index of the row's largest value, NaNs skipped;
 * the CPU's scan answers 0 when the first element is NaN, so does this. */
__global__ void k_argmax(int32_t *out, const float *x, int64_t dim)
{
	__shared__ float bv[RB];
	__shared__ int64_t bi[RB];
	pdl_wait();
	pdl_launch();
	int64_t r = blockIdx.x;
	const float *xr = x + r * dim;
	float best = -INFINITY;
	int64_t at = -1;
	for (int64_t i = threadIdx.x; i < dim; i += RB) {
		float v = xr[i];
		if (v == v && (at < 0 || v > best)) {
			best = v;
			at = i;
		}
	}
	bv[threadIdx.x] = best;
	bi[threadIdx.x] = at;
	__syncthreads();
	for (int st = RB / 2; st > 0; st >>= 1) {
		if (threadIdx.x < st) {
			float v = bv[threadIdx.x + st];
			int64_t j = bi[threadIdx.x + st];
			int64_t k = bi[threadIdx.x];
			if (j >= 0 && (k < 0 || v > bv[threadIdx.x] || (v == bv[threadIdx.x] && j < k))) {
				bv[threadIdx.x] = v;
				bi[threadIdx.x] = j;
			}
		}
		__syncthreads();
	}
	if (threadIdx.x == 0) {
		int64_t res = bi[0];
		if (res < 0 || xr[0] != xr[0])
			res = 0;
		out[r] = (int32_t)res;
	}
}

__global__ void k_select(float *out, const float *x, const int32_t *row,
                         const int32_t *col, int64_t n, int64_t cols)
{
	pdl_wait();
	pdl_launch();
	int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (j < n)
		out[j] = x[(int64_t)row[j] * cols + col[j]];
}

/* The argmax of one long row in two launches: AP blocks each find the
 * best of a slice (the same rule: NaNs skipped, ties to the lower index),
 * then one block the best of theirs. */

__device__ __forceinline__ bool better(float v, int64_t j, float bv, int64_t bj)
{
	return j >= 0 && (bj < 0 || v > bv || (v == bv && j < bj));
}

__global__ void k_argmax_part(float *pv, int64_t *pi, const float *x, int64_t dim)
{
	__shared__ float bv[RB];
	__shared__ int64_t bi[RB];
	pdl_wait();
	pdl_launch();
	int64_t chunk = (dim + AP - 1) / AP, lo = blockIdx.x * chunk, hi = lo + chunk < dim ? lo + chunk : dim;
	float best = -INFINITY;
	int64_t at = -1;
#pragma unroll 8
	for (int64_t i = lo + threadIdx.x; i < hi; i += RB) {
		float v = x[i];
		if (v == v && (at < 0 || v > best))
			best = v, at = i;
	}
	bv[threadIdx.x] = best, bi[threadIdx.x] = at;
	__syncthreads();
	for (int st = RB / 2; st > 0; st >>= 1) {
		if (threadIdx.x < st && better(bv[threadIdx.x + st], bi[threadIdx.x + st], bv[threadIdx.x], bi[threadIdx.x]))
			bv[threadIdx.x] = bv[threadIdx.x + st], bi[threadIdx.x] = bi[threadIdx.x + st];
		__syncthreads();
	}
	if (threadIdx.x == 0)
		pv[blockIdx.x] = bv[0], pi[blockIdx.x] = bi[0];
}

__global__ void k_argmax_fin(int32_t *out, const float *pv, const int64_t *pi, const float *x)
{
	__shared__ float bv[AP];
	__shared__ int64_t bi[AP];
	pdl_wait();
	pdl_launch();
	bv[threadIdx.x] = pv[threadIdx.x], bi[threadIdx.x] = pi[threadIdx.x];
	__syncthreads();
	for (int st = AP / 2; st > 0; st >>= 1) {
		if (threadIdx.x < st && better(bv[threadIdx.x + st], bi[threadIdx.x + st], bv[threadIdx.x], bi[threadIdx.x]))
			bv[threadIdx.x] = bv[threadIdx.x + st], bi[threadIdx.x] = bi[threadIdx.x + st];
		__syncthreads();
	}
	if (threadIdx.x == 0) {
		int64_t res = bi[0];
		if (res < 0 || x[0] != x[0])
			res = 0;
		out[0] = (int32_t)res;
	}
}

/* argmax1: the argmax of one row into out (two launches over the stream's
 * partials buffer); false when there is none. */
static bool argmax1(vd_stream *s, int32_t *out, const float *x, int64_t dim)
{
	if (!s->amax || dim < AP * RB)
		return false;
	float *pv = (float *)s->amax;
	int64_t *pi = (int64_t *)((char *)s->amax + AP * sizeof(float));
	launch(s, k_argmax_part, AP, RB, 0, pv, pi, x, dim);
	launch(s, k_argmax_fin, 1, AP, 0, out, pv, pi, x);
	launched(s);
	return true;
}

/* ---- sampling on the device ----
 *
 * k_sample: one block of SB threads draws the token cpu_sample draws, for
 * top-k between 1 and SB: the logits scaled by inv_temp in place; the k
 * best (logit, then lower id) found by a radix select on order-preserving
 * keys (4 passes of 8 bits) and collected in id order; sorted by a bitonic
 * network; then the host's double-precision softmax, top-p cut and draw,
 * in its order, by one thread. Only the token id is written. */
#define SB 1024

__device__ __forceinline__ uint32_t order_key(float f)
{
	if (f == 0.0f)
		f = 0.0f; /* -0 and +0 tie, as the host's comparison has them */
	uint32_t u = __float_as_uint(f);
	return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* block_scan: the exclusive prefix of v over the block (SB threads) in
 * thread order; *total gets the sum. ws: 32 ints. */
__device__ int block_scan(int v, int *ws, int *total)
{
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
	int inc = v;
	for (int o = 1; o < 32; o <<= 1) {
		int t = __shfl_up_sync(0xffffffffu, inc, o);
		if (lane >= o)
			inc += t;
	}
	__syncthreads();
	if (lane == 31)
		ws[w] = inc;
	__syncthreads();
	if (w == 0) {
		int x = lane < (int)(blockDim.x >> 5) ? ws[lane] : 0, y = x;
		for (int o = 1; o < 32; o <<= 1) {
			int t = __shfl_up_sync(0xffffffffu, y, o);
			if (lane >= o)
				y += t;
		}
		ws[lane] = y - x; /* exclusive over warps */
		if (lane == 31)
			ws[32] = y;
	}
	__syncthreads();
	*total = ws[32];
	return ws[w] + inc - v;
}

__global__ void __launch_bounds__(SB) k_sample(int32_t *out, float *l, int64_t V, float inv_temp, int k,
                                                double top_p, double u)
{
	__shared__ int hist[256];
	__shared__ int ws[33];
	__shared__ uint32_t s_prefix;
	__shared__ int s_left;
	__shared__ int32_t cid[SB];
	__shared__ float cl[SB];
	__shared__ double pr[SB];
	pdl_wait();
	pdl_launch();
	int tid = threadIdx.x;
	for (int64_t i = tid; i < V; i += SB)
		l[i] = l[i] * inv_temp;
	if (tid == 0)
		s_prefix = 0, s_left = k;
	__syncthreads();
	/* The k-th best key: digit by digit from the top. */
	for (int pass = 0; pass < 4; pass++) {
		int shift = 24 - 8 * pass;
		uint32_t hmask = pass == 0 ? 0u : 0xffffffffu << (shift + 8);
		for (int i = tid; i < 256; i += SB)
			hist[i] = 0;
		__syncthreads();
		uint32_t pre = s_prefix;
		for (int64_t i = tid; i < V; i += SB) {
			uint32_t key = order_key(l[i]);
			if ((key & hmask) == pre)
				atomicAdd(&hist[(key >> shift) & 255u], 1);
		}
		__syncthreads();
		if (tid == 0) {
			int left = s_left, dgt = 255;
			for (; dgt > 0; dgt--) {
				if (hist[dgt] >= left)
					break;
				left -= hist[dgt];
			}
			s_prefix = pre | ((uint32_t)dgt << shift);
			s_left = left;
		}
		__syncthreads();
	}
	uint32_t T = s_prefix;
	int ties = s_left; /* the ties at T taken, lowest ids first */
	int64_t chunk = (V + SB - 1) / SB, lo = tid * chunk, hi = lo + chunk < V ? lo + chunk : V;
	int gt = 0, eq = 0;
	for (int64_t i = lo; i < hi; i++) {
		uint32_t key = order_key(l[i]);
		gt += key > T;
		eq += key == T;
	}
	int ngt, neq;
	int pg = block_scan(gt, ws, &ngt);
	int pe = block_scan(eq, ws, &neq);
	for (int64_t i = lo; i < hi; i++) {
		uint32_t key = order_key(l[i]);
		if (key > T) {
			cid[pg] = (int32_t)i, cl[pg] = l[i];
			pg++;
		} else if (key == T) {
			if (pe < ties)
				cid[ngt + pe] = (int32_t)i, cl[ngt + pe] = l[i];
			pe++;
		}
	}
	__syncthreads();
	/* Bitonic sort of the k candidates, best first. */
	int P = 1;
	while (P < k)
		P <<= 1;
	if (tid >= k && tid < P)
		cid[tid] = 0x7fffffff, cl[tid] = -INFINITY;
	__syncthreads();
	for (int size = 2; size <= P; size <<= 1) {
		for (int stride = size >> 1; stride > 0; stride >>= 1) {
			int i = tid, j = i ^ stride;
			if (i < P && j > i) {
				bool up = (i & size) == 0;
				float li = cl[i], lj = cl[j];
				int32_t ii = cid[i], ij = cid[j];
				bool j_first = lj > li || (lj == li && ij < ii); /* j before i */
				if (j_first == up) {
					cl[i] = lj, cl[j] = li;
					cid[i] = ij, cid[j] = ii;
				}
			}
			__syncthreads();
		}
	}
	double mx = (double)cl[0];
	if (tid < k)
		pr[tid] = exp((double)cl[tid] - mx);
	__syncthreads();
	if (tid == 0) {
		double sum = 0;
		int n = k;
		for (int i = 0; i < n; i++)
			sum += pr[i];
		if (top_p > 0 && top_p < 1) {
			double cum = 0;
			for (int i = 0; i < n; i++) {
				cum += pr[i] / sum;
				if (cum >= top_p) {
					n = i + 1;
					break;
				}
			}
			sum = 0;
			for (int i = 0; i < n; i++)
				sum += pr[i];
		}
		double r = u * sum;
		int32_t tok = cid[n - 1];
		for (int i = 0; i < n; i++) {
			r -= pr[i];
			if (r < 0) {
				tok = cid[i];
				break;
			}
		}
		out[0] = tok;
	}
}

void c_logsumexp(vd_stream *s, vd_tensor out, vd_tensor x)
{
	ENTER(s);
	if (x.rows <= 0 || x.cols <= 0)
		return;
	launch(s, k_logsumexp, (unsigned)x.rows, RB, 0, (float *)out.data, (const float *)x.data, x.cols);
	launched(s);
}

void c_argmax(vd_stream *s, vd_tensor out, vd_tensor x)
{
	ENTER(s);
	if (x.rows <= 0 || x.cols <= 0)
		return;
	if (x.rows == 1 && argmax1(s, (int32_t *)out.data, (const float *)x.data, x.cols))
		return;
	launch(s, k_argmax, (unsigned)x.rows, RB, 0, (int32_t *)out.data, (const float *)x.data, x.cols);
	launched(s);
}

void c_select(vd_stream *s, vd_tensor out, vd_tensor x, vd_tensor row,
                     vd_tensor col)
{
	ENTER(s);
	int64_t n = elems(row);
	if (n <= 0)
		return;
	launch(s, k_select, blocks_for(n, EW), EW, 0, (float *)out.data, (const float *)x.data, (const int32_t *)row.data,
	                                              (const int32_t *)col.data, n, x.cols);
	launched(s);
}

/* c_sample: greedy and top-k up to SB on the device (k_argmax, k_sample);
 * otherwise cpu_sample's algorithm on a host copy of the logits (a
 * sampling step is one row; its cost is the copy). Candidates are ordered
 * by logit, ties by lower id: a strict order, so the top k and their order
 * are the CPU's. */
void c_sample(vd_stream *s, vd_tensor out, vd_tensor x, vd_sampling p)
{
	ENTER(s);
	int64_t V = x.cols;
	if (V <= 0)
		return;
	if (p.inv_temp == 0) { /* greedy: on the device, nothing crosses */
		if (!argmax1(s, (int32_t *)out.data, (const float *)x.data, V)) {
			launch(s, k_argmax, 1, RB, 0, (int32_t *)out.data, (const float *)x.data, V);
			launched(s);
		}
		return;
	}
	if (p.top_k > 0 && p.top_k <= SB && p.top_k < V) {
		launch(s, k_sample, 1, SB, 0, (int32_t *)out.data, (float *)x.data, V, p.inv_temp, (int)p.top_k, p.top_p,
		                              p.u);
		launched(s);
		return;
	}
	s->host.resize((size_t)V);
	float *l = s->host.data();
	check(s, cudaMemcpyAsync(l, x.data, (size_t)V * sizeof(float), cudaMemcpyDeviceToHost, s->st));
	check(s, cudaStreamSynchronize(s->st));
	if (s->err)
		return;
	int32_t tok = 0;
	if (p.inv_temp == 0) {
		for (int64_t j = 1; j < V; j++)
			if (l[j] > l[tok])
				tok = (int32_t)j;
	} else {
		for (int64_t i = 0; i < V; i++)
			l[i] = l[i] * p.inv_temp;
		std::vector<int32_t> idx((size_t)V);
		for (int64_t i = 0; i < V; i++)
			idx[(size_t)i] = (int32_t)i;
		int64_t k = V;
		if (p.top_k > 0 && p.top_k < k)
			k = p.top_k;
		auto before = [l](int32_t i, int32_t j) {
			if (l[i] != l[j])
				return l[i] > l[j];
			return i < j;
		};
		std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), before);
		std::vector<double> pr((size_t)k);
		double mx = (double)l[idx[0]], sum = 0;
		for (int64_t i = 0; i < k; i++) {
			pr[(size_t)i] = exp((double)l[idx[(size_t)i]] - mx);
			sum += pr[(size_t)i];
		}
		if (p.top_p > 0 && p.top_p < 1) {
			double cum = 0;
			for (int64_t i = 0; i < k; i++) {
				cum += pr[(size_t)i] / sum;
				if (cum >= p.top_p) {
					k = i + 1;
					break;
				}
			}
			sum = 0;
			for (int64_t i = 0; i < k; i++)
				sum += pr[(size_t)i];
		}
		double r = p.u * sum;
		tok = idx[(size_t)(k - 1)];
		for (int64_t i = 0; i < k; i++) {
			r -= pr[(size_t)i];
			if (r < 0) {
				tok = idx[(size_t)i];
				break;
			}
		}
	}
	s->tok = tok;
	check(s, cudaMemcpyAsync(out.data, &s->tok, sizeof s->tok, cudaMemcpyHostToDevice, s->st));
	check(s, cudaStreamSynchronize(s->st));
}

