/*
 * cpu_elementwise_impl.h: elementwise and row ops, included once per SIMD
 * level. Row reductions use 8 lane accumulators over the row (a row tail is
 * padded with a neutral value) and v_hsum; each row belongs to one task.
 */

/* ---- elementwise ---- */

VK_INLINE V VK_ISA(ew_apply)(const int op, V a, V b, V s)
{
	switch (op) {
	case VK_EW_GELU:
		return v_gelu(a);
	case VK_EW_GELU_MUL:
		return v_mul(v_gelu(a), b);
	case VK_EW_SOFTCAP:
		return v_mul(s, v_tanh(v_div(a, s)));
	case VK_EW_TANH:
		return v_tanh(a);
	case VK_EW_EXP:
		return v_exp(a);
	case VK_EW_ADD:
		return v_add(a, b);
	case VK_EW_MUL:
		return v_mul(a, b);
	case VK_EW_DIV:
		return v_div(a, b);
	case VK_EW_ADD_CONST:
		return v_add(a, s);
	case VK_EW_SCALE:
		return v_mul(a, s);
	default: /* VK_EW_ADD_SCALED */
		return v_mul(v_add(a, b), s);
	}
}

VK_INLINE void VK_ISA(ew_range_g)(const int op, float *y, const float *a,
                                  const float *b, int64_t lo, int64_t hi,
                                  float s)
{
	const int bin = op == VK_EW_GELU_MUL || op == VK_EW_ADD ||
	                op == VK_EW_MUL || op == VK_EW_DIV ||
	                op == VK_EW_ADD_SCALED;
	V vs = v_set1(s);
	int64_t i = lo;
	for (; i + 8 <= hi; i += 8)
		v_store(y + i, VK_ISA(ew_apply)(op, v_load(a + i),
		                                bin ? v_load(b + i) : vs, vs));
	if (i < hi)
		v_store_part(y + i, hi - i,
		             VK_ISA(ew_apply)(op, v_load_part(a + i, hi - i, 0),
		                              bin ? v_load_part(b + i, hi - i, 1) : vs,
		                              vs));
}

#define VK_EW_CASE(OP)                                                     \
	case OP:                                                               \
		VK_ISA(ew_range_g)(OP, c->y, c->a, c->b, lo, hi, c->s);           \
		break;

typedef struct {
	int op;
	float *y;
	const float *a, *b;
	int64_t n, grain;
	float s;
} VK_ISA(ew_ctx);

static void VK_ISA(ew_task)(void *vc, int64_t task)
{
	const VK_ISA(ew_ctx) *c = vc;
	int64_t lo = task * c->grain;
	int64_t hi = c->n - lo < c->grain ? c->n : lo + c->grain;
	switch (c->op) {
		VK_EW_CASE(VK_EW_GELU)
		VK_EW_CASE(VK_EW_GELU_MUL)
		VK_EW_CASE(VK_EW_SOFTCAP)
		VK_EW_CASE(VK_EW_TANH)
		VK_EW_CASE(VK_EW_EXP)
		VK_EW_CASE(VK_EW_ADD)
		VK_EW_CASE(VK_EW_MUL)
		VK_EW_CASE(VK_EW_DIV)
		VK_EW_CASE(VK_EW_ADD_CONST)
		VK_EW_CASE(VK_EW_SCALE)
		VK_EW_CASE(VK_EW_ADD_SCALED)
	}
}

static void VK_ISA(ew)(int op, float *y, const float *a, const float *b,
                       int64_t n, float s)
{
	/* Transcendental ops cost ~40 flops an element: smaller tasks. */
	int heavy = op <= VK_EW_EXP;
	VK_ISA(ew_ctx) c = {op, y, a, b, n, heavy ? VK_EW_GRAIN / 8 : VK_EW_GRAIN,
	                    s};
	vk_par((n + c.grain - 1) / c.grain, (heavy ? 40.0 : 1.0) * (double)n,
	       VK_ISA(ew_task), &c);
}

typedef struct {
	float *dst;
	const uint16_t *src;
	int64_t n;
} VK_ISA(cvt_ctx);

