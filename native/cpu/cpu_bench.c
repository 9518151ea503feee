/*
 * cpu_bench.c: the machine's limits, measured for benchmarks: streaming read
 * bandwidth and the float32 FMA peak, both on every pool thread.
 */
#include "cpu_internal.h"

#include <math.h>
#include <stdlib.h>
#include <time.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define BENCH_X86 1
#endif

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- read bandwidth ---- */

#define BW_CHUNK (1 << 20) /* bytes per task */

typedef struct {
	const float *p;
	int64_t n;       /* floats */
	float sink[256]; /* one per task slot, so the sums are used */
} bw_ctx;

#if defined(BENCH_X86)
__attribute__((target("avx2"))) static float bw_sum_avx2(const float *p,
                                                         int64_t n)
{
	__m256 a = _mm256_setzero_ps(), b = a, c = a, d = a;
	for (int64_t i = 0; i + 32 <= n; i += 32) {
		a = _mm256_add_ps(a, _mm256_load_ps(p + i));
		b = _mm256_add_ps(b, _mm256_load_ps(p + i + 8));
		c = _mm256_add_ps(c, _mm256_load_ps(p + i + 16));
		d = _mm256_add_ps(d, _mm256_load_ps(p + i + 24));
	}
	a = _mm256_add_ps(_mm256_add_ps(a, b), _mm256_add_ps(c, d));
	float t[8];
	_mm256_storeu_ps(t, a);
	return t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7];
}
#endif

static float bw_sum_plain(const float *p, int64_t n)
{
	float a[16] = {0};
	for (int64_t i = 0; i + 16 <= n; i += 16)
		for (int l = 0; l < 16; l++)
			a[l] += p[i + l];
	float s = 0;
	for (int l = 0; l < 16; l++)
		s += a[l];
	return s;
}

static int have_avx2(void)
{
#if defined(BENCH_X86)
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx2");
#else
	return 0;
#endif
}

static void bw_task(void *vc, int64_t task)
{
	bw_ctx *c = vc;
	int64_t per = BW_CHUNK / (int64_t)sizeof(float);
	int64_t lo = task * per, n = c->n - lo < per ? c->n - lo : per;
	float s;
#if defined(BENCH_X86)
	if (have_avx2())
		s = bw_sum_avx2(c->p + lo, n);
	else
#endif
		s = bw_sum_plain(c->p + lo, n);
	c->sink[task & 255] += s;
}

double vk_bench_read_bandwidth(int64_t bytes, int reps)
{
	bytes &= ~(int64_t)(BW_CHUNK - 1);
	if (bytes < BW_CHUNK)
		bytes = BW_CHUNK;
	float *p = aligned_alloc(4096, (size_t)bytes);
	if (!p)
		return 0;
	int64_t n = bytes / (int64_t)sizeof(float);
	for (int64_t i = 0; i < n; i++) /* touch every page, non-zero data */
		p[i] = (float)(i & 1023);
	bw_ctx c;
	memset(&c, 0, sizeof c);
	c.p = p;
	c.n = n;
	double best = 0;
	int64_t ntasks = bytes / BW_CHUNK;
	for (int r = 0; r < reps; r++) {
		double t0 = now_s();
		vk_pool_run(ntasks, bw_task, &c);
		double dt = now_s() - t0;
		double gbs = (double)bytes / dt / 1e9;
		if (gbs > best)
			best = gbs;
	}
	free(p);
	return best;
}

/* ---- FMA peak ---- */

#define FMA_CHAINS 16

typedef struct {
	int64_t iters;
	int kind; /* 2: 16 lanes (AVX-512), 1: 8 lanes (AVX2), 0: portable */
	float sink[256];
} fma_ctx;

#if defined(BENCH_X86)
__attribute__((target("avx512f"))) static float fma_avx512(int64_t iters)
{
	__m512 a[FMA_CHAINS];
	__m512 m = _mm512_set1_ps(0.99999f), c = _mm512_set1_ps(1e-5f);
	for (int i = 0; i < FMA_CHAINS; i++)
		a[i] = _mm512_set1_ps((float)i);
	for (int64_t k = 0; k < iters; k++)
#pragma GCC unroll 16
		for (int i = 0; i < FMA_CHAINS; i++)
			a[i] = _mm512_fmadd_ps(a[i], m, c);
	for (int i = 1; i < FMA_CHAINS; i++)
		a[0] = _mm512_add_ps(a[0], a[i]);
	return _mm512_reduce_add_ps(a[0]);
}

__attribute__((target("avx2,fma"))) static float fma_avx2(int64_t iters)
{
	__m256 a[FMA_CHAINS];
	__m256 m = _mm256_set1_ps(0.99999f), c = _mm256_set1_ps(1e-5f);
	for (int i = 0; i < FMA_CHAINS; i++)
		a[i] = _mm256_set1_ps((float)i);
	for (int64_t k = 0; k < iters; k++)
#pragma GCC unroll 16
		for (int i = 0; i < FMA_CHAINS; i++)
			a[i] = _mm256_fmadd_ps(a[i], m, c);
	for (int i = 1; i < FMA_CHAINS; i++)
		a[0] = _mm256_add_ps(a[0], a[i]);
	float t[8];
	_mm256_storeu_ps(t, a[0]);
	return t[0] + t[7];
}
#endif

static float fma_plain(int64_t iters)
{
	float a[FMA_CHAINS][8];
	for (int i = 0; i < FMA_CHAINS; i++)
		for (int l = 0; l < 8; l++)
			a[i][l] = (float)i;
	for (int64_t k = 0; k < iters; k++)
		for (int i = 0; i < FMA_CHAINS; i++)
			for (int l = 0; l < 8; l++)
				a[i][l] = fmaf(a[i][l], 0.99999f, 1e-5f);
	float s = 0;
	for (int i = 0; i < FMA_CHAINS; i++)
		s += a[i][0];
	return s;
}

static void fma_task(void *vc, int64_t task)
{
	fma_ctx *c = vc;
	float s;
#if defined(BENCH_X86)
	if (c->kind == 2)
		s = fma_avx512(c->iters);
	else if (c->kind == 1)
		s = fma_avx2(c->iters);
	else
#endif
		s = fma_plain(c->iters);
	c->sink[task & 255] += s;
}

static int fma_lanes(int kind) { return kind == 2 ? 16 : 8; }

double vk_bench_fma_peak(double seconds)
{
	fma_ctx c;
	memset(&c, 0, sizeof c);
	/* The widest FMA the kernels use. */
	int set = vk_simd_active();
	c.kind = set == 3 ? 2 : set == 1 ? 1 : 0;
	int threads = vk_pool_threads();
	int64_t ntasks = 8 * (int64_t)threads;
	/* Calibrate the iteration count on one short run. */
	c.iters = 1 << 16;
	double t0 = now_s();
	vk_pool_run(ntasks, fma_task, &c);
	double dt = now_s() - t0;
	if (dt > 0)
		c.iters = (int64_t)((double)c.iters * seconds / dt);
	if (c.iters < (1 << 16))
		c.iters = 1 << 16;
	double best = 0;
	for (int r = 0; r < 3; r++) {
		t0 = now_s();
		vk_pool_run(ntasks, fma_task, &c);
		dt = now_s() - t0;
		double flops = 2.0 * (double)ntasks * (double)c.iters * FMA_CHAINS *
		               (double)fma_lanes(c.kind);
		if (flops / dt / 1e9 > best)
			best = flops / dt / 1e9;
	}
	return best;
}
