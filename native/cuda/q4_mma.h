/*
 * q4_mma.h: the q4 product on tensor cores at float32 accuracy, exact
 * integer sums inside a chunk
 * (q4_mma.cu), for cuda_backend.cu's linear.
 */
#ifndef VERDICT_CUDA_Q4_MMA_H
#define VERDICT_CUDA_Q4_MMA_H

#include <cuda_runtime.h>

#include <cstdint>

/* q4_mma_fits: whether q4_mma takes a q4 matrix of these columns and
 * group (a power of two) at q: columns a multiple of 64, groups of 64 or
 * more, q 8-byte aligned; never when VERDICT_CUDA_MMA=0 (the float32-core
 * kernels then, for comparisons). The answer depends on the matrix alone,
 * never on the batch, so every batch of one matrix gets one arithmetic. */
bool q4_mma_fits(const void *q, int64_t cols, int64_t group);

/* q4_mma_scratch_bytes: the device scratch q4_mma takes for a product of
 * n tokens and nout rows of cols columns: its pre-pass's quantised x and,
 * unless whole, the slice parts of a product it splits (from 9 to 64
 * tokens, a block a slice, the parts then added in slice order: the same
 * bits; VERDICT_Q4_SPLIT=N from N, 0 never, for comparisons). */
size_t q4_mma_scratch_bytes(int64_t n, int64_t nout, int64_t cols, bool whole);

/* q4_mma enqueues y[t, i] = sum_c w[ids[i] (or i), c] * x[t, c] for the n
 * tokens of x (rows of cols floats) on st, for a matrix q4_mma_fits took
 * (lg = log2 of its group): a pre-pass that quantises x into scratch, then
 * the product; pdl sets programmatic stream serialisation (sm_90).
 * scratch holds scratch_bytes (at least q4_mma_scratch_bytes(.., true);
 * the product is split when it holds the parts too). It returns the
 * launch's error (cudaErrorInvalidValue for too little scratch). */
cudaError_t q4_mma(cudaStream_t st, bool pdl, float *y, const float *x, const uint8_t *q, const float *so,
                   const int32_t *ids, int64_t n, int64_t nout, int64_t cols, int lg, void *scratch,
                   size_t scratch_bytes);

/* Q4_MMA_PARTS: the most products q4_mma_group takes. */
#define Q4_MMA_PARTS 4

/* q4_mma_part: one product of q4_mma_group: y [n, nout] = x·wᵀ for a
 * matrix q4_mma_fits took (nibbles q, scales and offsets so, lg = log2 of
 * its group), then, when mul is set, y = gelu_tanh(y)·mul, or with into,
 * mul = gelu_tanh(mul)·y (mul [n, nout]: ew gelu_mul's arithmetic on the
 * stored product). With q2 set (a pair: into, mul set, q2's matrix of q's
 * shape and group), mul's product is made in the same launch: mul =
 * x·w2ᵀ (nibbles q2, scales so2), then mul = gelu_tanh(mul)·y, y kept (an
 * MLP's gate and up products in one pass); such a part goes alone. With
 * x set, the part's input is x (n rows of cols columns) in place of the
 * launch's: products of different inputs in one launch, where each
 * block quantises its part's x itself. */
struct q4_mma_part {
	float *y;
	float *mul;
	const uint8_t *q;
	const float *so;
	int64_t nout;
	int lg;
	bool into;
	const uint8_t *q2;
	const float *so2;
	const float *x;
	int64_t cols;
};

/* q4_mma_group enqueues np (1 to Q4_MMA_PARTS) products of the n tokens
 * of x (rows of cols floats) in one launch, the grid's blocks partitioned
 * over the parts (two launches when x takes the pre-pass, shared by
 * them), each part's y the bits q4_mma gives it alone (the chunk sums are
 * exact and the slices added in one order whatever the tiling). It
 * returns whether it took them (*err: the launch's error,
 * cudaErrorInvalidValue for too little scratch); it takes nothing for more
 * than 8 tokens or where one launch would not be fewer than the parts'
 * launches one by one (with their GELU products): the caller then runs
 * them one by one. scratch holds scratch_bytes, at least
 * q4_mma_scratch_bytes(n, 0, cols, true). */
bool q4_mma_group(cudaStream_t st, bool pdl, const q4_mma_part *parts, int np, const float *x, int64_t n,
                  int64_t cols, void *scratch, size_t scratch_bytes, cudaError_t *err);

/* q4_gemv_takes: whether q4_gemv takes a product of n tokens, nout rows
 * and cols columns (one token; only with VERDICT_Q4_GEMV=1, and up to
 * VERDICT_Q4_GEMV_ROWS rows). q4_gemv enqueues the np
 * products of q4_mma_group's parts for one token x in one launch on the
 * integer cores (q4_gemv.cu), each part's bits q4_mma's; q 16-byte
 * aligned. q4_mma and q4_mma_group send it what it takes. */
bool q4_gemv_takes(int64_t n, int64_t nout, int64_t cols);
cudaError_t q4_gemv(cudaStream_t st, bool pdl, const q4_mma_part *parts, int np, const float *x, int64_t cols);

/* q4_gemv_set: whether q4_gemv takes what it can (the harness's
 * comparisons; VERDICT_Q4_GEMV sets it at start). */
void q4_gemv_set(bool on);

/* q4_gemv_shape: the rows of q4_gemv's units (4, 8, 16 or 32; 0: by the
 * product's rows) and the most blocks of its grid (0: two a
 * multiprocessor; fewer make each block take several units in turn), for
 * the harness's comparisons (every shape gives the same bits). */
void q4_gemv_shape(int rows, int grid);

/* q4_bulk_takes: whether q4_bulk takes the parts (as q4_mma_group's, one
 * input) over n tokens of x: 1 to 8 tokens, 8 or more chunks of columns,
 * a multiple of 4, an even number of groups a row, q and the scales
 * 16-byte aligned, a device of compute capability 9.0 or later, and (by
 * default) one token (VERDICT_Q4_BULK=1: up to 8, 0: never). q4_bulk
 * enqueues them
 * (q4_bulk.cu: the weights by bulk copies into shared memory, each part's
 * bits q4_mma's); scratch as q4_mma_group's. q4_mma and q4_mma_group send
 * it what it takes. */
bool q4_bulk_takes(const q4_mma_part *parts, int np, const float *x, int64_t n, int64_t cols);
cudaError_t q4_bulk(cudaStream_t st, bool pdl, const q4_mma_part *parts, int np, const float *x, int64_t n,
                    int64_t cols, void *scratch, size_t scratch_bytes);

/* q4_bulk_set: 0 q4_bulk takes nothing, 1 products of one token, 2 of up
 * to 8 (the harness's comparisons; VERDICT_Q4_BULK sets it at start). */
void q4_bulk_set(int mode);

/* q4_bulk_set_warp: whether q4_bulk gives a whole unit of 16 rows to a
 * warp (the same bits): −1 where a launch has units enough (the default),
 * 0 never, 1 wherever it fits (VERDICT_Q4_WARP sets it at start). */
void q4_bulk_set_warp(int mode);

/* q4_mma_set_own_max: the most shared memory (bytes) a product of up to 8
 * tokens may take to quantise x in its own blocks rather than in a
 * pre-pass launch (0: always the pre-pass); for the harness's comparisons
 * (both give the same bits). */
void q4_mma_set_own_max(int64_t bytes);

/* q4_mma_set_split_sms: the multiprocessors the split of products of many
 * tokens with few rows counts on (0: never split them); for the harness,
 * so that the host emulation (one multiprocessor) takes that path too. */
void q4_mma_set_split_sms(int sms);

#endif
