/*
 * cpu_sparse_impl.h: Gemma 3n's MLP with activation sparsity over q4
 * weights, included once per 8-lane SIMD level after cpu_linear_impl.h and
 * cpu_elementwise_impl.h.
 *
 * In a layer with activation sparsity only the gate outputs above a cutoff
 * (mean + std·z of the token's gate row, about 5% of them) survive the
 * ReLU; every other element of gelu(g − cut)·up(x) is zero. So, per token:
 *   1. the survivors i (g_i − cut > 0, computed as the dense kernel does);
 *   2. up(x)_i for those rows only, each the canonical dot product of
 *      cpu_linear_impl.h (the same bits as the dense product's element);
 *   3. h_i = gelu(g_i − cut)·up_i, lane for lane as the dense kernel;
 *   4. y = Σ_i h_i·downᵀ_i over the survivors in increasing i, one fused
 *      multiply-add per survivor for every output element, downᵀ being
 *      down_proj transposed ([inter, d], q4 along d).
 * Every token is computed alone: results depend neither on n nor on the
 * thread count. Only the surviving rows of up and downᵀ are read.
 */

#define SP_RB 32 /* surviving rows per task (step 2) */
#define SP_CB 64 /* output columns per task (step 4) */

typedef struct {
	float *y, *g, *h;
	const float *x;
	const uint8_t *uq, *dq;
	const float *uso, *dso;
	int32_t *idx, *cnt, *off;
	int64_t n, inter, d;
	float z;
	int lg;
} VK_ISA(sp_ctx);

/* sp_select compacts token t's survivors: idx[k] = i and g[k] = g_i − cut
 * for the k-th survivor (in place), cnt[t] = their number. */
static void VK_ISA(sp_select)(void *vc, int64_t t)
{
	const VK_ISA(sp_ctx) *c = vc;
	float *g = c->g + t * c->inter;
	int32_t *idx = c->idx + t * c->inter;
	float cut = VK_ISA(sparse_cut)(g, c->inter, c->z);
	int32_t k = 0;
	for (int64_t i = 0; i < c->inter; i++) {
		float v = g[i] - cut;
		if (v > 0) {
			idx[k] = (int32_t)i;
			g[k++] = v;
		}
	}
	c->cnt[t] = k;
}

/* sp_dot: the canonical dot products of x with R q4 rows (pointers qr,
 * scales sr), over cols columns (a multiple of 32). */
VK_INLINE void VK_ISA(sp_dot)(const int R, const float *x,
                              const uint8_t *const *qr,
                              const float *const *sr, int lg, int64_t cols,
                              float *out)
{
	float ob[4 * 16] __attribute__((aligned(64)));
	for (int64_t b = 0; b < cols; b += LIN_KB) {
		int64_t be = b + LIN_KB < cols ? b + LIN_KB : cols;
		V a[4][2];
#pragma GCC unroll 4
		for (int r = 0; r < R; r++)
			a[r][0] = a[r][1] = v_zero();
		for (int64_t j = b; j < be; j += 32) {
			int64_t g2 = (j >> lg) * 2;
			V x0 = v_load(x + j), x1 = v_load(x + j + 8);
			V x2 = v_load(x + j + 16), x3 = v_load(x + j + 24);
#pragma GCC unroll 4
			for (int r = 0; r < R; r++) {
				const uint8_t *p = qr[r] + j / 2;
				V s = v_set1(sr[r][g2]), off = v_set1(sr[r][g2 + 1]);
				a[r][0] = v_fma(x0, VK_ISA(q4_deq8)(p, 0, s, off), a[r][0]);
				a[r][1] = v_fma(x1, VK_ISA(q4_deq8)(p + 8, 0, s, off), a[r][1]);
				a[r][0] = v_fma(x2, VK_ISA(q4_deq8)(p, 1, s, off), a[r][0]);
				a[r][1] = v_fma(x3, VK_ISA(q4_deq8)(p + 8, 1, s, off), a[r][1]);
			}
		}
#pragma GCC unroll 4
		for (int r = 0; r < R; r++)
#pragma GCC unroll 2
			for (int h = 0; h < 2; h++) {
				float *p = ob + r * 16 + h * 8;
				v_store(p, v_add(b == 0 ? v_zero() : v_load(p), a[r][h]));
			}
		__asm__ __volatile__("" ::: "memory");
	}
	for (int r = 0; r < R; r++)
		out[r] = v_hsum(v_add(v_load(ob + r * 16), v_load(ob + r * 16 + 8)));
}

/* sp_token finds the token of task task among the tokens' task ranges
 * off[t] .. off[t+1]. */
static int64_t VK_ISA(sp_token)(const int32_t *off, int64_t n, int64_t task)
{
	int64_t lo = 0, hi = n - 1;
	while (lo < hi) {
		int64_t mid = (lo + hi + 1) / 2;
		if (off[mid] <= task)
			lo = mid;
		else
			hi = mid - 1;
	}
	return lo;
}