static void VK_ISA(cvt_task)(void *vc, int64_t task)
{
	const VK_ISA(cvt_ctx) *c = vc;
	int64_t i = task * VK_EW_GRAIN;
	int64_t hi = c->n - i < VK_EW_GRAIN ? c->n : i + VK_EW_GRAIN;
	for (; i + 8 <= hi; i += 8)
		v_store(c->dst + i, v_load_bf16(c->src + i));
	for (; i < hi; i++) {
		uint32_t u = (uint32_t)c->src[i] << 16;
		memcpy(c->dst + i, &u, sizeof u);
	}
}

static void VK_ISA(bf16_to_f32)(float *dst, const uint16_t *src, int64_t n)
{
	VK_ISA(cvt_ctx) c = {dst, src, n};
	vk_par((n + VK_EW_GRAIN - 1) / VK_EW_GRAIN, (double)n, VK_ISA(cvt_task),
	       &c);
}

/* ---- row ops ---- */

typedef struct VK_ISA(row_ctx) VK_ISA(row_ctx);
struct VK_ISA(row_ctx) {
	void (*row)(const VK_ISA(row_ctx) *, int64_t);
	float *y;
	const float *x, *w, *u;
	int32_t *iout;
	const int32_t *pos;
	int64_t rows, dim, n, heads, rpt;
	float a;
};

static void VK_ISA(row_task)(void *vc, int64_t task)
{
	const VK_ISA(row_ctx) *c = vc;
	int64_t r = task * c->rpt, r1 = r + c->rpt < c->rows ? r + c->rpt : c->rows;
	for (; r < r1; r++)
		c->row(c, r);
}

/* rows_run runs c->row over c->rows rows of about width elements each,
 * costing cost flops per element. */
static void VK_ISA(rows_run)(VK_ISA(row_ctx) *c, int64_t width, double cost)
{
	if (c->rows <= 0)
		return;
	/* About 256K flops a task. */
	double rows = 262144.0 / (cost * (double)(width > 0 ? width : 1));
	c->rpt = rows < 1 ? 1 : (int64_t)rows;
	vk_par((c->rows + c->rpt - 1) / c->rpt,
	       cost * (double)c->rows * (double)width, VK_ISA(row_task), c);
}

/* sumsq: Σ x² over n elements with the 8-lane scheme. */
static float VK_ISA(sumsq)(const float *x, int64_t n)
{
	V acc = v_zero();
	int64_t i = 0;
	for (; i + 8 <= n; i += 8) {
		V v = v_load(x + i);
		acc = v_fma(v, v, acc);
	}
	if (i < n) {
		V v = v_load_part(x + i, n - i, 0);
		acc = v_fma(v, v, acc);
	}
	return v_hsum(acc);
}

static void VK_ISA(rmsnorm_row)(const VK_ISA(row_ctx) *c, int64_t r)
{
	int64_t dim = c->dim, i = 0;
	const float *x = c->x + r * dim;
	float *y = c->y + r * dim;
	float ss = VK_ISA(sumsq)(x, dim);
	float inv = (float)(1.0 / sqrt((double)(ss / (float)dim + c->a)));
	V vi = v_set1(inv);
	if (c->w) {
		for (; i + 8 <= dim; i += 8)
			v_store(y + i, v_mul(v_mul(v_load(x + i), vi), v_load(c->w + i)));
		if (i < dim)
			v_store_part(y + i, dim - i,
			             v_mul(v_mul(v_load_part(x + i, dim - i, 0), vi),
			                   v_load_part(c->w + i, dim - i, 0)));
	} else {
		for (; i + 8 <= dim; i += 8)
			v_store(y + i, v_mul(v_load(x + i), vi));
		if (i < dim)
			v_store_part(y + i, dim - i,
			             v_mul(v_load_part(x + i, dim - i, 0), vi));
	}
}

static void VK_ISA(rmsnorm)(float *y, const float *x, const float *w,
                            int64_t rows, int64_t dim, float eps)
{
	VK_ISA(row_ctx) c = {.row = VK_ISA(rmsnorm_row), .y = y, .x = x, .w = w,
	                     .rows = rows, .dim = dim, .a = eps};
	VK_ISA(rows_run)(&c, dim, 3);
}

static void VK_ISA(row_rms_row)(const VK_ISA(row_ctx) *c, int64_t r)
{
	float m = VK_ISA(sumsq)(c->x + r * c->dim, c->dim) / (float)c->dim;
	if (m < c->a)
		m = c->a;
	c->y[r] = (float)sqrt((double)m);
}

