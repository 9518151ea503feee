/*
 * q4_check.cu: the tensor-core q4 product (q4_mma.cu) against a float64
 * reference, and its batch identity: every token of a batch alone gives
 * the batch's bits, whichever kernel (few or many tokens, 1, 2 or 4 row
 * tiles a warp) each takes, and one token by q4_gemv.cu's kernel = by the
 * mma kernels, bit for bit. Runs on a GPU, and on the host emulation of
 * build/cuda-syntax.sh (`run`), where it checks the kernels' indexing and
 * order with the stub's mma.
 */
#include "q4_mma.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
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
	float *y = nullptr;
	void *scratch = nullptr;
	cudaMalloc(&y, (size_t)(n * nout) * sizeof(float));
	size_t sb = q4_mma_scratch_bytes(n, nout, cols, whole);
	cudaMalloc(&scratch, sb);
	if (q4_mma(nullptr, false, y, x, q, so, ids, n, nout, cols, lg, scratch, sb) != cudaSuccess)
		printf("q4_mma: launch failed\n");
	cudaDeviceSynchronize();
	std::vector<float> h((size_t)(n * nout));
	cudaMemcpy(h.data(), y, h.size() * sizeof(float), cudaMemcpyDeviceToHost);
	cudaFree(y);
	cudaFree(scratch);
	return h;
}

/* scratch_for: a scratch buffer for every product of up to n tokens of
 * those shapes. */
static void *scratch_for(int64_t n, int64_t nout, int64_t cols, size_t *bytes)
{
	void *p = nullptr;
	*bytes = q4_mma_scratch_bytes(n, nout, cols, false);
	cudaMalloc(&p, *bytes);
	return p;
}

/* bench: the E2B decode's q4 shapes at 1 and 8 tokens, timed (a graph of
 * 20 products replayed 10 times, PDL on), with the bytes they read a
 * microsecond; and at 40 (a scorer's branch rows) and 512 tokens (a
 * prefill; not the head), with their rate in int8 operations of the three
 * limbs (a multiply-add counted as two). The products take their weights
 * from as many copies as make 256 MB (at most 20), so that they come from
 * memory, as in a decode step, and not from L2. */
