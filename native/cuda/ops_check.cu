/*
 * ops_check.cu: compares every operation of the CUDA backend with the CPU
 * backend (the reference) on random inputs of many shapes, prints the
 * largest absolute and relative error of each, and exits 1 when one is over
 * its tolerance (2 when no GPU). Built by build/cuda.sh with the CPU
 * backend's C sources; no Go.
 *
 * Relative error is max|gpu − cpu| / max|cpu| over the output. Tolerances:
 *   TOL_DOT  2e-5  ops that sum (linear, sparse MLP, attention, norms,
 *                  logsumexp): the two backends sum in different orders;
 *   TOL_EW   1e-6  elementwise and per-element math (same operations);
 *   exact         memory ops, argmax (ties included: lowest index), select,
 *                  sample, and a row's result alone vs. in a batch (GPU).
 * Outputs are poisoned (NaN) before each op: an unwritten element fails.
 */
#include "check_common.cuh"
#include "q4_mma.h"

#include <chrono>

/* A random q4 matrix: nibbles and per-group scales and offsets. */
struct Q4 {
	Pair q, so;
};
static Q4 randq4(int64_t rows, int64_t cols, int group)
{
	std::vector<uint8_t> q((size_t)(rows * cols / 2));
	for (auto &b : q)
		b = (uint8_t)(rng() & 0xff);
	std::vector<float> so((size_t)(rows * (cols / group) * 2));
	std::uniform_real_distribution<float> sc(0.01f, 0.1f), off(-0.8f, 0.0f);
	for (size_t i = 0; i < so.size(); i += 2) {
		so[i] = sc(rng);
		so[i + 1] = off(rng);
	}
	return Q4{in(q), in(so)};
}

/* cmp_scaled is cmp with the error measured against scale (the size of
 * the terms summed) instead of the largest reference value. */
static void cmp_scaled(const std::string &name, const Pair &p, size_t n, double tol, double scale)
{
	std::vector<float> g = down_f(p, n);
	const float *c = (const float *)p.c;
	double mabs = 0;
	bool bad = false;
	for (size_t i = 0; i < n; i++) {
		if (std::isnan(c[i]) || std::isnan(g[i])) {
			bad = true;
			continue;
		}
		mabs = std::max(mabs, fabs((double)g[i] - (double)c[i]));
	}
	double rel = scale > 0 ? mabs / scale : mabs;
	bool fail = bad || rel > tol;
	checks++;
	printf("%-*s n=%-9zu maxabs %.3e rel %.3e of the terms' %.3e tol %.0e %s\n", check_col, name.c_str(), n, mabs,
	       rel, scale, tol, fail ? (bad ? "FAIL (NaN)" : "FAIL") : "ok");
	if (fail)
		failures++;
}

static void check_linear(bool small)
{
	struct S {
		int64_t n, rows, cols;
		int group;
	};
	/* small: q4 at shapes the host emulation runs in seconds: the
	 * tensor-core path (group 64), and with groups of 32 the float-core
	 * kernels (k_gemv_q4 for a few tokens, k_linear_q4_tiled past QT); f32
	 * for the last shape (k_linear_f32_tiled, and a row alone k_linear). */
	static const S few[] = {{1, 64, 2048, 64}, {3, 100, 96, 32}, {8, 40, 512, 32}, {130, 16, 512, 32}, {70, 72, 256, 32}};
	static const S all[] = {{1, 64, 2048, 64}, {3, 100, 96, 32}, {7, 257, 512, 128}, {65, 128, 1024, 64}, {1, 2048, 2048, 64}, {37, 300, 2112, 64},
	             {9, 4, 2048, 64}, {130, 16, 512, 32}, {513, 40, 256, 64}, {130, 1100, 2048, 64},
	             {200, 1024, 8192, 128}, {77, 2048, 512, 64}, {8, 8192, 2048, 64}, {64, 1030, 192, 64}};
	std::vector<S> shapes = small ? std::vector<S>(std::begin(few), std::end(few)) : std::vector<S>(std::begin(all), std::end(all));
	for (int dt : {VD_F32, VD_BF16, VD_Q4}) {
		for (S s : shapes) {
			/* small: f32 where a batch takes k_linear_f32_tiled (a row alone: k_linear) */
			if (small && dt != VD_Q4 && !(dt == VD_F32 && s.n >= 64 && s.rows >= 64))
				continue;
			auto x = randf((size_t)(s.n * s.cols));
			Pair X = in(x), W, SO;
			if (dt == VD_F32) {
				W = in(randf((size_t)(s.rows * s.cols), -0.1f, 0.1f));
			} else if (dt == VD_BF16) {
				W = in(bf16_of(randf((size_t)(s.rows * s.cols), -0.1f, 0.1f)));
			} else {
				Q4 q = randq4(s.rows, s.cols, s.group);
				W = q.q;
				SO = q.so;
			}
			auto wt = [&](bool g) { return dt == VD_Q4 ? Q(W, SO, g, s.rows, s.cols, s.group) : T(W, g, dt, s.rows, s.cols); };
			Pair Y = out((size_t)(s.n * s.rows * 4));
			char nm[96];
			snprintf(nm, sizeof nm, "linear %s n=%lld %lldx%lld", dtname(dt), (long long)s.n, (long long)s.rows,
			         (long long)s.cols);
			if (run(nm, [&](vd_backend *b, vd_stream *st, bool g) {
				    b->op.linear(st, T(Y, g, VD_F32, s.n, s.rows), T(X, g, VD_F32, s.n, s.cols), wt(g));
			    }))
				cmp(nm, Y, (size_t)(s.n * s.rows), TOL_DOT);
			/* The last row alone, on the GPU: the same bits as in the batch. */
			if (s.n > 1) {
				std::vector<float> all = down_f(Y, (size_t)(s.n * s.rows));
				Pair Y1 = out((size_t)(s.rows * 4));
				vd_tensor x1 = T(X, true, VD_F32, 1, s.cols);
				x1.data = (float *)X.g + (s.n - 1) * s.cols;
				GPU->op.linear(GS, T(Y1, true, VD_F32, 1, s.rows), x1, wt(true));
				GPU->stream.sync(GS);
				std::vector<float> one = down_f(Y1, (size_t)s.rows);
				std::vector<float> last(all.end() - s.rows, all.end());
				same(std::string(nm) + " row alone = in batch", one, last);
			}
			/* linear_rows over random rows. */
			int64_t k = s.rows / 3 + 1;
			Pair ID = in(randi((size_t)k, 0, (int32_t)s.rows - 1));
			Pair YR = out((size_t)(s.n * k * 4));
			std::string nr = std::string("linear_rows ") + (nm + 7);
			if (run(nr.c_str(), [&](vd_backend *b, vd_stream *st, bool g) {
				    b->op.linear_rows(st, T(YR, g, VD_F32, s.n, k), T(X, g, VD_F32, s.n, s.cols), wt(g),
				                   T(ID, g, VD_I32, 1, k));
			    }))
				cmp(nr, YR, (size_t)(s.n * k), TOL_DOT);
			free_all();
		}
	}
}

/* check_linear_alone: every token of a q4 batch (the tensor-core kernels
 * when the matrix fits them: few or many tokens, either kernel) alone on
 * the GPU gives the batch's bits; and linear_rows over all rows in
 * reverse gives linear's (the catalog's sparse head relies on it). */
static void check_linear_alone()
{
	struct S {
		int64_t n, rows, cols;
		int group;
	} shapes[] = {{70, 1030, 2048, 64}, {20, 300, 512, 64}, {9, 1024, 8192, 64}, {66, 1024, 128, 128},
	               {40, 2048, 2048, 64}, {300, 2100, 2048, 64}, {12, 70000, 64, 64}};
	for (S s : shapes) {
		Pair X = in(randf((size_t)(s.n * s.cols), -3, 3));
		Q4 q = randq4(s.rows, s.cols, s.group);
		vd_tensor w = Q(q.q, q.so, true, s.rows, s.cols, s.group);
		Pair Y = out((size_t)(s.n * s.rows * 4)), Y1 = out((size_t)(s.rows * 4)), YR = out((size_t)(s.n * s.rows * 4));
		GPU->op.linear(GS, T(Y, true, VD_F32, s.n, s.rows), T(X, true, VD_F32, s.n, s.cols), w);
		GPU->stream.sync(GS);
		std::vector<float> all = down_f(Y, (size_t)(s.n * s.rows)), alone;
		for (int64_t t = 0; t < s.n; t++) {
			vd_tensor x1 = T(X, true, VD_F32, 1, s.cols);
			x1.data = (float *)X.g + t * s.cols;
			GPU->op.linear(GS, T(Y1, true, VD_F32, 1, s.rows), x1, w);
			GPU->stream.sync(GS);
			std::vector<float> one = down_f(Y1, (size_t)s.rows);
			alone.insert(alone.end(), one.begin(), one.end());
		}
		char nm[96];
		snprintf(nm, sizeof nm, "linear q4 n=%lld %lldx%lld g%d", (long long)s.n, (long long)s.rows,
		         (long long)s.cols, s.group);
		same(std::string(nm) + " every row alone = in batch", alone, all);
		std::vector<int32_t> rev((size_t)s.rows);
		for (int64_t i = 0; i < s.rows; i++)
			rev[(size_t)i] = (int32_t)(s.rows - 1 - i);
		Pair ID = in(rev);
		GPU->op.linear_rows(GS, T(YR, true, VD_F32, s.n, s.rows), T(X, true, VD_F32, s.n, s.cols), w,
		                 T(ID, true, VD_I32, 1, s.rows));
		GPU->stream.sync(GS);
		std::vector<float> rr = down_f(YR, (size_t)(s.n * s.rows)), back(rr.size());
		for (int64_t t = 0; t < s.n; t++)
			for (int64_t i = 0; i < s.rows; i++)
				back[(size_t)(t * s.rows + s.rows - 1 - i)] = rr[(size_t)(t * s.rows + i)];
		same(std::string(nm) + " linear_rows = linear", back, all);
		free_all();
	}
}

/* check_prefetch: prefetch (a hint) leaves the stream without error and
 * the product after it with the bits it has without it: q4 weights (data
 * and scales), an f32 tensor at an odd offset and of an odd length, more
 * pieces than the kernel has threads, an empty tensor. */
