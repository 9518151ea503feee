/*
 * cpu_tower.c: the CPU backend's operations of the vision tower
 * (backend.h), each exactly one kernel of kernels_conv.h or
 * kernels_audio.h, so that a tower on the backend gives the bits of the
 * slice kernels.
 */
#include "cpu_internal.h"

#include "../backend.h"
#include "kernels_audio.h"
#include "kernels_conv.h"

#include <string.h>

#include "cpu_tower.h"

void vd_cpu_pointwise(vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor w)
{
	(void)s;
	vk_gemm_packed(y.data, w.rows, x.data, w.cols, w.data, x.rows, w.rows,
	               w.cols);
}

void vd_cpu_conv2d(vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor w,
                   vd_tensor bias, const vd_conv *g)
{
	(void)s;
	vk_conv2d(y.data, x.data, w.data, bias.data, g->h, g->w, g->c, w.rows,
	          g->oh, g->ow, g->k, g->stride, g->pad_t, g->pad_l);
}

void vd_cpu_dwconv2d(vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor w,
                     const vd_conv *g)
{
	(void)s;
	vk_dwconv2d(y.data, x.data, w.data, g->h, g->w, g->c, g->oh, g->ow, g->k,
	            g->stride, g->pad_t, g->pad_l);
}

void vd_cpu_norm_act(vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor w,
                     vd_tensor gamma, vd_tensor res, int64_t dim, float eps,
                     int gelu)
{
	(void)s;
	vk_rmsnorm_act(y.data, x.data, w.data, gamma.data, res.data,
	               x.rows * x.cols / dim, dim, eps, gelu);
}

void vd_cpu_avgpool2d(vd_stream *s, vd_tensor y, vd_tensor x, int64_t h,
                      int64_t w, int64_t c, int64_t k)
{
	(void)s;
	vk_avgpool2d(y.data, x.data, h, w, c, (int)k);
}

void vd_cpu_upsample_concat(vd_stream *s, vd_tensor y, vd_tensor a,
                            vd_tensor b, int64_t h, int64_t w, int64_t bh,
                            int64_t bw)
{
	(void)s;
	vk_upsample_concat(y.data, a.data, a.cols, b.data, b.cols, h, w, bh, bw);
}

void vd_cpu_transpose(vd_stream *s, vd_tensor y, vd_tensor x)
{
	(void)s;
	vk_chw_to_hwc(y.data, x.data, x.rows, x.cols);
}

void vd_cpu_mqa(vd_stream *s, vd_tensor out, vd_tensor q, vd_tensor k,
                vd_tensor v, int64_t heads, float scale)
{
	(void)s;
	vk_mqa(out.data, q.data, k.data, v.data, q.rows, heads, k.rows, k.cols,
	       scale);
}

void vd_cpu_im2col(vd_stream *s, vd_tensor y, vd_tensor x, const vd_conv *g,
                   int64_t kh, int64_t kw, int64_t stride_w)
{
	(void)s;
	vk_audio_im2col(y.data, x.data, g->h, g->w, g->c, g->oh, g->ow, kh, kw,
	                g->stride, stride_w, g->pad_t, g->pad_l);
}

void vd_cpu_cum_group_norm_relu(vd_stream *s, vd_tensor x, vd_tensor w,
                                float eps)
{
	(void)s;
	vk_audio_cum_group_norm_relu(x.data, x.rows, x.cols, w.rows * w.cols,
	                             w.data, eps);
}

/* The kernel takes the mask as bytes: converted in scratch. */
void vd_cpu_local_attention(vd_stream *s, vd_tensor out, vd_tensor q,
                            vd_tensor k, vd_tensor v, vd_tensor pos,
                            vd_tensor valid, int64_t heads, int64_t past,
                            int64_t future, float cap)
{
	(void)s;
	int64_t t = q.rows;
	uint8_t *m = vk_scratch(4, (size_t)t);
	const int32_t *vd = valid.data;
	for (int64_t i = 0; i < t; i++)
		m[i] = vd[i] != 0;
	vk_audio_local_attention(out.data, q.data, k.data, v.data, pos.data, m, t,
	                         heads, q.cols / heads, past, future, cap);
}

void vd_cpu_dwconv_causal(vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor w)
{
	(void)s;
	vk_audio_dwconv_causal(y.data, x.data, w.data, x.rows, x.cols, w.cols);
}

void vd_cpu_glu(vd_stream *s, vd_tensor y, vd_tensor x)
{
	(void)s;
	vk_audio_glu(y.data, x.data, y.rows, y.cols);
}

void vd_cpu_silu(vd_stream *s, vd_tensor y, vd_tensor x)
{
	(void)s;
	int64_t n = y.rows * y.cols;
	if (y.data != x.data)
		memmove(y.data, x.data, (size_t)n * sizeof(float));
	vk_audio_silu(y.data, n);
}

void vd_cpu_clip(vd_stream *s, vd_tensor y, vd_tensor x, float lim)
{
	(void)s;
	int64_t n = y.rows * y.cols;
	if (y.data != x.data)
		memmove(y.data, x.data, (size_t)n * sizeof(float));
	vk_audio_clip(y.data, n, lim);
}