static int bench(const char *only)
{
	struct B {
		int64_t nout, cols;
		const char *name;
	} bs[] = {{2048, 2048, "q, o"},          {512, 2048, "k, v"},    {8192, 2048, "gate, up"},
	          {2048, 8192, "down"},           {256, 2048, "ple gate"}, {2048, 256, "ple proj"},
	          {64, 2048, "laurel left"},      {2048, 64, "laurel right"}, {7680, 2048, "per-layer model proj"},
	          {262400, 2048, "head"}};
	int failures = 0;
	cudaStream_t st;
	cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
	cudaEvent_t e0, e1;
	cudaEventCreate(&e0);
	cudaEventCreate(&e1);
	for (B b : bs) {
		if (only && strcmp(only, b.name) != 0)
			continue;
		std::vector<uint8_t> q((size_t)(b.nout * b.cols / 2));
		for (auto &v : q)
			v = (uint8_t)rng();
		std::vector<float> so((size_t)(b.nout * b.cols / 64 * 2));
		std::uniform_real_distribution<float> d(-1.0f, 1.0f);
		for (auto &v : so)
			v = d(rng);
		const int64_t NMAX = 512;
		std::vector<float> x((size_t)(NMAX * b.cols));
		for (auto &v : x)
			v = d(rng);
		double bytes = (double)q.size() + 4.0 * (double)so.size();
		int nc = (int)std::min(20.0, std::ceil(256e6 / bytes));
		std::vector<float *> SO((size_t)nc);
		std::vector<uint8_t *> Q((size_t)nc);
		for (int c = 0; c < nc; c++)
			SO[c] = dev(so), Q[c] = dev(q);
		float *X = dev(x), *Y = nullptr;
		cudaMalloc(&Y, (size_t)(NMAX * b.nout) * sizeof(float));
		size_t sbytes = 0;
		void *SC = scratch_for(NMAX, b.nout, b.cols, &sbytes);
		for (int64_t n : {1, 8, 40, 512}) {
			if (n > 40 && b.nout > 65536)
				continue;
			{
				cudaGraph_t g;
				cudaGraphExec_t ge;
				cudaStreamBeginCapture(st, cudaStreamCaptureModeRelaxed);
				for (int i = 0; i < 20; i++)
					q4_mma(st, true, Y, X, Q[i % nc], SO[i % nc], nullptr, n, b.nout, b.cols, 6, SC, sbytes);
				cudaStreamEndCapture(st, &g);
				if (cudaGraphInstantiate(&ge, g, 0) != cudaSuccess) {
					printf("bench %s: no graph\n", b.name);
					failures++;
					continue;
				}
				cudaGraphLaunch(ge, st);
				cudaEventRecord(e0, st);
				for (int r = 0; r < 10; r++)
					cudaGraphLaunch(ge, st);
				cudaEventRecord(e1, st);
				cudaStreamSynchronize(st);
				float ms = 0;
				cudaEventElapsedTime(&ms, e0, e1);
				double us = ms * 1000.0 / 200.0;
				printf("bench %-22s %6lldx%-5lld n=%-3lld: %8.2f us  %7.0f GB/s  %6.1f TOPS\n", b.name,
				       (long long)b.nout, (long long)b.cols, (long long)n, us, bytes / us / 1e3,
				       6.0 * (double)n * (double)b.nout * (double)b.cols / us / 1e6);
				cudaGraphExecDestroy(ge);
				cudaGraphDestroy(g);
			}
		}
		for (int c = 0; c < nc; c++)
			cudaFree(SO[c]), cudaFree(Q[c]);
		cudaFree(X), cudaFree(Y), cudaFree(SC);
	}
	printf("q4_check bench: %d failure(s)\n", failures);
	return failures != 0;
}

/* groups: q4_mma_group's parts by bulk copies = by its own kernels, bit
 * for bit: a pair (gate and up with the GELU product), and three parts of
 * one input (a GELU product into mul, one of mul, a plain one), at one
 * token and at five. */
