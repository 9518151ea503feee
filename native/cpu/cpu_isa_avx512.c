/*
 * cpu_isa_avx512.c: the x86 AVX-512 kernel set: the AVX2 set with its
 * linear kernels (float32, bfloat16, q4) replaced by 16-lane ones.
 *
 * The canonical dot product of cpu_linear_impl.h has 16 lanes: one zmm
 * register holds one dot product's lanes, so each FMA here is the two FMAs
 * of the 8-lane sets, lane for lane; results are bit-identical. q4 weights
 * are dequantized with a 16-entry table per group (vpermps picks entry
 * nibble): table[j] = fmaf(scale, j, offset), the value every set computes.
 *
 * cpu_api.c selects this set only when __builtin_cpu_supports reports
 * AVX-512 F, BW, DQ and VL (and AVX2 and FMA).
 */
#include "cpu_internal.h"

#if defined(VK_HAVE_AVX512_BUILD)

#include <immintrin.h>
#include <math.h>

#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")

#define LIN_KB 512     /* columns per accumulation block (cpu_linear_impl.h) */
#define LIN_KC 1024    /* columns per cache block (GEMM) */
#define LIN_RB 48      /* rows per task (GEMM) */
#define LIN_TB 64      /* tokens per task (GEMM) */
#define LIN_RB_GEMV 32 /* rows per task when n <= LIN_GEMV_N */
#define LIN_GEMV_N 3
#ifndef Z_Q4_FUSED_N
#define Z_Q4_FUSED_N 32 /* q4 token counts up to this dequantize in registers */
#endif

typedef __m512 Z;



VK_INLINE Z z_wload(const int bf, const void *w, int64_t off)
{
	if (bf) {
		__m512i v = _mm512_cvtepu16_epi32(
		    _mm256_loadu_si256((const __m256i *)((const uint16_t *)w + off)));
		return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
	}
	return _mm512_loadu_ps((const float *)w + off);
}

VK_INLINE float z_wscalar(const int bf, const void *w, int64_t off)
{
	if (bf) {
		uint32_t u = (uint32_t)((const uint16_t *)w)[off] << 16;
		float f;
		memcpy(&f, &u, sizeof f);
		return f;
	}
	return ((const float *)w)[off];
}

VK_INLINE const void *z_wrow(const int bf, const void *w, int64_t off)
{
	return bf ? (const void *)((const uint16_t *)w + off)
	          : (const void *)((const float *)w + off);
}

/* z_hsum: o_l + o_{l+8}, then the 8-lane tree of v_hsum. */
VK_INLINE float z_hsum(Z o)
{
	__m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(o),
	                          _mm512_extractf32x8_ps(o, 1));
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(s8),
	                      _mm256_extractf128_ps(s8, 1));
	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	return _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)));
}

/* z_tile: lin_tile of cpu_linear_impl.h with 16-lane registers (outer sums
 * in memory at ob[t·lds + 16r]). */
