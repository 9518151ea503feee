/*
 * catalog_check.cu: checks the CUDA backend's catalog step against the CPU
 * backend's (cpu_catalog.c, itself checked against engine/catalog's State
 * by the Go tests), prints a line a check and exits 1 on any failure (2
 * when no GPU). Built by build/cuda.sh with the CPU backend's C sources.
 *
 *   walks      random tries (small: constant memory; large: global memory),
 *              every head type (f32, bf16, q4), both no-repeat forms
 *              (counts, mask), batches of 1, 2, 7, 32 and 64 sequences
 *              with random k: the two backends run in lock step on exact
 *              data (small integers: every dot product exact, so ties are
 *              common and both sides' logits are the same numbers) and
 *              every field of every walk, the legal sets, logits, chosen
 *              tokens, emitted entries, banned sets and live counts must
 *              be identical after every step; at the end every walk has
 *              emitted exactly k distinct entries;
 *   dense      random float data: each backend's sparse logits equal its
 *              own dense head (linear, then the soft-cap) at the legal
 *              tokens bit for bit and its winner is the dense argmax over
 *              the legal set; the GPU's logits are the CPU's to 2e-5;
 *   broken     a planted broken trie (counts and masks that lie) raises
 *              VD_CAT_EEMPTY at the same step and node on both; malformed
 *              tries are refused at bind time on both;
 *   switch     grammars switched between steps (constant to constant,
 *              constant to global, a freed one replaced), a captured graph
 *              of one grammar replayed after another was bound: no walk
 *              reads a stale trie (lock step with the CPU), re-binds
 *              counted;
 *   determinism  one configuration run twice: identical bits.
 */
#include "check_common.cuh"
#include "../catalog_walk.h"

#include <map>
#include <set>

int cat_cuda_step(cudaStream_t st, vd_gram *g, const vd_cat_step *c);
int cat_cuda_resident(const vd_gram *g);
long cat_cuda_stale(const vd_gram *g);
long cat_cuda_rebinds(void);

/* CATALOG_CHECK_QUICK=1: fewer batch sizes and steps (a slow emulation). */
static bool quick = getenv("CATALOG_CHECK_QUICK") != nullptr;
static std::vector<int64_t> batches()
{
	if (quick)
		return {1, 2, 7};
	return {1, 2, 7, 32, 64};
}

/* gpu_bytes: b's device side. */
static std::vector<uint8_t> gpu_bytes(const Pair &b)
{
	std::vector<uint8_t> v(b.n);
	cudaMemcpy(v.data(), b.g, b.n, cudaMemcpyDeviceToHost);
	return v;
}

/* ---- tries, built as engine/catalog's Compile builds them ---- */

static const int32_t SEP = 1, STOP = 2;

struct Trie {
	std::vector<std::vector<int32_t>> names;
	std::vector<int32_t> first, token, child, ends, count, pfirst, path;
	std::vector<uint64_t> mask;
	int words = 0;
	vd_grammar g() const
	{
		vd_grammar x;
		x.nodes = (int32_t)ends.size();
		x.edges = (int32_t)token.size();
		x.entries = (int32_t)names.size();
		x.words = words;
		x.first = first.data();
		x.token = token.data();
		x.child = child.data();
		x.ends = ends.data();
		x.count = count.data();
		x.mask = mask.data();
		x.path_first = pfirst.data();
		x.path = path.data();
		return x;
	}
	size_t image_bytes() const
	{
		vd_grammar x = g();
		return (size_t)vd_gram_layout_of(&x).total * 4;
	}
};

