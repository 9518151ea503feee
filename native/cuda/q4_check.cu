/*
 * q4_check.cu: the tensor-core q4 product (q4_mma.cu) against a float64
 * reference, and its batch identity: every token of a batch alone gives
 * the batch's bits, whichever kernel (few or many tokens, 1, 2 or 4 row
 * tiles a warp) each takes. Runs on a GPU, and on the host emulation of
 * build/cuda-syntax.sh (`run`), where it checks the kernels' indexing and
 * order with the stub's mma.
 */
#include "q4_mma.h"

#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

static std::mt19937 rng(7);

template <class T> static T *dev(const std::vector<T> &v)
{
	T *p = nullptr;
	cudaMalloc(&p, v.size() * sizeof(T) + 16);
	cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice);
	return p;
}

/* run: the product, split by slices where q4_mma splits that shape
 * unless whole (then the unsplit kernel). */
static std::vector<float> run(const float *x, const uint8_t *q, const float *so, const int32_t *ids, int64_t n,
                              int64_t nout, int64_t cols, int lg, bool whole = false)
{
	float *y = nullptr, *part = nullptr;
	cudaMalloc(&y, (size_t)(n * nout) * sizeof(float));
	size_t pb = whole ? 0 : q4_mma_part_bytes(n, nout, cols);
	if (pb)
		cudaMalloc(&part, pb);
	q4_mma(nullptr, false, y, x, q, so, ids, n, nout, cols, lg, part);
	cudaDeviceSynchronize();
	std::vector<float> h((size_t)(n * nout));
	cudaMemcpy(h.data(), y, h.size() * sizeof(float), cudaMemcpyDeviceToHost);
	cudaFree(y);
	if (part)
		cudaFree(part);
	return h;
}

int main()
{
	struct S {
		int64_t n, rows, cols;
		int group;
		bool ids;
	} shapes[] = {
	    {1, 16, 2048, 64, false},   /* few, one row tile, 8 slices of 4 chunks */
	    {3, 20, 576, 64, false},    /* 9 chunks in 8 uneven slices */
	    {9, 34, 512, 128, true},    /* two token tiles a warp, groups of 128, ids */
	    {20, 40, 2048, 64, false},  /* split by slices; whole: four token tiles a warp, the last part dead */
	    {40, 150, 1024, 64, false}, /* split, 64 tokens a block: two row blocks (the last part dead) */
	    {66, 1030, 128, 64, false}, /* many tokens: the staged kernel, 2 slices */
	    {260, 2060, 64, 64, true},  /* the staged kernel 64 tokens a block, ids */
	    {12, 66000, 64, 64, false}, /* 2 row tiles and two token tiles a warp */
	    {1, 262200, 64, 64, true},  /* 4 row tiles a warp, ids */
	};
	int failures = 0;
	for (S s : shapes) {
		if (!q4_mma_fits((const void *)16, s.cols, s.group)) {
			printf("q4 %lldx%lld: not taken\n", (long long)s.rows, (long long)s.cols);
			failures++;
			continue;
		}
		std::vector<uint8_t> q((size_t)(s.rows * s.cols / 2));
		for (auto &b : q)
			b = (uint8_t)rng();
		int64_t gpr = s.cols / s.group * 2;
		std::vector<float> so((size_t)(s.rows * gpr));
		std::uniform_real_distribution<float> sc(0.01f, 0.1f), off(-0.8f, 0.0f), xd(-2.0f, 2.0f);
		for (size_t i = 0; i < so.size(); i += 2)
			so[i] = sc(rng), so[i + 1] = off(rng);
		std::vector<float> x((size_t)(s.n * s.cols));
		for (auto &v : x)
			v = xd(rng);
		int64_t nout = s.ids ? s.rows / 2 : s.rows;
		std::vector<int32_t> ids((size_t)nout);
		for (auto &i : ids)
			i = (int32_t)(rng() % (uint32_t)s.rows);
		int lg = 0;
		while ((1 << lg) < s.group)
			lg++;
		float *X = dev(x), *SO = dev(so);
		uint8_t *Q = dev(q);
		int32_t *ID = s.ids ? dev(ids) : nullptr;
		std::vector<float> y = run(X, Q, SO, ID, s.n, nout, s.cols, lg);
		double md = 0, mx = 0;
		for (int64_t t = 0; t < s.n; t++)
			for (int64_t i = 0; i < nout; i++) {
				int64_t r = s.ids ? ids[(size_t)i] : i;
				double acc = 0;
				for (int64_t c = 0; c < s.cols; c++) {
					int64_t b = c & 31;
					uint8_t v = q[(size_t)(r * (s.cols / 2) + (c - b) / 2 + (b & 15))];
					int nib = b < 16 ? v & 15 : v >> 4;
					const float *g = &so[(size_t)(r * gpr + (c / s.group) * 2)];
					acc += ((double)g[0] * nib + g[1]) * x[(size_t)(t * s.cols + c)];
				}
				md = std::fmax(md, std::fabs(acc - y[(size_t)(t * nout + i)]));
				mx = std::fmax(mx, std::fabs(acc));
			}
		bool ok = md <= 2e-5 * mx;
		printf("q4 n=%lld %lldx%lld g%d%s: max|y - float64| %.3g of %.3g %s\n", (long long)s.n, (long long)nout,
		       (long long)s.cols, s.group, s.ids ? " ids" : "", md, mx, ok ? "ok" : "FAIL");
		failures += !ok;
		/* a split product = the same product whole */
		if (q4_mma_part_bytes(s.n, nout, s.cols) > 0) {
			std::vector<float> w = run(X, Q, SO, ID, s.n, nout, s.cols, lg, true);
			bool same = memcmp(w.data(), y.data(), y.size() * sizeof(float)) == 0;
			printf("q4 n=%lld %lldx%lld: split by slices = whole, bit for bit %s\n", (long long)s.n,
			       (long long)nout, (long long)s.cols, same ? "ok" : "FAIL");
			failures += !same;
		}
		/* tokens alone (the first, the last, one inside a tile) = in the batch */
		size_t differ = 0;
		for (int64_t t : {(int64_t)0, s.n / 2, s.n - 1}) {
			std::vector<float> one = run(X + t * s.cols, Q, SO, ID, 1, nout, s.cols, lg);
			differ += memcmp(one.data(), y.data() + t * nout, one.size() * sizeof(float)) != 0;
		}
		printf("q4 n=%lld %lldx%lld: tokens alone = in batch: %zu of 3 differ %s\n", (long long)s.n, (long long)nout,
		       (long long)s.cols, differ, differ ? "FAIL" : "ok");
		failures += differ != 0;
		cudaFree(X), cudaFree(SO), cudaFree(Q);
		if (ID)
			cudaFree(ID);
	}
	printf("q4_check: %d failure(s)\n", failures);
	return failures != 0;
}