static int groups()
{
	int failures = 0;
	std::uniform_real_distribution<float> sc(0.01f, 0.1f), off(-0.8f, 0.0f), xd(-2.0f, 2.0f);
	auto mat = [&](int64_t rows, int64_t cols, uint8_t **q, float **so) {
		std::vector<uint8_t> hq((size_t)(rows * cols / 2));
		for (auto &b : hq)
			b = (uint8_t)rng();
		std::vector<float> hs((size_t)(rows * cols / 64 * 2));
		for (size_t i = 0; i < hs.size(); i += 2)
			hs[i] = sc(rng), hs[i + 1] = off(rng);
		*q = dev(hq), *so = dev(hs);
	};
	struct G {
		bool pair;
		int64_t cols, rows[3];
	} gs[] = {{true, 512, {40, 0, 0}}, {false, 1024, {40, 24, 16}}};
	for (G gc : gs)
		for (int64_t n : {1, 5}) {
			std::vector<float> x((size_t)(n * gc.cols));
			for (auto &v : x)
				v = xd(rng);
			float *X = dev(x);
			int np = gc.pair ? 1 : 3;
			uint8_t *Q[3], *Q2 = nullptr;
			float *SO[3], *SO2 = nullptr, *Y[3], *M[3];
			std::vector<float> m0((size_t)(n * 64));
			for (auto &v : m0)
				v = xd(rng);
			for (int i = 0; i < np; i++) {
				mat(gc.rows[i], gc.cols, &Q[i], &SO[i]);
				cudaMalloc(&Y[i], (size_t)(n * gc.rows[i]) * sizeof(float));
				cudaMalloc(&M[i], (size_t)(n * gc.rows[i]) * sizeof(float));
			}
			if (gc.pair)
				mat(gc.rows[0], gc.cols, &Q2, &SO2);
			size_t sb = 0;
			void *SC = scratch_for(n, 64, gc.cols, &sb);
			std::vector<float> out[3];
			for (int m : {0, 2, 3}) { /* 3: bulk copies, a unit a warp */
				q4_bulk_set(m == 3 ? 2 : m);
				q4_bulk_set_warp(m == 3 ? 1 : -1);
				q4_mma_part parts[3];
				for (int i = 0; i < np; i++) {
					cudaMemcpy(M[i], m0.data(), (size_t)(n * gc.rows[i]) * sizeof(float), cudaMemcpyHostToDevice);
					parts[i] = {Y[i], i < 2 ? M[i] : nullptr, Q[i], SO[i], gc.rows[i], 6, i == 0};
					if (gc.pair)
						parts[i].q2 = Q2, parts[i].so2 = SO2;
				}
				cudaError_t err = cudaSuccess;
				bool took = q4_mma_group(nullptr, false, parts, np, X, n, gc.cols, SC, sb, &err);
				cudaDeviceSynchronize();
				if (!took || err != cudaSuccess) {
					printf("q4 group: not taken (bulk mode %d) FAIL\n", m);
					failures++;
				}
				for (int i = 0; i < np; i++) {
					std::vector<float> h((size_t)(n * gc.rows[i]));
					cudaMemcpy(h.data(), Y[i], h.size() * sizeof(float), cudaMemcpyDeviceToHost);
					out[(m + 1) / 2].insert(out[(m + 1) / 2].end(), h.begin(), h.end());
					cudaMemcpy(h.data(), M[i], h.size() * sizeof(float), cudaMemcpyDeviceToHost);
					out[(m + 1) / 2].insert(out[(m + 1) / 2].end(), h.begin(), h.end());
				}
			}
			q4_bulk_set(1);
			q4_bulk_set_warp(-1);
			bool same = true;
			for (int i = 1; i < 3; i++)
				same = same && out[0].size() == out[i].size() &&
				       memcmp(out[0].data(), out[i].data(), out[0].size() * 4) == 0;
			printf("q4 group %s n=%lld cols %lld: by bulk copies (a unit a block and a warp) = by the group kernels, "
			       "bit for bit %s\n",
			       gc.pair ? "pair" : "of three", (long long)n, (long long)gc.cols, same ? "ok" : "FAIL");
			failures += !same;
			for (int i = 0; i < np; i++)
				cudaFree(Q[i]), cudaFree(SO[i]), cudaFree(Y[i]), cudaFree(M[i]);
			if (gc.pair)
				cudaFree(Q2), cudaFree(SO2);
			cudaFree(X), cudaFree(SC);
		}
	return failures;
}

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "bench") == 0)
		return bench(argc > 2 ? argv[2] : nullptr);
	if (argc == 5 && strcmp(argv[1], "one") == 0) { /* one NOUT COLS N: three products, for a profiler */
		int64_t nout = atoll(argv[2]), cols = atoll(argv[3]), n = atoll(argv[4]);
		std::vector<uint8_t> q((size_t)(nout * cols / 2), 0x5a);
		std::vector<float> so((size_t)(nout * cols / 64 * 2), 0.01f), x((size_t)(n * cols), 0.5f);
		float *X = dev(x), *SO = dev(so), *Y = nullptr;
		uint8_t *Q = dev(q);
		cudaMalloc(&Y, (size_t)(n * nout) * sizeof(float));
		size_t sbytes = 0;
		void *SC = scratch_for(n, nout, cols, &sbytes);
		for (int i = 0; i < 3; i++)
			q4_mma(nullptr, false, Y, X, Q, SO, nullptr, n, nout, cols, 6, SC, sbytes);
		return cudaDeviceSynchronize() != cudaSuccess;
	}
	struct S {
		int64_t n, rows, cols;
		int group;
		bool ids;
		int xk; /* x: 0 uniform in ±2; 1 magnitudes from 1e-6 to 1e3 in every chunk; 2 as 0 with token 0's
		           column 70 NaN and a chunk of zeros */
	} shapes[] = {
	    {1, 16, 2048, 64, false},   /* few, one row tile, 8 slices of 4 chunks */
	    {3, 20, 576, 64, false},    /* 9 chunks in 8 uneven slices */
	    {5, 300, 8192, 64, true},   /* 128 chunks, ids */
	    {8, 50, 1024, 128, false},  /* 16 chunks, groups of 128, a partial row tile */
	    {9, 34, 512, 128, true},    /* two token tiles a warp, groups of 128, ids */
	    {20, 40, 2048, 64, false},  /* split by slices; whole: four token tiles a warp, the last part dead */
	    {40, 150, 1024, 64, false}, /* split, 64 tokens a block: two row blocks (the last part dead) */
	    {66, 1030, 128, 64, false}, /* many tokens: the staged kernel, 2 slices */
	    {260, 2060, 64, 64, true},  /* the staged kernel 64 tokens a block, ids */
	    {12, 66000, 64, 64, false}, /* 2 row tiles and two token tiles a warp */
	    {1, 262200, 64, 64, true},  /* 4 row tiles a warp, ids */
	    {3, 40, 2048, 64, false, 1}, /* wide magnitudes within a chunk */
	    {70, 1030, 256, 64, false, 1},
	    {4, 40, 512, 64, false, 2},  /* a NaN: token 0 NaN, the others finite */
	    {72, 256, 1024, 64, false},  /* many tokens, few rows: split (as k and v in a prefill) */
	    {47, 200, 1024, 64, true},   /* split, 64 tokens a block (17 of them dead), ids */
	    {50, 300, 1024, 64, false},  /* split, a partial row block */
	    {2, 40, 8192, 64, false},    /* 128 chunks, a partial row tile: by bulk copies, 3 units through 2 stages */
	    {1, 600, 512, 64, false},    /* a unit a warp: 38 units, 5 a warp through 2 stages, a partial last */
	    {2, 40, 768, 64, false},     /* 12 chunks: uneven slices by bulk copies, a unit a block and a warp */
	};
	q4_mma_set_split_sms(132); /* an H100's: the emulation's one would never split them */
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
		std::uniform_real_distribution<float> ex(-6.0f, 3.0f);
		for (auto &v : x)
			v = s.xk == 1 ? std::copysign(std::pow(10.0f, ex(rng)), xd(rng)) : xd(rng);
		if (s.xk == 2) {
			x[70] = NAN;
			for (int64_t c = 128; c < 192; c++)
				x[(size_t)(s.cols + c)] = 0.0f;
		}
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
		if (s.xk == 2) { /* token 0 all NaN, the rest finite */
			size_t bad = 0;
			for (int64_t t = 0; t < s.n; t++)
				for (int64_t i = 0; i < nout; i++)
					bad += std::isnan(y[(size_t)(t * nout + i)]) != (t == 0);
			printf("q4 n=%lld %lldx%lld: a NaN in token 0: %zu outputs wrong %s\n", (long long)s.n, (long long)nout,
			       (long long)s.cols, bad, bad ? "FAIL" : "ok");
			failures += bad != 0;
		}
		for (int64_t t = s.xk == 2 ? 1 : 0; t < s.n; t++)
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
		if (q4_mma_scratch_bytes(s.n, nout, s.cols, false) > q4_mma_scratch_bytes(s.n, nout, s.cols, true)) {
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
		/* one token on the integer cores (q4_gemv) = on the tensor cores,
		 * bit for bit, in units of each size, a unit a block and (small
		 * matrices) several a block in turn */
		if (!s.ids) {
			size_t differ1 = 0, runs = 0;
			for (int64_t t : {(int64_t)0, s.n - 1}) {
				q4_gemv_set(false);
				std::vector<float> mma = run(X + t * s.cols, Q, SO, ID, 1, nout, s.cols, lg);
				q4_gemv_set(true);
				for (int r : {0, 4, 8, 16, 32})
					for (int g : {0, 3}) {
						if ((r || g) && nout * s.cols > (1 << 22))
							continue;
						q4_gemv_shape(r, g);
						std::vector<float> gv = run(X + t * s.cols, Q, SO, ID, 1, nout, s.cols, lg);
						differ1 += memcmp(mma.data(), gv.data(), gv.size() * sizeof(float)) != 0;
						runs++;
					}
				q4_gemv_shape(0, 0);
			}
			printf("q4 n=%lld %lldx%lld: one token by q4_gemv = by the mma kernels: %zu of %zu differ %s\n",
			       (long long)s.n, (long long)nout, (long long)s.cols, differ1, runs, differ1 ? "FAIL" : "ok");
			failures += differ1 != 0;
		}
		/* the weights by bulk copies (q4_bulk: x in the blocks and by the
		 * pre-pass) = the other kernels, for products of up to 8 tokens */
		if (s.n <= 8 && !s.ids) {
			q4_mma_part p = {nullptr, nullptr, Q, SO, nout, lg, false};
			q4_bulk_set(2);
			bool took = q4_bulk_takes(&p, 1, X, s.n, s.cols);
			std::vector<float> own = run(X, Q, SO, ID, s.n, nout, s.cols, lg);
			q4_mma_set_own_max(0);
			std::vector<float> pre = run(X, Q, SO, ID, s.n, nout, s.cols, lg);
			q4_mma_set_own_max(40 << 10);
			q4_bulk_set_warp(1); /* a unit a warp, x in the blocks and by the pre-pass */
			bool wtook = q4_bulk_takes(&p, 1, X, s.n, s.cols);
			std::vector<float> wown = run(X, Q, SO, ID, s.n, nout, s.cols, lg);
			q4_mma_set_own_max(0);
			std::vector<float> wpre = run(X, Q, SO, ID, s.n, nout, s.cols, lg);
			q4_mma_set_own_max(40 << 10);
			q4_bulk_set_warp(-1);
			q4_bulk_set(0);
			std::vector<float> off = run(X, Q, SO, ID, s.n, nout, s.cols, lg);
			q4_bulk_set(1);
			bool same = true;
			for (auto *v : {&own, &pre, &wown, &wpre})
				same = same && memcmp(v->data(), off.data(), off.size() * sizeof(float)) == 0;
			printf("q4 n=%lld %lldx%lld: by bulk copies (%s; a unit a warp: %s) = by the other kernels, bit for bit "
			       "%s\n",
			       (long long)s.n, (long long)nout, (long long)s.cols, took ? "taken" : "not taken",
			       wtook ? "taken" : "not taken", same ? "ok" : "FAIL");
			failures += !same;
		}
		/* x quantised in the blocks = by the pre-pass, for products of up to 8 tokens */
		if (s.n <= 8) {
			q4_mma_set_own_max(0);
			std::vector<float> pre = run(X, Q, SO, ID, s.n, nout, s.cols, lg);
			q4_mma_set_own_max(40 << 10);
			std::vector<float> inl = run(X, Q, SO, ID, s.n, nout, s.cols, lg);
			bool same = memcmp(pre.data(), inl.data(), pre.size() * sizeof(float)) == 0 &&
			            memcmp(pre.data(), y.data(), pre.size() * sizeof(float)) == 0;
			printf("q4 n=%lld %lldx%lld: x quantised in the blocks = by the pre-pass, bit for bit %s\n",
			       (long long)s.n, (long long)nout, (long long)s.cols, same ? "ok" : "FAIL");
			failures += !same;
		}
		cudaFree(X), cudaFree(SO), cudaFree(Q);
		if (ID)
			cudaFree(ID);
	}
	failures += groups();
	printf("q4_check: %d failure(s)\n", failures);
	return failures != 0;
}