static void check_prefetch(bool small)
{
	int64_t n = 3, rows = small ? 96 : 8192, cols = small ? 256 : 2048;
	Pair X = in(randf((size_t)(n * cols), -3, 3)), Y0 = out((size_t)(n * rows * 4)), Y1 = out((size_t)(n * rows * 4));
	Pair B = in(randf(small ? 4099 : (3 << 20) + 5));
	Q4 q = randq4(rows, cols, 64);
	vd_tensor w = Q(q.q, q.so, true, rows, cols, 64), x = T(X, true, VD_F32, n, cols);
	GPU->op.linear(GS, T(Y0, true, VD_F32, n, rows), x, w);
	vd_prefetch p = {};
	p.t[0] = w;
	p.t[1] = T(B, true, VD_F32, 1, small ? 4097 : (3 << 20) + 3);
	p.t[1].data = (float *)B.g + 1; /* 4 bytes past an aligned start */
	p.t[2] = T(B, true, VD_F32, 0, 16);
	p.n = 3;
	GPU->op.prefetch(GS, &p);
	GPU->op.linear(GS, T(Y1, true, VD_F32, n, rows), x, w);
	int rc = GPU->stream.sync(GS);
	verdict(rc == 0, "%-44s sync -> %d", "prefetch: no error", rc);
	same("prefetch: the product after it = before it", down_f(Y1, (size_t)(n * rows)), down_f(Y0, (size_t)(n * rows)));
	free_all();
}

/* check_linears: linears (the products of one x in one launch, with
 * their GELU products) against the CPU and, on the GPU, bit for bit
 * against each part's linear (and ew gelu_mul) alone: a layer's q, k, v
 * and Laurel's left (E2B's shapes, and at reduced width), the KV-sharing
 * layers' q and Laurel, the per-layer gate with its GELU product, the
 * MLP's up product with its gate's GELU (gelu_into), a mix of groups; 1
 * to 8 tokens; x quantised in the blocks and by the
 * pre-pass (q4_mma_set_own_max(0)); a part of groups of 32 (the
 * float-core kernels) sends every part alone. small: the host
 * emulation's shapes. */
static void check_linears(bool small)
{
	struct P {
		int64_t rows;
		int group;
		bool gelu, into;
		int mul_of = -1; /* the GELU product goes into this earlier part's y (a pair) */
		int64_t xcols = 0; /* the part's own x of xcols columns (0: the call's) */
		int x_of = -1;     /* that x is this earlier part's y (of xcols columns) */
	};
	struct S {
		const char *name;
		int64_t cols;
		std::vector<P> parts;
	};
	std::vector<S> shapes = {
		{"q k v laurel", 512, {{512, 64, false, false}, {128, 64, false, false}, {128, 64, false, false}, {64, 64, false, false}}},
		{"q laurel (kv shared)", 512, {{512, 64, false, false}, {64, 64, false, false}}},
		{"ple gate+gelu", 512, {{64, 64, true, false}}},
		{"up into gate", 256, {{1024, 64, true, true}}},
		{"mixed groups, gelu", 256, {{100, 128, true, false}, {16, 64, false, false}, {40, 256, true, true}}},
		{"a float-core part", 256, {{48, 64, false, false}, {32, 32, true, false}, {40, 32, true, true}}},
		{"gate, up into it", 256, {{1000, 64, false, false}, {1000, 64, true, true, 0}}},
		{"output, laurel right (its own x)", 256, {{256, 64, false, false}, {256, 64, false, false, -1, 64}}},
		{"laurel left, right (x the left's y)", 256, {{64, 64, false, false}, {256, 64, false, false, -1, 64, 0}}},
	};
	if (!small) {
		shapes.push_back({"E2B q k v laurel", 2048, {{2048, 64, false, false}, {512, 64, false, false}, {512, 64, false, false}, {64, 64, false, false}}});
		shapes.push_back({"E2B ple gate+gelu", 2048, {{256, 64, true, false}}});
		shapes.push_back({"E2B up into gate", 2048, {{8192, 64, true, true}}});
		shapes.push_back({"E2B gate, up into it", 2048, {{8192, 64, false, false}, {8192, 64, true, true, 0}}});
		shapes.push_back({"E2B output, laurel right", 2048, {{2048, 64, false, false}, {2048, 64, false, false, -1, 64}}});
	}
	std::vector<int64_t> ns = small ? std::vector<int64_t>{1, 2, 5, 8} : std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8};
	for (int prepass = 0; prepass < 2; prepass++) {
		q4_mma_set_own_max(prepass ? 0 : (int64_t)40 << 10);
		for (const S &s : shapes) {
			int np = (int)s.parts.size();
			std::vector<Q4> ws;
			for (const P &p : s.parts)
				ws.push_back(randq4(p.rows, p.xcols ? p.xcols : s.cols, p.group));
			for (int64_t n : ns) {
				Pair X = in(randf((size_t)(n * s.cols), -3, 3));
				std::vector<Pair> XS;
				for (const P &p : s.parts)
					XS.push_back(p.xcols ? in(randf((size_t)(n * p.xcols), -3, 3)) : Pair());
				std::vector<Pair> Y, YA, M, MA; /* MA: M for the parts alone (gelu_into writes it) */
				for (const P &p : s.parts) {
					Y.push_back(out((size_t)(n * p.rows * 4)));
					YA.push_back(out((size_t)(n * p.rows * 4)));
					std::vector<float> m = randf((size_t)(n * p.rows), -2, 2);
					M.push_back(in(m));
					MA.push_back(in(m));
				}
				auto args = [&](bool g, std::vector<Pair> &y, std::vector<Pair> &mul) {
					vd_linears l;
					memset(&l, 0, sizeof l);
					l.x = T(X, g, VD_F32, n, s.cols), l.nparts = np;
					for (int i = 0; i < np; i++) {
						const P &p = s.parts[(size_t)i];
						l.y[i] = T(y[(size_t)i], g, VD_F32, n, p.rows);
						l.w[i] = Q(ws[(size_t)i].q, ws[(size_t)i].so, g, p.rows, p.xcols ? p.xcols : s.cols, p.group);
						l.xs[i] = p.x_of >= 0  ? T(y[(size_t)p.x_of], g, VD_F32, n, p.xcols)
						          : p.xcols ? T(XS[(size_t)i], g, VD_F32, n, p.xcols)
						                    : NIL();
						l.gelu_mul[i] = p.mul_of >= 0 ? T(y[(size_t)p.mul_of], g, VD_F32, n, p.rows)
						                : p.gelu ? T(mul[(size_t)i], g, VD_F32, n, p.rows) : NIL();
						l.gelu_into[i] = p.into;
					}
					return l;
				};
				std::string nm = fmt("linears %s n=%lld%s", s.name, (long long)n, prepass ? " pre-pass" : "");
				if (!run(nm, [&](vd_backend *b, vd_stream *st, bool g) {
					    vd_linears l = args(g, Y, M);
					    b->op.linears(st, &l);
				    }))
					continue;
				/* each part alone on the GPU */
				vd_linears l = args(true, YA, MA);
				for (int i = 0; i < np; i++) {
					GPU->op.linear(GS, l.y[i], l.xs[i].data ? l.xs[i] : l.x, l.w[i]);
					if (l.gelu_mul[i].data && l.gelu_into[i])
						GPU->op.ew(GS, VD_EW_GELU_MUL, l.gelu_mul[i], l.gelu_mul[i], l.y[i], 0);
					else if (l.gelu_mul[i].data)
						GPU->op.ew(GS, VD_EW_GELU_MUL, l.y[i], l.y[i], l.gelu_mul[i], 0);
				}
				GPU->stream.sync(GS);
				for (int i = 0; i < np; i++) {
					const P &p = s.parts[(size_t)i];
					size_t m = (size_t)(n * p.rows);
					std::string pn = nm + fmt(" part %d %lldx%lld g%d%s", i, (long long)p.rows, (long long)(p.xcols ? p.xcols : s.cols),
					                          p.group, p.into ? " gelu into" : p.gelu ? " gelu" : "");
					cmp(pn, Y[(size_t)i], m, TOL_DOT);
					same(pn + " = alone", down_f(Y[(size_t)i], m), down_f(YA[(size_t)i], m));
					if (p.into && p.mul_of < 0) {
						cmp(pn + " (gelu_mul)", M[(size_t)i], m, TOL_DOT);
						same(pn + " (gelu_mul) = alone", down_f(M[(size_t)i], m), down_f(MA[(size_t)i], m));
					}
				}
			}
			free_all();
		}
	}
	q4_mma_set_own_max((int64_t)40 << 10);
}

/* router: the fused kernel against the CPU's four operations, and a row
 * alone against the batch (GPU). */
