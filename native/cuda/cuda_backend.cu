/*
 * cuda_backend.cu: Verdict's CUDA backend, the table of backend.h over
 * device memory, built as libverdict_cuda.so (build/cuda.sh) and loaded at
 * run time by native.Open("cuda"). This file holds the table and its core:
 * memory, streams and transfers, profiling, scratch, graphs and loops, the
 * catalog's and the towers' entries (catalog.cu, tower.cu) and the
 * device's opening; the operations are in a file a family (linear.cu and
 * q4_linear.cu, sparse_mlp.cu, norm.cu, elementwise.cu, rope.cu,
 * attention.cu, gather.cu, sampling.cu, limits.cu), their shared internals
 * in common.cuh.
 *
 * Memory is device memory (cudaMalloc); bind copies the host weights to
 * the device once, unbind frees them. A stream is a cudaStream_t; every
 * operation is enqueued on it. Failures (a launch, a transfer, an op over a
 * dtype it does not take, attention over more keys than max_keys) set a
 * sticky error that sync returns: a cudaError_t value, or one of the
 * VDC_E* codes (common.cuh).
 *
 * Exactness: float32 arithmetic, compiled with -fmad=false so that only the
 * fused multiply-adds written as fmaf are fused; exp, tanh and GELU are the
 * CPU kernels' (cpu_math_impl.h) operation for operation. Dot products are
 * summed per warp lane in column order, then by a fixed shuffle tree: a
 * different order from the CPU's 16-lane blocks, so results agree with the
 * CPU backend to float32 rounding, not bit for bit. Every output element is
 * computed by one thread or warp in an order fixed by the shapes alone, so
 * a row's result never depends on the batch it sits in or on the launch.
 */
#include "common.cuh"
#include "tower.h"

/* ---- profiling (VERDICT_CUDA_PROFILE=1) ----
 *
 * Each operation records an event before and after its work; sync sums
 * the device time between them per operation, with the host time the call
 * took (its launch cost). The table goes to stderr at exit. Recording a
 * graph records no events: a replay counts as one graph_run. */
struct prof_total {
	long calls = 0;
	double dev_ms = 0, host_us = 0;
};

static std::mutex prof_mu;
static std::map<std::string, prof_total> *prof_tab;
static double prof_sync_us;
static long prof_syncs;

/* VERDICT_CUDA_PROFILE names the file the table is written to (rewritten
 * at most every 0.2 s and when a stream is freed: a Go program's exit runs
 * no C exit handlers); "1" or "-" is stderr, at those times too. */
static const char *prof_path()
{
	static const char *p = (const char *)1;
	if (p == (const char *)1) {
		const char *e = getenv("VERDICT_CUDA_PROFILE");
		p = e && *e && strcmp(e, "0") != 0 ? e : nullptr;
	}
	return p;
}

bool profiling() { return prof_path() != nullptr; }

bool op_skipped(const char *name)
{
	static const char *e = getenv("VERDICT_CUDA_SKIP");
	return e && *e && name_listed(e, name);
}

static void prof_print_locked(FILE *f);

static void prof_write()
{
	const char *p = prof_path();
	bool err = strcmp(p, "1") == 0 || strcmp(p, "-") == 0;
	FILE *f = err ? stderr : fopen(p, "w");
	if (!f)
		return;
	prof_print_locked(f);
	if (!err)
		fclose(f);
}

static void prof_print_locked(FILE *f)
{
	if (!prof_tab)
		return;
	std::vector<std::pair<std::string, prof_total>> v(prof_tab->begin(), prof_tab->end());
	std::sort(v.begin(), v.end(), [](const auto &x, const auto &y) { return x.second.dev_ms > y.second.dev_ms; });
	double dev = 0, host = 0;
	long calls = 0;
	for (auto &e : v)
		dev += e.second.dev_ms, host += e.second.host_us, calls += e.second.calls;
	fprintf(f, "cuda profile: %ld calls, device %.3f ms, host %.3f ms in calls, %ld syncs waiting %.3f ms\n",
	        calls, dev, host / 1e3, prof_syncs, prof_sync_us / 1e3);
	fprintf(f, "%-22s %9s %12s %8s %12s %8s\n", "op", "calls", "device ms", "dev %", "us/call dev", "us host");
	for (auto &e : v)
		fprintf(f, "%-22s %9ld %12.3f %8.1f %12.2f %8.2f\n", e.first.c_str(), e.second.calls,
		        e.second.dev_ms, dev > 0 ? 100 * e.second.dev_ms / dev : 0.0,
		        1e3 * e.second.dev_ms / (double)e.second.calls, e.second.host_us / (double)e.second.calls);
}

