/*
 * tower_mma.h: the towers' product on the tensor cores (tower_mma.cu), for
 * tower.cu's pointwise, conv2d and tower_linear.
 */
#ifndef VERDICT_CUDA_TOWER_MMA_H
#define VERDICT_CUDA_TOWER_MMA_H

#include <cuda_runtime.h>

#include <cstdint>

/* conv_geom: a convolution's image (h, w, c), output width, kernel size,
 * stride and padding before (the im2col view of tower.cu's products). */
struct conv_geom {
	int h, w, c, ow, k, stride, pad_t, pad_l;
};

/* conv_origin: the input pixel (padding counted) at the top left of
 * output pixel i's window. */
static __device__ __forceinline__ void conv_origin(const conv_geom &g, int64_t i, int *iy, int *ix)
{
	int oy = (int)(i / g.ow), ox = (int)(i - (int64_t)oy * g.ow);
	*iy = oy * g.stride - g.pad_t;
	*ix = ox * g.stride - g.pad_l;
}

/* mma_gemm enqueues y[i·ldy + j] = Σ_p A[i, p]·B[j, p] (+ bias[j]) for
 * i < m, j < n on st. A is x (rows of stride ldx) or, when g is set, the
 * im2col view of the image x; B is packed (panels of 16 rows, k-major:
 * kernels_conv.h) or, when not, w [n, k] by rows (k a multiple of 4, x and
 * w 16-byte aligned, x's rows too). sms is the device's multiprocessors
 * (the tile's choice); tile 88, 84 or 44 forces a tile (0: chosen by the
 * waves its blocks take); vec false loads A a float at a time. Returns 0
 * or the launch's error. */
int mma_gemm(cudaStream_t st, int sms, int tile, bool vec, bool packed, float *y, int64_t ldy, const float *x,
             int64_t ldx, const float *b, const float *bias, int64_t m, int64_t n, int64_t k, const conv_geom *g);

#endif