/* sp_up: up(x) for SP_RB survivors of a token, then h = gelu(v)·up. */
static void VK_ISA(sp_up)(void *vc, int64_t task)
{
	const VK_ISA(sp_ctx) *c = vc;
	int64_t t = VK_ISA(sp_token)(c->off, c->n, task);
	int64_t k0 = (task - c->off[t]) * SP_RB;
	int64_t k1 = k0 + SP_RB < c->cnt[t] ? k0 + SP_RB : c->cnt[t];
	int64_t cols = c->d, ldq = cols / 2, ldso = (cols >> c->lg) * 2;
	const int32_t *idx = c->idx + t * c->inter;
	const float *x = c->x + t * cols;
	float *h = c->h + t * c->inter, *v = c->g + t * c->inter;
	int64_t k = k0;
	for (; k < k1; k += 4) {
		int R = k1 - k < 4 ? (int)(k1 - k) : 4;
		const uint8_t *qr[4];
		const float *sr[4];
		for (int r = 0; r < 4; r++) {
			int64_t i = idx[k + (r < R ? r : 0)];
			qr[r] = c->uq + i * ldq;
			sr[r] = c->uso + i * ldso;
		}
		/* The next rows are scattered: ask for their first lines now. */
		for (int r = 0; r < 4 && k + 4 + r < k1; r++)
			__builtin_prefetch(c->uq + idx[k + 4 + r] * ldq);
		switch (R) {
		case 4:
			VK_ISA(sp_dot)(4, x, qr, sr, c->lg, cols, h + k);
			break;
		case 3:
			VK_ISA(sp_dot)(3, x, qr, sr, c->lg, cols, h + k);
			break;
		case 2:
			VK_ISA(sp_dot)(2, x, qr, sr, c->lg, cols, h + k);
			break;
		default:
			VK_ISA(sp_dot)(1, x, qr, sr, c->lg, cols, h + k);
			break;
		}
	}
	/* h = gelu(v)·up, lane for lane as sparse_row. */
	for (k = k0; k + 8 <= k1; k += 8)
		v_store(h + k, v_mul(v_gelu(v_load(v + k)), v_load(h + k)));
	if (k < k1)
		v_store_part(h + k, k1 - k,
		             v_mul(v_gelu(v_load_part(v + k, k1 - k, 0)),
		                   v_load_part(h + k, k1 - k, 0)));
}

/* sp_down: y[t, c0:c0+SP_CB] = Σ_k h_k·downᵀ[idx_k, c0:c0+SP_CB]. */
static void VK_ISA(sp_down)(void *vc, int64_t task)
{
	const VK_ISA(sp_ctx) *c = vc;
	int64_t nch = (c->d + SP_CB - 1) / SP_CB;
	int64_t t = task / nch, c0 = task % nch * SP_CB;
	int64_t cols = c->d, ldq = cols / 2, ldso = (cols >> c->lg) * 2;
	const int32_t *idx = c->idx + t * c->inter;
	const float *h = c->h + t * c->inter;
	int64_t nk = c->cnt[t], w = cols - c0 < SP_CB ? cols - c0 : SP_CB;
	V acc[SP_CB / 8];
	for (int b = 0; b < SP_CB / 8; b++)
		acc[b] = v_zero();
	for (int64_t k = 0; k < nk; k++) {
		int64_t i = idx[k];
		if (k + 2 < nk)
			__builtin_prefetch(c->dq + idx[k + 2] * ldq + c0 / 2);
		const uint8_t *q = c->dq + i * ldq;
		const float *so = c->dso + i * ldso;
		V hv = v_set1(h[k]);
		for (int64_t j = c0; j < c0 + w; j += 32) {
			int64_t g2 = (j >> c->lg) * 2;
			V s = v_set1(so[g2]), off = v_set1(so[g2 + 1]);
			const uint8_t *p = q + j / 2;
			int b = (int)((j - c0) / 8);
			acc[b] = v_fma(hv, VK_ISA(q4_deq8)(p, 0, s, off), acc[b]);
			acc[b + 1] = v_fma(hv, VK_ISA(q4_deq8)(p + 8, 0, s, off), acc[b + 1]);
			acc[b + 2] = v_fma(hv, VK_ISA(q4_deq8)(p, 1, s, off), acc[b + 2]);
			acc[b + 3] = v_fma(hv, VK_ISA(q4_deq8)(p + 8, 1, s, off), acc[b + 3]);
		}
	}
	float *y = c->y + t * cols + c0;
	for (int b = 0; b < w / 8; b++)
		v_store(y + 8 * b, acc[b]);
}

static void VK_ISA(sparse_mlp_q4)(float *y, float *g, float *h,
                                  int32_t *idx, int32_t *cnt, int32_t *off,
                                  const float *x, const uint8_t *uq,
                                  const float *uso, const uint8_t *dq,
                                  const float *dso, int64_t n, int64_t inter,
                                  int64_t d, float z, int lg)
{
	VK_ISA(sp_ctx) c = {y, g, h, x, uq, dq, uso, dso, idx, cnt, off,
	                    n, inter, d, z, lg};
	vk_par(n, 45.0 * (double)(n * inter), VK_ISA(sp_select), &c);
	int64_t tasks = 0, work = 0;
	for (int64_t t = 0; t < n; t++) {
		off[t] = (int32_t)tasks;
		tasks += (cnt[t] + SP_RB - 1) / SP_RB;
		work += cnt[t];
	}
	off[n] = (int32_t)tasks;
	vk_par(tasks, 2.0 * (double)work * (double)d, VK_ISA(sp_up), &c);
	vk_par(n * ((d + SP_CB - 1) / SP_CB), 2.0 * (double)work * (double)d,
	       VK_ISA(sp_down), &c);
}