VK_INLINE void z_tile(const int T, const int R, const int bf, const float *x,
                      int64_t ldx, const void *w, int64_t ldw, int64_t k0,
                      int64_t k1, float *ob, int64_t lds, int init, int fin,
                      float *y, int64_t ldy, int64_t c16, int64_t cols)
{
	for (int64_t b = k0; b < k1; b += LIN_KB) {
		int64_t be = b + LIN_KB < k1 ? b + LIN_KB : k1;
		Z a[4][6];
#pragma GCC unroll 4
		for (int t = 0; t < T; t++)
#pragma GCC unroll 6
			for (int r = 0; r < R; r++)
				a[t][r] = _mm512_setzero_ps();
		for (int64_t k = b; k < be; k += 16) {
			if (R >= T) {
				Z wr[6];
#pragma GCC unroll 6
				for (int r = 0; r < R; r++)
					wr[r] = z_wload(bf, w, r * ldw + k);
#pragma GCC unroll 4
				for (int t = 0; t < T; t++) {
					Z xv = _mm512_loadu_ps(x + t * ldx + k);
#pragma GCC unroll 6
					for (int r = 0; r < R; r++)
						a[t][r] = _mm512_fmadd_ps(xv, wr[r], a[t][r]);
				}
			} else {
				Z xv[4];
#pragma GCC unroll 4
				for (int t = 0; t < T; t++)
					xv[t] = _mm512_loadu_ps(x + t * ldx + k);
#pragma GCC unroll 6
				for (int r = 0; r < R; r++) {
					Z wr = z_wload(bf, w, r * ldw + k);
#pragma GCC unroll 4
					for (int t = 0; t < T; t++)
						a[t][r] = _mm512_fmadd_ps(xv[t], wr, a[t][r]);
				}
			}
		}
		int first = init && b == k0;
#pragma GCC unroll 4
		for (int t = 0; t < T; t++)
#pragma GCC unroll 6
			for (int r = 0; r < R; r++) {
				float *p = ob + t * lds + r * 16;
				_mm512_storeu_ps(p, _mm512_add_ps(first ? _mm512_setzero_ps()
				                                        : _mm512_loadu_ps(p),
				                                  a[t][r]));
			}
		__asm__ __volatile__("" ::: "memory");
	}
	if (!fin)
		return;
	int none = init && k0 >= k1;
	for (int t = 0; t < T; t++)
		for (int r = 0; r < R; r++) {
			float s = none ? 0.0f : z_hsum(_mm512_loadu_ps(ob + t * lds + r * 16));
			for (int64_t c = c16; c < cols; c++)
				s = fmaf(x[t * ldx + c], z_wscalar(bf, w, r * ldw + c), s);
			y[t * ldy + r] = s;
		}
}

VK_INLINE void z_rows(const int T, const int R, const int bf, const float *x,
                      int64_t ldx, const void *w, int64_t ldw, int64_t nr,
                      int64_t k0, int64_t k1, float *scr, int64_t lds,
                      int init, int fin, float *y, int64_t ldy, int64_t c16,
                      int64_t cols)
{
	int64_t r = 0;
	for (; r + R <= nr; r += R)
		z_tile(T, R, bf, x, ldx, z_wrow(bf, w, r * ldw), ldw, k0, k1,
		       scr + r * 16, lds, init, fin, y + r, ldy, c16, cols);
	for (; r < nr; r++)
		z_tile(T, 1, bf, x, ldx, z_wrow(bf, w, r * ldw), ldw, k0, k1,
		       scr + r * 16, lds, init, fin, y + r, ldy, c16, cols);
}

VK_INLINE void z_block(const int bf, const float *x, int64_t ldx, int64_t nt,
                       const void *w, int64_t ldw, int64_t nr, int64_t k0,
                       int64_t k1, float *scr, int64_t lds, int init, int fin,
                       float *y, int64_t ldy, int64_t c16, int64_t cols)
{
	int64_t t = 0;
	for (; t + 4 <= nt; t += 4)
		z_rows(4, 6, bf, x + t * ldx, ldx, w, ldw, nr, k0, k1, scr + t * lds,
		       lds, init, fin, y + t * ldy, ldy, c16, cols);
	const float *xt = x + t * ldx;
	float *st = scr + t * lds, *yt = y + t * ldy;
	switch (nt - t) {
	case 3:
		z_rows(3, 6, bf, xt, ldx, w, ldw, nr, k0, k1, st, lds, init, fin, yt,
		       ldy, c16, cols);
		break;
	case 2:
		z_rows(2, 6, bf, xt, ldx, w, ldw, nr, k0, k1, st, lds, init, fin, yt,
		       ldy, c16, cols);
		break;
	case 1:
		z_rows(1, 6, bf, xt, ldx, w, ldw, nr, k0, k1, st, lds, init, fin, yt,
		       ldy, c16, cols);
		break;
	}
}

/* ---- q4 ---- */

static const float z_iota[16] = {0, 1, 2,  3,  4,  5,  6,  7,
                                 8, 9, 10, 11, 12, 13, 14, 15};

/* z_table: the 16 weights a group's nibbles stand for. */
VK_INLINE Z z_table(const float *so)
{
	return _mm512_fmadd_ps(_mm512_set1_ps(so[0]), _mm512_loadu_ps(z_iota),
	                       _mm512_set1_ps(so[1]));
}