static void check_router()
{
	for (int64_t dim : {2048, 1024, 2560}) {
		for (int64_t n : {1, 37}) {
			int64_t nout = 4;
			Pair X = in(randf((size_t)(n * dim), -2, 2)), NW = in(randf((size_t)dim, 0.5f, 1.5f));
			Pair WR = in(randf((size_t)(nout * dim), -0.2f, 0.2f)), F = out((size_t)(n * dim * 4));
			Pair Y = out((size_t)(n * nout * 4));
			std::string nm = "router n=" + std::to_string(n) + " dim=" + std::to_string(dim);
			if (run(nm.c_str(), [&](vd_backend *b, vd_stream *st, bool g) {
				    b->op.router(st, T(Y, g, VD_F32, n, nout), T(F, g, VD_F32, n, dim), T(X, g, VD_F32, n, dim),
				              T(NW, g, VD_F32, 1, dim), T(WR, g, VD_F32, nout, dim), dim, 1e-6f, 1.0f / dim);
			    }))
				cmp(nm, Y, (size_t)(n * nout), TOL_DOT);
			if (n > 1) {
				std::vector<float> all = down_f(Y, (size_t)(n * nout));
				Pair Y1 = out((size_t)(nout * 4));
				vd_tensor x1 = T(X, true, VD_F32, 1, dim);
				x1.data = (float *)X.g + (n - 1) * dim;
				GPU->op.router(GS, T(Y1, true, VD_F32, 1, nout), T(F, true, VD_F32, 1, dim), x1, T(NW, true, VD_F32, 1, dim),
				            T(WR, true, VD_F32, nout, dim), dim, 1e-6f, 1.0f / dim);
				GPU->stream.sync(GS);
				std::vector<float> one = down_f(Y1, (size_t)nout);
				same(nm + " row alone = in batch", one, std::vector<float>(all.end() - nout, all.end()));
				/* five outputs take k_router, four k_router_reg: the
				 * first four outputs agree bit for bit */
				std::vector<float> w5 = down_f(WR, (size_t)(nout * dim)), more = randf((size_t)dim, -0.2f, 0.2f);
				w5.insert(w5.end(), more.begin(), more.end());
				Pair W5 = in(w5), Y5 = out((size_t)(n * 5 * 4));
				GPU->op.router(GS, T(Y5, true, VD_F32, n, 5), T(F, true, VD_F32, n, dim), T(X, true, VD_F32, n, dim),
				            T(NW, true, VD_F32, 1, dim), T(W5, true, VD_F32, 5, dim), dim, 1e-6f, 1.0f / dim);
				GPU->stream.sync(GS);
				std::vector<float> y5 = down_f(Y5, (size_t)(n * 5)), first4;
				for (int64_t t = 0; t < n; t++)
					first4.insert(first4.end(), y5.begin() + t * 5, y5.begin() + t * 5 + 4);
				same(nm + " registers = shared row (k_router_reg = k_router)", all, first4);
			}
			/* router_coef: AltUp's 16 (prediction) and 4 (correction, + 1)
			 * coefficients after the router, against the CPU and, on the
			 * GPU, bit for bit against router, linear, add_const; five
			 * outputs take k_router's tail */
			for (int64_t no : {4, 5}) {
				for (int64_t nc : {16, 4}) {
					bool plus = nc == 4;
					Pair WR2 = in(randf((size_t)(no * dim), -0.2f, 0.2f)), CW = in(randf((size_t)(nc * no), -1, 1));
					Pair YA = out((size_t)(n * no * 4)), CA = out((size_t)(n * nc * 4)), YB = out((size_t)(n * no * 4)),
					     CB = out((size_t)(n * nc * 4));
					std::string nc_nm = nm + " router_coef " + std::to_string(no) + "x" + std::to_string(nc) + (plus ? " +1" : "");
					if (run(nc_nm.c_str(), [&](vd_backend *b, vd_stream *st, bool g) {
						    b->op.router_coef(st, T(YA, g, VD_F32, n, no), T(F, g, VD_F32, n, dim), T(X, g, VD_F32, n, dim),
						                   T(NW, g, VD_F32, 1, dim), T(WR2, g, VD_F32, no, dim), dim, 1e-6f, 1.0f / dim,
						                   T(CW, g, VD_F32, nc, no), T(CA, g, VD_F32, n, nc), 1.0f, plus);
					    })) {
						cmp(nc_nm + " (router)", YA, (size_t)(n * no), TOL_DOT);
						cmp(nc_nm + " (coefficients)", CA, (size_t)(n * nc), TOL_DOT);
					}
					GPU->op.router(GS, T(YB, true, VD_F32, n, no), T(F, true, VD_F32, n, dim), T(X, true, VD_F32, n, dim),
					            T(NW, true, VD_F32, 1, dim), T(WR2, true, VD_F32, no, dim), dim, 1e-6f, 1.0f / dim);
					GPU->op.linear(GS, T(CB, true, VD_F32, n, nc), T(YB, true, VD_F32, n, no), T(CW, true, VD_F32, nc, no));
					if (plus)
						GPU->op.ew(GS, VD_EW_ADD_CONST, T(CB, true, VD_F32, n, nc), T(CB, true, VD_F32, n, nc), NIL(), 1.0f);
					GPU->stream.sync(GS);
					same(nc_nm + " = router, linear, add_const", down_f(CA, (size_t)(n * nc)), down_f(CB, (size_t)(n * nc)));
				}
			}
			free_all();
		}
	}
}

/* check_layer_steps: altup_predict_step, altup_correct_step and
 * norm_add_more against the CPU and, on the GPU, bit for bit against the
 * operations they stand for; small: the host emulation's shapes (2,048
 * columns: a full row, norm_full's kernels; 2,304: past a thread's
 * registers). */