static Trie build(const std::vector<std::vector<int32_t>> &names)
{
	Trie t;
	t.names = names;
	std::vector<std::vector<std::pair<int32_t, int32_t>>> edges(1);
	t.ends.push_back(-1);
	for (size_t i = 0; i < names.size(); i++) {
		int32_t cur = 0;
		for (int32_t tok : names[i]) {
			int32_t next = -1;
			for (auto &e : edges[(size_t)cur])
				if (e.first == tok)
					next = e.second;
			if (next < 0) {
				next = (int32_t)edges.size();
				edges.emplace_back();
				t.ends.push_back(-1);
				edges[(size_t)cur].push_back({tok, next});
			}
			cur = next;
		}
		t.ends[(size_t)cur] = (int32_t)i;
	}
	t.first.push_back(0);
	for (size_t n = 0; n < edges.size(); n++) {
		if (t.ends[n] >= 0) {
			edges[n].push_back({SEP, VD_CHILD_SEP});
			edges[n].push_back({STOP, VD_CHILD_STOP});
		}
		std::sort(edges[n].begin(), edges[n].end());
		for (auto &e : edges[n]) {
			t.token.push_back(e.first);
			t.child.push_back(e.second);
		}
		t.first.push_back((int32_t)t.token.size());
	}
	size_t E = t.token.size();
	t.words = (int)((names.size() + 63) / 64);
	t.count.assign(E, 0);
	t.mask.assign(E * (size_t)t.words, 0);
	t.pfirst.push_back(0);
	for (size_t i = 0; i < names.size(); i++) {
		int32_t cur = 0;
		for (int32_t tok : names[i]) {
			int32_t x = -1;
			for (int32_t e = t.first[(size_t)cur]; e < t.first[(size_t)cur + 1]; e++)
				if (t.token[(size_t)e] == tok)
					x = e;
			t.count[(size_t)x]++;
			t.mask[(size_t)x * t.words + i / 64] |= 1ull << (i % 64);
			t.path.push_back(x);
			cur = t.child[(size_t)x];
		}
		t.pfirst.push_back((int32_t)t.path.size());
	}
	return t;
}

/* random_trie: entries distinct names of lo..hi tokens from a pool of
 * pool tokens in [3, vocab). */
static Trie random_trie(int entries, int lo, int hi, int pool, int vocab)
{
	std::vector<int32_t> toks;
	std::set<int32_t> seen;
	while ((int)toks.size() < pool) {
		int32_t t = 3 + (int32_t)(rng() % (uint64_t)(vocab - 3));
		if (seen.insert(t).second)
			toks.push_back(t);
	}
	std::set<std::vector<int32_t>> have;
	std::vector<std::vector<int32_t>> names;
	while ((int)names.size() < entries) {
		int len = lo + (int)(rng() % (uint64_t)(hi - lo + 1));
		std::vector<int32_t> nm;
		for (int j = 0; j < len; j++)
			nm.push_back(toks[rng() % toks.size()]);
		if (have.insert(nm).second)
			names.push_back(nm);
	}
	return build(names);
}

/* ---- heads and hidden rows ---- */

static const int64_t V = 1000, D = 256;

struct Head {
	int dt;
	Pair w, so;
	vd_tensor t(bool g) const
	{
		vd_tensor x = T(w, g, dt, V, D);
		if (dt == VD_Q4) {
			x.aux = g ? so.g : so.c;
			x.group = 64;
		}
		return x;
	}
};

/* make_head: exact (weights k/8, k in -8..8, or q4 with scale 1/8 and
 * offset -1: every product and sum exact) or random. Rows 10 and 11 copy
 * rows 20 and 21: planted ties between tokens. */
static Head make_head(int dt, bool exact)
{
	Head h;
	h.dt = dt;
	std::uniform_real_distribution<float> u(-0.1f, 0.1f);
	std::vector<float> f((size_t)(V * D));
	for (auto &x : f)
		x = exact ? (float)((int)(rng() % 17) - 8) / 8.0f : u(rng);
	for (int64_t c = 0; c < D; c++) {
		f[(size_t)(10 * D + c)] = f[(size_t)(20 * D + c)];
		f[(size_t)(11 * D + c)] = f[(size_t)(21 * D + c)];
	}
	if (dt == VD_F32) {
		h.w = in(f);
	} else if (dt == VD_BF16) {
		std::vector<uint16_t> b(f.size());
		for (size_t i = 0; i < f.size(); i++)
			b[i] = bf16(f[i]);
		h.w = in(b);
	} else {
		std::vector<uint8_t> q((size_t)(V * D / 2));
		for (auto &x : q)
			x = (uint8_t)(rng() & 0xff);
		std::vector<float> so((size_t)(V * (D / 64) * 2));
		std::uniform_real_distribution<float> sc(0.01f, 0.1f), off(-0.8f, 0.0f);
		for (size_t i = 0; i < so.size(); i += 2) {
			so[i] = exact ? 0.125f : sc(rng);
			so[i + 1] = exact ? -1.0f : off(rng);
		}
		for (int64_t r : {10, 11}) {
			memcpy(&q[(size_t)(r * D / 2)], &q[(size_t)((r + 10) * D / 2)], (size_t)(D / 2));
			memcpy(&so[(size_t)(r * (D / 64) * 2)], &so[(size_t)((r + 10) * (D / 64) * 2)], (size_t)(D / 64) * 2 * 4);
		}
		h.w = in(q);
		h.so = in(so);
	}
	return h;
}

