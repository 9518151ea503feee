/*
 * cpu_linear_impl.h: y = x·Wᵀ for float32, bfloat16 and packed 4-bit (q4)
 * weights, included once per 8-lane SIMD level (portable, AVX2, NEON);
 * cpu_isa_avx512.c computes the same arithmetic with 16-lane registers.
 *
 * The canonical dot product x·w over cols columns, which every kernel set,
 * shape and tile computes bit for bit:
 *   - c16 = cols & ~15; lane l (0..15) takes the columns c ≡ l (mod 16)
 *     below c16;
 *   - those columns go in accumulation blocks of LIN_KB: in each block,
 *     lane l starts a fresh sum at +0 and adds x_c·w_c for its columns in
 *     increasing c by fused multiply-adds; the block sum is then added to
 *     the lane's outer sum (which starts at +0);
 *   - the outer sums are added as s_l = o_l + o_{l+8} (l < 8), then
 *     ((s0+s4)+(s2+s6)) + ((s1+s5)+(s3+s7)) (v_hsum);
 *   - the last cols%16 columns are added in increasing c with fmaf.
 * No chain of roundings is longer than LIN_KB/16 + cols/LIN_KB terms, so a
 * long dot product's rounding error is a few times smaller than with one
 * chain per lane over the whole row.
 *
 * A q4 weight is w = fmaf(scale, q, offset), q in 0..15 (see kernels.h for
 * the packing); kernels compute exactly that value, in registers (few
 * tokens: the dequantization is fused into the dot products) or into a
 * float32 panel that the float32 tiles then read (many tokens).
 *
 * Tiles (tokens × rows), cache blocks (partial sums parked in scratch) and
 * the split into tasks only change the order in which different dot
 * products advance, never the arithmetic of one: results depend neither on
 * n nor on the thread count.
 */

#define LIN_KB 512     /* columns per accumulation block */
#define LIN_KC 1024    /* columns per cache block (GEMM); multiple of LIN_KB */
#define LIN_RB 48      /* rows per task (GEMM) */
#define LIN_TB 64      /* tokens per task (GEMM) */
#define LIN_RB_GEMV 32 /* rows per task when n <= LIN_GEMV_N */
#define LIN_GEMV_N 3   /* token counts that take the GEMV path */

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

VK_INLINE const void *lin_wrow(const int bf, const void *w, int64_t off)
{
	return bf ? (const void *)((const uint16_t *)w + off)
	          : (const void *)((const float *)w + off);
}

/* lin_tile advances the T×R dot products x_t·w_r over columns [k0, k1)
 * (k0 a multiple of LIN_KB, k1 one too or the end of the 16-lane part).
 * Their outer sums live in memory, ob[t·lds + 16r + l]: they start at +0
 * when init, and stay in memory between blocks (a compiler barrier keeps
 * the registers for the block sums and operands). fin: finish (adding
 * columns [c16, cols) one by one) into y[t·ldy + r]. */
VK_INLINE void VK_ISA(lin_tile)(const int T, const int R, const int bf,
                                const float *x, int64_t ldx, const void *w,
                                int64_t ldw, int64_t k0, int64_t k1,
                                float *ob, int64_t lds, int init, int fin,
                                float *y, int64_t ldy, int64_t c16,
                                int64_t cols)
{
	for (int64_t b = k0; b < k1; b += LIN_KB) {
		int64_t be = b + LIN_KB < k1 ? b + LIN_KB : k1;
		V a[4][4][2];
#pragma GCC unroll 4
		for (int t = 0; t < T; t++)
#pragma GCC unroll 4
			for (int r = 0; r < R; r++)
				a[t][r][0] = a[t][r][1] = v_zero();
		for (int64_t k = b; k < be; k += 16) {
#pragma GCC unroll 2
			for (int h = 0; h < 2; h++) {
				int64_t kk = k + 8 * h;
				if (R >= T) { /* one x at a time against R rows */
					V wr[4];
#pragma GCC unroll 4
					for (int r = 0; r < R; r++)
						wr[r] = VK_ISA(lin_wload)(bf, w, r * ldw + kk);
#pragma GCC unroll 4
					for (int t = 0; t < T; t++) {
						V xv = v_load(x + t * ldx + kk);
#pragma GCC unroll 4
						for (int r = 0; r < R; r++)
							a[t][r][h] = v_fma(xv, wr[r], a[t][r][h]);
					}
				} else { /* one row at a time against T tokens */
					V xv[4];
#pragma GCC unroll 4
					for (int t = 0; t < T; t++)
						xv[t] = v_load(x + t * ldx + kk);
#pragma GCC unroll 4
					for (int r = 0; r < R; r++) {
						V wr = VK_ISA(lin_wload)(bf, w, r * ldw + kk);
#pragma GCC unroll 4
						for (int t = 0; t < T; t++)
							a[t][r][h] = v_fma(xv[t], wr, a[t][r][h]);
					}
				}
			}
		}
		int first = init && b == k0;
#pragma GCC unroll 4
		for (int t = 0; t < T; t++)
#pragma GCC unroll 4
			for (int r = 0; r < R; r++)
#pragma GCC unroll 2
				for (int h = 0; h < 2; h++) {
					float *p = ob + t * lds + r * 16 + h * 8;
					v_store(p, v_add(first ? v_zero() : v_load(p), a[t][r][h]));
				}
		__asm__ __volatile__("" ::: "memory");
	}
	if (!fin)
		return;
	int none = init && k0 >= k1; /* no block: the sums are still +0 */
	for (int t = 0; t < T; t++)
		for (int r = 0; r < R; r++) {
			const float *p = ob + t * lds + r * 16;
			float s = none ? 0.0f : v_hsum(v_add(v_load(p), v_load(p + 8)));
			for (int64_t c = c16; c < cols; c++)
				s = fmaf(x[t * ldx + c], lin_wscalar(bf, w, r * ldw + c), s);
			y[t * ldy + r] = s;
		}
}