/* z_q4_tile: q4_tile of cpu_linear_impl.h with 16-lane registers: the R
 * rows' weights of each 32-column block are dequantized into registers once
 * and used by all T tokens (T <= 8). pf: prefetch the next tile's rows. */
VK_INLINE void z_q4_tile(const int T, const int R, const float *x,
                         int64_t ldx, const uint8_t *q, int64_t ldq,
                         const float *so, int64_t ldso, int lg, int64_t cols,
                         float *y, int64_t ldy, int pf)
{
	const int64_t G = (int64_t)1 << lg;
	float ob[8 * 4 * 16] __attribute__((aligned(64)));
	for (int64_t b = 0; b < cols; b += LIN_KB) {
		int64_t be = b + LIN_KB < cols ? b + LIN_KB : cols;
		Z a[8][4];
#pragma GCC unroll 8
		for (int t = 0; t < T; t++)
#pragma GCC unroll 4
			for (int r = 0; r < R; r++)
				a[t][r] = _mm512_setzero_ps();
		for (int64_t g0 = b; g0 < be; g0 += G) {
			Z tbl[4];
#pragma GCC unroll 4
			for (int r = 0; r < R; r++)
				tbl[r] = z_table(so + r * ldso + (g0 >> lg) * 2);
			for (int64_t j = g0; j < g0 + G; j += 32) {
				/* The next tile's rows follow these: fetch R·16 bytes of
				 * them per R·16 bytes read (short rows are too short for
				 * the hardware prefetchers). */
				if (pf) {
					const char *p = (const char *)q + R * ldq + (j / 32) * R * 16;
					_mm_prefetch(p, _MM_HINT_T0);
					if (R * 16 > 64)
						_mm_prefetch(p + 64, _MM_HINT_T0);
					if ((j & 255) == 0)
						_mm_prefetch((const char *)(so + R * ldso) + (j / 256) * 64,
						             _MM_HINT_T0);
				}
				Z w0[4], w1[4];
#pragma GCC unroll 4
				for (int r = 0; r < R; r++) {
					__m512i v = _mm512_cvtepu8_epi32(
					    _mm_loadu_si128((const __m128i *)(q + r * ldq + j / 2)));
					w0[r] = _mm512_permutexvar_ps(v, tbl[r]);
					w1[r] = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), tbl[r]);
				}
#pragma GCC unroll 8
				for (int t = 0; t < T; t++) {
					Z x0 = _mm512_loadu_ps(x + t * ldx + j);
					Z x1 = _mm512_loadu_ps(x + t * ldx + j + 16);
#pragma GCC unroll 4
					for (int r = 0; r < R; r++) {
						a[t][r] = _mm512_fmadd_ps(x0, w0[r], a[t][r]);
						a[t][r] = _mm512_fmadd_ps(x1, w1[r], a[t][r]);
					}
				}
			}
		}
#pragma GCC unroll 8
		for (int t = 0; t < T; t++)
#pragma GCC unroll 4
			for (int r = 0; r < R; r++) {
				float *p = ob + (t * 4 + r) * 16;
				_mm512_storeu_ps(p, _mm512_add_ps(b == 0 ? _mm512_setzero_ps()
				                                         : _mm512_loadu_ps(p),
				                                  a[t][r]));
			}
		__asm__ __volatile__("" ::: "memory");
	}
	for (int t = 0; t < T; t++)
		for (int r = 0; r < R; r++)
			y[t * ldy + r] = z_hsum(_mm512_loadu_ps(ob + (t * 4 + r) * 16));
}

/* z_q4_rows: tokens [0, n) (n <= 8) against rows [0, nr), R rows a tile. */
VK_INLINE void z_q4_rows(const int T, const int R, const float *x,
                         int64_t ldx, const uint8_t *q, int64_t ldq,
                         const float *so, int64_t ldso, int lg, int64_t cols,
                         float *y, int64_t ldy, int64_t nr, int pf_last)
{
	int64_t r = 0;
	for (; r + R <= nr; r += R)
		z_q4_tile(T, R, x, ldx, q + r * ldq, ldq, so + r * ldso, ldso, lg, cols,
		          y + r, ldy, r + 2 * R <= nr || pf_last);
	for (; r < nr; r++)
		z_q4_tile(T, 1, x, ldx, q + r * ldq, ldq, so + r * ldso, ldso, lg, cols,
		          y + r, ldy, 0);
}

