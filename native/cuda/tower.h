/*
 * tower.h: the CUDA backend's tower operations (tower.cu), called by the
 * table of cuda_backend.cu. Each enqueues its kernels on c->st and returns
 * 0 or an error code for the stream's sticky error: a cudaError_t value, or
 * one of the TOW_E* codes below (the same numbers as cuda_backend.cu's
 * VDC_E* codes).
 */
#ifndef VERDICT_CUDA_TOWER_H
#define VERDICT_CUDA_TOWER_H

#include "../backend.h"

#include <cuda_runtime.h>

enum {
	TOW_EDTYPE = 1001,   /* a tensor of a dtype the op does not take */
	TOW_ESCRATCH = 1004, /* the stream's scratch could not grow */
	TOW_ESHAPE = 1006,   /* a shape past the kernels' limits (see tower.cu) */
	TOW_ELINEAR = -1,    /* tow_linear: not taken, linear's kernels are the caller's to run */
};

/* A tower op's stream and its scratch: scratch(owner, bytes) returns device
 * memory of at least bytes, valid until the next operation of the stream,
 * or NULL (the owner has then set its error). */
struct tow_ctx {
	cudaStream_t st;
	void *(*scratch)(void *owner, size_t bytes);
	void *owner;
};

int tow_pointwise(const tow_ctx *c, vd_tensor y, vd_tensor x, vd_tensor w);
int tow_linear(const tow_ctx *c, vd_tensor y, vd_tensor x, vd_tensor w);
int tow_conv2d(const tow_ctx *c, vd_tensor y, vd_tensor x, vd_tensor w, vd_tensor bias, const vd_conv *g);
int tow_dwconv2d(const tow_ctx *c, vd_tensor y, vd_tensor x, vd_tensor w, const vd_conv *g);
int tow_norm_act(const tow_ctx *c, vd_tensor y, vd_tensor x, vd_tensor w, vd_tensor gamma, vd_tensor res,
                 int64_t dim, float eps, int gelu);
int tow_avgpool2d(const tow_ctx *c, vd_tensor y, vd_tensor x, int64_t h, int64_t w, int64_t ch, int64_t k);
int tow_upsample_concat(const tow_ctx *c, vd_tensor y, vd_tensor a, vd_tensor b, int64_t h, int64_t w, int64_t bh,
                        int64_t bw);
int tow_transpose(const tow_ctx *c, vd_tensor y, vd_tensor x);
int tow_mqa(const tow_ctx *c, vd_tensor out, vd_tensor q, vd_tensor k, vd_tensor v, int64_t heads, float scale);
int tow_im2col(const tow_ctx *c, vd_tensor y, vd_tensor x, const vd_conv *g, int64_t kh, int64_t kw,
               int64_t stride_w);
int tow_cum_group_norm_relu(const tow_ctx *c, vd_tensor x, vd_tensor w, float eps);
int tow_local_attention(const tow_ctx *c, vd_tensor out, vd_tensor q, vd_tensor k, vd_tensor v, vd_tensor pos,
                        vd_tensor valid, int64_t heads, int64_t past, int64_t future, float cap);
int tow_dwconv_causal(const tow_ctx *c, vd_tensor y, vd_tensor x, vd_tensor w);
int tow_glu(const tow_ctx *c, vd_tensor y, vd_tensor x);
int tow_silu(const tow_ctx *c, vd_tensor y, vd_tensor x);
int tow_clip(const tow_ctx *c, vd_tensor y, vd_tensor x, float lim);
int tow_clamp(const tow_ctx *c, vd_tensor y, vd_tensor x, float lo, float hi);

#endif