/* lin_rows runs T-token tiles over rows [0, nr), R rows at a time; the
 * outer sums of row r of token t are at scr[t·lds + 16r]. */
VK_INLINE void VK_ISA(lin_rows)(const int T, const int R, const int bf,
                                const float *x, int64_t ldx, const void *w,
                                int64_t ldw, int64_t nr, int64_t k0,
                                int64_t k1, float *scr, int64_t lds, int init,
                                int fin, float *y, int64_t ldy, int64_t c16,
                                int64_t cols)
{
	int64_t r = 0;
	for (; r + R <= nr; r += R)
		VK_ISA(lin_tile)(T, R, bf, x, ldx, lin_wrow(bf, w, r * ldw), ldw, k0,
		                 k1, scr + r * 16, lds, init, fin, y + r, ldy, c16,
		                 cols);
	for (; r < nr; r++)
		VK_ISA(lin_tile)(T, 1, bf, x, ldx, lin_wrow(bf, w, r * ldw), ldw, k0,
		                 k1, scr + r * 16, lds, init, fin, y + r, ldy, c16,
		                 cols);
}

/* lin_block_g computes (or advances, see lin_tile) the nt×nr dot products
 * of tokens x[t·ldx] and rows w[r·ldw]. */
VK_INLINE void VK_ISA(lin_block_g)(const int bf, const float *x, int64_t ldx,
                                   int64_t nt, const void *w, int64_t ldw,
                                   int64_t nr, int64_t k0, int64_t k1,
                                   float *scr, int64_t lds, int init, int fin,
                                   float *y, int64_t ldy, int64_t c16,
                                   int64_t cols)
{
	int64_t t = 0;
	for (; t + 3 <= nt; t += 3)
		VK_ISA(lin_rows)(3, 2, bf, x + t * ldx, ldx, w, ldw, nr, k0, k1,
		                 scr + t * lds, lds, init, fin, y + t * ldy, ldy, c16,
		                 cols);
	const float *xt = x + t * ldx;
	float *st = scr + t * lds, *yt = y + t * ldy;
	switch (nt - t) {
	case 2:
		VK_ISA(lin_rows)(2, 3, bf, xt, ldx, w, ldw, nr, k0, k1, st, lds, init,
		                 fin, yt, ldy, c16, cols);
		break;
	case 1:
		VK_ISA(lin_rows)(1, 4, bf, xt, ldx, w, ldw, nr, k0, k1, st, lds, init,
		                 fin, yt, ldy, c16, cols);
		break;
	}
}

/* lin_block_f32 computes the nt×nr dot products in one pass (attention:
 * nt <= 4 query heads, nr <= 16 keys). */
static void VK_ISA(lin_block_f32)(const float *x, int64_t ldx, int64_t nt,
                                  const float *w, int64_t ldw, int64_t nr,
                                  float *y, int64_t ldy, int64_t cols)
{
	float ob[4 * 16 * 16] __attribute__((aligned(64)));
	int64_t c16 = cols & ~(int64_t)15;
	for (int64_t t0 = 0; t0 < nt; t0 += 4)
		for (int64_t r0 = 0; r0 < nr; r0 += 16)
			VK_ISA(lin_block_g)(0, x + t0 * ldx, ldx, nt - t0 < 4 ? nt - t0 : 4,
			                    w + r0 * ldw, ldw, nr - r0 < 16 ? nr - r0 : 16,
			                    0, c16, ob, 16 * 16, 1, 1, y + t0 * ldy + r0,
			                    ldy, c16, cols);
}