static void check_layer_steps(bool small)
{
	std::vector<int64_t> dims = small ? std::vector<int64_t>{256, 300, 2048, 2304} : std::vector<int64_t>{2048, 2560, 4096};
	std::vector<int64_t> ns = small ? std::vector<int64_t>{1, 3} : std::vector<int64_t>{1, 5, 37};
	for (int64_t dim : dims) {
		for (int64_t n : ns) {
			std::string nm = " n=" + std::to_string(n) + " dim=" + std::to_string(dim);
			size_t nd = (size_t)(n * dim);
			std::vector<float> hv = randf(4 * nd, -2, 2);
			Pair H = in(hv), H2 = in(hv), NW = in(randf((size_t)dim, 0.5f, 1.5f)), WR = in(randf((size_t)(4 * dim), -0.2f, 0.2f));
			Pair OW = in(randf((size_t)dim, 0.5f, 1.5f)), F = out(nd * 4);
			for (int pass = 0; pass < 2; pass++) {
				bool pred = pass == 0;
				int64_t nc = pred ? 16 : 4;
				for (int variant = 0; variant < 3; variant++) {
					/* the third with its pre part: correct, the layer's last
					 * norm-add first; predict, the previous layer's per-layer
					 * input to streams 1..3 first */
					bool withw = variant != 1, withpre = variant == 2;
					std::string name = std::string(pred ? "altup_predict_step" : "altup_correct_step") + nm +
					                   (withw ? "" : " no out_w") + (withpre ? " +pre" : "");
					std::vector<float> xv = randf(nd, -2, 2), prev = randf(nd, -2, 2);
					Pair CW = in(randf((size_t)(nc * 4), -1, 1)), X = in(xv), P = in(randf(4 * nd, -2, 2));
					Pair PRE = in(prev), PW = in(randf((size_t)dim, 0.5f, 1.5f)), XS = in(xv), PRES = in(prev);
					Pair Y = out((size_t)n * 16), CY = out((size_t)(n * nc) * 4), PR = out(4 * nd * 4), O = out(nd * 4);
					std::vector<float> hnow = down_f(H, 4 * nd); /* the correction writes h: each pass from the same */
					Pair HG = in(hnow); /* the CPU runs on its host side, the GPU on its device side */
					auto args = [&](bool g, Pair &h, Pair &pr, Pair &y, Pair &cy, Pair &o, Pair &x, Pair &pre) {
						vd_altup a;
						memset(&a, 0, sizeof a);
						a.y = T(y, g, VD_F32, n, 4), a.f = T(F, g, VD_F32, n, dim);
						a.x = pred ? T(h, g, VD_F32, n, dim) : T(x, g, VD_F32, n, dim);
						if (withpre)
							a.pre = T(pre, g, VD_F32, n, dim), a.pre_w = T(PW, g, VD_F32, 1, dim);
						a.norm_w = T(NW, g, VD_F32, 1, dim), a.w = T(WR, g, VD_F32, 4, dim);
						a.cw = T(CW, g, VD_F32, nc, 4), a.cy = T(cy, g, VD_F32, n, nc);
						a.h = T(h, g, VD_F32, 4 * n, dim), a.pred = pred ? T(pr, g, VD_F32, 4 * n, dim) : T(P, g, VD_F32, 4 * n, dim);
						a.out = T(o, g, VD_F32, n, dim), a.out_w = withw ? T(OW, g, VD_F32, 1, dim) : NIL();
						a.eps = 1e-6f, a.scale = 1.0f / dim, a.add = 1.0f, a.has_add = !pred, a.n = n, a.dim = dim;
						return a;
					};
					if (run(name, [&](vd_backend *b, vd_stream *st, bool g) {
						    vd_altup a = args(g, HG, PR, Y, CY, O, X, PRE);
						    (pred ? b->op.altup_predict_step : b->op.altup_correct_step)(st, &a);
					    })) {
						cmp(name + " (coefficients)", CY, (size_t)(n * nc), TOL_DOT);
						cmp(name + " (out)", O, nd, TOL_DOT);
						cmp(name + (pred ? " (prediction)" : " (streams)"), pred ? PR : HG, 4 * nd, TOL_DOT);
						if (withpre) {
							cmp(name + " (x after the norm-add)", X, nd, TOL_DOT);
							cmp(name + " (pre normalised)", PRE, nd, TOL_DOT);
							if (pred)
								cmp(name + " (streams after the per-layer input)", HG, 4 * nd, TOL_DOT);
						}
					}
					/* the operations it stands for, on the GPU, from the same h */
					Pair HS = in(hnow), YS = out((size_t)n * 16), CS2 = out((size_t)(n * nc) * 4), PS = out(4 * nd * 4),
					     OS = out(nd * 4);
					vd_altup a = args(true, HS, PS, YS, CS2, OS, XS, PRES);
					if (withpre && pred) { /* the per-layer input's own norm_add_more, with its rep */
						vd_tensor h1 = a.h, h23 = a.h;
						h1.rows = n, h1.data = (float *)a.h.data + nd, h23.rows = 2 * n, h23.data = (float *)a.h.data + 2 * nd;
						GPU->op.norm_add_more(GS, h1, a.pre, a.pre_w, h1, NIL(), NIL(), NIL(), dim, a.eps, 0.0f, h23, NIL(), NIL());
					} else if (withpre)
						GPU->op.norm_add(GS, a.x, a.pre, a.pre_w, a.x, NIL(), dim, a.eps, 0.0f);
					GPU->op.router_coef(GS, a.y, a.f, a.x, a.norm_w, a.w, dim, a.eps, a.scale, a.cw, a.cy, a.add, a.has_add);
					vd_tensor o = a.out, h0 = a.h, p0 = a.pred;
					h0.rows = n, p0.rows = n;
					if (pred) {
						GPU->op.altup_predict(GS, a.pred, a.h, a.cy, n, dim);
						GPU->op.rmsnorm(GS, o, p0, a.out_w, dim, a.eps);
					} else {
						GPU->op.altup_correct(GS, a.h, a.pred, a.x, a.cy, n, dim);
						if (withw)
							GPU->op.ew(GS, VD_EW_MUL_REP, o, h0, a.out_w, 0);
						else
							GPU->stream.copy(GS, o.data, h0.data, nd * 4);
					}
					GPU->stream.sync(GS);
					same(name + " = the operations", down_f(CY, (size_t)(n * nc)), down_f(CS2, (size_t)(n * nc)));
					same(name + " = the operations (out)", down_f(O, nd), down_f(OS, nd));
					same(name + " = the operations (streams)", down_f(pred ? PR : HG, 4 * nd), down_f(pred ? PS : HS, 4 * nd));
					if (withpre) {
						same(name + " = the operations (x)", down_f(X, nd), down_f(XS, nd));
						same(name + " = the operations (pre normalised)", down_f(PRE, nd), down_f(PRES, nd));
						if (pred)
							same(name + " = the operations (streams after the per-layer input)", down_f(HG, 4 * nd),
							     down_f(HS, 4 * nd));
					}
				}
			}
			/* norm_add_more: the attention's norm-add with the MLP's norm
			 * (b, c, f), with Laurel's norm-add of b first (bw, ba; with
			 * and without bw), and the per-layer input's add to three
			 * streams (rep of two blocks) */
			for (int mode = 0; mode < 4; mode++) {
				bool withf = mode != 1, laurel = mode >= 2, withbw = mode == 2;
				std::string name = std::string("norm_add_more") + nm + (withf ? " +b, f" : " rep") +
				                   (laurel ? (withbw ? " +laurel" : " +laurel no bw") : "");
				std::vector<float> xv = randf(nd, -2, 2), av = randf(nd, -2, 2), rv = randf(2 * nd, -2, 2), bv = randf(nd, -1, 1);
				Pair XG = in(xv), XS = in(xv), A = in(av), AS = in(av), BG = in(bv), BS = in(bv), W = in(randf((size_t)dim, 0.5f, 1.5f));
				Pair RG = in(rv), RS = in(rv), FW = in(randf((size_t)dim, 0.5f, 1.5f));
				Pair BW = in(randf((size_t)dim, 0.5f, 1.5f)), BA = in(randf(nd, -2, 2));
				Pair Y = out(nd * 4), FO = out(nd * 4), YS = out(nd * 4), FS = out(nd * 4);
				auto call = [&](vd_backend *b, vd_stream *st, bool g, Pair &x, Pair &y, Pair &a, Pair &r, Pair &f) {
					b->op.norm_add_more(st, T(y, g, VD_F32, n, dim), T(x, g, VD_F32, n, dim), T(W, g, VD_F32, 1, dim),
					                    T(a, g, VD_F32, n, dim), withf ? T(BG, g, VD_F32, n, dim) : NIL(),
					                    withbw ? T(BW, g, VD_F32, 1, dim) : NIL(), laurel ? T(BA, g, VD_F32, n, dim) : NIL(),
					                    dim, 1e-6f, 0.70710678f, withf ? NIL() : T(r, g, VD_F32, 2 * n, dim),
					                    withf ? T(f, g, VD_F32, n, dim) : NIL(), withf ? T(FW, g, VD_F32, 1, dim) : NIL());
				};
				if (run(name, [&](vd_backend *b, vd_stream *st, bool g) { call(b, st, g, XG, Y, A, RG, FO); })) {
					cmp(name + " (y)", Y, nd, TOL_DOT);
					cmp(name + " (x)", XG, nd, TOL_DOT);
					if (withf)
						cmp(name + " (f)", FO, nd, TOL_DOT);
					else
						cmp(name + " (rep)", RG, 2 * nd, TOL_DOT);
					if (laurel)
						cmp(name + " (b after its norm-add)", BG, nd, TOL_DOT);
				}
				if (laurel) /* Laurel's own norm_add, in place */
					GPU->op.norm_add(GS, T(BS, true, VD_F32, n, dim), T(BS, true, VD_F32, n, dim),
					                 withbw ? T(BW, true, VD_F32, 1, dim) : NIL(), T(BA, true, VD_F32, n, dim), NIL(), dim,
					                 1e-6f, 0.0f);
				GPU->op.norm_add(GS, T(YS, true, VD_F32, n, dim), T(XS, true, VD_F32, n, dim), T(W, true, VD_F32, 1, dim),
				                 T(AS, true, VD_F32, n, dim), withf ? T(BS, true, VD_F32, n, dim) : NIL(), dim, 1e-6f, 0.70710678f);
				if (withf)
					GPU->op.rmsnorm(GS, T(FS, true, VD_F32, n, dim), T(YS, true, VD_F32, n, dim), T(FW, true, VD_F32, 1, dim), dim, 1e-6f);
				else
					GPU->op.ew(GS, VD_EW_ADD_REP, T(RS, true, VD_F32, 2 * n, dim), T(RS, true, VD_F32, 2 * n, dim),
					           T(XS, true, VD_F32, n, dim), 0);
				GPU->stream.sync(GS);
				same(name + " = norm_add, then its ops (y)", down_f(Y, nd), down_f(YS, nd));
				same(name + " = norm_add, then its ops (x)", down_f(XG, nd), down_f(XS, nd));
				if (withf)
					same(name + " = norm_add, then its ops (f)", down_f(FO, nd), down_f(FS, nd));
				else
					same(name + " = norm_add, then its ops (rep)", down_f(RG, 2 * nd), down_f(RS, 2 * nd));
				if (laurel)
					same(name + " = norm_add, then its ops (b)", down_f(BG, nd), down_f(BS, nd));
			}
			/* norm_ropes: a layer's q (normed, rotated), k (normed, rotated,
			 * scattered) and v (scattered) in one launch */
			{
				int64_t hd = small ? 64 : 256, hq = small ? 2 : 8, hkv = small ? 1 : 2, slots = n + 3;
				std::string name = "norm_ropes" + nm;
				std::vector<float> qv = randf((size_t)(n * hq * hd), -2, 2), kv = randf((size_t)(n * hkv * hd), -2, 2),
				                   vv = randf((size_t)(n * hkv * hd), -2, 2);
				std::vector<int32_t> slot(slots); /* distinct slots, shuffled */
				for (int64_t i = 0; i < slots; i++)
					slot[i] = (int32_t)i;
				std::shuffle(slot.begin(), slot.end(), rng);
				slot.resize(n);
				std::vector<float> freq(hd / 2);
				for (int64_t i = 0; i < hd / 2; i++)
					freq[i] = powf(10000.0f, -2.0f * i / hd);
				Pair Q = in(qv), K = in(kv), V = in(vv), QS = in(qv), KS = in(kv), VS = in(vv), QW = in(randf((size_t)hd, 0.5f, 1.5f)),
				     KW = in(randf((size_t)hd, 0.5f, 1.5f)), POS = in(randi((size_t)n, 0, 4000)), IDX = in(slot), FR = in(freq);
				std::vector<float> pool((size_t)(slots * hkv * hd), 0.0f);
				Pair PK = in(pool), PV = in(pool), PKS = in(pool), PVS = in(pool);
				auto parts = [&](bool g, Pair &q, Pair &k, Pair &v, Pair &pk, Pair &pv) {
					vd_norm_ropes r;
					memset(&r, 0, sizeof r);
					r.part[0] = {NIL(), T(q, g, VD_F32, n, hq * hd), T(QW, g, VD_F32, 1, hd), T(FR, g, VD_F32, 1, hd / 2), hq};
					r.part[1] = {T(pk, g, VD_F32, slots, hkv * hd), T(k, g, VD_F32, n, hkv * hd), T(KW, g, VD_F32, 1, hd),
					             T(FR, g, VD_F32, 1, hd / 2), hkv};
					r.part[2] = {T(pv, g, VD_F32, slots, hkv * hd), T(v, g, VD_F32, n, hkv * hd), NIL(), NIL(), hkv};
					r.nparts = 3, r.idx = T(IDX, g, VD_I32, 1, n), r.pos = T(POS, g, VD_I32, 1, n), r.eps = 1e-6f, r.head_dim = hd;
					return r;
				};
				if (run(name, [&](vd_backend *b, vd_stream *st, bool g) {
					    vd_norm_ropes r = parts(g, Q, K, V, PK, PV);
					    b->op.norm_ropes(st, &r);
				    })) {
					cmp(name + " (q)", Q, qv.size(), TOL_DOT);
					cmp(name + " (k pool)", PK, pool.size(), TOL_DOT);
					cmp(name + " (v pool)", PV, pool.size(), TOL_DOT);
				}
				vd_norm_ropes r = parts(true, QS, KS, VS, PKS, PVS);
				for (int i = 0; i < 3; i++)
					GPU->op.norm_rope(GS, r.part[i].y, r.idx, r.part[i].x, r.part[i].w, r.eps, r.pos, r.part[i].heads, hd,
					                  r.part[i].inv_freq);
				GPU->stream.sync(GS);
				same(name + " = three norm_rope (q)", down_f(Q, qv.size()), down_f(QS, qv.size()));
				same(name + " = three norm_rope (k)", down_f(PK, pool.size()), down_f(PKS, pool.size()));
				same(name + " = three norm_rope (v)", down_f(PV, pool.size()), down_f(PVS, pool.size()));
			}
			free_all();
		}
	}
}

/* gate_cut: a token's sparse-MLP cutoff, mean + population std·z of its
 * gates g[0..inter) (float64). */
static double gate_cut(const float *g, int64_t inter, double z)
{
	double mean = 0, var = 0;
	for (int64_t i = 0; i < inter; i++)
		mean += g[i];
	mean /= (double)inter;
	for (int64_t i = 0; i < inter; i++)
		var += (g[i] - mean) * (g[i] - mean);
	return mean + sqrt(var / (double)inter) * z;
}

/* mlp_scale: the largest Σ_i |gelu_i|·(Σ_k |x_k·up_ik|)·|dT_ic| over an
 * output c of the sparse MLP (float64, from the inputs): the size of the
 * terms both nested sums round, the scale an error is measured against
 * when they cancel. */
static double mlp_scale(const std::vector<float> &gv, const float *x, const Q4 &up, const Q4 &dt, int64_t n,
                        int64_t inter, int64_t d, int group, double z)
{
	int lg = 0;
	while ((1 << lg) < group)
		lg++;
	std::vector<float> wu((size_t)(inter * d)), wd((size_t)(inter * d));
	vk_q4_dequant(wu.data(), (const uint8_t *)up.q.c, (const float *)up.so.c, inter, d, lg);
	vk_q4_dequant(wd.data(), (const uint8_t *)dt.q.c, (const float *)dt.so.c, inter, d, lg);
	double best = 0;
	for (int64_t t = 0; t < n; t++) {
		const float *g = gv.data() + t * inter;
		double cut = gate_cut(g, inter, z);
		std::vector<double> sc((size_t)d, 0.0);
		for (int64_t i = 0; i < inter; i++) {
			double v = g[i] - cut;
			if (v <= 0)
				continue;
			double ge = 0.5 * v * (1 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v))), dot = 0;
			for (int64_t c = 0; c < d; c++)
				dot += fabs((double)x[t * d + c] * wu[(size_t)(i * d + c)]);
			for (int64_t c = 0; c < d; c++)
				sc[(size_t)c] += fabs(ge * dot * wd[(size_t)(i * d + c)]);
		}
		for (double v : sc)
			best = std::max(best, v);
	}
	return best;
}

/* clear_cut moves gate values within 1e-3 of their token's cutoff (mean
 * + std·z) 2e-3 away from it: which gates survive is then the same under
 * any rounding of the mean and deviation, and the check measures the
 * sums alone. */
static void clear_cut(std::vector<float> &gv, int64_t n, int64_t inter, double z)
{
	for (int64_t t = 0; t < n; t++) {
		float *g = gv.data() + t * inter;
		double cut = gate_cut(g, inter, z);
		for (int64_t i = 0; i < inter; i++)
			if (fabs(g[i] - cut) < 1e-3)
				g[i] = (float)(g[i] < cut ? cut - 2e-3 : cut + 2e-3);
	}
}