static std::vector<float> hidden(int64_t n, bool exact)
{
	std::uniform_real_distribution<float> u(-1.0f, 1.0f);
	std::vector<float> x((size_t)(n * D));
	for (auto &v : x)
		v = exact ? (float)((int)(rng() % 5) - 2) : u(rng);
	return x;
}

/* ---- walks on both sides ---- */

struct Walks {
	int64_t slots, kmax, edges, words;
	bool counts;
	Pair seq, banned, live, emitted, legal, logits, next, k;
};

static Walks walks(const Trie &t, int64_t slots, bool counts)
{
	Walks w;
	w.slots = slots;
	w.kmax = (int64_t)t.names.size();
	w.edges = (int64_t)t.token.size();
	w.words = t.words;
	w.counts = counts;
	w.seq = zeros((size_t)(slots * VD_SEQ_FIELDS * 4));
	w.banned = zeros((size_t)(slots * 2 * w.words * 4));
	w.live = zeros((size_t)(slots * w.edges * 4));
	w.emitted = zeros((size_t)(slots * w.kmax * 4));
	w.legal = zeros((size_t)(slots * 2 * VD_CAT_MAX_EDGES * 4));
	w.logits = zeros((size_t)(slots * VD_CAT_MAX_EDGES * 4));
	w.next = zeros((size_t)(slots * 4));
	w.k = zeros((size_t)(slots * 4));
	return w;
}

static vd_cat_step desc(const Walks &w, bool g, int64_t n, const Pair *h, const Head *hd, float cap)
{
	vd_cat_step c;
	memset(&c, 0, sizeof c);
	if (h)
		c.h = T(*h, g, VD_F32, n, D);
	if (hd)
		c.w = hd->t(g);
	c.softcap = cap;
	c.counts = w.counts;
	c.n = n;
	c.hrow = NIL();
	c.slot = NIL();
	c.k = T(w.k, g, VD_I32, 1, n);
	c.seq = T(w.seq, g, VD_I32, w.slots, VD_SEQ_FIELDS);
	c.banned = T(w.banned, g, VD_I32, w.slots, 2 * w.words);
	c.live = w.counts ? T(w.live, g, VD_I32, w.slots, w.edges) : NIL();
	c.emitted = T(w.emitted, g, VD_I32, w.slots, w.kmax);
	c.legal = T(w.legal, g, VD_I32, w.slots, 2 * VD_CAT_MAX_EDGES);
	c.logits = T(w.logits, g, VD_F32, w.slots, VD_CAT_MAX_EDGES);
	c.next = T(w.next, g, VD_I32, 1, w.slots);
	return c;
}

/* same_walks compares every buffer of the walks, GPU against CPU, and
 * says which differs first. */
static std::string same_walks(const Walks &w)
{
	const Pair *bs[] = {&w.seq, &w.banned, &w.live, &w.emitted, &w.legal, &w.logits, &w.next};
	const char *nm[] = {"walk fields", "banned sets", "live counts", "emitted", "legal sets", "logits", "chosen tokens"};
	for (int i = 0; i < 7; i++) {
		std::vector<uint8_t> g = gpu_bytes(*bs[i]);
		if (memcmp(g.data(), bs[i]->c, bs[i]->n) != 0)
			return nm[i];
	}
	return "";
}

static int32_t field(const Walks &w, int64_t slot, int f) { return ((const int32_t *)w.seq.c)[slot * VD_SEQ_FIELDS + f]; }