static void VK_ISA(row_rms)(float *out, const float *x, int64_t rows,
                            int64_t dim, float floor)
{
	VK_ISA(row_ctx) c = {.row = VK_ISA(row_rms_row), .y = out, .x = x,
	                     .rows = rows, .dim = dim, .a = floor};
	VK_ISA(rows_run)(&c, dim, 2);
}

/* scale_rows_row: row r of y times x[r] (scale_rows) or times w (mul_rows). */
static void VK_ISA(scale_rows_row)(const VK_ISA(row_ctx) *c, int64_t r)
{
	int64_t dim = c->dim, i = 0;
	float *y = c->y + r * dim;
	if (c->w) {
		for (; i + 8 <= dim; i += 8)
			v_store(y + i, v_mul(v_load(y + i), v_load(c->w + i)));
		if (i < dim)
			v_store_part(y + i, dim - i,
			             v_mul(v_load_part(y + i, dim - i, 0),
			                   v_load_part(c->w + i, dim - i, 0)));
		return;
	}
	V s = v_set1(c->x[r]);
	for (; i + 8 <= dim; i += 8)
		v_store(y + i, v_mul(v_load(y + i), s));
	if (i < dim)
		v_store_part(y + i, dim - i, v_mul(v_load_part(y + i, dim - i, 0), s));
}

static void VK_ISA(scale_rows)(float *x, const float *s, int64_t rows,
                               int64_t dim)
{
	VK_ISA(row_ctx) c = {.row = VK_ISA(scale_rows_row), .y = x, .x = s,
	                     .rows = rows, .dim = dim};
	VK_ISA(rows_run)(&c, dim, 1);
}

static void VK_ISA(mul_rows)(float *x, const float *w, int64_t rows,
                             int64_t dim)
{
	VK_ISA(row_ctx) c = {.row = VK_ISA(scale_rows_row), .y = x, .w = w,
	                     .rows = rows, .dim = dim};
	VK_ISA(rows_run)(&c, dim, 1);
}

/* sparse_cut: Gemma 3n's activation-sparsity cutoff of a gate row:
 * mean + population std · z. */
static float VK_ISA(sparse_cut)(const float *g, int64_t dim, float z)
{
	int64_t i;
	V acc = v_zero();
	for (i = 0; i + 8 <= dim; i += 8)
		acc = v_add(acc, v_load(g + i));
	if (i < dim)
		acc = v_add(acc, v_load_part(g + i, dim - i, 0));
	float mu = v_hsum(acc) / (float)dim;
	V vmu = v_set1(mu);
	acc = v_zero();
	for (i = 0; i + 8 <= dim; i += 8) {
		V d = v_sub(v_load(g + i), vmu);
		acc = v_fma(d, d, acc);
	}
	if (i < dim) {
		V d = v_sub(v_load_part(g + i, dim - i, mu), vmu);
		acc = v_fma(d, d, acc);
	}
	float sd = (float)sqrt((double)(v_hsum(acc) / (float)dim));
	return mu + sd * z;
}

static void VK_ISA(sparse_row)(const VK_ISA(row_ctx) *c, int64_t r)
{
	int64_t dim = c->dim, i;
	float *g = c->y + r * dim;
	const float *u = c->u + r * dim;
	V cut = v_set1(VK_ISA(sparse_cut)(g, dim, c->a)), zero = v_zero();
	for (i = 0; i + 8 <= dim; i += 8) {
		V v = v_sub(v_load(g + i), cut);
		v = v_select(v_lt(v, zero), zero, v);
		v_store(g + i, v_mul(v_gelu(v), v_load(u + i)));
	}
	if (i < dim) {
		V v = v_sub(v_load_part(g + i, dim - i, 0), cut);
		v = v_select(v_lt(v, zero), zero, v);
		v_store_part(g + i, dim - i,
		             v_mul(v_gelu(v), v_load_part(u + i, dim - i, 0)));
	}
}

static void VK_ISA(sparse_gelu_mul)(float *g, const float *u, int64_t rows,
                                    int64_t dim, float z)
{
	VK_ISA(row_ctx) c = {.row = VK_ISA(sparse_row), .y = g, .u = u,
	                     .rows = rows, .dim = dim, .a = z};
	VK_ISA(rows_run)(&c, dim, 45);
}