static void check_sparse_mlp(bool small)
{
	/* small: in the small run too (the 66-token shape: many tokens, and
	 * columns past 1,024) */
	struct S {
		int64_t n, inter, d;
		int group;
		bool small;
	} shapes[] = {{1, 1024, 256, 64, true},  {5, 512, 512, 32, true},    {3, 2048, 256, 128, false},
	               {66, 320, 1088, 32, true}, {70, 1024, 288, 32, false}, {2, 8192, 2048, 64, false}};
	for (S s : shapes) {
		if (small && !s.small)
			continue;
		Q4 up = randq4(s.inter, s.d, s.group), dt = randq4(s.inter, s.d, s.group);
		Pair X = in(randf((size_t)(s.n * s.d)));
		auto gv = randf((size_t)(s.n * s.inter), -2, 2);
		clear_cut(gv, s.n, s.inter, 1.6448536);
		Pair G = in(gv);
		Pair H = out((size_t)(s.n * s.inter * 4)), I = out((size_t)(s.n * s.inter * 4));
		Pair Y = out((size_t)(s.n * s.d * 4));
		char nm[96];
		snprintf(nm, sizeof nm, "sparse_mlp n=%lld inter=%lld d=%lld g=%d", (long long)s.n, (long long)s.inter,
		         (long long)s.d, s.group);
		if (run(nm, [&](vd_backend *b, vd_stream *st, bool g) {
			    b->op.sparse_mlp(st, T(Y, g, VD_F32, s.n, s.d), T(G, g, VD_F32, s.n, s.inter),
			                  T(H, g, VD_F32, s.n, s.inter), T(I, g, VD_I32, s.n, s.inter),
			                  T(X, g, VD_F32, s.n, s.d), Q(up.q, up.so, g, s.inter, s.d, s.group),
			                  Q(dt.q, dt.so, g, s.inter, s.d, s.group), 1.6448536f);
		    }))
			cmp_scaled(nm, Y, (size_t)(s.n * s.d), TOL_DOT,
			           mlp_scale(gv, (const float *)X.c, up, dt, s.n, s.inter, s.d, s.group, 1.6448536));
		if (s.n > 1) { /* the last token alone on the GPU: the batch's bits */
			std::vector<float> all = down_f(Y, (size_t)(s.n * s.d));
			std::vector<float> g1(gv.end() - s.inter, gv.end());
			Pair G1 = in(g1), H1 = out((size_t)s.inter * 4), I1 = out((size_t)s.inter * 4), Y1 = out((size_t)s.d * 4);
			vd_tensor x1 = T(X, true, VD_F32, 1, s.d);
			x1.data = (float *)X.g + (s.n - 1) * s.d;
			GPU->op.sparse_mlp(GS, T(Y1, true, VD_F32, 1, s.d), T(G1, true, VD_F32, 1, s.inter),
			                T(H1, true, VD_F32, 1, s.inter), T(I1, true, VD_I32, 1, s.inter), x1,
			                Q(up.q, up.so, true, s.inter, s.d, s.group), Q(dt.q, dt.so, true, s.inter, s.d, s.group),
			                1.6448536f);
			GPU->stream.sync(GS);
			same(std::string(nm) + " token alone = in batch", down_f(Y1, (size_t)s.d),
			     std::vector<float>(all.end() - s.d, all.end()));
		}
		free_all();
	}
}

static void check_rows()
{
	for (int64_t dim : {64, 2048, 2000, 5000}) {
		int64_t rows = 9;
		size_t n = (size_t)(rows * dim);
		Pair X = in(randf(n, -3, 3)), W = in(randf((size_t)dim, 0.5f, 1.5f));
		std::string sfx = " dim=" + std::to_string(dim);
		for (int withw = 0; withw < 2; withw++) {
			Pair Y = out(n * 4);
			std::string nm = std::string("rmsnorm") + (withw ? " w" : " no-w") + sfx;
			if (run(nm.c_str(), [&](vd_backend *b, vd_stream *st, bool g) {
				    b->op.rmsnorm(st, T(Y, g, VD_F32, rows, dim), T(X, g, VD_F32, rows, dim),
				               withw ? T(W, g, VD_F32, 1, dim) : NIL(), dim, 1e-6f);
			    }))
				cmp(nm, Y, n, TOL_DOT);
		}
		Pair R = out((size_t)rows * 4);
		if (run("row_rms", [&](vd_backend *b, vd_stream *st, bool g) {
			    b->op.row_rms(st, T(R, g, VD_F32, rows, 1), T(X, g, VD_F32, rows, dim), dim, 1e-3f);
		    }))
			cmp("row_rms" + sfx, R, (size_t)rows, TOL_DOT);
		Pair SC = in(randf((size_t)rows)), X2 = in(randf(n));
		if (run("scale_rows", [&](vd_backend *b, vd_stream *st, bool g) {
			    b->op.scale_rows(st, T(X2, g, VD_F32, rows, dim), T(SC, g, VD_F32, rows, 1), dim);
		    }))
			cmp("scale_rows" + sfx, X2, n, TOL_EW);
		Pair X3 = in(randf(n));
		if (run("mul_rows", [&](vd_backend *b, vd_stream *st, bool g) {
			    b->op.mul_rows(st, T(X3, g, VD_F32, rows, dim), T(W, g, VD_F32, 1, dim));
		    }))
			cmp("mul_rows" + sfx, X3, n, TOL_EW);
		Pair G = in(randf(n, -2, 2)), U = in(randf(n));
		if (run("sparse_gelu_mul", [&](vd_backend *b, vd_stream *st, bool g) {
			    b->op.sparse_gelu_mul(st, T(G, g, VD_F32, rows, dim), T(U, g, VD_F32, rows, dim), dim, 1.6448536f);
		    }))
			cmp("sparse_gelu_mul" + sfx, G, n, TOL_DOT);
		/* norm_add: in place (y = a) without b, and with b. */
		Pair NX = in(randf(n, -3, 3)), NA = in(randf(n)), NB = in(randf(n)), NY = out(n * 4);
		if (run("norm_add", [&](vd_backend *b, vd_stream *st, bool g) {
			    b->op.norm_add(st, T(NA, g, VD_F32, rows, dim), T(NX, g, VD_F32, rows, dim), T(W, g, VD_F32, 1, dim),
			                T(NA, g, VD_F32, rows, dim), vd_tensor{}, dim, 1e-6f, 0);
			    b->op.norm_add(st, T(NY, g, VD_F32, rows, dim), T(NX, g, VD_F32, rows, dim), vd_tensor{},
			                T(NA, g, VD_F32, rows, dim), T(NB, g, VD_F32, rows, dim), dim, 1e-6f, 0.7071f);
		    })) {
			cmp("norm_add in place" + sfx, NA, n, TOL_DOT);
			cmp("norm_add with b" + sfx, NY, n, TOL_DOT);
		}
		Pair L = out((size_t)rows * 4);
		Pair XL = in(randf(n, -20, 20));
		if (run("logsumexp", [&](vd_backend *b, vd_stream *st, bool g) {
			    b->op.logsumexp(st, T(L, g, VD_F32, rows, 1), T(XL, g, VD_F32, rows, dim));
		    }))
			cmp("logsumexp" + sfx, L, (size_t)rows, TOL_DOT);
		/* argmax with a planted tie in some rows: the lowest index wins. */
		auto xa = randf(n);
		for (int64_t r = 0; r < rows; r += 2) {
			xa[(size_t)(r * dim + dim / 3)] = 5.0f;
			xa[(size_t)(r * dim + dim / 2)] = 5.0f;
		}
		Pair XA = in(xa), A = out((size_t)rows * 4);
		if (run("argmax", [&](vd_backend *b, vd_stream *st, bool g) {
			    b->op.argmax(st, T(A, g, VD_I32, rows, 1), T(XA, g, VD_F32, rows, dim));
		    }))
			cmp_i("argmax (ties: lowest)" + sfx, A, (size_t)rows);
		free_all();
	}
	/* One long row (the two-launch argmax): ties across its slices, and
	 * a NaN first element (the CPU answers 0). */
	for (int c = 0; c < 3; c++) {
		int64_t dim = 262144;
		auto xa = randf((size_t)dim);
		if (c >= 1)
			xa[100000] = xa[250001] = 9.0f;
		if (c == 2)
			xa[0] = std::nanf("");
		Pair XA = in(xa), A = out(4);
		std::string nm = "argmax one row of 262144, case " + std::to_string(c);
		if (run(nm.c_str(), [&](vd_backend *b, vd_stream *st, bool g) {
			    b->op.argmax(st, T(A, g, VD_I32, 1, 1), T(XA, g, VD_F32, 1, dim));
		    }))
			cmp_i(nm, A, 1);
		free_all();
	}
}

static void check_ew()
{
	static const char *names[] = {"gelu", "gelu_mul", "softcap", "tanh", "add", "mul", "div", "add_const", "scale", "add_scaled"};
	size_t n = 100003;
	auto a = randf(n, -12, 12), bb = randf(n, 0.2f, 3.0f);
	for (int op = VD_EW_GELU; op <= VD_EW_ADD_SCALED; op++) {
		Pair A = in(a), B = in(bb), Y = out(n * 4);
		float c = op == VD_EW_SOFTCAP ? 30.0f : 0.37f;
		std::string nm = std::string("ew ") + names[op];
		if (run(nm.c_str(), [&](vd_backend *b, vd_stream *st, bool g) {
			    b->op.ew(st, op, T(Y, g, VD_F32, 1, (int64_t)n), T(A, g, VD_F32, 1, (int64_t)n),
			          T(B, g, VD_F32, 1, (int64_t)n), c);
		    }))
			cmp(nm, Y, n, TOL_EW);
		/* in place: y = a */
		if (run(nm.c_str(), [&](vd_backend *b, vd_stream *st, bool g) {
			    b->op.ew(st, op, T(A, g, VD_F32, 1, (int64_t)n), T(A, g, VD_F32, 1, (int64_t)n),
			          T(B, g, VD_F32, 1, (int64_t)n), c);
		    }))
			cmp(nm + " (in place)", A, n, TOL_EW);
		free_all();
	}
	/* b repeated over y: a row added to (or multiplying) every row */
	for (int op : {(int)VD_EW_ADD_REP, (int)VD_EW_MUL_REP}) {
		const int64_t rows = 37, d = 2048;
		Pair A = in(randf((size_t)(rows * d), -3, 3)), B = in(randf((size_t)d, 0.2f, 3.0f)), Y = out((size_t)(rows * d) * 4);
		std::string nm = op == VD_EW_ADD_REP ? "ew add_rep" : "ew mul_rep";
		if (run(nm.c_str(), [&](vd_backend *b, vd_stream *st, bool g) {
			    b->op.ew(st, op, T(Y, g, VD_F32, rows, d), T(A, g, VD_F32, rows, d), T(B, g, VD_F32, 1, d), 0);
		    }))
			cmp(nm, Y, (size_t)(rows * d), 0);
		free_all();
	}
}