/* A grammar bound on both backends. */
struct Bound {
	vd_gram *c = nullptr, *g = nullptr;
};
static Bound bind(const Trie &t)
{
	Bound b;
	vd_grammar x = t.g();
	int rc = CPU->op.grammar_bind(CPU, &x, &b.c), rg = GPU->op.grammar_bind(GPU, &x, &b.g);
	if (rc || rg) {
		fprintf(stderr, "catalog_check: bind failed (cpu %d, gpu %d)\n", rc, rg);
		exit(3);
	}
	return b;
}
static void unbind(Bound &b)
{
	CPU->op.grammar_free(CPU, b.c);
	GPU->op.grammar_free(GPU, b.g);
}

/* init_both starts n walks with random k in 1..kcap on both sides. */
static void init_both(Walks &w, Bound &b, int64_t n, int kcap)
{
	std::vector<int32_t> ks((size_t)n);
	for (auto &k : ks)
		k = 1 + (int32_t)(rng() % (uint64_t)std::min<int64_t>(kcap, w.kmax));
	put(w.k, ks.data(), ks.size() * 4);
	vd_cat_step cc = desc(w, false, n, nullptr, nullptr, 0), cg = desc(w, true, n, nullptr, nullptr, 0);
	CPU->op.catalog_init(CS, b.c, &cc);
	GPU->op.catalog_init(GS, b.g, &cg);
	GPU->stream.sync(GS);
}

/* step_both runs one step on both sides with fresh hidden rows; returns
 * "" or what differs, or the GPU's error. */
static std::string step_both(Walks &w, Bound &b, const Head &hd, int64_t n, float cap, bool exact, Pair &h)
{
	std::vector<float> x = hidden(n, exact);
	put(h, x.data(), x.size() * 4);
	vd_cat_step cc = desc(w, false, n, &h, &hd, cap), cg = desc(w, true, n, &h, &hd, cap);
	CPU->op.catalog_step(CS, b.c, &cc);
	GPU->op.catalog_step(GS, b.g, &cg);
	if (int rc = GPU->stream.sync(GS))
		return "GPU error " + std::to_string(rc);
	return same_walks(w);
}

static bool all_stopped(const Walks &w, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		if (!field(w, i, VD_SEQ_DONE) && !field(w, i, VD_SEQ_ERR))
			return false;
	return true;
}

/* exactly_k: every walk done, without error, with k distinct entries. */
static bool exactly_k(const Walks &w, int64_t n)
{
	for (int64_t i = 0; i < n; i++) {
		if (!field(w, i, VD_SEQ_DONE) || field(w, i, VD_SEQ_ERR) || field(w, i, VD_SEQ_NEMIT) != field(w, i, VD_SEQ_K))
			return false;
		const int32_t *em = (const int32_t *)w.emitted.c + i * w.kmax;
		std::set<int32_t> s(em, em + field(w, i, VD_SEQ_NEMIT));
		if ((int)s.size() != field(w, i, VD_SEQ_NEMIT))
			return false;
	}
	return true;
}

/* lockstep decodes n walks on both sides to the end; returns the steps
 * run, or -1 after printing the first difference. */
static int lockstep(Walks &w, Bound &b, const Head &hd, int64_t n, float cap, bool exact, const std::string &name)
{
	Pair h = zeros((size_t)(n * D * 4));
	int steps = 0;
	for (; steps < 200 && !all_stopped(w, n); steps++) {
		std::string d = step_both(w, b, hd, n, cap, exact, h);
		if (!d.empty()) {
			verdict(false, "%s: step %d: %s differ", name.c_str(), steps, d.c_str());
			return -1;
		}
	}
	return steps;
}

static void check_walks()
{
	struct TS {
		const char *name;
		int entries, lo, hi, pool;
		bool cnst;
	} tries[] = {{"small", 40, 1, 4, 12, true}, {"large", 700, 2, 6, 150, false}};
	for (TS ts : tries) {
		Trie t = random_trie(quick && !ts.cnst ? 300 : ts.entries, ts.lo, ts.hi, ts.pool, (int)V);
		Bound b = bind(t);
		verdict(cat_cuda_resident(b.g) == (int)ts.cnst, "%s trie: %zu nodes, %zu edges, %zu-byte image: %s memory",
		        ts.name, t.ends.size(), t.token.size(), t.image_bytes(), cat_cuda_resident(b.g) ? "constant" : "global");
		for (int dt : {VD_F32, VD_BF16, VD_Q4}) {
			Head hd = make_head(dt, true);
			for (int counts : {1, 0})
				for (int64_t n : batches()) {
					float cap = n % 2 ? 30.0f : 0.0f;
					Walks w = walks(t, n, counts);
					init_both(w, b, n, 6);
					char nm[128];
					snprintf(nm, sizeof nm, "walks %s %s %s n=%lld cap=%g", ts.name, dtname(dt), counts ? "counts" : "mask",
					         (long long)n, cap);
					int steps = lockstep(w, b, hd, n, cap, true, nm);
					if (steps >= 0)
						verdict(exactly_k(w, n), "%s: %d steps identical, exactly k distinct", nm, steps);
				}
			free_all();
		}
		unbind(b);
	}
}

