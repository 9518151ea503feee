/*
 * rope.cu: the rotary position embedding (rope) and the fused norm_rope
 * (a head's rmsnorm, its rotation and the scatter into the key/value
 * pool's slots).
 */
#include "common.cuh"

/* k_rope: one thread a (token, head, pair); the angle in float32, its sine
 * and cosine in double then rounded, as the CPU does. */
__global__ void k_rope(float *x, const int32_t *pos, int64_t n, int64_t heads,
                       int64_t hd, const float *inv_freq)
{
	pdl_wait();
	pdl_launch();
	int64_t half = hd / 2;
	int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (e >= n * heads * half)
		return;
	int64_t i = e % half, th = e / half, t = th / heads;
	float f = (float)pos[t] * inv_freq[i];
	double sd, cd;
	sincos((double)f, &sd, &cd);
	float co = (float)cd, sn = (float)sd;
	float *b = x + th * hd;
	float a = b[i], bb = b[half + i];
	b[i] = a * co - bb * sn;
	b[half + i] = bb * co + a * sn;
}

/* k_norm_rope: k_rmsnorm, then k_rope (inv_freq set), then k_rows'
 * scatter to y's rows idx (y set), over a block a head (row r of width
 * hd: token r / heads), their expressions in their order; the normalised
 * head passes through shared memory to the rotation. */
/* norm_rope_head: k_norm_rope's work on head r of x. */
static __device__ __forceinline__ void norm_rope_head(int64_t r, float *y, const int32_t *idx, float *x, const float *w,
                                                      float eps, const int32_t *pos, int64_t heads, int64_t hd,
                                                      const float *inv_freq, float *red, float *hv)
{
	float *xr = x + r * hd;
	float a = 0.0f;
	for (int64_t i = threadIdx.x; i < hd; i += RB)
		a = fmaf(xr[i], xr[i], a);
	float ss = block_sum(a, red);
	float inv = (float)(1.0 / sqrt((double)(ss / (float)hd + eps)));
	for (int64_t i = threadIdx.x; i < hd; i += RB)
		hv[i] = w ? (xr[i] * inv) * __ldg(w + i) : xr[i] * inv;
	__syncthreads();
	int64_t half = hd / 2, t = r / heads;
	float *yr = y ? y + (int64_t)idx[t] * heads * hd + (r % heads) * hd : nullptr;
	if (!inv_freq) {
		for (int64_t i = threadIdx.x; i < hd; i += RB) {
			xr[i] = hv[i];
			if (yr)
				yr[i] = hv[i];
		}
		return;
	}
	for (int64_t i = threadIdx.x; i < half; i += RB) {
		float f = (float)pos[t] * inv_freq[i];
		double sd, cd;
		sincos((double)f, &sd, &cd);
		float co = (float)cd, sn = (float)sd;
		float p = hv[i], q = hv[half + i];
		float a = p * co - q * sn, b = q * co + p * sn;
		xr[i] = a, xr[half + i] = b;
		if (yr)
			yr[i] = a, yr[half + i] = b;
	}
}

__global__ void k_norm_rope(float *y, const int32_t *idx, float *x, const float *w, float eps, const int32_t *pos,
                            int64_t heads, int64_t hd, const float *inv_freq)
{
	__shared__ float red[32];
	extern __shared__ float hv[]; /* hd */
	pdl_wait();
	pdl_launch();
	norm_rope_head(blockIdx.x, y, idx, x, w, eps, pos, heads, hd, inv_freq, red, hv);
}

/* k_norm_ropes: k_norm_rope over the heads of every part, the part's
 * blocks one after another. */
__global__ void k_norm_ropes(vd_norm_ropes r, int64_t n)
{
	__shared__ float red[32];
	extern __shared__ float hv[]; /* head_dim */
	pdl_wait();
	pdl_launch();
	int64_t b = blockIdx.x;
	for (int i = 0; i < r.nparts; i++) {
		const vd_norm_rope_part &p = r.part[i];
		if (b < n * p.heads) {
			norm_rope_head(b, (float *)p.y.data, (const int32_t *)r.idx.data, (float *)p.x.data, (const float *)p.w.data,
			               r.eps, (const int32_t *)r.pos.data, p.heads, r.head_dim, (const float *)p.inv_freq.data, red,
			               hv);
			return;
		}
		b -= n * p.heads;
	}
}

void c_rope(vd_stream *s, vd_tensor x, vd_tensor pos, int64_t heads,
                   int64_t head_dim, vd_tensor inv_freq)
{
	ENTER(s);
	int64_t n = elems(pos), m = n * heads * (head_dim / 2);
	if (m <= 0)
		return;
	launch(s, k_rope, blocks_for(m, EW), EW, 0, (float *)x.data, (const int32_t *)pos.data, n, heads, head_dim,
	                                            (const float *)inv_freq.data);
	launched(s);
}

void c_norm_rope(vd_stream *s, vd_tensor y, vd_tensor idx, vd_tensor x, vd_tensor w, float eps,
                        vd_tensor pos, int64_t heads, int64_t head_dim, vd_tensor inv_freq)
{
	ENTER(s);
	int64_t rows = elems(pos) * heads;
	if (rows <= 0 || head_dim <= 0)
		return;
	launch(s, k_norm_rope, (unsigned)rows, RB, (size_t)head_dim * sizeof(float), (float *)y.data,
	       (const int32_t *)idx.data, (float *)x.data, (const float *)w.data, eps, (const int32_t *)pos.data, heads,
	       head_dim, (const float *)inv_freq.data);
	launched(s);
}


void c_norm_ropes(vd_stream *s, const vd_norm_ropes *r)
{
	ENTER(s);
	int64_t n = elems(r->pos), blocks = 0;
	if (n <= 0 || r->head_dim <= 0)
		return;
	for (int i = 0; i < r->nparts; i++)
		blocks += n * r->part[i].heads;
	if (blocks <= 0)
		return;
	if (!layer_step_on("norm_ropes")) {
		for (int i = 0; i < r->nparts; i++) {
			const vd_norm_rope_part &p = r->part[i];
			c_norm_rope(s, p.y, r->idx, p.x, p.w, r->eps, r->pos, p.heads, r->head_dim, p.inv_freq);
		}
		return;
	}
	launch(s, k_norm_ropes, (unsigned)blocks, RB, (size_t)r->head_dim * sizeof(float), *r, n);
	launched(s);
}