static void check_rope_altup()
{
	for (int64_t hd : {64, 256}) {
		int64_t n = 13, heads = 4;
		size_t m = (size_t)(n * heads * hd);
		std::vector<float> inv((size_t)(hd / 2));
		for (int64_t i = 0; i < hd / 2; i++)
			inv[(size_t)i] = (float)pow(10000.0, -2.0 * (double)i / (double)hd);
		Pair X = in(randf(m)), P = in(randi((size_t)n, 0, 8000)), F = in(inv);
		std::string nm = "rope hd=" + std::to_string(hd);
		if (run(nm.c_str(), [&](vd_backend *b, vd_stream *st, bool g) {
			    b->op.rope(st, T(X, g, VD_F32, n, heads * hd), T(P, g, VD_I32, 1, n), heads, hd, T(F, g, VD_F32, 1, hd / 2));
		    }))
			cmp(nm, X, m, TOL_EW);
		/* norm_rope = rmsnorm then rope: against the CPU, and on the GPU
		 * bit for bit against the two */
		auto x0 = randf(m);
		Pair NX = in(x0), NW = in(randf((size_t)hd, 0.5f, 1.5f)), RX = in(x0);
		for (bool wn : {true, false}) {
			nm = std::string("norm_rope hd=") + std::to_string(hd) + (wn ? "" : " no w");
			cudaMemcpy(NX.g, x0.data(), m * 4, cudaMemcpyHostToDevice);
			memcpy(NX.c, x0.data(), m * 4);
			if (run(nm.c_str(), [&](vd_backend *b, vd_stream *st, bool g) {
				    b->op.norm_rope(st, NIL(), NIL(), T(NX, g, VD_F32, n, heads * hd), wn ? T(NW, g, VD_F32, 1, hd) : NIL(),
				                 1e-6f, T(P, g, VD_I32, 1, n), heads, hd, T(F, g, VD_F32, 1, hd / 2));
			    }))
				cmp(nm, NX, m, TOL_DOT);
			cudaMemcpy(RX.g, x0.data(), m * 4, cudaMemcpyHostToDevice);
			vd_tensor rx = T(RX, true, VD_F32, n, heads * hd);
			GPU->op.rmsnorm(GS, rx, rx, wn ? T(NW, true, VD_F32, 1, hd) : NIL(), hd, 1e-6f);
			GPU->op.rope(GS, rx, T(P, true, VD_I32, 1, n), heads, hd, T(F, true, VD_F32, 1, hd / 2));
			GPU->stream.sync(GS);
			same(nm + " = rmsnorm, rope", down_f(NX, m), down_f(RX, m));
		}
		/* with the scatter to a pool's rows, rotated or not */
		std::vector<int32_t> slots((size_t)(3 * n));
		for (size_t i = 0; i < slots.size(); i++)
			slots[i] = (int32_t)i;
		std::shuffle(slots.begin(), slots.end(), rng);
		slots.resize((size_t)n);
		for (bool rot : {true, false}) {
			Pair SX = in(x0), SL = in(slots), POOL = in(randf((size_t)(3 * n * heads * hd)));
			nm = std::string("norm_rope hd=") + std::to_string(hd) + (rot ? " scatter" : " scatter, not rotated");
			if (run(nm.c_str(), [&](vd_backend *b, vd_stream *st, bool g) {
				    b->op.norm_rope(st, T(POOL, g, VD_F32, 3 * n, heads * hd), T(SL, g, VD_I32, 1, n),
				                 T(SX, g, VD_F32, n, heads * hd), T(NW, g, VD_F32, 1, hd), 1e-6f, T(P, g, VD_I32, 1, n),
				                 heads, hd, rot ? T(F, g, VD_F32, 1, hd / 2) : NIL());
			    })) {
				cmp(nm + " (pool)", POOL, (size_t)(3 * n * heads * hd), TOL_DOT);
				cmp(nm + " (x)", SX, m, TOL_DOT);
			}
		}
		free_all();
	}
	int64_t n = 6, d = 2048;
	size_t m = (size_t)(4 * n * d);
	Pair H = in(randf(m)), C = in(randf((size_t)(16 * n))), PR = out(m * 4);
	if (run("altup_predict", [&](vd_backend *b, vd_stream *st, bool g) {
		    b->op.altup_predict(st, T(PR, g, VD_F32, 4 * n, d), T(H, g, VD_F32, 4 * n, d), T(C, g, VD_F32, n, 16), n, d);
	    }))
		cmp("altup_predict n=6 d=2048", PR, m, TOL_EW);
	Pair PD = in(randf(m)), ACT = in(randf((size_t)(n * d))), CF = in(randf((size_t)(4 * n))), O = out(m * 4);
	if (run("altup_correct", [&](vd_backend *b, vd_stream *st, bool g) {
		    b->op.altup_correct(st, T(O, g, VD_F32, 4 * n, d), T(PD, g, VD_F32, 4 * n, d), T(ACT, g, VD_F32, n, d),
		                     T(CF, g, VD_F32, n, 4), n, d);
	    }))
		cmp("altup_correct n=6 d=2048", O, m, TOL_EW);
	if (run("altup_correct in place", [&](vd_backend *b, vd_stream *st, bool g) {
		    b->op.altup_correct(st, T(PD, g, VD_F32, 4 * n, d), T(PD, g, VD_F32, 4 * n, d), T(ACT, g, VD_F32, n, d),
		                     T(CF, g, VD_F32, n, 4), n, d);
	    }))
		cmp("altup_correct in place", PD, m, TOL_EW);
	free_all();
}

/* Paged attention: several sequences whose keys sit in shuffled blocks,
 * entries of assorted lengths (some blocks partly filled), queries at
 * several positions of each (prefill runs and decode steps). Each shape
 * runs causal and with key limits (qlim: a random later position of the
 * query's sequence for about two queries in three, as an image block's
 * queries see their block's later keys). small: a few small shapes and
 * sequences, for the host emulation (ops_check -attn). */
static void check_attention(bool small)
{
	struct S {
		int64_t hq, hkv, d, block, window;
	};
	static const S all[] = {{8, 2, 64, 16, 0}, {8, 2, 64, 16, 20}, {4, 1, 256, 8, 0}, {2, 2, 128, 32, 0}, {8, 4, 256, 16, 48},
	                        {4, 2, 64, 1, 0}, {8, 2, 64, 1, 40}}; /* blocks of one key: over 256 entries a sequence */
	static const S few[] = {{4, 2, 16, 4, 0}, {4, 2, 16, 4, 6}, {2, 1, 32, 1, 5}, {8, 2, 16, 8, 0},
	                        /* shapes the prefill tiles take (attention_tile.cu): G = 2, 4, 8, 1 */
	                        {4, 2, 32, 4, 0}, {4, 1, 64, 4, 6}, {8, 1, 32, 8, 0}, {2, 2, 32, 2, 30}};
	std::vector<S> shapes = small ? std::vector<S>(std::begin(few), std::end(few)) : std::vector<S>(std::begin(all), std::end(all));
	for (S s : shapes)
	for (bool withLim : {false, true}) {
		int64_t nblocks = 600, ldk = s.hkv * s.d;
		size_t pool = (size_t)(nblocks * s.block * ldk);
		Pair K = in(randf(pool)), V = in(randf(pool));
		std::vector<int32_t> perm((size_t)nblocks);
		for (int64_t i = 0; i < nblocks; i++)
			perm[(size_t)i] = (int32_t)i;
		std::shuffle(perm.begin(), perm.end(), rng);
		std::vector<int32_t> seq_ent{0}, blk, pos, len, qpos, qseq, qlim;
		int64_t nb = 0, max_keys = 1;
		int lens_all[] = {150, 37, 5, 300}, lens_few[] = {70, 13, 5, 27};
		int *lens = small ? lens_few : lens_all;
		for (int sq = 0; sq < 4; sq++) {
			int64_t p = 0;
			while (p < lens[sq]) {
				int64_t l = std::min<int64_t>(lens[sq] - p, 1 + (int64_t)(rng() % (uint64_t)s.block));
				blk.push_back(perm[(size_t)nb++]);
				pos.push_back((int32_t)p);
				len.push_back((int32_t)l);
				p += l;
			}
			seq_ent.push_back((int32_t)blk.size());
			max_keys = std::max<int64_t>(max_keys, lens[sq]);
			/* a prefill run over the last 6 positions (over all of sequence
			 * 0 where d takes the prefill's tiles, attention_tile.cu:
			 * whole tiles of one sequence), a first one, one in the middle */
			bool whole = sq == 0 && s.d % 32 == 0;
			for (int64_t q = whole ? 0 : std::max<int64_t>(0, lens[sq] - 6); q < lens[sq]; q++) {
				qpos.push_back((int32_t)q);
				qseq.push_back(sq);
			}
			qpos.push_back(0);
			qseq.push_back(sq);
			qpos.push_back(lens[sq] / 2);
			qseq.push_back(sq);
		}
		for (size_t i = 0; i < qpos.size(); i++) {
			int32_t last = lens[qseq[i]] - 1, q = qpos[i];
			qlim.push_back(q < last && rng() % 3 != 0 ? q + 1 + (int32_t)(rng() % (uint64_t)(last - q)) : q);
		}
		int64_t nq = (int64_t)qpos.size();
		size_t qn = (size_t)(nq * s.hq * s.d);
		Pair Qp = in(randf(qn)), O = out(qn * 4);
		Pair QP = in(qpos), QS = in(qseq), SE = in(seq_ent), EB = in(blk), EP = in(pos), EL = in(len), QL = in(qlim);
		auto attn = [&](bool g, const Pair &out_, const Pair &q_, int64_t qoff, int64_t nqq) {
			vd_attn a;
			memset(&a, 0, sizeof a);
			a.out = T(out_, g, VD_F32, nqq, s.hq * s.d);
			a.q = T(q_, g, VD_F32, nqq, s.hq * s.d);
			a.q.data = (float *)a.q.data + qoff * s.hq * s.d;
			a.out.data = (float *)a.out.data + qoff * s.hq * s.d;
			a.k = T(K, g, VD_F32, nblocks * s.block, ldk);
			a.v = T(V, g, VD_F32, nblocks * s.block, ldk);
			a.qpos = T(QP, g, VD_I32, 1, nqq);
			a.qpos.data = (int32_t *)a.qpos.data + qoff;
			a.qseq = T(QS, g, VD_I32, 1, nqq);
			a.qseq.data = (int32_t *)a.qseq.data + qoff;
			a.seq_ent = T(SE, g, VD_I32, 1, (int64_t)seq_ent.size());
			a.ent_blk = T(EB, g, VD_I32, 1, (int64_t)blk.size());
			a.ent_pos = T(EP, g, VD_I32, 1, (int64_t)pos.size());
			a.ent_len = T(EL, g, VD_I32, 1, (int64_t)len.size());
			a.hq = s.hq;
			a.hkv = s.hkv;
			a.d = s.d;
			a.block = s.block;
			a.window = s.window;
			a.max_keys = max_keys;
			a.scale = 1.0f / sqrtf((float)s.d);
			if (withLim) {
				a.qlim = T(QL, g, VD_I32, 1, nqq);
				a.qlim.data = (int32_t *)a.qlim.data + qoff;
			}
			return a;
		};
		char nm[140];
		snprintf(nm, sizeof nm, "attention%s hq=%lld hkv=%lld d=%lld blk=%lld win=%lld nq=%lld", withLim ? " qlim" : "",
		         (long long)s.hq, (long long)s.hkv, (long long)s.d, (long long)s.block, (long long)s.window,
		         (long long)nq);
		if (run(nm, [&](vd_backend *b, vd_stream *st, bool g) {
			    vd_attn a = attn(g, O, Qp, 0, nq);
			    b->op.attention(st, &a);
		    })) {
			cmp(nm, O, qn, TOL_DOT);
			/* every query alone on the GPU, each way a few queries
			 * take (attention_one.cu's launch, attention_dec.cu's,
			 * k_attn_part and k_attn_combine): the same bits */
			std::vector<float> all = down_f(O, qn), each(qn);
			Pair O1 = out(qn * 4);
			std::string one = getenv("VERDICT_ATTN_ONE") ? getenv("VERDICT_ATTN_ONE") : "";
			const char *dec = getenv("VERDICT_ATTN_DEC");
			std::string dec0 = dec ? dec : "";
			struct W {
				const char *one, *dec, *gh, *name;
			} ways[] = {{"1", "1", "1", "one launch"},
			            {"0", "1", "1", "dec"},
			            {"0", "1", "g", "dec, the group's heads a block"},
			            {"0", "0", "1", "parts"}};
			std::string G = std::to_string(s.hq / s.hkv);
			for (W way : ways) {
				setenv("VERDICT_ATTN_ONE", way.one, 1);
				setenv("VERDICT_ATTN_DEC", way.dec, 1);
				setenv("VERDICT_ATTN_DEC_GH", strcmp(way.gh, "g") == 0 ? G.c_str() : way.gh, 1);
				for (int64_t i = 0; i < nq; i++) {
					vd_attn a = attn(true, O1, Qp, i, 1);
					GPU->op.attention(GS, &a);
				}
				GPU->stream.sync(GS);
				same(std::string(nm) + " alone = batched (" + way.name + ")", down_f(O1, qn), all);
			}
			setenv("VERDICT_ATTN_ONE", one.c_str(), 1);
			unsetenv("VERDICT_ATTN_DEC_GH");
			if (dec)
				setenv("VERDICT_ATTN_DEC", dec0.c_str(), 1);
			else
				unsetenv("VERDICT_ATTN_DEC");
		}
		free_all();
	}
}