cudaEvent_t prof_event(vd_stream *s)
{
	if (!s->events.empty()) {
		cudaEvent_t e = s->events.back();
		s->events.pop_back();
		return e;
	}
	cudaEvent_t e = nullptr;
	if (cudaEventCreate(&e) != cudaSuccess) {
		cudaGetLastError();
		return nullptr;
	}
	return e;
}

/* prof_flush sums a synchronised stream's records. */
static void prof_flush(vd_stream *s, double wait_us)
{
	if (!profiling())
		return;
	std::lock_guard<std::mutex> l(prof_mu);
	if (!prof_tab)
		prof_tab = new std::map<std::string, prof_total>();
	prof_syncs++;
	prof_sync_us += wait_us > 0 ? wait_us : 0;
	for (auto &r : s->pend) {
		float ms = 0;
		if (cudaEventElapsedTime(&ms, r.a, r.b) != cudaSuccess) {
			cudaGetLastError();
			ms = 0;
		}
		prof_total &t = (*prof_tab)[r.name];
		t.calls++;
		t.dev_ms += ms;
		t.host_us += r.host_us;
		s->events.push_back(r.a);
		s->events.push_back(r.b);
	}
	s->pend.clear();
	static std::chrono::steady_clock::time_point last;
	auto now = std::chrono::steady_clock::now();
	if (wait_us < 0 || now - last > std::chrono::milliseconds(200)) {
		last = now;
		prof_write();
	}
}

/* grow_scratch replaces *p (of *n bytes) by a buffer of at least bytes
 * (doubling, at most cap when bytes fits it), keeping the old one until
 * the stream is freed: a recorded graph may hold it. It cannot grow inside
 * a recording (the recording fails; the pass runs directly and grows it). */
bool grow_scratch(vd_stream *s, void **p, size_t *n, size_t bytes, size_t cap)
{
	if (*n >= bytes)
		return true;
	if (s->recording) {
		fail(s, VDC_ESCRATCH);
		return false;
	}
	size_t want = std::max(bytes, std::min(2 * *n, cap));
	void *q = nullptr;
	if (cudaMalloc(&q, want) != cudaSuccess) {
		cudaGetLastError();
		fail(s, VDC_ESCRATCH);
		return false;
	}
	if (*p)
		s->retired.push_back(*p);
	*p = q;
	*n = want;
	return true;
}

void *scratch(vd_stream *s, size_t bytes)
{
	if (!grow_scratch(s, &s->scratch, &s->scratch_n, bytes, (size_t)64 << 20))
		return nullptr;
	return s->scratch;
}

/* ---- the table ---- */

static void *c_alloc(vd_backend *b, size_t bytes)
{
	cudaSetDevice(st_of(b)->device);
	void *p = nullptr;
	if (cudaMalloc(&p, bytes ? bytes : 64) != cudaSuccess) {
		cudaGetLastError();
		return nullptr;
	}
	return p;
}

static void c_release(vd_backend *b, void *p, size_t bytes)
{
	(void)bytes;
	if (!p)
		return;
	cudaSetDevice(st_of(b)->device);
	cudaFree(p);
}

static void *c_bind(vd_backend *b, void *host, size_t bytes)
{
	void *p = c_alloc(b, bytes);
	if (!p)
		return nullptr;
	if (bytes && cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice) != cudaSuccess) {
		cudaGetLastError();
		cudaFree(p);
		return nullptr;
	}
	return p;
}

static void c_unbind(vd_backend *b, void *p, void *host, size_t bytes)
{
	(void)host;
	c_release(b, p, bytes);
}