/* check_dense: on random float data, each backend's sparse logits are its
 * own dense head's bit for bit and its winner the dense argmax; the GPU's
 * logits are the CPU's to 2e-5. The sides walk on their own. */
static void check_dense()
{
	Trie t = random_trie(60, 1, 5, 40, (int)V);
	Bound b = bind(t);
	for (int dt : {VD_F32, VD_BF16, VD_Q4}) {
		Head hd = make_head(dt, false);
		for (int64_t n : quick ? std::vector<int64_t>{1, 7} : std::vector<int64_t>{1, 7, 64}) {
			float cap = 30.0f;
			Walks w = walks(t, n, 0);
			init_both(w, b, n, 4);
			Pair h = zeros((size_t)(n * D * 4)), dense = zeros((size_t)(n * V * 4));
			size_t bad_bits[2] = {0, 0}, bad_win[2] = {0, 0}, cand = 0;
			double maxrel = 0;
			for (int s = 0; s < 12; s++) {
				std::vector<float> x = hidden(n, false);
				put(h, x.data(), x.size() * 4);
				for (int side = 0; side < 2; side++) {
					bool g = side == 1;
					vd_backend *be = g ? GPU : CPU;
					vd_stream *st = g ? GS : CS;
					std::vector<uint8_t> pre = g ? gpu_bytes(w.seq) : std::vector<uint8_t>((uint8_t *)w.seq.c, (uint8_t *)w.seq.c + w.seq.n);
					vd_cat_step c = desc(w, g, n, &h, &hd, cap);
					be->op.catalog_step(st, g ? b.g : b.c, &c);
					be->op.linear(st, T(dense, g, VD_F32, n, V), T(h, g, VD_F32, n, D), hd.t(g));
					be->op.ew(st, VD_EW_SOFTCAP, T(dense, g, VD_F32, n, V), T(dense, g, VD_F32, n, V), NIL(), cap);
					be->stream.sync(st);
					std::vector<uint8_t> sq = g ? gpu_bytes(w.seq) : std::vector<uint8_t>((uint8_t *)w.seq.c, (uint8_t *)w.seq.c + w.seq.n);
					std::vector<uint8_t> lg = g ? gpu_bytes(w.legal) : std::vector<uint8_t>((uint8_t *)w.legal.c, (uint8_t *)w.legal.c + w.legal.n);
					std::vector<uint8_t> lo = g ? gpu_bytes(w.logits) : std::vector<uint8_t>((uint8_t *)w.logits.c, (uint8_t *)w.logits.c + w.logits.n);
					std::vector<uint8_t> dn = g ? gpu_bytes(dense) : std::vector<uint8_t>((uint8_t *)dense.c, (uint8_t *)dense.c + dense.n);
					const int32_t *sqi = (const int32_t *)sq.data(), *lgi = (const int32_t *)lg.data();
					const float *lof = (const float *)lo.data(), *dnf = (const float *)dn.data();
					for (int64_t i = 0; i < n; i++) {
						const int32_t *f = sqi + i * VD_SEQ_FIELDS, *f0 = (const int32_t *)pre.data() + i * VD_SEQ_FIELDS;
						if (f[VD_SEQ_ERR] || f0[VD_SEQ_DONE])
							continue; /* stopped before this step */
						int nl = f[VD_SEQ_NLEGAL], best = 0;
						for (int j = 0; j < nl; j++) {
							float dv = dnf[i * V + lgi[i * 2 * VD_CAT_MAX_EDGES + j]], sv = lof[i * VD_CAT_MAX_EDGES + j];
							bad_bits[side] += memcmp(&dv, &sv, 4) != 0;
							if (dv > dnf[i * V + lgi[i * 2 * VD_CAT_MAX_EDGES + best]])
								best = j;
							cand += side == 0;
						}
						bad_win[side] += nl > 0 && f[VD_SEQ_BEST] != best;
					}
				}
				/* GPU against CPU: the same walks while the winners agree. */
				const float *cl = (const float *)w.logits.c;
				std::vector<uint8_t> gl = gpu_bytes(w.logits);
				const float *glf = (const float *)gl.data();
				double mx = 0, me = 0; /* over the step's logits, as ops_check */
				for (int64_t i = 0; i < n; i++) {
					int nl = field(w, i, VD_SEQ_NLEGAL);
					for (int j = 0; j < nl; j++) {
						mx = std::max(mx, (double)fabsf(cl[i * VD_CAT_MAX_EDGES + j]));
						me = std::max(me, (double)fabsf(cl[i * VD_CAT_MAX_EDGES + j] - glf[i * VD_CAT_MAX_EDGES + j]));
					}
				}
				if (mx > 0)
					maxrel = std::max(maxrel, me / mx);
				if (!same_walks(w).empty() && same_walks(w) != "logits")
					break; /* a near tie sent the sides apart: stop comparing */
			}
			verdict(bad_bits[0] == 0 && bad_win[0] == 0, "dense cpu %s n=%lld: %zu candidates, sparse = dense (%zu differ), winners (%zu differ)",
			        dtname(dt), (long long)n, cand, bad_bits[0], bad_win[0]);
			verdict(bad_bits[1] == 0 && bad_win[1] == 0, "dense gpu %s n=%lld: sparse = dense (%zu differ), winners (%zu differ)", dtname(dt),
			        (long long)n, bad_bits[1], bad_win[1]);
			verdict(maxrel <= 2e-5, "dense %s n=%lld: gpu logits vs cpu max rel %.3e (tol 2e-5)", dtname(dt), (long long)n, maxrel);
		}
		free_all(); /* the head's too */
	}
	unbind(b);
}