static void check_memory()
{
	int64_t V = 300, C = 256;
	auto ids = randi(40, 0, (int32_t)V - 1);
	for (int dt : {VD_F32, VD_BF16, VD_Q4}) {
		Pair W, SO;
		if (dt == VD_F32)
			W = in(randf((size_t)(V * C)));
		else if (dt == VD_BF16)
			W = in(bf16_of(randf((size_t)(V * C))));
		else {
			Q4 q = randq4(V, C, 64);
			W = q.q;
			SO = q.so;
		}
		Pair ID = in(ids), Y = out((size_t)(ids.size() * C * 4));
		std::string nm = std::string("embed ") + dtname(dt);
		if (run(nm.c_str(), [&](vd_backend *b, vd_stream *st, bool g) {
			    vd_tensor t = dt == VD_Q4 ? Q(W, SO, g, V, C, 64) : T(W, g, dt, V, C);
			    b->op.embed(st, T(Y, g, VD_F32, (int64_t)ids.size(), C), t, T(ID, g, VD_I32, 1, (int64_t)ids.size()), 45.25f);
		    }))
			cmp(nm, Y, ids.size() * C, TOL_EW);
		free_all();
	}
	Pair X = in(randf((size_t)(V * C))), ID = in(ids), Y = out((size_t)(ids.size() * C * 4));
	if (run("gather", [&](vd_backend *b, vd_stream *st, bool g) {
		    b->op.gather(st, T(Y, g, VD_F32, (int64_t)ids.size(), C), T(X, g, VD_F32, V, C), T(ID, g, VD_I32, 1, (int64_t)ids.size()));
	    }))
		cmp("gather", Y, ids.size() * C, 0);
	std::vector<int32_t> perm((size_t)V);
	for (int64_t i = 0; i < V; i++)
		perm[(size_t)i] = (int32_t)i;
	std::shuffle(perm.begin(), perm.end(), rng);
	perm.resize(50);
	Pair PI = in(perm), XS = in(randf((size_t)(50 * C))), YS = in(randf((size_t)(V * C)));
	if (run("scatter", [&](vd_backend *b, vd_stream *st, bool g) {
		    b->op.scatter(st, T(YS, g, VD_F32, V, C), T(XS, g, VD_F32, 50, C), T(PI, g, VD_I32, 1, 50));
	    }))
		cmp("scatter", YS, (size_t)(V * C), 0);
	Pair YC = in(randf((size_t)(V * C)));
	if (run("copy2d", [&](vd_backend *b, vd_stream *st, bool g) {
		    b->op.copy2d(st, T(YC, g, VD_F32, V, C), C, T(X, g, VD_F32, V, C), C + 3, 40, C - 7);
	    }))
		cmp("copy2d", YC, (size_t)(V * C), 0);
	Pair R = in(randi(77, 0, (int32_t)V - 1)), CO = in(randi(77, 0, (int32_t)C - 1)), O = out(77 * 4);
	if (run("select", [&](vd_backend *b, vd_stream *st, bool g) {
		    b->op.select(st, T(O, g, VD_F32, 1, 77), T(X, g, VD_F32, V, C), T(R, g, VD_I32, 1, 77), T(CO, g, VD_I32, 1, 77));
	    }))
		cmp("select", O, 77, 0);
	/* transfers: upload, copy, download */
	auto h = randf(1000);
	Pair A = out(4000), B = out(4000);
	GPU->stream.upload(GS, A.g, h.data(), 4000);
	GPU->stream.copy(GS, B.g, A.g, 4000);
	std::vector<float> back(1000);
	GPU->stream.download(GS, back.data(), B.g, 4000);
	int rc = GPU->stream.sync(GS);
	same("upload, copy, download", h, back);
	if (rc)
		failures++;
	free_all();
}

static void check_sample()
{
	int64_t V = 5000;
	struct P {
		float inv_temp;
		int64_t top_k;
		double top_p, u;
	} ps[] = {{0, 0, 1, 0.5}, {1.25f, 40, 0.9, 0.3}, {1.0f, 0, 1, 0.77}, {2.0f, 0, 0.5, 0.999}, {0.7f, 1, 1, 0.1}, {1.0f, 7, 0.0, 0.6}};
	int k = 0;
	for (P p : ps) {
		for (int rep = 0; rep < 5; rep++) {
			auto x = randf((size_t)V, -5, 5);
			x[17] = x[4000] = 6.0f; /* a tie at the top */
			Pair X = in(x), O = out(4);
			vd_sampling sp;
			sp.inv_temp = p.inv_temp;
			sp.top_k = p.top_k;
			sp.top_p = p.top_p;
			sp.u = std::fmod(p.u + 0.137 * rep, 1.0);
			char nm[96];
			snprintf(nm, sizeof nm, "sample T^-1=%.2f k=%lld p=%.2f u=%.3f", p.inv_temp, (long long)p.top_k, p.top_p, sp.u);
			if (run(nm, [&](vd_backend *b, vd_stream *st, bool g) {
				    b->op.sample(st, T(O, g, VD_I32, 1, 1), T(X, g, VD_F32, 1, V), sp);
			    }))
				cmp_i(nm, O, 1);
			free_all();
			k++;
		}
	}
	/* The device's top-k draw: a vocabulary's size, and ties across the
	 * k-th place (100 equal logits; the lower ids go in). */
	V = 262144;
	P big[] = {{1.0f, 64, 0.95, 0.4}, {0.8f, 1024, 1, 0.9}, {1.0f, 50, 1, 0.2}, {1.1f, 3, 0.5, 0.7}, {1.0f, 1000, 0.3, 0.05}};
	for (P p : big) {
		for (int rep = 0; rep < 4; rep++) {
			auto x = randf((size_t)V, -8, 8);
			if (rep & 1)
				for (int j = 0; j < 100; j++)
					x[(size_t)(j * 2600 + 11)] = 7.5f;
			if (rep == 2)
				for (size_t j = 0; j < x.size(); j += 3)
					x[j] = -0.0f; /* signed zeros tie with +0 */
			Pair X = in(x), O = out(4);
			vd_sampling sp;
			sp.inv_temp = p.inv_temp;
			sp.top_k = p.top_k;
			sp.top_p = p.top_p;
			sp.u = std::fmod(p.u + 0.211 * rep, 1.0);
			char nm[96];
			snprintf(nm, sizeof nm, "sample V=%lld T^-1=%.2f k=%lld p=%.2f u=%.3f", (long long)V, p.inv_temp,
			         (long long)p.top_k, p.top_p, sp.u);
			if (run(nm, [&](vd_backend *b, vd_stream *st, bool g) {
				    b->op.sample(st, T(O, g, VD_I32, 1, 1), T(X, g, VD_F32, 1, V), sp);
			    }))
				cmp_i(nm, O, 1);
			free_all();
		}
	}
}

/* The loops' row set-up and a greedy step's bookkeeping: every output
 * exact, rows past one block's threads, steps inside and outside the
 * loop's, stop tokens with padding, rows already done. */