/* ---- q4 ---- */

/* q4_deq8 dequantizes 8 weights: low (hi = 0) or high nibbles of p[0..8). */
VK_INLINE V VK_ISA(q4_deq8)(const uint8_t *p, const int hi, V s, V o)
{
	return v_fma(s, v_q4_nibbles(p, hi), o);
}

/* q4_tile: the T×R dot products of tokens x[t·ldx] and q4 rows (ldq bytes,
 * ldso scale/offset floats apart) over all cols (a multiple of 32), weights
 * dequantized in registers. Groups are 1 << lg columns. */
VK_INLINE void VK_ISA(q4_tile)(const int T, const int R, const float *x,
                               int64_t ldx, const uint8_t *q, int64_t ldq,
                               const float *so, int64_t ldso, int lg,
                               int64_t cols, float *y, int64_t ldy, int pf)
{
	float ob[4 * 4 * 16] __attribute__((aligned(64)));
	for (int64_t b = 0; b < cols; b += LIN_KB) {
		int64_t be = b + LIN_KB < cols ? b + LIN_KB : cols;
		V a[4][4][2];
#pragma GCC unroll 4
		for (int t = 0; t < T; t++)
#pragma GCC unroll 4
			for (int r = 0; r < R; r++)
				a[t][r][0] = a[t][r][1] = v_zero();
		for (int64_t j = b; j < be; j += 32) {
			int64_t g2 = (j >> lg) * 2;
			/* The next tile's rows follow these: fetch R·16 bytes of them
			 * per R·16 bytes read (short rows are too short for the
			 * hardware prefetchers). */
			if (pf) {
				const char *p = (const char *)q + R * ldq + (j / 32) * R * 16;
				__builtin_prefetch(p);
				if (R * 16 > 64)
					__builtin_prefetch(p + 64);
				if ((j & 255) == 0)
					__builtin_prefetch((const char *)(so + R * ldso) + (j / 256) * 64);
			}
#pragma GCC unroll 4
			for (int r = 0; r < R; r++) {
				const uint8_t *p = q + r * ldq + j / 2;
				V s = v_set1(so[r * ldso + g2]), off = v_set1(so[r * ldso + g2 + 1]);
				V w0 = VK_ISA(q4_deq8)(p, 0, s, off);
				V w1 = VK_ISA(q4_deq8)(p + 8, 0, s, off);
				V w2 = VK_ISA(q4_deq8)(p, 1, s, off);
				V w3 = VK_ISA(q4_deq8)(p + 8, 1, s, off);
#pragma GCC unroll 4
				for (int t = 0; t < T; t++) {
					const float *xp = x + t * ldx + j;
					a[t][r][0] = v_fma(v_load(xp), w0, a[t][r][0]);
					a[t][r][1] = v_fma(v_load(xp + 8), w1, a[t][r][1]);
					a[t][r][0] = v_fma(v_load(xp + 16), w2, a[t][r][0]);
					a[t][r][1] = v_fma(v_load(xp + 24), w3, a[t][r][1]);
				}
			}
		}
#pragma GCC unroll 4
		for (int t = 0; t < T; t++)
#pragma GCC unroll 4
			for (int r = 0; r < R; r++)
#pragma GCC unroll 2
				for (int h = 0; h < 2; h++) {
					float *p = ob + (t * 4 + r) * 16 + h * 8;
					v_store(p, v_add(b == 0 ? v_zero() : v_load(p), a[t][r][h]));
				}
		__asm__ __volatile__("" ::: "memory");
	}
	for (int t = 0; t < T; t++)
		for (int r = 0; r < R; r++) {
			const float *p = ob + (t * 4 + r) * 16;
			y[t * ldy + r] = v_hsum(v_add(v_load(p), v_load(p + 8)));
		}
}

/* q4_panel dequantizes rows [0, nr) × columns [k0, k1) (multiples of 32)
 * into dst[r·ldd + (c − k0)]. */
