/*
 * cpu_linear_impl.h: y = x·Wᵀ, included once per SIMD level.
 *
 * Every dot product x_t·w_r is accumulated the same way whatever the shape
 * or tile: lane l of one 8-lane accumulator takes the products of columns
 * c ≡ l (mod 8) below cols&~7 in increasing c through fused multiply-adds,
 * the lanes are summed by v_hsum's fixed tree, and the last cols%8 columns
 * are added in order with fmaf. Tiles (tokens × rows kept in registers) and
 * K blocks (partial accumulators parked in scratch) only change the order in
 * which different dot products advance, never the arithmetic of one; so
 * results depend neither on n nor on the thread count.
 */

#define LIN_KB 1024   /* columns per K block (GEMM) */
#define LIN_RB 48     /* rows per task (GEMM); divisible by 3, 6 and 8 */
#define LIN_TB 64     /* tokens per task (GEMM) */
#define LIN_RB_GEMV 64 /* rows per task when n < 4 */

VK_INLINE V VK_ISA(lin_wload)(const int bf, const void *w, int64_t off)
{
	if (bf)
		return v_load_bf16((const uint16_t *)w + off);
	return v_load((const float *)w + off);
}

VK_INLINE float lin_wscalar(const int bf, const void *w, int64_t off)
{
	if (bf) {
		uint32_t u = (uint32_t)((const uint16_t *)w)[off] << 16;
		float f;
		memcpy(&f, &u, sizeof f);
		return f;
	}
	return ((const float *)w)[off];
}

/* lin_tile advances the T×R dot products x_t·w_r over columns [k0, k1)
 * (multiples of 8). init: start from zero, else from scr; fin: finish into
 * y[t·ldy + r], else park the accumulators in scr[t·lds + 8r]. */
VK_INLINE void VK_ISA(lin_tile)(const int T, const int R, const int bf,
                                const float *x, int64_t ldx, const void *w,
                                int64_t ldw, int64_t k0, int64_t k1,
                                float *scr, int64_t lds, int init, int fin,
                                float *y, int64_t ldy, int64_t cols)
{
	V acc[4][8];
#pragma GCC unroll 4
	for (int t = 0; t < T; t++)
#pragma GCC unroll 8
		for (int r = 0; r < R; r++)
			acc[t][r] = init ? v_zero() : v_load(scr + t * lds + r * 8);
	/* Keep all within 16 registers: T x vectors and one w at a time, or
	 * (4×3) R w vectors and one x at a time. */
	if (T * R + T + 1 <= 16) {
		for (int64_t k = k0; k < k1; k += 8) {
			V xv[4];
#pragma GCC unroll 4
			for (int t = 0; t < T; t++)
				xv[t] = v_load(x + t * ldx + k);
#pragma GCC unroll 8
			for (int r = 0; r < R; r++) {
				V wr = VK_ISA(lin_wload)(bf, w, r * ldw + k);
#pragma GCC unroll 4
				for (int t = 0; t < T; t++)
					acc[t][r] = v_fma(xv[t], wr, acc[t][r]);
			}
		}
	} else {
		for (int64_t k = k0; k < k1; k += 8) {
			V wr[8];
#pragma GCC unroll 8
			for (int r = 0; r < R; r++)
				wr[r] = VK_ISA(lin_wload)(bf, w, r * ldw + k);
#pragma GCC unroll 4
			for (int t = 0; t < T; t++) {
				V xv = v_load(x + t * ldx + k);
#pragma GCC unroll 8
				for (int r = 0; r < R; r++)
					acc[t][r] = v_fma(xv, wr[r], acc[t][r]);
			}
		}
	}
	if (!fin) {
#pragma GCC unroll 4
		for (int t = 0; t < T; t++)
#pragma GCC unroll 8
			for (int r = 0; r < R; r++)
				v_store(scr + t * lds + r * 8, acc[t][r]);
		return;
	}
	int64_t c8 = cols & ~(int64_t)7;
	for (int t = 0; t < T; t++)
		for (int r = 0; r < R; r++) {
			float s = v_hsum(acc[t][r]);
			for (int64_t c = c8; c < cols; c++)
				s = fmaf(x[t * ldx + c], lin_wscalar(bf, w, r * ldw + c), s);
			y[t * ldy + r] = s;
		}
}

VK_INLINE const void *lin_wrow(const int bf, const void *w, int64_t off)
{
	return bf ? (const void *)((const uint16_t *)w + off)
	          : (const void *)((const float *)w + off);
}

/* lin_rows runs T-token tiles over rows [0, nr), R rows at a time. */
VK_INLINE void VK_ISA(lin_rows)(const int T, const int R, const int bf,
                                const float *x, int64_t ldx, const void *w,
                                int64_t ldw, int64_t nr, int64_t k0,
                                int64_t k1, float *scr, int64_t lds, int init,
                                int fin, float *y, int64_t ldy, int64_t cols)
{
	int64_t r = 0;
	for (; r + R <= nr; r += R)
		VK_ISA(lin_tile)(T, R, bf, x, ldx, lin_wrow(bf, w, r * ldw), ldw, k0,
		                 k1, scr ? scr + r * 8 : NULL, lds, init, fin, y + r,
		                 ldy, cols);
	for (; r < nr; r++)
		VK_ISA(lin_tile)(T, 1, bf, x, ldx, lin_wrow(bf, w, r * ldw), ldw, k0,
		                 k1, scr ? scr + r * 8 : NULL, lds, init, fin, y + r,
		                 ldy, cols);
}

