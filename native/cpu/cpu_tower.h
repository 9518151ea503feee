/* cpu_tower.h: the CPU backend's tower operations (cpu_tower.c), for its
 * table in cpu_backend.c. */
#ifndef VERDICT_CPU_TOWER_H
#define VERDICT_CPU_TOWER_H

#include "../backend.h"

void vd_cpu_pointwise(vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor w);
void vd_cpu_conv2d(vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor w,
                   vd_tensor bias, const vd_conv *g);
void vd_cpu_dwconv2d(vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor w,
                     const vd_conv *g);
void vd_cpu_norm_act(vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor w,
                     vd_tensor gamma, vd_tensor res, int64_t dim, float eps,
                     int gelu);
void vd_cpu_avgpool2d(vd_stream *s, vd_tensor y, vd_tensor x, int64_t h,
                      int64_t w, int64_t c, int64_t k);
void vd_cpu_upsample_concat(vd_stream *s, vd_tensor y, vd_tensor a,
                            vd_tensor b, int64_t h, int64_t w, int64_t bh,
                            int64_t bw);
void vd_cpu_transpose(vd_stream *s, vd_tensor y, vd_tensor x);
void vd_cpu_mqa(vd_stream *s, vd_tensor out, vd_tensor q, vd_tensor k,
                vd_tensor v, int64_t heads, float scale);
void vd_cpu_im2col(vd_stream *s, vd_tensor y, vd_tensor x, const vd_conv *g,
                   int64_t kh, int64_t kw, int64_t stride_w);
void vd_cpu_cum_group_norm_relu(vd_stream *s, vd_tensor x, vd_tensor w,
                                float eps);
void vd_cpu_local_attention(vd_stream *s, vd_tensor out, vd_tensor q,
                            vd_tensor k, vd_tensor v, vd_tensor pos,
                            vd_tensor valid, int64_t heads, int64_t past,
                            int64_t future, float cap);
void vd_cpu_dwconv_causal(vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor w);
void vd_cpu_glu(vd_stream *s, vd_tensor y, vd_tensor x);
void vd_cpu_silu(vd_stream *s, vd_tensor y, vd_tensor x);
void vd_cpu_clip(vd_stream *s, vd_tensor y, vd_tensor x, float lim);
/* cpu_gemma4.c */
void vd_cpu_clamp(vd_stream *s, vd_tensor y, vd_tensor x, float lo, float hi);

#endif
