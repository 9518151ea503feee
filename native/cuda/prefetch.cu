/*
 * prefetch.cu: the table's prefetch, a hint that weights the next
 * operations read be brought into L2 while the operations before them
 * run (k_prefetch).
 *
 * A decode step's products each wait for the row operation before them,
 * then stream their weights from memory; a layer's chain is a series of
 * such waits. Asked for a few kernels ahead, the weights are in L2 by the
 * time their product runs (an H200 holds 50 MB there: a Gemma 3n layer's
 * MLP is 32 MB in q4). The kernel runs on a branch of its own: the
 * stream's side stream, forked from the stream where the call stands and
 * joined back only where the stream is recorded, synchronised or freed,
 * so no kernel of the chain waits for it (in the chain, the next kernel
 * waited for its completion: measured on the H200, 11% slower a decode
 * step than without it). Off by default: measured on the H200 with
 * Gemma 3n E2B's decode (2026-12-05), it bought nothing on the branch
 * either (299.8 and 252.7 tokens/s against 303.9 and 257.4 without it, in
 * two calls): a product's blocks already ask for their weights before
 * they wait, behind the one-block row operation before most of them.
 * VERDICT_PREFETCH=1 turns it on.
 */
#include "common.cuh"

namespace {

constexpr int PF_MAX = 2 * VD_PREFETCH_MAX; /* stretches: a tensor's data and q4 scales */
constexpr int64_t PF_PIECE = 64 << 10;      /* bytes one prefetch instruction asks for */
constexpr int PF_BLOCKS = 64, PF_THREADS = 32;

/* pf_list: the stretches (16-byte aligned, whole 16-byte units) and the
 * running count of their pieces. */
struct pf_list {
	const char *p[PF_MAX];
	int64_t bytes[PF_MAX], first[PF_MAX + 1];
	int n;
};

/* k_prefetch: thread i asks for pieces i, i + threads, ... of the
 * stretches, in L2 (cp.async.bulk.prefetch, sm_90; a line at a time
 * before). */
__global__ void __launch_bounds__(PF_THREADS) k_prefetch(pf_list l)
{
	int64_t th = (int64_t)gridDim.x * blockDim.x, i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	int r = 0;
	for (int64_t k = i; k < l.first[l.n]; k += th) {
		while (k >= l.first[r + 1])
			r++;
		int64_t off = (k - l.first[r]) * PF_PIECE, len = l.bytes[r] - off;
		len = len < PF_PIECE ? len : PF_PIECE;
		const char *a = l.p[r] + off;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
		asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(a), "r"((unsigned)len) : "memory");
#else
		for (int64_t o = 0; o < len; o += 128)
			pdl_prefetch_l2(a + o);
#endif
	}
}

/* tensor_bytes: the bytes of t's data, and of its q4 scales in *aux. */
int64_t tensor_bytes(vd_tensor t, int64_t *aux)
{
	*aux = 0;
	int64_t n = t.rows * t.cols;
	switch (t.dtype) {
	case VD_Q4:
		*aux = t.group > 0 ? t.rows * (t.cols / t.group) * 2 * (int64_t)sizeof(float) : 0;
		return n / 2;
	case VD_BF16:
		return 2 * n;
	default:
		return 4 * n;
	}
}

/* add: the whole 16-byte units of [p, p + bytes) to l. */
void add(pf_list &l, const void *p, int64_t bytes)
{
	if (!p || bytes <= 0 || l.n == PF_MAX)
		return;
	uintptr_t a = ((uintptr_t)p + 15) & ~(uintptr_t)15, e = ((uintptr_t)p + (uintptr_t)bytes) & ~(uintptr_t)15;
	if (e <= a)
		return;
	l.p[l.n] = (const char *)a;
	l.bytes[l.n] = (int64_t)(e - a);
	l.first[l.n + 1] = l.first[l.n] + (l.bytes[l.n] + PF_PIECE - 1) / PF_PIECE;
	l.n++;
}

/* ok: e is cudaSuccess; else it is the stream's error. */
bool ok(vd_stream *s, cudaError_t e)
{
	check(s, e);
	return e == cudaSuccess;
}

} // namespace

void c_prefetch(vd_stream *s, const vd_prefetch *p)
{
	static const bool on = env_is("VERDICT_PREFETCH", "1");
	if (!on || p->n <= 0)
		return;
	ENTER(s);
	pf_list l;
	l.n = 0;
	l.first[0] = 0;
	for (int i = 0; i < p->n && i < VD_PREFETCH_MAX; i++) {
		int64_t aux, b = tensor_bytes(p->t[i], &aux);
		add(l, p->t[i].data, b);
		if (p->t[i].dtype == VD_Q4)
			add(l, p->t[i].aux, aux);
	}
	int64_t pieces = l.first[l.n];
	if (pieces == 0)
		return;
	if (!s->side) {
		if (cudaStreamCreateWithFlags(&s->side, cudaStreamNonBlocking) != cudaSuccess) {
			s->side = nullptr;
			cudaGetLastError();
			return; /* a hint: no branch, no prefetch */
		}
		if (cudaEventCreateWithFlags(&s->fork, cudaEventDisableTiming) != cudaSuccess ||
		    cudaEventCreateWithFlags(&s->join, cudaEventDisableTiming) != cudaSuccess) {
			cudaGetLastError();
			free_side(s);
			return;
		}
	}
	if (!ok(s, cudaEventRecord(s->fork, s->st)) || !ok(s, cudaStreamWaitEvent(s->side, s->fork, 0)))
		return;
	s->forked = true;
	int64_t blocks = (pieces + PF_THREADS - 1) / PF_THREADS;
	check(s, launch_pdl(false, k_prefetch, dim3((unsigned)(blocks < PF_BLOCKS ? blocks : PF_BLOCKS)), dim3(PF_THREADS),
	                    0, s->side, l));
}

void join_side(vd_stream *s)
{
	if (!s->forked)
		return;
	s->forked = false;
	if (ok(s, cudaEventRecord(s->join, s->side)))
		check(s, cudaStreamWaitEvent(s->st, s->join, 0));
}

void free_side(vd_stream *s)
{
	if (s->side) {
		cudaStreamSynchronize(s->side);
		cudaStreamDestroy(s->side);
	}
	if (s->fork)
		cudaEventDestroy(s->fork);
	if (s->join)
		cudaEventDestroy(s->join);
	s->side = nullptr, s->fork = s->join = nullptr, s->forked = false;
}