static void check_broken()
{
	Trie t = random_trie(40, 2, 4, 12, (int)V);
	/* The lie: every token edge below the root claims no live entry. */
	Trie bad = t;
	for (size_t e = (size_t)bad.first[1]; e < bad.token.size(); e++)
		if (bad.child[e] >= 0) {
			bad.count[e] = 0;
			for (int w = 0; w < bad.words; w++)
				bad.mask[e * (size_t)bad.words + (size_t)w] = 0;
		}
	Bound b = bind(bad);
	Head hd = make_head(VD_F32, true);
	for (int counts : {1, 0}) {
		int64_t n = 7;
		Walks w = walks(bad, n, counts);
		init_both(w, b, n, 3);
		int steps = lockstep(w, b, hd, n, 0, true, counts ? "broken counts" : "broken mask");
		int empty = 0, other = 0;
		for (int64_t i = 0; i < n; i++) {
			int e = field(w, i, VD_SEQ_ERR);
			empty += e == VD_CAT_EEMPTY && field(w, i, VD_SEQ_ENODE) > 0;
			other += e != 0 && e != VD_CAT_EEMPTY;
		}
		if (steps >= 0)
			verdict(empty > 0 && other == 0, "broken trie (%s): %d of %lld walks stop with VD_CAT_EEMPTY, same step and node on both",
			        counts ? "counts" : "mask", empty, (long long)n);
	}
	free_all();
	unbind(b);
	/* Refused at bind time: a node of 257 edges, a child out of range. */
	std::vector<std::vector<int32_t>> wide;
	for (int i = 0; i < 257; i++)
		wide.push_back({3 + i});
	Trie w = build(wide);
	Trie oob = t;
	oob.child[(size_t)oob.first[0]] = (int32_t)oob.ends.size();
	for (auto *tr : {&w, &oob}) {
		vd_grammar x = tr->g();
		vd_gram *c = nullptr, *g = nullptr;
		int rc = CPU->op.grammar_bind(CPU, &x, &c), rg = GPU->op.grammar_bind(GPU, &x, &g);
		int want = tr == &w ? VD_CAT_ESHAPE : VD_CAT_ETRIE;
		verdict(rc == want && rg == want && !c && !g, "bind refuses %s: cpu %d, gpu %d (want %d)",
		        tr == &w ? "a node of 257 edges" : "a child out of range", rc, rg, want);
	}
}