static void VK_ISA(lse_row)(const VK_ISA(row_ctx) *c, int64_t r)
{
	int64_t dim = c->dim, i;
	const float *x = c->x + r * dim;
	V m = v_set1(x[0]);
	for (i = 0; i + 8 <= dim; i += 8)
		m = v_max(v_load(x + i), m);
	if (i < dim)
		m = v_max(v_load_part(x + i, dim - i, x[0]), m);
	float mx = v_hmax(m);
	V vm = v_set1(mx);
	VD s = vd_zero();
	for (i = 0; i + 8 <= dim; i += 8)
		s = vd_add_f(s, v_exp(v_sub(v_load(x + i), vm)));
	if (i < dim) /* padding lanes: exp(-inf) = 0 */
		s = vd_add_f(s, v_exp(v_sub(v_load_part(x + i, dim - i, -INFINITY), vm)));
	c->y[r] = mx + (float)log(vd_hsum(s));
}

static void VK_ISA(logsumexp)(float *out, const float *x, int64_t rows,
                              int64_t dim)
{
	if (dim <= 0)
		return;
	VK_ISA(row_ctx) c = {.row = VK_ISA(lse_row), .y = out, .x = x,
	                     .rows = rows, .dim = dim};
	VK_ISA(rows_run)(&c, dim, 20);
}

static void VK_ISA(argmax_row)(const VK_ISA(row_ctx) *c, int64_t r)
{
	int64_t dim = c->dim, i;
	const float *x = c->x + r * dim;
	V m = v_set1(x[0]), nan = v_ne_self(m);
	for (i = 0; i + 8 <= dim; i += 8) {
		V v = v_load(x + i);
		m = v_max(v, m);
		nan = v_or(nan, v_ne_self(v));
	}
	if (i < dim) {
		V v = v_load_part(x + i, dim - i, x[0]);
		m = v_max(v, m);
		nan = v_or(nan, v_ne_self(v));
	}
	int64_t at = 0;
	if (v_mask(nan)) { /* NaNs: the reference's scan, exactly */
		for (int64_t j = 1; j < dim; j++)
			if (x[j] > x[at])
				at = j;
	} else { /* the first element equal to the maximum */
		float best = v_hmax(m);
		V vb = v_set1(best);
		for (; at + 8 <= dim; at += 8) {
			int msk = v_mask(v_eq(v_load(x + at), vb));
			if (msk) {
				at += __builtin_ctz((unsigned)msk);
				break;
			}
		}
		while (at < dim && x[at] != best)
			at++;
	}
	c->iout[r] = (int32_t)at;
}

static void VK_ISA(argmax)(int32_t *out, const float *x, int64_t rows,
                           int64_t dim)
{
	if (dim <= 0)
		return;
	VK_ISA(row_ctx) c = {.row = VK_ISA(argmax_row), .iout = out, .x = x,
	                     .rows = rows, .dim = dim};
	VK_ISA(rows_run)(&c, dim, 1);
}

static void VK_ISA(rope_row)(const VK_ISA(row_ctx) *c, int64_t t)
{
	int64_t hd = c->dim, half = hd / 2;
	float *cs = vk_scratch(2, (size_t)(2 * half + 16) * sizeof(float));
	float *sn = cs + half;
	float p = (float)c->pos[t];
	for (int64_t i = 0; i < half; i++) {
		double s, co;
		double f = (double)(p * c->w[i]); /* the angle in float32 */
#if defined(__GLIBC__)
		sincos(f, &s, &co);
#else
		s = sin(f);
		co = cos(f);
#endif
		cs[i] = (float)co;
		sn[i] = (float)s;
	}
	for (int64_t h = 0; h < c->heads; h++) {
		float *b = c->y + (t * c->heads + h) * hd;
		int64_t i = 0;
		for (; i + 8 <= half; i += 8) {
			V a = v_load(b + i), bb = v_load(b + half + i);
			V co = v_load(cs + i), s = v_load(sn + i);
			v_store(b + i, v_sub(v_mul(a, co), v_mul(bb, s)));
			v_store(b + half + i, v_add(v_mul(bb, co), v_mul(a, s)));
		}
		for (; i < half; i++) {
			float a = b[i], bb = b[half + i];
			b[i] = a * cs[i] - bb * sn[i];
			b[half + i] = bb * cs[i] + a * sn[i];
		}
	}
}