/* z_q4_panel: q4_panel of cpu_linear_impl.h. */
static void z_q4_panel(float *dst, int64_t ldd, const uint8_t *q, int64_t ldq,
                       const float *so, int64_t ldso, int lg, int64_t nr,
                       int64_t k0, int64_t k1)
{
	const int64_t G = (int64_t)1 << lg;
	for (int64_t r = 0; r < nr; r++) {
		const uint8_t *qr = q + r * ldq;
		float *d = dst + r * ldd - k0;
		for (int64_t g0 = k0; g0 < k1; g0 += G) {
			Z tbl = z_table(so + r * ldso + (g0 >> lg) * 2);
			int64_t ge = g0 + G < k1 ? g0 + G : k1;
			for (int64_t j = g0; j < ge; j += 32) {
				__m512i v = _mm512_cvtepu8_epi32(
				    _mm_loadu_si128((const __m128i *)(qr + j / 2)));
				_mm512_storeu_ps(d + j, _mm512_permutexvar_ps(v, tbl));
				_mm512_storeu_ps(d + j + 16, _mm512_permutexvar_ps(
				                                 _mm512_srli_epi32(v, 4), tbl));
			}
		}
	}
}

/* ---- tasks (as in cpu_linear_impl.h) ---- */

typedef struct {
	float *y;
	const float *x;
	const void *w;
	const uint8_t *q;
	const float *so;
	int bf, lg;
	int64_t n, rows, cols, rb, ntb;
} z_ctx;

static void z_gemv_task(void *vc, int64_t task)
{
	const z_ctx *c = vc;
	int64_t cols = c->cols, c16 = cols & ~(int64_t)15;
	int64_t r0 = task * c->rb;
	int64_t nr = c->rows - r0 < c->rb ? c->rows - r0 : c->rb;
	float *y = c->y + r0;
	if (c->q) {
		int64_t ldq = cols / 2, ldso = (cols >> c->lg) * 2;
		const uint8_t *q = c->q + r0 * ldq;
		const float *so = c->so + r0 * ldso;
		int pf = r0 + nr < c->rows; /* rows follow this task's */
		/* The first tile's rows start cold: ask for them all at once. */
		for (int64_t b = 0; b < 4 * ldq && b < nr * ldq; b += 64)
			_mm_prefetch((const char *)q + b, _MM_HINT_T0);
		/* Tokens in groups of 8: each group reads the task's rows again,
		 * from the cache after the first. */
		for (int64_t t0 = 0; t0 < c->n; t0 += 8) {
			int64_t nt = c->n - t0 < 8 ? c->n - t0 : 8;
			const float *x = c->x + t0 * cols;
			float *yt = y + t0 * c->rows;
#define ZQ4(T, R)                                                          \
	case T:                                                                \
		z_q4_rows(T, R, x, cols, q, ldq, so, ldso, c->lg, cols, yt, c->rows, nr, \
		          pf && t0 == 0);                                          \
		break;
			switch (nt) {
				ZQ4(1, 4)
				ZQ4(2, 4)
				ZQ4(3, 4)
				ZQ4(4, 4)
				ZQ4(5, 3)
				ZQ4(6, 3)
				ZQ4(7, 2)
				ZQ4(8, 2)
			}
#undef ZQ4
		}
		return;
	}
	float ob[3 * LIN_RB_GEMV * 16] __attribute__((aligned(64)));
	int64_t lds = LIN_RB_GEMV * 16;
	const void *w = z_wrow(c->bf, c->w, r0 * cols);
#define Z_GEMV(BF)                                                         \
	switch (c->n) {                                                        \
	case 1:                                                                \
		z_rows(1, 6, BF, c->x, cols, w, cols, nr, 0, c16, ob, lds, 1, 1, y,   \
		       c->rows, c16, cols);                                        \
		break;                                                             \
	case 2:                                                                \
		z_rows(2, 6, BF, c->x, cols, w, cols, nr, 0, c16, ob, lds, 1, 1, y,   \
		       c->rows, c16, cols);                                        \
		break;                                                             \
	default:                                                               \
		z_rows(3, 6, BF, c->x, cols, w, cols, nr, 0, c16, ob, lds, 1, 1, y,   \
		       c->rows, c16, cols);                                        \
		break;                                                             \
	}
	if (c->bf)
		Z_GEMV(1)
	else
		Z_GEMV(0)
#undef Z_GEMV
}

