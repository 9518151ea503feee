/*
 * gather.cu: the memory work: embed (rows of a table, dequantised and
 * scaled), gather, scatter and copy2d.
 */
#include "common.cuh"

__global__ void k_embed(float *y, const void *t, const float *so, int dtype,
                        const int32_t *ids, int64_t n, int64_t C, int lg,
                        float scale)
{
	pdl_wait();
	pdl_launch();
	int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (e >= n * C)
		return;
	int64_t i = e / C, c = e % C, r = ids[i];
	float v;
	if (dtype == VD_F32) {
		v = ((const float *)t)[r * C + c];
	} else if (dtype == VD_BF16) {
		v = bf2f(((const uint16_t *)t)[r * C + c]);
	} else {
		int64_t j = c & ~(int64_t)31, b = c & 31;
		uint32_t q = ((const uint8_t *)t)[r * (C / 2) + j / 2 + (b & 15)];
		float nib = (float)(b >= 16 ? (q >> 4) : (q & 15u));
		const float *sr = so + r * ((C >> lg) * 2) + (c >> lg) * 2;
		v = fmaf(sr[0], nib, sr[1]);
	}
	y[e] = v * scale;
}

/* k_rows: y[yi(i)·C + c] = x[xi(i)·C + c]; gather (xi = idx) or scatter
 * (yi = idx). */
__global__ void k_rows(float *y, const float *x, const int32_t *idx, int scatter,
                       int64_t n, int64_t C)
{
	pdl_wait();
	pdl_launch();
	int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (e >= n * C)
		return;
	int64_t i = e / C, c = e % C;
	if (scatter)
		y[idx[i] * C + c] = x[i * C + c];
	else
		y[i * C + c] = x[idx[i] * C + c];
}

__global__ void k_copy2d(float *y, int64_t ys, const float *x, int64_t xs,
                         int64_t rows, int64_t cols)
{
	pdl_wait();
	pdl_launch();
	int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (e >= rows * cols)
		return;
	int64_t r = e / cols, c = e % cols;
	y[r * ys + c] = x[r * xs + c];
}

void c_embed(vd_stream *s, vd_tensor y, vd_tensor t, vd_tensor ids,
                    float scale)
{
	ENTER(s);
	int64_t n = elems(ids), C = t.cols;
	if (n * C <= 0)
		return;
	if (t.dtype != VD_F32 && t.dtype != VD_BF16 && t.dtype != VD_Q4) {
		fail(s, VDC_EDTYPE);
		return;
	}
	launch(s, k_embed, blocks_for(n * C, EW), EW, 0, (float *)y.data, t.data, (const float *)t.aux, t.dtype,
	                                                 (const int32_t *)ids.data, n, C,
	                                                 t.dtype == VD_Q4 ? lg2(t.group) : 0, scale);
	launched(s);
}

void c_gather(vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor idx)
{
	ENTER(s);
	int64_t n = elems(idx), C = x.cols;
	if (n * C <= 0)
		return;
	launch(s, k_rows, blocks_for(n * C, EW), EW, 0, (float *)y.data, (const float *)x.data, (const int32_t *)idx.data, 0, n, C);
	launched(s);
}

void c_scatter(vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor idx)
{
	ENTER(s);
	int64_t n = elems(idx), C = x.cols;
	if (n * C <= 0)
		return;
	launch(s, k_rows, blocks_for(n * C, EW), EW, 0, (float *)y.data, (const float *)x.data, (const int32_t *)idx.data, 1, n, C);
	launched(s);
}

void c_copy2d(vd_stream *s, vd_tensor y, int64_t ys, vd_tensor x,
                     int64_t xs, int64_t rows, int64_t cols)
{
	ENTER(s);
	if (rows * cols <= 0)
		return;
	launch(s, k_copy2d, blocks_for(rows * cols, EW), EW, 0, (float *)y.data, ys, (const float *)x.data, xs, rows, cols);
	launched(s);
}

