/*
 * cpu_q4.c: packing float32 weights into q4 (see kernels.h).
 *
 * Each group of g weights gets an offset and a scale: first the group's
 * minimum and (max − min)/15, then up to two least-squares refits of both
 * to the chosen nibbles, each kept only when it lowers the group's squared
 * error. Plain float and double arithmetic in a fixed order, one group at a
 * time: the result depends neither on the thread count nor on the machine.
 */
#include "cpu_internal.h"

#include <math.h>

/* q4_fit picks the nibbles of w[0..g) for scale s and offset o into nb and
 * returns the squared error of fmaf(s, nb, o) against w. */
static double q4_fit(const float *w, int64_t g, float s, float o,
                     uint8_t *nb)
{
	double err = 0;
	float inv = s > 0 ? 1.0f / s : 0.0f;
	for (int64_t i = 0; i < g; i++) {
		float v = floorf((w[i] - o) * inv + 0.5f);
		v = v < 0 ? 0 : v > 15 ? 15 : v;
		nb[i] = (uint8_t)v;
		double e = (double)fmaf(s, v, o) - (double)w[i];
		err += e * e;
	}
	return err;
}

static void q4_group(const float *w, int64_t g, uint8_t *nb, uint8_t *tmp,
                     float *so)
{
	float mn = w[0], mx = w[0];
	for (int64_t i = 1; i < g; i++) {
		mn = w[i] < mn ? w[i] : mn;
		mx = w[i] > mx ? w[i] : mx;
	}
	float s = (mx - mn) / 15.0f, o = mn;
	if (!(s > 0) || !isfinite(s)) { /* constant group (or not finite) */
		so[0] = 0;
		so[1] = mn;
		memset(nb, 0, (size_t)g);
		return;
	}
	double err = q4_fit(w, g, s, o, nb);
	for (int it = 0; it < 2; it++) {
		/* Least squares for w ≈ s·q + o given the nibbles. */
		double sq = 0, sqq = 0, sw = 0, sqw = 0;
		for (int64_t i = 0; i < g; i++) {
			double q = nb[i];
			sq += q;
			sqq += q * q;
			sw += w[i];
			sqw += q * w[i];
		}
		double den = (double)g * sqq - sq * sq;
		if (!(den > 0))
			break;
		double ns = ((double)g * sqw - sq * sw) / den;
		double no = (sw - ns * sq) / (double)g;
		if (!(ns > 0))
			break;
		float fs = (float)ns, fo = (float)no;
		double e = q4_fit(w, g, fs, fo, tmp);
		if (!(e < err))
			break;
		err = e;
		s = fs;
		o = fo;
		memcpy(nb, tmp, (size_t)g);
	}
	so[0] = s;
	so[1] = o;
}

typedef struct {
	uint8_t *q;
	float *so;
	const float *w;
	int64_t rows, cols, per;
	int lg;
} q4q_ctx;

static void q4q_task(void *vc, int64_t task)
{
	const q4q_ctx *c = vc;
	int64_t g = (int64_t)1 << c->lg, ng = c->cols >> c->lg;
	int64_t r0 = task * c->per, r1 = r0 + c->per < c->rows ? r0 + c->per : c->rows;
	uint8_t *nb = vk_scratch(2, (size_t)(2 * g));
	for (int64_t r = r0; r < r1; r++) {
		const float *wr = c->w + r * c->cols;
		uint8_t *qr = c->q + r * (c->cols / 2);
		for (int64_t k = 0; k < ng; k++) {
			q4_group(wr + k * g, g, nb, nb + g, c->so + (r * ng + k) * 2);
			/* Pack: in each 32-column block, byte b holds columns b (low
			 * nibble) and 16 + b (high). */
			for (int64_t j = 0; j < g; j += 32) {
				uint8_t *d = qr + (k * g + j) / 2;
				for (int b = 0; b < 16; b++)
					d[b] = (uint8_t)(nb[j + b] | nb[j + 16 + b] << 4);
			}
		}
	}
}

void vk_q4_quantize(uint8_t *q, float *so, const float *w, int64_t rows,
                    int64_t cols, int lg)
{
	q4q_ctx c = {q, so, w, rows, cols, 0, lg};
	c.per = cols >= 8192 ? 1 : 8192 / cols;
	vk_par((rows + c.per - 1) / c.per, 40.0 * (double)rows * (double)cols,
	       q4q_task, &c);
}
