/*
 * cpu_gemma4.c: the CPU backend's operations added for Gemma 4's towers
 * (engine/gemma4's vision_ops.go and audio_ops.go): the reference the
 * CUDA kernels are checked against (native/cuda/tower_check.cu).
 */
#include "../backend.h"

#include "cpu_tower.h"

/* vk_clamp writes y = min(max(x, lo), hi) over n elements; a NaN stays
 * NaN (both comparisons are false), as Go's min(max(v, lo), hi) does. y
 * may be x. */
static void vk_clamp(float *y, const float *x, int64_t n, float lo, float hi)
{
	for (int64_t i = 0; i < n; i++) {
		float v = x[i];
		v = v < lo ? lo : v;
		y[i] = v > hi ? hi : v;
	}
}

void vd_cpu_clamp(vd_stream *s, vd_tensor y, vd_tensor x, float lo, float hi)
{
	(void)s;
	vk_clamp(y.data, x.data, y.rows * y.cols, lo, hi);
}