static void VK_ISA(q4_panel)(float *dst, int64_t ldd, const uint8_t *q,
                             int64_t ldq, const float *so, int64_t ldso,
                             int lg, int64_t nr, int64_t k0, int64_t k1)
{
	for (int64_t r = 0; r < nr; r++) {
		const uint8_t *qr = q + r * ldq;
		const float *sr = so + r * ldso;
		float *d = dst + r * ldd - k0;
		for (int64_t j = k0; j < k1; j += 32) {
			int64_t g2 = (j >> lg) * 2;
			V s = v_set1(sr[g2]), off = v_set1(sr[g2 + 1]);
			const uint8_t *p = qr + j / 2;
			v_store(d + j, VK_ISA(q4_deq8)(p, 0, s, off));
			v_store(d + j + 8, VK_ISA(q4_deq8)(p + 8, 0, s, off));
			v_store(d + j + 16, VK_ISA(q4_deq8)(p, 1, s, off));
			v_store(d + j + 24, VK_ISA(q4_deq8)(p + 8, 1, s, off));
		}
	}
}

/* ---- tasks ---- */

typedef struct {
	float *y;
	const float *x;
	const void *w;     /* f32 or bf16 rows; NULL for q4 */
	const uint8_t *q;  /* q4 nibbles */
	const float *so;   /* q4 scales and offsets */
	int bf, lg;
	int64_t n, rows, cols, rb, ntb;
} VK_ISA(lin_ctx);

/* lin_gemv_task: rows [r0, r0+rb) for all n <= LIN_GEMV_N tokens. */
static void VK_ISA(lin_gemv_task)(void *vc, int64_t task)
{
	const VK_ISA(lin_ctx) *c = vc;
	int64_t cols = c->cols, c16 = cols & ~(int64_t)15;
	int64_t r0 = task * c->rb;
	int64_t nr = c->rows - r0 < c->rb ? c->rows - r0 : c->rb;
	float *y = c->y + r0;
	if (c->q) {
		int64_t ldq = cols / 2, ldso = (cols >> c->lg) * 2;
		const uint8_t *q = c->q + r0 * ldq;
		const float *so = c->so + r0 * ldso;
		int64_t r = 0;
#define Q4_ROWS(T, R)                                                      \
	for (; r + R <= nr; r += R)                                            \
		VK_ISA(q4_tile)(T, R, c->x, cols, q + r * ldq, ldq, so + r * ldso,  \
		                ldso, c->lg, cols, y + r, c->rows,                 \
		                r0 + r + 2 * R <= c->rows);                        \
	for (; r < nr; r++)                                                    \
		VK_ISA(q4_tile)(T, 1, c->x, cols, q + r * ldq, ldq, so + r * ldso,  \
		                ldso, c->lg, cols, y + r, c->rows, 0);
		switch (c->n) {
		case 1:
			Q4_ROWS(1, 4)
			break;
		case 2:
			Q4_ROWS(2, 2)
			break;
		default:
			Q4_ROWS(3, 2)
			break;
		}
#undef Q4_ROWS
		return;
	}
	float ob[3 * LIN_RB_GEMV * 16] __attribute__((aligned(64)));
	int64_t lds = LIN_RB_GEMV * 16;
	const void *w = lin_wrow(c->bf, c->w, r0 * cols);
#define LIN_GEMV(BF)                                                       \
	switch (c->n) {                                                        \
	case 1:                                                                \
		VK_ISA(lin_rows)(1, 4, BF, c->x, cols, w, cols, nr, 0, c16, ob, lds,  \
		                 1, 1, y, c->rows, c16, cols);                     \
		break;                                                             \
	case 2:                                                                \
		VK_ISA(lin_rows)(2, 3, BF, c->x, cols, w, cols, nr, 0, c16, ob, lds,  \
		                 1, 1, y, c->rows, c16, cols);                     \
		break;                                                             \
	default:                                                               \
		VK_ISA(lin_rows)(3, 2, BF, c->x, cols, w, cols, nr, 0, c16, ob, lds,  \
		                 1, 1, y, c->rows, c16, cols);                     \
		break;                                                             \
	}
	if (c->bf)
		LIN_GEMV(1)
	else
		LIN_GEMV(0)
#undef LIN_GEMV
}

/* lin_gemm_task: rows [r0, r0+rb) × tokens [t0, t0+LIN_TB), in cache blocks
 * of LIN_KC columns; q4 rows are dequantized into a panel per block. */