static vd_stream *c_stream_new(vd_backend *b)
{
	cudaSetDevice(st_of(b)->device);
	vd_stream *s = new (std::nothrow) vd_stream();
	if (!s)
		return nullptr;
	s->b = b;
	s->dev = st_of(b)->device;
	if (cudaStreamCreateWithFlags(&s->st, cudaStreamNonBlocking) != cudaSuccess) {
		cudaGetLastError();
		delete s;
		return nullptr;
	}
	if (cudaMalloc(&s->amax, AP * (sizeof(float) + sizeof(int64_t))) != cudaSuccess) {
		cudaGetLastError();
		s->amax = nullptr; /* argmax in one launch */
	}
	if (cudaMalloc(&s->adone, attn_dec_counters()) != cudaSuccess ||
	    cudaMemsetAsync(s->adone, 0, attn_dec_counters(), s->st) != cudaSuccess) {
		cudaGetLastError();
		if (s->adone)
			cudaFree(s->adone);
		s->adone = nullptr; /* attention in two launches */
	}
	return s;
}

static void c_stream_free(vd_stream *s)
{
	if (!s)
		return;
	cudaSetDevice(s->dev);
	join_side(s);
	cudaStreamSynchronize(s->st);
	free_side(s);
	prof_flush(s, -1); /* and write the table */
	for (cudaEvent_t e : s->events)
		cudaEventDestroy(e);
	if (s->scratch)
		cudaFree(s->scratch);
	if (s->amax)
		cudaFree(s->amax);
	if (s->apart)
		cudaFree(s->apart);
	if (s->adone)
		cudaFree(s->adone);
	if (s->qpart)
		cudaFree(s->qpart);
	for (void *p : s->retired)
		cudaFree(p);
	cudaStreamDestroy(s->st);
	delete s;
}

static void c_upload(vd_stream *s, void *dst, const void *host, size_t n)
{
	ENTER(s);
	if (n)
		check(s, cudaMemcpyAsync(dst, host, n, cudaMemcpyHostToDevice, s->st));
}

static void c_download(vd_stream *s, void *host, const void *src, size_t n)
{
	ENTER(s);
	if (n)
		check(s, cudaMemcpyAsync(host, src, n, cudaMemcpyDeviceToHost, s->st));
}

static void c_copy(vd_stream *s, void *dst, const void *src, size_t n)
{
	ENTER(s);
	if (n && dst != src)
		check(s, cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, s->st));
}