static void check_loop()
{
	const int64_t n = 200, steps = 5, V = 64;
	for (int32_t t : {0, 2, 4, 5, 7}) {
		auto ids = randi((size_t)n, -2, (int32_t)V + 3);
		Pair IT = in(std::vector<int32_t>{t}), ID = in(ids), LUT = in(randi((size_t)V, 0, 1000)),
		     P0 = in(randi((size_t)n, 0, 5000)), S0 = in(randi((size_t)(n * steps), 0, 99999)),
		     S1 = in(randi((size_t)(n * steps), 0, 99999)), ROW = out((size_t)n * 4), POS = out((size_t)n * 4),
		     D0 = out((size_t)n * 4), D1 = out((size_t)n * 4);
		char nm[64];
		snprintf(nm, sizeof nm, "loop_rows t=%d", t);
		if (run(nm, [&](vd_backend *b, vd_stream *st, bool g) {
			    vd_loop_rows r;
			    r.n = n, r.steps = steps;
			    r.iter = T(IT, g, VD_I32, 1, 1), r.ids = T(ID, g, VD_I32, 1, n), r.lut = T(LUT, g, VD_I32, 1, V);
			    r.row = T(ROW, g, VD_I32, 1, n), r.pos0 = T(P0, g, VD_I32, 1, n), r.pos = T(POS, g, VD_I32, 1, n);
			    r.slots0 = T(S0, g, VD_I32, 1, n * steps), r.slots1 = T(S1, g, VD_I32, 1, n * steps);
			    r.slot0 = T(D0, g, VD_I32, 1, n), r.slot1 = T(D1, g, VD_I32, 1, n);
			    b->op.loop_rows(st, &r);
		    })) {
			cmp_i(std::string(nm) + " row", ROW, (size_t)n);
			cmp_i(std::string(nm) + " pos", POS, (size_t)n);
			cmp_i(std::string(nm) + " slot0", D0, (size_t)n);
			cmp_i(std::string(nm) + " slot1", D1, (size_t)n);
			cmp_i(std::string(nm) + " iter", IT, 1);
		}
		std::vector<int32_t> stop = {3, -1, 17, 40, -1, -1};
		Pair IT2 = in(std::vector<int32_t>{t}), ST = in(stop), O = in(std::vector<int32_t>((size_t)(n * steps), -9)),
		     DN = in(randi((size_t)n, 0, 1)), CD = in(std::vector<int32_t>{-5});
		snprintf(nm, sizeof nm, "loop_emit iter=%d", t);
		if (run(nm, [&](vd_backend *b, vd_stream *st, bool g) {
			    vd_loop_emit e;
			    e.n = n, e.steps = steps;
			    e.iter = T(IT2, g, VD_I32, 1, 1), e.ids = T(ID, g, VD_I32, 1, n);
			    e.stop = T(ST, g, VD_I32, 1, (int64_t)stop.size()), e.out = T(O, g, VD_I32, 1, n * steps);
			    e.done = T(DN, g, VD_I32, 1, n), e.cond = T(CD, g, VD_I32, 1, 1);
			    b->op.loop_emit(st, &e);
		    })) {
			cmp_i(std::string(nm) + " out", O, (size_t)(n * steps));
			cmp_i(std::string(nm) + " done", DN, (size_t)n);
			cmp_i(std::string(nm) + " cond", CD, 1);
		}
		free_all();
	}
}

/* -attn-bench (a GPU only): attention at E2B's shape (8 query heads, 2
 * key/value heads, d 256, blocks of 16 keys) over a sequence of n keys:
 * a prefill of all n queries from position 0 (n = 512, 2,048, the second
 * also with a window of 512, as the sliding layers), and a decode step's
 * one query at the end (n = 256, 1,024, and 560 in a capacity of 1,024
 * keys, as a decode step after a 512-token prompt records it), timed
 * over 20 calls (200 for a decode step) after 3; run it with
 * VERDICT_ATTN_TILE at 0 and 1 to compare the tiles with the chunks; a
 * decode step's query runs each way a few queries take (attention_one.cu,
 * attention_dec.cu with a head a block and with the group's 4, k_attn_part
 * and k_attn_combine). */
static void bench_attention()
{
	const int64_t hq = 8, hkv = 2, d = 256, block = 16, ldk = hkv * d;
	struct C {
		int64_t n, window, nq, cap; /* cap: the key capacity (max_keys), 0: n */
	} cases[] = {{512, 0, 512, 0}, {2048, 0, 2048, 0}, {2048, 512, 2048, 0}, {256, 0, 1, 0}, {1024, 0, 1, 0},
	             {560, 0, 1, 1024}};
	for (C cs : cases) {
		int64_t n = cs.n, window = cs.window, nq = cs.nq, calls = nq == 1 ? 200 : 20, cap = cs.cap ? cs.cap : n;
		int64_t nb = n / block;
		Pair K = in(randf((size_t)(nb * block * ldk))), V = in(randf((size_t)(nb * block * ldk)));
		std::vector<int32_t> seq_ent{0, (int32_t)nb}, blk, pos, len, qpos, qseq;
		for (int64_t b = 0; b < nb; b++)
			blk.push_back((int32_t)b), pos.push_back((int32_t)(b * block)), len.push_back((int32_t)block);
		for (int64_t q = n - nq; q < n; q++)
			qpos.push_back((int32_t)q), qseq.push_back(0);
		Pair Q = in(randf((size_t)(nq * hq * d))), O = out((size_t)(nq * hq * d * 4));
		Pair QP = in(qpos), QS = in(qseq), SE = in(seq_ent), EB = in(blk), EP = in(pos), EL = in(len);
		vd_attn a;
		memset(&a, 0, sizeof a);
		a.out = T(O, true, VD_F32, nq, hq * d);
		a.q = T(Q, true, VD_F32, nq, hq * d);
		a.k = T(K, true, VD_F32, nb * block, ldk);
		a.v = T(V, true, VD_F32, nb * block, ldk);
		a.qpos = T(QP, true, VD_I32, 1, nq);
		a.qseq = T(QS, true, VD_I32, 1, nq);
		a.seq_ent = T(SE, true, VD_I32, 1, 2);
		a.ent_blk = T(EB, true, VD_I32, 1, nb);
		a.ent_pos = T(EP, true, VD_I32, 1, nb);
		a.ent_len = T(EL, true, VD_I32, 1, nb);
		a.hq = hq, a.hkv = hkv, a.d = d, a.block = block, a.window = window, a.max_keys = cap;
		a.scale = 1.0f / 16.0f;
		/* a decode step's query each way a few queries take (the
		 * environment's for a prefill) */
		struct W {
			const char *one, *dec, *gh, *name;
		} ways[] = {{nullptr, nullptr, nullptr, "env"},
		            {"1", "1", "1", "one"},
		            {"0", "1", "1", "dec"},
		            {"0", "1", "4", "dec-group"},
		            {"0", "0", "1", "parts"}};
		for (W way : ways) {
			if (nq == 1 && !way.one)
				continue;
			if (nq > 1 && way.one)
				break;
			if (way.one)
				setenv("VERDICT_ATTN_ONE", way.one, 1), setenv("VERDICT_ATTN_DEC", way.dec, 1),
				    setenv("VERDICT_ATTN_DEC_GH", way.gh, 1);
			for (int i = 0; i < 3; i++)
				GPU->op.attention(GS, &a);
			int rc = GPU->stream.sync(GS);
			auto t0 = std::chrono::steady_clock::now();
			for (int64_t i = 0; i < calls; i++)
				GPU->op.attention(GS, &a);
			rc = rc ? rc : GPU->stream.sync(GS);
			double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
			            (double)calls;
			const char *e = getenv("VERDICT_ATTN_TILE");
			printf("attention bench %s keys=%lld cap=%lld queries=%lld window=%lld tiles=%s way=%s: %.1f us a call "
			       "(sync %d)\n",
			       nq == 1 ? "decode" : "prefill", (long long)n, (long long)cap, (long long)nq, (long long)window,
			       e ? e : "unset", way.name, us, rc);
			if (rc)
				failures++;
		}
		free_all();
	}
}

int main(int argc, char **argv)
{
	/* -steps: the layer steps alone, at small shapes (the host emulation);
	 * -q4: the q4 products and the sparse MLP, at small shapes (the same) */
	bool steps = argc > 1 && strcmp(argv[1], "-steps") == 0, q4 = argc > 1 && strcmp(argv[1], "-q4") == 0;
	bool attn = argc > 1 && strcmp(argv[1], "-attn") == 0; /* -attn: paged attention, causal and with key limits, small */
	bool attn_all = argc > 1 && strcmp(argv[1], "-attn-all") == 0; /* -attn-all: the same at the full run's shapes */
	bool linears = argc > 1 && strcmp(argv[1], "-linears") == 0; /* -linears: grouped products, small */
	bool abench = argc > 1 && strcmp(argv[1], "-attn-bench") == 0;
	setenv("VERDICT_PREFETCH", "1", 0);   /* prefetch, off by default, is checked */
	/* the few queries' one launch, off by default, is checked, and the
	 * prefill's attention tiles wherever the shape allows (by default
	 * not for many short sequences) */
	setenv("VERDICT_ATTN_ONE", "1", 0);
	setenv("VERDICT_ATTN_TILE", "1", 0);
	cudaDeviceProp prop = check_open("ops_check", 12345, 44);
	if (steps || q4 || attn || attn_all || linears || abench) {
		if (attn_all)
			check_attention(false);
		else if (abench)
			bench_attention();
		else if (steps)
			check_layer_steps(true);
		else if (linears)
			check_linears(true);
		else if (attn)
			check_attention(true);
		else
			check_linear(true), check_sparse_mlp(true), check_prefetch(true);
		printf("ops_check %s: %d checks, %d failure(s)\n", argv[1], checks, failures);
		return failures ? 1 : 0;
	}
	printf("ops_check: %s (sm_%d%d), CPU reference kernels set %d\n", prop.name, prop.major, prop.minor, vk_simd_active());
	check_linear(false);
	check_linear_alone();
	check_router();
	check_sparse_mlp(false);
	check_rows();
	check_ew();
	check_rope_altup();
	check_attention(false);
	check_memory();
	check_sample();
	check_loop();
	check_layer_steps(false);
	check_linears(false);
	check_prefetch(false);
	/* A bad call sets the sticky error that sync returns. */
	{
		Pair X = in(randf(64)), Y = out(64 * 4);
		vd_tensor w = T(X, true, 99, 8, 8);
		GPU->op.linear(GS, T(Y, true, VD_F32, 1, 8), T(X, true, VD_F32, 1, 8), w);
		int rc1 = GPU->stream.sync(GS), rc2 = GPU->stream.sync(GS);
		verdict(rc1 && rc1 == rc2, "%-44s sync -> %d, then %d", "sticky error (bad dtype)", rc1, rc2);
		free_all();
	}
	printf("ops_check: %d checks, %d failure(s)\n", checks, failures);
	return failures ? 1 : 0;
}
