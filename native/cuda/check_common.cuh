/*
 * check_common.cuh: the scaffolding of the device harnesses that compare
 * the CUDA backend with the CPU backend (ops_check.cu, tower_check.cu,
 * catalog_check.cu; q4_check.cu checks against float64 and stands alone):
 *
 *   check_open  the CUDA backend of device 0 (exit 2 when there is none)
 *               and the CPU backend, the reference (native/cpu, linked by
 *               build/cuda.sh), a stream each; the random source seeded;
 *   Pair        a buffer on both sides (c: host memory, the CPU backend's;
 *               g: device memory), made by in (a copy of host data), out
 *               (poisoned: NaN floats, so an unwritten element fails) or
 *               zeros, freed together by free_all;
 *   T, F, Q, NIL  tensor descriptors of a Pair on either side;
 *   randf, randi, bf16_of  random data;
 *   run         an operation on the CPU, then on the GPU; a GPU error is a
 *               failed check;
 *   cmp, cmp_i, same, verdict  a check's line: its name (padded to the
 *               harness's column), what was measured, then "ok" or
 *               "FAIL", counted in checks and failures.
 *
 * Tolerances (relative error max|gpu − cpu| / max|cpu|): TOL_DOT for ops
 * that sum (the backends sum in different orders), TOL_EW for elementwise
 * math, EXACT for memory ops and anything promised bit for bit.
 *
 * Each harness is one program and includes this once: everything here is
 * static.
 */
#ifndef VERDICT_CUDA_CHECK_COMMON_CUH
#define VERDICT_CUDA_CHECK_COMMON_CUH

#include "../backend.h"
#include "../cpu/kernels.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

extern "C" vd_backend *vd_cuda_backend(int device, char *err, size_t errlen);

static const double TOL_DOT = 2e-5, TOL_EW = 1e-6, EXACT = 0;

static vd_backend *CPU, *GPU;
static vd_stream *CS, *GS;
static std::mt19937_64 rng; /* seeded by check_open */
static int checks = 0, failures = 0;
static const char *check_prog = "check"; /* the harness's name, for messages */
static int check_col = 58;               /* the width of a check's name in its line */

/* check_open opens both backends (the CPU's kernels on 8 threads) and a
 * stream on each, seeds rng, and returns device 0's properties; no GPU
 * ends the program with status 2. Lines are written as they end. */
static cudaDeviceProp check_open(const char *prog, uint64_t seed, int col)
{
	setvbuf(stdout, nullptr, _IOLBF, 0);
	check_prog = prog;
	check_col = col;
	rng.seed(seed);
	char err[512] = "";
	GPU = vd_cuda_backend(0, err, sizeof err);
	if (!GPU) {
		fprintf(stderr, "%s: %s\n", prog, err);
		exit(2);
	}
	vk_init(8);
	CPU = vd_cpu_backend();
	CS = CPU->stream.stream_new(CPU);
	GS = GPU->stream.stream_new(GPU);
	cudaDeviceProp prop;
	cudaGetDeviceProperties(&prop, 0);
	return prop;
}

/* fmt: printf into a string. */
static std::string fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
static std::string fmt(const char *f, ...)
{
	char b[512];
	va_list ap;
	va_start(ap, f);
	vsnprintf(b, sizeof b, f, ap);
	va_end(ap);
	return b;
}

/* verdict: a check's line, its name printf's, then ok or FAIL. */
static void verdict(bool ok, const char *f, ...) __attribute__((format(printf, 2, 3)));
static void verdict(bool ok, const char *f, ...)
{
	char buf[512];
	va_list ap;
	va_start(ap, f);
	vsnprintf(buf, sizeof buf, f, ap);
	va_end(ap);
	printf("%-*s %s\n", check_col, buf, ok ? "ok" : "FAIL");
	checks++;
	if (!ok)
		failures++;
}

/* ---- buffers on both sides ---- */

struct Pair {
	void *c = nullptr, *g = nullptr;
	size_t n = 0; /* bytes (4 for an empty one) */
};
static std::vector<Pair> live_pairs;

/* pair: n bytes on both sides, the host's filled with byte v, the
 * device's too. The backends' streams do not wait for the legacy default
 * stream that cudaMemset and cudaMemcpy use: each waits here. */
static Pair pair(size_t bytes, int v)
{
	Pair p;
	p.n = bytes ? bytes : 4;
	p.c = malloc(p.n);
	p.g = GPU->buffer.alloc(GPU, p.n);
	if (!p.c || !p.g) {
		fprintf(stderr, "%s: out of memory (%zu bytes)\n", check_prog, bytes);
		exit(3);
	}
	memset(p.c, v, p.n);
	if (cudaMemset(p.g, v, p.n) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) {
		fprintf(stderr, "%s: cudaMemset failed\n", check_prog);
		exit(3);
	}
	live_pairs.push_back(p);
	return p;
}

/* put copies bytes of host data to both sides of p. */
static void put(Pair &p, const void *host, size_t bytes)
{
	memcpy(p.c, host, bytes);
	cudaMemcpy(p.g, host, bytes, cudaMemcpyHostToDevice);
	cudaDeviceSynchronize();
}

/* in: a copy of host data; out: poisoned (every byte 0xff: NaN floats,
 * −1 ints); zeros: zeroed. */
static Pair in(const void *host, size_t bytes)
{
	Pair p = pair(bytes, 0);
	put(p, host, bytes);
	return p;
}
template <class E> static Pair in(const std::vector<E> &v) { return in(v.data(), v.size() * sizeof(E)); }
static Pair out(size_t bytes) { return pair(bytes, 0xff); }
static Pair zeros(size_t bytes) { return pair(bytes, 0); }

