/*
 * q4_mma.h: the q4 product on tensor cores at float32 accuracy
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

/* q4_mma_part_bytes: the device scratch q4_mma takes to split a product
 * of n tokens and nout rows of cols columns by slices (a block a slice,
 * the parts then added in slice order: the same bits), or 0 when it does
 * not split one of that shape (from 9 to 64 tokens; VERDICT_Q4_SPLIT=N
 * from N, 0 never, for comparisons). */
size_t q4_mma_part_bytes(int64_t n, int64_t nout, int64_t cols);

/* q4_mma enqueues y[t, i] = sum_c w[ids[i] (or i), c] * x[t, c] for the n
 * tokens of x (rows of cols floats) on st, for a matrix q4_mma_fits took
 * (lg = log2 of its group); pdl sets programmatic stream serialisation
 * (sm_90). part, when not null, is q4_mma_part_bytes of scratch for a
 * split product. It returns the launch's error. */
cudaError_t q4_mma(cudaStream_t st, bool pdl, float *y, const float *x, const uint8_t *q, const float *so,
                   const int32_t *ids, int64_t n, int64_t nout, int64_t cols, int lg, float *part);

#endif