static int c_sync(vd_stream *s)
{
	cudaSetDevice(s->dev);
	auto t0 = std::chrono::steady_clock::now();
	join_side(s);
	check(s, cudaStreamSynchronize(s->st));
	prof_flush(s, std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
	int *flag = st_of(s->b)->dev_err;
	int e = 0;
	if (cudaMemcpy(&e, flag, sizeof e, cudaMemcpyDeviceToHost) == cudaSuccess && e) {
		fail(s, e);
		int zero = 0;
		cudaMemcpy(flag, &zero, sizeof zero, cudaMemcpyHostToDevice);
	}
	return s->err;
}

/* Graphs: stream capture in relaxed mode (the operations' own checks may
 * call the runtime); an operation that waits for the host (a scratch that
 * grows, a sampling draw on the host) invalidates the capture, and
 * graph_end then reports NULL with the stream's error as it was. */
static int c_graph_begin(vd_stream *s)
{
	cudaSetDevice(s->dev);
	if (s->err || s->recording)
		return s->err ? s->err : -1;
	join_side(s);
	cudaError_t e = cudaStreamBeginCapture(s->st, cudaStreamCaptureModeRelaxed);
	if (e != cudaSuccess) {
		cudaGetLastError();
		return (int)e;
	}
	s->recording = true;
	return 0;
}

/* count_kernels: with VERDICT_GRAPH_KERNELS=1, a line on stderr saying how
 * many kernel launches a recording holds (a loop's: its body's, a round):
 * the launches a replayed step costs. */
static void count_kernels(cudaGraph_t g, bool body)
{
	static const bool on = env_is("VERDICT_GRAPH_KERNELS", "1");
	if (!on)
		return;
	size_t n = 0;
	if (cudaGraphGetNodes(g, nullptr, &n) != cudaSuccess)
		return;
	std::vector<cudaGraphNode_t> nodes(n);
	if (n && cudaGraphGetNodes(g, nodes.data(), &n) != cudaSuccess)
		return;
	size_t k = 0, other = 0;
	for (cudaGraphNode_t v : nodes) {
		cudaGraphNodeType t;
		if (cudaGraphNodeGetType(v, &t) == cudaSuccess && t == cudaGraphNodeTypeKernel)
			k++;
		else
			other++;
	}
	fprintf(stderr, "verdict cuda: recorded %s: %zu kernels, %zu other nodes\n", body ? "a loop's body" : "a graph", k, other);
}

static void *c_graph_end(vd_stream *s)
{
	cudaSetDevice(s->dev);
	if (!s->recording)
		return nullptr;
	s->recording = false;
	join_side(s); /* a capture ends with its branches joined */
	cudaGraph_t g = nullptr;
	cudaError_t e = cudaStreamEndCapture(s->st, &g);
	if (e == cudaSuccess && g)
		count_kernels(g, s->loop != nullptr);
	if (s->loop) { /* g is the while node's body; the loop is its graph */
		g = s->loop;
		s->loop = nullptr;
	}
	cudaGraphExec_t x = nullptr;
	if (e == cudaSuccess && !s->err)
		e = cudaGraphInstantiate(&x, g, 0);
	if (g)
		cudaGraphDestroy(g);
	if (e != cudaSuccess || s->err) {
		cudaGetLastError();
		s->err = 0; /* the recording's errors: nothing ran */
		if (x)
			cudaGraphExecDestroy(x);
		return nullptr;
	}
	return (void *)x;
}

/* Loops: a graph of one conditional while node (its condition's default
 * 1 at every launch, so the body runs at least once), the body recorded by
 * capture into the node's graph; loop_while's kernel sets the condition
 * for the next round from the device. Needs CUDA 12.4 or later. */
static int c_loop_begin(vd_stream *s)
{
	cudaSetDevice(s->dev);
	if (s->err || s->recording)
		return s->err ? s->err : -1;
	join_side(s);
	cudaGraph_t g = nullptr;
	cudaError_t e = cudaGraphCreate(&g, 0);
	cudaGraphConditionalHandle h = 0;
	if (e == cudaSuccess)
		e = cudaGraphConditionalHandleCreate(&h, g, 1, cudaGraphCondAssignDefault);
	cudaGraphNodeParams p = {};
	p.type = cudaGraphNodeTypeConditional;
	p.conditional.handle = h;
	p.conditional.type = cudaGraphCondTypeWhile;
	p.conditional.size = 1;
	cudaGraphNode_t node = nullptr;
	if (e == cudaSuccess)
#if CUDART_VERSION >= 13000
		e = cudaGraphAddNode(&node, g, nullptr, nullptr, 0, &p);
#else
		e = cudaGraphAddNode(&node, g, nullptr, 0, &p);
#endif
	if (e == cudaSuccess)
		e = cudaStreamBeginCaptureToGraph(s->st, p.conditional.phGraph_out[0], nullptr, nullptr, 0,
		                                  cudaStreamCaptureModeRelaxed);
	if (e != cudaSuccess) {
		cudaGetLastError();
		if (g)
			cudaGraphDestroy(g);
		return (int)e;
	}
	s->loop = g;
	s->cond = h;
	s->recording = true;
	return 0;
}

__global__ void k_loop_while(cudaGraphConditionalHandle h, const int32_t *cond, const int32_t *iter, int64_t limit)
{
	pdl_wait();
	pdl_launch();
	cudaGraphSetConditional(h, cond[0] != 0 && iter[0] < limit ? 1u : 0u);
}

static void c_loop_while(vd_stream *s, vd_tensor cond, vd_tensor iter, int64_t limit)
{
	ENTER(s);
	if (!s->loop)
		return;
	launch(s, k_loop_while, 1, 1, 0, s->cond, (const int32_t *)cond.data, (const int32_t *)iter.data, limit);
	check(s, cudaGetLastError());
}

/* One block: every thread reads the step before thread 0 advances it. */
__global__ void k_loop_rows(vd_loop_rows r)
{
	pdl_wait();
	pdl_launch();
	int32_t *it = (int32_t *)r.iter.data;
	int64_t t = it[0], ts = t < r.steps ? t : r.steps - 1, nl = r.lut.rows * r.lut.cols;
	const int32_t *ids = (const int32_t *)r.ids.data, *lut = (const int32_t *)r.lut.data;
	for (int64_t i = threadIdx.x; i < r.n; i += blockDim.x) {
		int32_t id = ids[i];
		((int32_t *)r.pos.data)[i] = ((const int32_t *)r.pos0.data)[i] + (int32_t)t;
		((int32_t *)r.slot0.data)[i] = ((const int32_t *)r.slots0.data)[i * r.steps + ts];
		((int32_t *)r.slot1.data)[i] = ((const int32_t *)r.slots1.data)[i * r.steps + ts];
		((int32_t *)r.row.data)[i] = id >= 0 && id < nl ? lut[id] : 0;
	}
	__syncthreads();
	if (threadIdx.x == 0)
		it[0] = (int32_t)(t + 1);
}

static void c_loop_rows(vd_stream *s, const vd_loop_rows *r)
{
	ENTER(s);
	if (r->n <= 0 || r->steps <= 0)
		return;
	launch(s, k_loop_rows, 1, 128, 0, *r);
	check(s, cudaGetLastError());
}

/* One block: thread i keeps row i's token and marks it done; the count of
 * rows left is a block sum (rows of more than one pass of the block add
 * in thread order). */
__global__ void k_loop_emit(vd_loop_emit e)
{
	pdl_wait();
	pdl_launch();
	__shared__ int32_t left[128];
	int64_t t = (int64_t)((const int32_t *)e.iter.data)[0] - 1, ns = e.stop.rows * e.stop.cols;
	const int32_t *ids = (const int32_t *)e.ids.data, *stop = (const int32_t *)e.stop.data;
	int32_t *out = (int32_t *)e.out.data, *done = (int32_t *)e.done.data, mine = 0;
	for (int64_t i = threadIdx.x; i < e.n; i += blockDim.x) {
		int32_t id = ids[i], d = done[i];
		if (t >= 0 && t < e.steps)
			out[i * e.steps + t] = id;
		for (int64_t k = 0; k < ns && !d; k++)
			if (stop[k] >= 0 && stop[k] == id)
				d = 1;
		done[i] = d;
		mine += !d;
	}
	left[threadIdx.x] = mine;
	__syncthreads();
	if (threadIdx.x == 0) {
		int32_t c = 0;
		for (int i = 0; i < (int)blockDim.x; i++)
			c += left[i];
		((int32_t *)e.cond.data)[0] = c;
	}
}

static void c_loop_emit(vd_stream *s, const vd_loop_emit *e)
{
	ENTER(s);
	if (e->n <= 0)
		return;
	launch(s, k_loop_emit, 1, 128, 0, *e);
	check(s, cudaGetLastError());
}

static void c_graph_run(vd_stream *s, void *g)
{
	ENTER(s);
	check(s, cudaGraphLaunch((cudaGraphExec_t)g, s->st));
}

static void c_graph_free(vd_backend *b, void *g)
{
	cudaSetDevice(st_of(b)->device);
	if (g)
		cudaGraphExecDestroy((cudaGraphExec_t)g);
}

/* ---- the catalog step (catalog.cu) ---- */

int cat_cuda_bind(int dev, const vd_grammar *g, vd_gram **out);
void cat_cuda_free(int dev, vd_gram *g);
int cat_cuda_init(cudaStream_t st, bool pdl, vd_gram *g, const vd_cat_step *c);
int cat_cuda_step_pdl(cudaStream_t st, bool pdl, vd_gram *g, const vd_cat_step *c);

static int c_grammar_bind(vd_backend *b, const vd_grammar *g, vd_gram **out)
{
	cudaSetDevice(st_of(b)->device);
	return cat_cuda_bind(st_of(b)->device, g, out);
}

static void c_grammar_free(vd_backend *b, vd_gram *g)
{
	cudaSetDevice(st_of(b)->device);
	cat_cuda_free(st_of(b)->device, g);
}

static void c_catalog_init(vd_stream *s, vd_gram *g, const vd_cat_step *c)
{
	ENTER(s);
	if (int e = cat_cuda_init(s->st, pdl_of(s), g, c))
		fail(s, e);
}

static void c_catalog_step(vd_stream *s, vd_gram *g, const vd_cat_step *c)
{
	ENTER(s);
	if (int e = cat_cuda_step_pdl(s->st, pdl_of(s), g, c))
		fail(s, e);
}

/* ---- the towers' operations (tower.cu) ----
 *
 * Each runs tower.cu's kernels on the stream; an error they return (a bad
 * dtype, a shape past their limits, a failed launch) is the stream's. */

static void *tow_scratch(void *s, size_t bytes) { return scratch((vd_stream *)s, bytes); }

#define TOW(s, call)                                        \
	do {                                                \
		ENTER(s);                                   \
		tow_ctx ctx_ {(s)->st, tow_scratch, (s)};   \
		if (int e_ = call)                          \
			fail((s), e_);                      \
	} while (0)

static void c_pointwise(vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor w)
{
	TOW(s, tow_pointwise(&ctx_, y, x, w));
}

/* c_tower_linear: tow_linear's tensor-core product, or linear where it
 * does not take the call (VERDICT_TOWER_MMA=0, another dtype, rows not
 * 16-byte aligned). */
static void c_tower_linear(vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor w)
{
	int e;
	{
		ENTER(s);
		tow_ctx ctx_ {s->st, tow_scratch, s};
		e = tow_linear(&ctx_, y, x, w);
	}
	if (e == TOW_ELINEAR)
		c_linear(s, y, x, w);
	else if (e)
		fail(s, e);
}

static void c_conv2d(vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor w, vd_tensor bias, const vd_conv *g)
{
	TOW(s, tow_conv2d(&ctx_, y, x, w, bias, g));
}

static void c_dwconv2d(vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor w, const vd_conv *g)
{
	TOW(s, tow_dwconv2d(&ctx_, y, x, w, g));
}

static void c_norm_act(vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor w, vd_tensor gamma, vd_tensor res,
                       int64_t dim, float eps, int gelu)
{
	TOW(s, tow_norm_act(&ctx_, y, x, w, gamma, res, dim, eps, gelu));
}

static void c_avgpool2d(vd_stream *s, vd_tensor y, vd_tensor x, int64_t h, int64_t w, int64_t c, int64_t k)
{
	TOW(s, tow_avgpool2d(&ctx_, y, x, h, w, c, k));
}

static void c_upsample_concat(vd_stream *s, vd_tensor y, vd_tensor a, vd_tensor b, int64_t h, int64_t w,
                              int64_t bh, int64_t bw)
{
	TOW(s, tow_upsample_concat(&ctx_, y, a, b, h, w, bh, bw));
}

static void c_transpose(vd_stream *s, vd_tensor y, vd_tensor x)
{
	TOW(s, tow_transpose(&ctx_, y, x));
}

static void c_mqa(vd_stream *s, vd_tensor out, vd_tensor q, vd_tensor k, vd_tensor v, int64_t heads, float scale)
{
	TOW(s, tow_mqa(&ctx_, out, q, k, v, heads, scale));
}

static void c_im2col(vd_stream *s, vd_tensor y, vd_tensor x, const vd_conv *g, int64_t kh, int64_t kw,
                     int64_t stride_w)
{
	TOW(s, tow_im2col(&ctx_, y, x, g, kh, kw, stride_w));
}

static void c_cum_group_norm_relu(vd_stream *s, vd_tensor x, vd_tensor w, float eps)
{
	TOW(s, tow_cum_group_norm_relu(&ctx_, x, w, eps));
}

static void c_local_attention(vd_stream *s, vd_tensor out, vd_tensor q, vd_tensor k, vd_tensor v, vd_tensor pos,
                              vd_tensor valid, int64_t heads, int64_t past, int64_t future, float cap)
{
	TOW(s, tow_local_attention(&ctx_, out, q, k, v, pos, valid, heads, past, future, cap));
}

static void c_dwconv_causal(vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor w)
{
	TOW(s, tow_dwconv_causal(&ctx_, y, x, w));
}

static void c_glu(vd_stream *s, vd_tensor y, vd_tensor x)
{
	TOW(s, tow_glu(&ctx_, y, x));
}

static void c_silu(vd_stream *s, vd_tensor y, vd_tensor x)
{
	TOW(s, tow_silu(&ctx_, y, x));
}

static void c_clip(vd_stream *s, vd_tensor y, vd_tensor x, float lim)
{
	TOW(s, tow_clip(&ctx_, y, x, lim));
}

static void c_clamp(vd_stream *s, vd_tensor y, vd_tensor x, float lo, float hi)
{
	TOW(s, tow_clamp(&ctx_, y, x, lo, hi));
}

static vd_backend table_template()
{
	vd_backend t;
	memset(&t, 0, sizeof t);
	t.abi = VD_ABI;
	t.name = "cuda";
	t.buffer.alloc = c_alloc;
	t.buffer.release = c_release;
	t.buffer.bind = c_bind;
	t.buffer.unbind = c_unbind;
	t.stream.stream_new = c_stream_new;
	t.stream.stream_free = c_stream_free;
	t.stream.upload = c_upload;
	t.stream.download = c_download;
	t.stream.copy = c_copy;
	t.stream.sync = c_sync;
	t.op.linear = c_linear;
	t.op.linear_rows = c_linear_rows;
	t.op.sparse_mlp = c_sparse_mlp;
	t.op.rmsnorm = c_rmsnorm;
	t.op.row_rms = c_row_rms;
	t.op.scale_rows = c_scale_rows;
	t.op.mul_rows = c_mul_rows;
	t.op.sparse_gelu_mul = c_sparse_gelu_mul;
	t.op.ew = c_ew;
	t.op.rope = c_rope;
	t.op.altup_predict = c_altup_predict;
	t.op.altup_correct = c_altup_correct;
	t.op.attention = c_attention;
	t.op.embed = c_embed;
	t.op.gather = c_gather;
	t.op.scatter = c_scatter;
	t.op.copy2d = c_copy2d;
	t.op.logsumexp = c_logsumexp;
	t.op.argmax = c_argmax;
	t.op.select = c_select;
	t.op.sample = c_sample;
	t.device.info = c_info;
	t.device.limits = c_limits;
	t.op.norm_add = c_norm_add;
	t.op.router = c_router;
	t.stream.graph_begin = c_graph_begin;
	t.stream.graph_end = c_graph_end;
	t.stream.graph_run = c_graph_run;
	t.stream.graph_free = c_graph_free;
	t.stream.loop_begin = c_loop_begin;
	t.stream.loop_while = c_loop_while;
	t.op.loop_rows = c_loop_rows;
	t.op.loop_emit = c_loop_emit;
	t.op.norm_rope = c_norm_rope;
	t.op.router_coef = c_router_coef;
	t.op.altup_predict_step = c_altup_predict_step;
	t.op.altup_correct_step = c_altup_correct_step;
	t.op.norm_add_more = c_norm_add_more;
	t.op.norm_ropes = c_norm_ropes;
	t.op.grammar_bind = c_grammar_bind;
	t.op.grammar_free = c_grammar_free;
	t.op.catalog_init = c_catalog_init;
	t.op.catalog_step = c_catalog_step;
	t.op.pointwise = c_pointwise;
	t.op.conv2d = c_conv2d;
	t.op.dwconv2d = c_dwconv2d;
	t.op.norm_act = c_norm_act;
	t.op.avgpool2d = c_avgpool2d;
	t.op.upsample_concat = c_upsample_concat;
	t.op.transpose = c_transpose;
	t.op.mqa = c_mqa;
	t.op.im2col = c_im2col;
	t.op.cum_group_norm_relu = c_cum_group_norm_relu;
	t.op.local_attention = c_local_attention;
	t.op.dwconv_causal = c_dwconv_causal;
	t.op.glu = c_glu;
	t.op.silu = c_silu;
	t.op.clip = c_clip;
	t.op.clamp = c_clamp;
	t.op.linears = c_linears;
	t.op.prefetch = c_prefetch;
	t.op.tower_linear = c_tower_linear;
	return t;
}

static void say(char *err, size_t errlen, const char *fmt, int a, int b, const char *m)
{
	if (err && errlen)
		snprintf(err, errlen, fmt, a, b, m);
}

#define MAXDEV 64
static std::mutex open_mu;
static vd_backend *opened[MAXDEV];

/* cuda_pdl_device: whether device dev's backend launches with PDL (false
 * before it is opened); for catalog.cu's cat_cuda_step. */
bool cuda_pdl_device(int dev)
{
	std::lock_guard<std::mutex> lock(open_mu);
	return dev >= 0 && dev < MAXDEV && opened[dev] && st_of(opened[dev])->pdl;
}

/* count_devices returns the number of CUDA devices; 0 when there is none
 * and -1 when they cannot be counted (a driver older than this build's
 * runtime, a failed query), with the reason in err. */
static int count_devices(char *err, size_t errlen)
{
	int drv = 0, rt = 0;
	cudaDriverGetVersion(&drv);
	cudaRuntimeGetVersion(&rt);
	int count = 0;
	cudaError_t e = cudaGetDeviceCount(&count);
	if (e == cudaErrorInsufficientDriver || (drv > 0 && drv < rt)) {
		say(err, errlen, "cuda: the driver (CUDA %d) is older than this library's runtime (CUDA %d)%s", drv, rt, "");
		return -1;
	}
	if (e == cudaErrorNoDevice || (e == cudaSuccess && count == 0) || drv == 0) {
		say(err, errlen, "cuda: no CUDA device (driver version %d, runtime %d)%s", drv, rt, "");
		return 0;
	}
	if (e != cudaSuccess) {
		say(err, errlen, "cuda: cannot count devices (error %d, runtime %d): %s", (int)e, rt, cudaGetErrorString(e));
		return -1;
	}
	return count < MAXDEV ? count : MAXDEV;
}

/* vd_cuda_device_count returns the number of CUDA devices this library can
 * open as cuda:0 .. cuda:N-1 (at most MAXDEV): 0 when there is none, -1
 * when they cannot be counted, with the reason in err in both cases.
 * Whether each one opens (its compute capability, its memory) is known
 * when vd_cuda_backend opens it. */
extern "C" __attribute__((visibility("default"))) int
vd_cuda_device_count(char *err, size_t errlen)
{
	std::lock_guard<std::mutex> lock(open_mu);
	return count_devices(err, errlen);
}

/* vd_cuda_backend returns the backend of CUDA device device, or NULL with
 * the reason in err (no device, a driver older than this build's runtime,
 * a device older than compute capability 8.0, a failed start). */
extern "C" __attribute__((visibility("default"))) vd_backend *
vd_cuda_backend(int device, char *err, size_t errlen)
{
	std::lock_guard<std::mutex> lock(open_mu);
	if (device < 0 || device >= MAXDEV) {
		say(err, errlen, "cuda: device %d out of range (0..%d)%s", device, MAXDEV - 1, "");
		return nullptr;
	}
	if (opened[device])
		return opened[device];
	int count = count_devices(err, errlen);
	if (count <= 0)
		return nullptr;
	cudaError_t e;
	if (device >= count) {
		say(err, errlen, "cuda: no device %d (%d present)%s", device, count, "");
		return nullptr;
	}
	cudaDeviceProp prop;
	if ((e = cudaGetDeviceProperties(&prop, device)) != cudaSuccess) {
		say(err, errlen, "cuda: device %d: error %d: %s", device, (int)e, cudaGetErrorString(e));
		return nullptr;
	}
	if (prop.major < 8) {
		say(err, errlen, "cuda: device compute capability %d.%d is older than 8.0%s", prop.major, prop.minor, "");
		return nullptr;
	}
	if ((e = cudaSetDevice(device)) != cudaSuccess || (e = cudaFree(0)) != cudaSuccess) {
		say(err, errlen, "cuda: device %d: cannot start (error %d): %s", device, (int)e, cudaGetErrorString(e));
		return nullptr;
	}
	cuda_state *cs = new cuda_state();
	cs->device = device;
	int optin = 0;
	cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
	cs->smem_optin = optin > 0 ? optin - 1024 : 48 * 1024; /* room for the static part */
	cs->pdl = prop.major >= 9 && !env_is("VERDICT_PDL", "0");
	cs->pdl_loop = !env_is("VERDICT_PDL_LOOP", "0");
	if ((e = cudaMalloc(&cs->dev_err, sizeof(int))) != cudaSuccess ||
	    (e = cudaMemset(cs->dev_err, 0, sizeof(int))) != cudaSuccess) {
		say(err, errlen, "cuda: device %d: cannot allocate (error %d): %s", device, (int)e, cudaGetErrorString(e));
		delete cs;
		return nullptr;
	}
	q4_linear_init(cs->smem_optin);
	cudaGetLastError();
	vd_backend *b = new vd_backend(table_template());
	b->state = cs;
	opened[device] = b;
	return b;
}