/* check_switch: walks of three grammars stepped in turn on one stream,
 * then a freed grammar replaced, then a captured graph replayed after
 * another grammar was bound. */
static void check_switch()
{
	Trie ta = random_trie(30, 1, 4, 10, (int)V), tb = random_trie(30, 1, 4, 10, (int)V);
	Trie tc = random_trie(700, 2, 6, 150, (int)V);
	Bound a = bind(ta), b = bind(tb), c = bind(tc);
	verdict(cat_cuda_resident(a.g) && cat_cuda_resident(b.g) && !cat_cuda_resident(c.g),
	        "switch: a and b in constant memory, c in global");
	Head hd = make_head(VD_Q4, true);
	int64_t n = 7;
	Walks wa = walks(ta, n, 1), wb = walks(tb, n, 0), wc = walks(tc, n, 1);
	init_both(wa, a, n, 5);
	init_both(wb, b, n, 5);
	init_both(wc, c, n, 5);
	Pair h = zeros((size_t)(n * D * 4));
	long r0 = cat_cuda_rebinds();
	int steps = 0;
	std::string diff;
	for (; steps < 60 && diff.empty(); steps++) {
		Walks *ws[] = {&wa, &wb, &wc};
		Bound *bs[] = {&a, &b, &c};
		for (int j = 0; j < 3 && diff.empty(); j++)
			if (!all_stopped(*ws[j], n))
				diff = step_both(*ws[j], *bs[j], hd, n, 30.0f, true, h);
		if (all_stopped(wa, n) && all_stopped(wb, n) && all_stopped(wc, n))
			break;
	}
	long rebinds = cat_cuda_rebinds() - r0;
	verdict(diff.empty() && exactly_k(wa, n) && exactly_k(wb, n) && exactly_k(wc, n),
	        "switch a, b, c every step: %d rounds identical to the cpu (%s), exactly k", steps, diff.empty() ? "-" : diff.c_str());
	verdict(rebinds >= 2 && cat_cuda_stale(a.g) == 0 && cat_cuda_stale(b.g) == 0,
	        "switch: %ld re-binds of constant memory, 0 stale launches (a %ld, b %ld)", rebinds, cat_cuda_stale(a.g),
	        cat_cuda_stale(b.g));
	/* A freed grammar replaced by another (the allocator may reuse its
	 * memory and handle). */
	unbind(b);
	Trie td = random_trie(30, 1, 4, 10, (int)V);
	Bound d = bind(td);
	Walks wd = walks(td, n, 0);
	init_both(wd, d, n, 5);
	init_both(wa, a, n, 5);
	diff.clear();
	for (int s = 0; s < 60 && diff.empty() && !(all_stopped(wa, n) && all_stopped(wd, n)); s++) {
		if (!all_stopped(wd, n))
			diff = step_both(wd, d, hd, n, 0, true, h);
		if (diff.empty() && !all_stopped(wa, n))
			diff = step_both(wa, a, hd, n, 0, true, h);
	}
	verdict(diff.empty() && exactly_k(wd, n) && exactly_k(wa, n), "switch: b freed, d bound in its place: identical (%s)",
	        diff.empty() ? "-" : diff.c_str());
	/* A graph capturing a step of a, replayed after d owns constant memory. */
	init_both(wa, a, n, 5);
	init_both(wd, d, n, 5);
	cudaStream_t cs;
	cudaStreamCreate(&cs);
	std::vector<float> x = hidden(n, true);
	put(h, x.data(), x.size() * 4);
	vd_cat_step ga = desc(wa, true, n, &h, &hd, 0);
	cudaGraph_t graph = nullptr;
	cudaGraphExec_t exec = nullptr;
	int rc1 = (int)cudaStreamBeginCapture(cs, cudaStreamCaptureModeThreadLocal);
	int rc2 = cat_cuda_step(cs, a.g, &ga);
	int rc3 = (int)cudaStreamEndCapture(cs, &graph);
	int rc4 = (int)cudaGraphInstantiate(&exec, graph, 0);
	verdict(!rc1 && !rc2 && !rc3 && !rc4, "graph: a step of a captured (%d %d %d %d)", rc1, rc2, rc3, rc4);
	bool same = rc1 == 0 && rc2 == 0 && rc3 == 0 && rc4 == 0;
	long stale0 = cat_cuda_stale(d.g);
	for (int s = 0; s < 30 && same && !(all_stopped(wa, n) && all_stopped(wd, n)); s++) {
		/* d steps on the backend's stream (owning constant memory), then
		 * the graph steps a on its own stream: the replay re-binds. */
		if (!all_stopped(wd, n) && !step_both(wd, d, hd, n, 0, true, h).empty())
			same = false;
		if (all_stopped(wa, n))
			continue;
		std::vector<float> xa = hidden(n, true);
		put(h, xa.data(), xa.size() * 4);
		vd_cat_step ca = desc(wa, false, n, &h, &hd, 0);
		CPU->op.catalog_step(CS, a.c, &ca);
		if (cudaGraphLaunch(exec, cs) != cudaSuccess || cudaStreamSynchronize(cs) != cudaSuccess || !same_walks(wa).empty())
			same = false;
	}
	verdict(same && exactly_k(wa, n) && exactly_k(wd, n),
	        "graph: replays of a between steps of d identical to the cpu; d's stale launches read global memory (%ld)",
	        cat_cuda_stale(d.g) - stale0);
	if (exec)
		cudaGraphExecDestroy(exec);
	if (graph)
		cudaGraphDestroy(graph);
	cudaStreamDestroy(cs);
	free_all();
	unbind(a);
	unbind(c);
	unbind(d);
}