static void free_all()
{
	for (Pair &p : live_pairs) {
		free(p.c);
		GPU->buffer.release(GPU, p.g, p.n);
	}
	live_pairs.clear();
}

/* down_f: n floats of p's device side. */
static std::vector<float> down_f(const Pair &p, size_t n)
{
	std::vector<float> v(n);
	cudaMemcpy(v.data(), p.g, n * 4, cudaMemcpyDeviceToHost);
	return v;
}

/* ---- tensors ---- */

/* T: p as a [r, c] tensor of dtype dt, its device side when g; F: an f32
 * one; Q: a q4 one, so its scales and offsets. */
static vd_tensor T(const Pair &p, bool g, int dt, int64_t r, int64_t c)
{
	vd_tensor t;
	memset(&t, 0, sizeof t);
	t.data = g ? p.g : p.c;
	t.dtype = dt;
	t.rows = r;
	t.cols = c;
	return t;
}
static vd_tensor F(const Pair &p, bool g, int64_t r, int64_t c) { return T(p, g, VD_F32, r, c); }
static vd_tensor Q(const Pair &q, const Pair &so, bool g, int64_t r, int64_t c, int group)
{
	vd_tensor t = T(q, g, VD_Q4, r, c);
	t.aux = g ? so.g : so.c;
	t.group = group;
	return t;
}
static vd_tensor NIL()
{
	vd_tensor t;
	memset(&t, 0, sizeof t);
	return t;
}

static const char *dtname(int dt) { return dt == VD_F32 ? "f32" : dt == VD_BF16 ? "bf16" : "q4"; }

/* ---- random data ---- */

static std::vector<float> randf(size_t n, float lo = -1, float hi = 1)
{
	std::uniform_real_distribution<float> d(lo, hi);
	std::vector<float> v(n);
	for (auto &x : v)
		x = d(rng);
	return v;
}
static std::vector<int32_t> randi(size_t n, int32_t lo, int32_t hi)
{
	std::uniform_int_distribution<int32_t> d(lo, hi);
	std::vector<int32_t> v(n);
	for (auto &x : v)
		x = d(rng);
	return v;
}
/* bf16: f's top 16 bits (truncation). */
static uint16_t bf16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return (uint16_t)(u >> 16);
}
static std::vector<uint16_t> bf16_of(const std::vector<float> &f)
{
	std::vector<uint16_t> b(f.size());
	for (size_t i = 0; i < f.size(); i++)
		b[i] = bf16(f[i]);
	return b;
}

/* ---- running and comparing ---- */

/* run calls op on the CPU then the GPU and syncs both; a GPU error is a
 * failed check. */
static bool run(const std::string &name, const std::function<void(vd_backend *, vd_stream *, bool)> &op)
{
	op(CPU, CS, false);
	CPU->stream.sync(CS);
	op(GPU, GS, true);
	int rc = GPU->stream.sync(GS);
	if (rc) {
		checks++;
		failures++;
		printf("%-*s GPU ERROR %d FAIL\n", check_col, name.c_str(), rc);
		return false;
	}
	return true;
}

/* cmp compares n floats of p, GPU against CPU: the largest absolute and
 * relative error, the elements whose bits differ; a NaN on either side
 * (an unwritten element) fails, and so does any difference when tol is
 * EXACT. */
static void cmp(const std::string &name, const Pair &p, size_t n, double tol)
{
	std::vector<float> g = down_f(p, n);
	const float *c = (const float *)p.c;
	double mabs = 0, mref = 0;
	size_t bits = 0;
	bool bad = false;
	for (size_t i = 0; i < n; i++) {
		bits += memcmp(&c[i], &g[i], 4) != 0;
		if (std::isnan(c[i]) || std::isnan(g[i])) {
			bad = true;
			continue;
		}
		double e = fabs((double)g[i] - (double)c[i]);
		mabs = std::max(mabs, e);
		mref = std::max(mref, fabs((double)c[i]));
	}
	double rel = mref > 0 ? mabs / mref : mabs;
	bool fail = bad || rel > tol || (tol == 0 && bits != 0);
	checks++;
	printf("%-*s n=%-9zu maxabs %.3e rel %.3e bits≠ %-8zu tol %.0e %s\n", check_col, name.c_str(), n, mabs, rel,
	       bits, tol, fail ? (bad ? "FAIL (NaN/unwritten)" : "FAIL") : "ok");
	if (fail)
		failures++;
}

/* cmp_i compares n int32s of p, GPU against CPU, exactly. */
static void cmp_i(const std::string &name, const Pair &p, size_t n)
{
	std::vector<int32_t> g(n);
	cudaMemcpy(g.data(), p.g, n * 4, cudaMemcpyDeviceToHost);
	const int32_t *c = (const int32_t *)p.c;
	size_t diff = 0;
	for (size_t i = 0; i < n; i++)
		diff += g[i] != c[i];
	checks++;
	printf("%-*s n=%-9zu mismatches %zu (exact) %s\n", check_col, name.c_str(), n, diff, diff ? "FAIL" : "ok");
	if (diff)
		failures++;
}

/* same checks that the GPU's values a and b are identical bits. */
static void same(const std::string &name, const float *a, const float *b, size_t n)
{
	size_t diff = 0;
	for (size_t i = 0; i < n; i++)
		diff += memcmp(&a[i], &b[i], 4) != 0;
	checks++;
	printf("%-*s n=%-9zu differing %zu (exact) %s\n", check_col, name.c_str(), n, diff, diff ? "FAIL" : "ok");
	if (diff)
		failures++;
}
static void same(const std::string &name, const std::vector<float> &a, const std::vector<float> &b)
{
	same(name, a.data(), b.data(), std::min(a.size(), b.size()));
}

#endif
