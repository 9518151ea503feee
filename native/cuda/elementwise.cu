/*
 * elementwise.cu: the elementwise operations (ew: GELU, softcap, tanh,
 * adds, products, a row repeated over rows) and AltUp's prediction and
 * correction.
 */
#include "common.cuh"

__global__ void k_ew(int op, float *y, const float *a, const float *b, int64_t n,
                     int64_t nb, float c)
{
	pdl_wait();
	pdl_launch();
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n)
		return;
	float x = a[i], r;
	switch (op) {
	case VD_EW_GELU:
		r = d_gelu(x);
		break;
	case VD_EW_GELU_MUL:
		r = d_gelu(x) * b[i];
		break;
	case VD_EW_SOFTCAP:
		r = c * d_tanh(x / c);
		break;
	case VD_EW_TANH:
		r = d_tanh(x);
		break;
	case VD_EW_ADD:
		r = x + b[i];
		break;
	case VD_EW_MUL:
		r = x * b[i];
		break;
	case VD_EW_DIV:
		r = x / b[i];
		break;
	case VD_EW_ADD_CONST:
		r = x + c;
		break;
	case VD_EW_SCALE:
		r = x * c;
		break;
	case VD_EW_ADD_REP:
		r = x + b[i % nb];
		break;
	case VD_EW_MUL_REP:
		r = x * b[i % nb];
		break;
	default: /* VD_EW_ADD_SCALED */
		r = (x + b[i]) * c;
		break;
	}
	y[i] = r;
}

__global__ void k_altup_predict(float *pred, const float *h, const float *coef,
                                int64_t n, int64_t d)
{
	pdl_wait();
	pdl_launch();
	int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (e >= n * d)
		return;
	int64_t t = e / d, nd = n * d;
	float h0 = h[e], h1 = h[nd + e], h2 = h[2 * nd + e], h3 = h[3 * nd + e];
	float hv[4] = {h0, h1, h2, h3}, o[4];
	altup_pred_elem(o, hv, coef + t * 16);
	for (int j = 0; j < 4; j++)
		pred[j * nd + e] = o[j];
}

__global__ void k_altup_correct(float *out, const float *pred, const float *act,
                                const float *cf, int64_t n, int64_t d)
{
	pdl_wait();
	pdl_launch();
	int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (e >= n * d)
		return;
	int64_t t = e / d, nd = n * d;
	float o[4];
	altup_corr_elem(o, pred + e, nd, act[e], cf + t * 4);
	for (int k = 0; k < 4; k++)
		out[k * nd + e] = o[k];
}

void c_ew(vd_stream *s, int op, vd_tensor y, vd_tensor a, vd_tensor b,
                 float c)
{
	ENTER(s);
	int64_t n = elems(y);
	if (n <= 0)
		return;
	int64_t nb = elems(b);
	if (op < VD_EW_GELU || op > VD_EW_MUL_REP || ((op == VD_EW_ADD_REP || op == VD_EW_MUL_REP) && nb <= 0)) {
		fail(s, VDC_EDTYPE);
		return;
	}
	launch(s, k_ew, blocks_for(n, EW), EW, 0, op, (float *)y.data, (const float *)a.data, (const float *)b.data, n, nb,
	       c);
	launched(s);
}

void c_altup_predict(vd_stream *s, vd_tensor pred, vd_tensor h,
                            vd_tensor coef, int64_t n, int64_t d)
{
	ENTER(s);
	if (n * d <= 0)
		return;
	launch(s, k_altup_predict, blocks_for(n * d, EW), EW, 0, (float *)pred.data, (const float *)h.data,
	                                                         (const float *)coef.data, n, d);
	launched(s);
}

void c_altup_correct(vd_stream *s, vd_tensor out, vd_tensor pred,
                            vd_tensor act, vd_tensor c, int64_t n, int64_t d)
{
	ENTER(s);
	if (n * d <= 0)
		return;
	launch(s, k_altup_correct, blocks_for(n * d, EW), EW, 0, (float *)out.data, (const float *)pred.data,
	                                                         (const float *)act.data, (const float *)c.data, n, d);
	launched(s);
}