/* lin_block computes (or advances, see lin_tile) the nt×nr dot products of
 * tokens x[t·ldx] and rows w[r·ldw], 4 tokens at a time. */
VK_INLINE void VK_ISA(lin_block_g)(const int bf, const float *x, int64_t ldx,
                                   int64_t nt, const void *w, int64_t ldw,
                                   int64_t nr, int64_t k0, int64_t k1,
                                   float *scr, int64_t lds, int init, int fin,
                                   float *y, int64_t ldy, int64_t cols)
{
	int64_t t = 0;
	for (; t + 4 <= nt; t += 4)
		VK_ISA(lin_rows)(4, 3, bf, x + t * ldx, ldx, w, ldw, nr, k0, k1,
		                 scr ? scr + t * lds : NULL, lds, init, fin,
		                 y + t * ldy, ldy, cols);
	const float *xt = x + t * ldx;
	float *st = scr ? scr + t * lds : NULL, *yt = y + t * ldy;
	switch (nt - t) {
	case 3:
		VK_ISA(lin_rows)(3, 3, bf, xt, ldx, w, ldw, nr, k0, k1, st, lds, init,
		                 fin, yt, ldy, cols);
		break;
	case 2:
		VK_ISA(lin_rows)(2, 6, bf, xt, ldx, w, ldw, nr, k0, k1, st, lds, init,
		                 fin, yt, ldy, cols);
		break;
	case 1:
		VK_ISA(lin_rows)(1, 8, bf, xt, ldx, w, ldw, nr, k0, k1, st, lds, init,
		                 fin, yt, ldy, cols);
		break;
	}
}

static void VK_ISA(lin_block_f32)(const float *x, int64_t ldx, int64_t nt,
                                  const float *w, int64_t ldw, int64_t nr,
                                  int64_t k0, int64_t k1, float *scr,
                                  int64_t lds, int init, int fin, float *y,
                                  int64_t ldy, int64_t cols)
{
	VK_ISA(lin_block_g)(0, x, ldx, nt, w, ldw, nr, k0, k1, scr, lds, init, fin,
	                    y, ldy, cols);
}

static void VK_ISA(lin_block_bf16)(const float *x, int64_t ldx, int64_t nt,
                                   const uint16_t *w, int64_t ldw, int64_t nr,
                                   int64_t k0, int64_t k1, float *scr,
                                   int64_t lds, int init, int fin, float *y,
                                   int64_t ldy, int64_t cols)
{
	VK_ISA(lin_block_g)(1, x, ldx, nt, w, ldw, nr, k0, k1, scr, lds, init, fin,
	                    y, ldy, cols);
}

typedef struct {
	float *y;
	const float *x;
	const void *w;
	int bf;
	int64_t n, rows, cols, rb, ntb;
} VK_ISA(lin_ctx);

static void VK_ISA(lin_task)(void *vc, int64_t task)
{
	const VK_ISA(lin_ctx) *c = vc;
	int64_t cols = c->cols, c8 = cols & ~(int64_t)7;
	int64_t r0 = task / c->ntb * c->rb, t0 = task % c->ntb * LIN_TB;
	int64_t nr = c->rows - r0 < c->rb ? c->rows - r0 : c->rb;
	int64_t nt = c->n - t0 < LIN_TB ? c->n - t0 : LIN_TB;
	const float *x = c->x + t0 * cols;
	float *y = c->y + t0 * c->rows + r0;
	const void *w = lin_wrow(c->bf, c->w, r0 * cols);
	if (nt < 4 || c8 <= LIN_KB) { /* one pass over K */
		if (c->bf)
			VK_ISA(lin_block_bf16)(x, cols, nt, w, cols, nr, 0, c8, NULL, 0, 1,
			                       1, y, c->rows, cols);
		else
			VK_ISA(lin_block_f32)(x, cols, nt, w, cols, nr, 0, c8, NULL, 0, 1, 1,
			                      y, c->rows, cols);
		return;
	}
	int64_t lds = c->rb * 8;
	float *scr = vk_scratch(0, (size_t)(LIN_TB * lds) * sizeof(float));
	for (int64_t k0 = 0; k0 < c8; k0 += LIN_KB) {
		int64_t k1 = k0 + LIN_KB < c8 ? k0 + LIN_KB : c8;
		int init = k0 == 0, fin = k1 == c8;
		if (c->bf)
			VK_ISA(lin_block_bf16)(x, cols, nt, w, cols, nr, k0, k1, scr, lds,
			                       init, fin, y, c->rows, cols);
		else
			VK_ISA(lin_block_f32)(x, cols, nt, w, cols, nr, k0, k1, scr, lds,
			                      init, fin, y, c->rows, cols);
	}
}

static void VK_ISA(linear)(float *y, const float *x, const void *w, int bf,
                           int64_t n, int64_t rows, int64_t cols)
{
	VK_ISA(lin_ctx) c = {y, x, w, bf, n, rows, cols, 0, 0};
	c.rb = n < 4 ? LIN_RB_GEMV : LIN_RB;
	c.ntb = (n + LIN_TB - 1) / LIN_TB;
	int64_t ntasks = (rows + c.rb - 1) / c.rb * c.ntb;
	vk_par(ntasks, 2.0 * (double)n * (double)rows * (double)cols,
	       VK_ISA(lin_task), &c);
}