/* check_determinism: the same decode on the GPU twice, bit for bit. */
static void check_determinism()
{
	Trie t = random_trie(100, 1, 5, 30, (int)V);
	Bound b = bind(t);
	int64_t n = quick ? 7 : 32;
	std::vector<std::vector<uint8_t>> runs;
	std::vector<size_t> marks; /* where each step's buffers start */
	for (int r = 0; r < 2; r++) {
		std::mt19937_64 keep = rng;
		rng.seed(777);
		Head hd = make_head(VD_BF16, false); /* free_bufs frees it with the run */
		Walks w = walks(t, n, 0);
		std::vector<int32_t> ks((size_t)n, 3);
		put(w.k, ks.data(), ks.size() * 4);
		vd_cat_step ci = desc(w, true, n, nullptr, nullptr, 0);
		GPU->op.catalog_init(GS, b.g, &ci);
		Pair h = zeros((size_t)(n * D * 4));
		std::vector<uint8_t> all;
		marks.clear();
		for (int s = 0; s < 40; s++) {
			std::vector<float> x = hidden(n, false);
			put(h, x.data(), x.size() * 4);
			vd_cat_step c = desc(w, true, n, &h, &hd, 30.0f);
			GPU->op.catalog_step(GS, b.g, &c);
			GPU->stream.sync(GS);
			for (const Pair *bb : {&w.seq, &w.legal, &w.logits, &w.next, &w.emitted}) {
				marks.push_back(all.size());
				std::vector<uint8_t> v = gpu_bytes(*bb);
				all.insert(all.end(), v.begin(), v.end());
			}
		}
		runs.push_back(all);
		free_all();
		rng = keep;
	}
	size_t at = 0;
	while (at < runs[0].size() && runs[0][at] == runs[1][at])
		at++;
	if (at < runs[0].size()) {
		size_t m = 0;
		while (m + 1 < marks.size() && marks[m + 1] <= at)
			m++;
		const char *nm[] = {"walk fields", "legal sets", "logits", "chosen tokens", "emitted"};
		printf("determinism: first difference at step %zu, %s, byte %zu\n", m / 5, nm[m % 5], at - marks[m]);
	}
	verdict(runs[0] == runs[1], "determinism: %lld walks x 40 steps twice, %zu bytes of state and logits identical", (long long)n,
	        runs[0].size());
	unbind(b);
}

int main()
{
	cudaDeviceProp prop = check_open("catalog_check", 20261201, 86);
	printf("catalog_check: %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
	check_walks();
	check_dense();
	check_broken();
	check_switch();
	check_determinism();
	printf("catalog_check: %d checks, %d failure(s)\n", checks, failures);
	return failures ? 1 : 0;
}