static void VK_ISA(lin_gemm_task)(void *vc, int64_t task)
{
	const VK_ISA(lin_ctx) *c = vc;
	int64_t cols = c->cols, c16 = cols & ~(int64_t)15;
	int64_t r0 = task / c->ntb * c->rb, t0 = task % c->ntb * LIN_TB;
	int64_t nr = c->rows - r0 < c->rb ? c->rows - r0 : c->rb;
	int64_t nt = c->n - t0 < LIN_TB ? c->n - t0 : LIN_TB;
	const float *x = c->x + t0 * cols;
	float *y = c->y + t0 * c->rows + r0;
	int64_t lds = c->rb * 16;
	float *scr = vk_scratch(0, (size_t)(LIN_TB * lds) * sizeof(float));
	if (c->q) {
		int64_t ldq = cols / 2, ldso = (cols >> c->lg) * 2;
		float *panel = vk_scratch(3, (size_t)(c->rb * LIN_KC) * sizeof(float));
		for (int64_t k0 = 0; k0 < cols; k0 += LIN_KC) {
			int64_t k1 = k0 + LIN_KC < cols ? k0 + LIN_KC : cols;
			VK_ISA(q4_panel)(panel, k1 - k0, c->q + r0 * ldq, ldq,
			                 c->so + r0 * ldso, ldso, c->lg, nr, k0, k1);
			/* The panel's columns start at k0, a multiple of LIN_KB: the
			 * accumulation blocks stay where they are. */
			VK_ISA(lin_block_g)(0, x + k0, cols, nt, panel, k1 - k0, nr, 0,
			                    k1 - k0, scr, lds, k0 == 0, k1 == cols, y,
			                    c->rows, k1 - k0, k1 - k0);
		}
		return;
	}
	const void *w = lin_wrow(c->bf, c->w, r0 * cols);
	for (int64_t k0 = 0;; k0 += LIN_KC) {
		int64_t k1 = k0 + LIN_KC < c16 ? k0 + LIN_KC : c16;
		if (c->bf)
			VK_ISA(lin_block_g)(1, x, cols, nt, w, cols, nr, k0, k1, scr, lds,
			                    k0 == 0, k1 == c16, y, c->rows, c16, cols);
		else
			VK_ISA(lin_block_g)(0, x, cols, nt, w, cols, nr, k0, k1, scr, lds,
			                    k0 == 0, k1 == c16, y, c->rows, c16, cols);
		if (k1 == c16)
			break;
	}
}

static void VK_ISA(lin_run)(VK_ISA(lin_ctx) *c)
{
	int64_t ntasks;
	vk_task_fn fn;
	if (c->n <= LIN_GEMV_N) {
		c->rb = LIN_RB_GEMV;
		ntasks = (c->rows + c->rb - 1) / c->rb;
		fn = VK_ISA(lin_gemv_task);
	} else {
		c->rb = LIN_RB;
		c->ntb = (c->n + LIN_TB - 1) / LIN_TB;
		ntasks = (c->rows + c->rb - 1) / c->rb * c->ntb;
		fn = VK_ISA(lin_gemm_task);
	}
	vk_par(ntasks, 2.0 * (double)c->n * (double)c->rows * (double)c->cols, fn,
	       c);
}

static void VK_ISA(linear)(float *y, const float *x, const void *w, int bf,
                           int64_t n, int64_t rows, int64_t cols)
{
	VK_ISA(lin_ctx) c = {y, x, w, NULL, NULL, bf, 0, n, rows, cols, 0, 0};
	VK_ISA(lin_run)(&c);
}

static void VK_ISA(linear_q4)(float *y, const float *x, const uint8_t *q,
                              const float *so, int64_t n, int64_t rows,
                              int64_t cols, int lg)
{
	VK_ISA(lin_ctx) c = {y, x, NULL, q, so, 0, lg, n, rows, cols, 0, 0};
	VK_ISA(lin_run)(&c);
}

/* q4_dequant: rows × cols weights of q4 rows into dst [rows, cols]. */
typedef struct {
	float *dst;
	const uint8_t *q;
	const float *so;
	int64_t rows, cols, per;
	int lg;
} VK_ISA(q4d_ctx);

static void VK_ISA(q4d_task)(void *vc, int64_t task)
{
	const VK_ISA(q4d_ctx) *c = vc;
	int64_t r0 = task * c->per;
	int64_t nr = c->rows - r0 < c->per ? c->rows - r0 : c->per;
	int64_t ldq = c->cols / 2, ldso = (c->cols >> c->lg) * 2;
	VK_ISA(q4_panel)(c->dst + r0 * c->cols, c->cols, c->q + r0 * ldq, ldq,
	                 c->so + r0 * ldso, ldso, c->lg, nr, 0, c->cols);
}

static void VK_ISA(q4_dequant)(float *dst, const uint8_t *q, const float *so,
                               int64_t rows, int64_t cols, int lg)
{
	VK_ISA(q4d_ctx) c = {dst, q, so, rows, cols, 0, lg};
	c.per = cols >= 16384 ? 1 : 16384 / cols;
	vk_par((rows + c.per - 1) / c.per, 2.0 * (double)rows * (double)cols,
	       VK_ISA(q4d_task), &c);
}