static void z_gemm_task(void *vc, int64_t task)
{
	const z_ctx *c = vc;
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
			z_q4_panel(panel, k1 - k0, c->q + r0 * ldq, ldq, c->so + r0 * ldso,
			           ldso, c->lg, nr, k0, k1);
			z_block(0, x + k0, cols, nt, panel, k1 - k0, nr, 0, k1 - k0, scr,
			        lds, k0 == 0, k1 == cols, y, c->rows, k1 - k0, k1 - k0);
		}
		return;
	}
	const void *w = z_wrow(c->bf, c->w, r0 * cols);
	for (int64_t k0 = 0;; k0 += LIN_KC) {
		int64_t k1 = k0 + LIN_KC < c16 ? k0 + LIN_KC : c16;
		if (c->bf)
			z_block(1, x, cols, nt, w, cols, nr, k0, k1, scr, lds, k0 == 0,
			        k1 == c16, y, c->rows, c16, cols);
		else
			z_block(0, x, cols, nt, w, cols, nr, k0, k1, scr, lds, k0 == 0,
			        k1 == c16, y, c->rows, c16, cols);
		if (k1 == c16)
			break;
	}
}

static void z_run(z_ctx *c)
{
	int64_t ntasks;
	vk_task_fn fn;
	if (c->n <= LIN_GEMV_N || (c->q && c->n <= Z_Q4_FUSED_N)) {
		c->rb = LIN_RB_GEMV;
		ntasks = (c->rows + c->rb - 1) / c->rb;
		fn = z_gemv_task;
	} else {
		c->rb = LIN_RB;
		c->ntb = (c->n + LIN_TB - 1) / LIN_TB;
		ntasks = (c->rows + c->rb - 1) / c->rb * c->ntb;
		fn = z_gemm_task;
	}
	vk_par(ntasks, 2.0 * (double)c->n * (double)c->rows * (double)c->cols, fn,
	       c);
}

static void linear_avx512(float *y, const float *x, const void *w, int bf,
                          int64_t n, int64_t rows, int64_t cols)
{
	z_ctx c = {y, x, w, NULL, NULL, bf, 0, n, rows, cols, 0, 0};
	z_run(&c);
}

static void linear_q4_avx512(float *y, const float *x, const uint8_t *q,
                             const float *so, int64_t n, int64_t rows,
                             int64_t cols, int lg)
{
	z_ctx c = {y, x, NULL, q, so, 0, lg, n, rows, cols, 0, 0};
	z_run(&c);
}

typedef struct {
	float *dst;
	const uint8_t *q;
	const float *so;
	int64_t rows, cols, per;
	int lg;
} zd_ctx;

static void zd_task(void *vc, int64_t task)
{
	const zd_ctx *c = vc;
	int64_t r0 = task * c->per;
	int64_t nr = c->rows - r0 < c->per ? c->rows - r0 : c->per;
	int64_t ldq = c->cols / 2, ldso = (c->cols >> c->lg) * 2;
	z_q4_panel(c->dst + r0 * c->cols, c->cols, c->q + r0 * ldq, ldq,
	           c->so + r0 * ldso, ldso, c->lg, nr, 0, c->cols);
}

static void q4_dequant_avx512(float *dst, const uint8_t *q, const float *so,
                              int64_t rows, int64_t cols, int lg)
{
	zd_ctx c = {dst, q, so, rows, cols, 0, lg};
	c.per = cols >= 16384 ? 1 : 16384 / cols;
	vk_par((rows + c.per - 1) / c.per, 2.0 * (double)rows * (double)cols,
	       zd_task, &c);
}

void vk_ops_avx512_fill(vk_ops *o)
{
	*o = vk_ops_avx2;
	o->linear = linear_avx512;
	o->linear_q4 = linear_q4_avx512;
	o->q4_dequant = q4_dequant_avx512;
}

#else
typedef int vk_no_avx512; /* not an x86 build */
#endif