static void VK_ISA(rope)(float *x, const int32_t *pos, int64_t n,
                         int64_t heads, int64_t head_dim,
                         const float *inv_freq)
{
	VK_ISA(row_ctx) c = {.row = VK_ISA(rope_row), .y = x, .w = inv_freq,
	                     .pos = pos, .rows = n, .dim = head_dim,
	                     .heads = heads};
	/* cos/sin cost about 40 flops per angle. */
	VK_ISA(rows_run)(&c, heads * head_dim, 3.0 + 40.0 / (double)(heads > 0 ? heads : 1));
}

static void VK_ISA(altup_predict_row)(const VK_ISA(row_ctx) *c, int64_t t)
{
	int64_t n = c->n, d = c->dim;
	for (int j = 0; j < 4; j++) {
		const float *a = c->w + t * 16 + 4 * j;
		const float *hj = c->x + (j * n + t) * d;
		const float *h0 = c->x + t * d, *h1 = h0 + n * d, *h2 = h1 + n * d,
		            *h3 = h2 + n * d;
		float *o = c->y + (j * n + t) * d;
		V a0 = v_set1(a[0]), a1 = v_set1(a[1]), a2 = v_set1(a[2]),
		  a3 = v_set1(a[3]);
		int64_t i = 0;
		for (; i + 8 <= d; i += 8) {
			V s = v_load(hj + i);
			s = v_add(s, v_mul(a0, v_load(h0 + i)));
			s = v_add(s, v_mul(a1, v_load(h1 + i)));
			s = v_add(s, v_mul(a2, v_load(h2 + i)));
			s = v_add(s, v_mul(a3, v_load(h3 + i)));
			v_store(o + i, s);
		}
		for (; i < d; i++) {
			float s = hj[i];
			s += a[0] * h0[i];
			s += a[1] * h1[i];
			s += a[2] * h2[i];
			s += a[3] * h3[i];
			o[i] = s;
		}
	}
}

static void VK_ISA(altup_predict)(float *pred, const float *h,
                                  const float *coef, int64_t n, int64_t d)
{
	VK_ISA(row_ctx) c = {.row = VK_ISA(altup_predict_row), .y = pred, .x = h,
	                     .w = coef, .rows = n, .n = n, .dim = d};
	VK_ISA(rows_run)(&c, 4 * d, 8);
}

static void VK_ISA(altup_correct_row)(const VK_ISA(row_ctx) *c, int64_t t)
{
	int64_t n = c->n, d = c->dim;
	const float *act = c->u + t * d, *cf = c->w + t * 4;
	const float *p0 = c->x + t * d;
	V c0 = v_set1(cf[0]), c1 = v_set1(cf[1]), c2 = v_set1(cf[2]),
	  c3 = v_set1(cf[3]);
	int64_t i = 0;
	for (; i + 8 <= d; i += 8) {
		V in = v_sub(v_load(act + i), v_load(p0 + i));
		/* Each stream's pred chunk is read before out (maybe the same
		 * memory) is written. */
		V o0 = v_add(v_load(p0 + i), v_mul(c0, in));
		V o1 = v_add(v_load(p0 + n * d + i), v_mul(c1, in));
		V o2 = v_add(v_load(p0 + 2 * n * d + i), v_mul(c2, in));
		V o3 = v_add(v_load(p0 + 3 * n * d + i), v_mul(c3, in));
		v_store(c->y + t * d + i, o0);
		v_store(c->y + (n + t) * d + i, o1);
		v_store(c->y + (2 * n + t) * d + i, o2);
		v_store(c->y + (3 * n + t) * d + i, o3);
	}
	for (; i < d; i++) {
		float in = act[i] - p0[i];
		float o[4];
		for (int k = 0; k < 4; k++)
			o[k] = p0[k * n * d + i] + cf[k] * in;
		for (int k = 0; k < 4; k++)
			c->y[(k * n + t) * d + i] = o[k];
	}
}

static void VK_ISA(altup_correct)(float *out, const float *pred,
                                  const float *act, const float *cf, int64_t n,
                                  int64_t d)
{
	VK_ISA(row_ctx) c = {.row = VK_ISA(altup_correct_row), .y = out,
	                     .x = pred, .u = act, .w = cf, .rows = n, .n = n,
	                     .dim = d};
	VK_ISA(rows_run)(&c, 4 * d, 3);
}
