package native

/*
#cgo CFLAGS: -O3 -std=c11 -pthread
#cgo LDFLAGS: -lm -pthread
#include "cpu/kernels.h"
*/
import "C"

import (
	"runtime"
	"unsafe"

	_ "verdict/native/cpu" // the CPU backend's C (cpu/kernels.h, vd_cpu_backend)
)

// The kernels are C (cpu/cpu_*.c, see cpu/kernels.h), one cgo call per operation.
// Slices are passed as pointers to their first element; C never keeps them.

func init() { C.vk_init(C.int(runtime.NumCPU())) }

// SetThreads sets the number of worker threads the kernels use (n <= 0: one
// per CPU core). Results are identical for every thread count.
func SetThreads(n int) {
	if n <= 0 {
		n = runtime.NumCPU()
	}
	C.vk_set_threads(C.int(n))
}

// Threads reports the number of worker threads the kernels use.
func Threads() int { return int(C.vk_threads()) }

// setSIMD selects the C kernel set (0: portable, 1: best the CPU has) and
// reports the active one (0: portable, 1: AVX2+FMA, 2: NEON). For tests.
func setSIMD(level int) int { return int(C.vk_set_simd(C.int(level))) }

// useSIMD selects one kernel set (0 portable, 1 AVX2, 2 NEON, 3 AVX-512);
// false when this machine lacks it. For tests.
func useSIMD(set int) bool { return C.vk_use_simd(C.int(set)) != 0 }

func fp(s []float32) *C.float { return (*C.float)(unsafe.Pointer(unsafe.SliceData(s))) }

func ip(s []int32) *C.int32_t { return (*C.int32_t)(unsafe.Pointer(unsafe.SliceData(s))) }

func i64(n int) C.int64_t { return C.int64_t(n) }

func check(ok bool, msg string) {
	if !ok {
		panic("native: " + msg)
	}
}

// Linear computes y[t, r] = Σ_c x[t, c]·W[r, c] for t < n.
// x is [n, W.Cols], y is [n, W.Rows]; y must not alias x.
// Each row of y is bit-identical to what a call with n = 1 gives, for any
// thread count and kernel set. Every dot product is summed the same way:
// 16 lanes (lane l takes the columns c ≡ l mod 16), fresh lane sums per
// block of 512 columns added into outer sums, a fixed tree over the lanes,
// the last Cols%16 columns added in order. A Q4 matrix gives exactly the
// result of its dequantized float32 weights (Dequantize).
func Linear(y, x []float32, w Matrix, n int) {
	if n <= 0 || w.Rows <= 0 {
		return
	}
	check(w.Cols >= 0 && len(x) >= n*w.Cols, "Linear: x too short")
	check(len(y) >= n*w.Rows, "Linear: y too short")
	switch w.DType {
	case F32:
		check(len(w.F32) >= w.Rows*w.Cols, "Linear: matrix has no f32 data")
		C.vk_linear_f32(fp(y), fp(x), fp(w.F32), i64(n), i64(w.Rows), i64(w.Cols))
	case BF16:
		check(len(w.BF16) >= w.Rows*w.Cols, "Linear: matrix has no bf16 data")
		C.vk_linear_bf16(fp(y), fp(x), (*C.uint16_t)(unsafe.Pointer(unsafe.SliceData(w.BF16))),
			i64(n), i64(w.Rows), i64(w.Cols))
	case Q4:
		w.checkQ4("Linear")
		C.vk_linear_q4(fp(y), fp(x), bp(w.Q4), fp(w.Q4SO), i64(n), i64(w.Rows), i64(w.Cols), C.int(log2(w.Group)))
	default:
		panic("native: Linear: unknown dtype")
	}
}

// RMSNorm computes y = x / sqrt(mean(x²) + eps) · w over each row of width
// dim; w == nil means no scale. y may alias x.
func RMSNorm(y, x, w []float32, dim int, eps float32) {
	check(dim > 0, "RMSNorm: dim <= 0")
	rows := len(x) / dim
	if rows == 0 {
		return
	}
	check(len(y) >= rows*dim, "RMSNorm: y too short")
	check(w == nil || len(w) >= dim, "RMSNorm: w too short")
	C.vk_rmsnorm(fp(y), fp(x), fp(w), i64(rows), i64(dim), C.float(eps))
}

// RowRMS writes out[r] = sqrt(max(mean(x_r²), floor)) for each row of width dim.
func RowRMS(out, x []float32, dim int, floor float32) {
	if len(out) == 0 {
		return
	}
	check(dim > 0, "RowRMS: dim <= 0")
	check(len(x) >= len(out)*dim, "RowRMS: x too short")
	C.vk_row_rms(fp(out), fp(x), i64(len(out)), i64(dim), C.float(floor))
}

// ScaleRows multiplies row r (width dim) of x by s[r], in place.
func ScaleRows(x, s []float32, dim int) {
	if len(s) == 0 || dim <= 0 {
		return
	}
	check(len(x) >= len(s)*dim, "ScaleRows: x too short")
	C.vk_scale_rows(fp(x), fp(s), i64(len(s)), i64(dim))
}

// RoPE rotates x [n, heads, headDim] in place with the rotate-half (NeoX)
// convention: position pos[t], frequencies invFreq[headDim/2]. The angle
// float32(pos)·invFreq[i] is float32; its cos and sin are rounded from float64.
func RoPE(x []float32, pos []int32, heads, headDim int, invFreq []float32) {
	if len(pos) == 0 || heads <= 0 || headDim < 2 {
		return
	}
	check(len(x) >= len(pos)*heads*headDim, "RoPE: x too short")
	check(len(invFreq) >= headDim/2, "RoPE: invFreq too short")
	C.vk_rope(fp(x), ip(pos), i64(len(pos)), i64(heads), i64(headDim), fp(invFreq))
}

// Attention computes causal (optionally sliding-window) attention; see AttnParams.
// Each query row's output is independent of the other rows (and of NQ).
func Attention(out, q, k, v []float32, p AttnParams) {
	if p.NQ <= 0 || p.HeadsQ <= 0 || p.HeadDim <= 0 {
		return
	}
	check(p.HeadsKV > 0 && p.HeadsQ%p.HeadsKV == 0, "Attention: HeadsQ is not a multiple of HeadsKV")
	check(len(p.QPos) >= p.NQ, "Attention: QPos too short")
	nq := p.NQ * p.HeadsQ * p.HeadDim
	check(len(q) >= nq && len(out) >= nq, "Attention: q or out too short")
	check(p.NK >= 0 && len(k) >= p.NK*p.HeadsKV*p.HeadDim && len(v) >= p.NK*p.HeadsKV*p.HeadDim,
		"Attention: k or v too short")
	C.vk_attention(fp(out), fp(q), fp(k), fp(v), ip(p.QPos), i64(p.NQ), i64(p.NK),
		i64(p.HeadsQ), i64(p.HeadsKV), i64(p.HeadDim), i64(p.Window), C.float(p.Scale))
}

// GeluTanh applies tanh-approximated GELU in place.
func GeluTanh(x []float32) {
	if len(x) > 0 {
		C.vk_gelu_tanh(fp(x), i64(len(x)))
	}
}

// GeluMul computes g = gelu_tanh(g)·u elementwise, in place in g.
func GeluMul(g, u []float32) {
	if len(g) == 0 {
		return
	}
	check(len(u) >= len(g), "GeluMul: u too short")
	C.vk_gelu_mul(fp(g), fp(u), i64(len(g)))
}

// SparseGeluMul applies Gemma 3n's Gaussian top-k to each row of g (width
// dim): g = relu(g − (mean + std·z)) with population std, then
// g = gelu_tanh(g)·u, in place in g.
func SparseGeluMul(g, u []float32, dim int, z float32) {
	if len(g) == 0 {
		return
	}
	check(dim > 0 && len(g)%dim == 0, "SparseGeluMul: len(g) is not a multiple of dim")
	check(len(u) >= len(g), "SparseGeluMul: u too short")
	C.vk_sparse_gelu_mul(fp(g), fp(u), i64(len(g)/dim), i64(dim), C.float(z))
}

// Softcap computes x = cap·tanh(x/cap) in place.
func Softcap(x []float32, cap float32) {
	if len(x) > 0 {
		C.vk_softcap(fp(x), i64(len(x)), C.float(cap))
	}
}

// Tanh applies tanh in place.
func Tanh(x []float32) {
	if len(x) > 0 {
		C.vk_tanh(fp(x), i64(len(x)))
	}
}

// expInPlace applies the kernels' vectorised exp in place. For tests.
func expInPlace(x []float32) {
	if len(x) > 0 {
		C.vk_exp(fp(x), i64(len(x)))
	}
}

// Add computes y = a + b elementwise; y may alias a or b.
func Add(y, a, b []float32) {
	if len(y) == 0 {
		return
	}
	check(len(a) >= len(y) && len(b) >= len(y), "Add: input too short")
	C.vk_add(fp(y), fp(a), fp(b), i64(len(y)))
}

// Mul computes y = a·b elementwise; y may alias a or b.
func Mul(y, a, b []float32) {
	if len(y) == 0 {
		return
	}
	check(len(a) >= len(y) && len(b) >= len(y), "Mul: input too short")
	C.vk_mul(fp(y), fp(a), fp(b), i64(len(y)))
}

// MulRows multiplies every row (width len(w)) of x by w elementwise, in place.
func MulRows(x, w []float32) {
	if len(x) == 0 {
		return
	}
	check(len(w) > 0 && len(x)%len(w) == 0, "MulRows: len(x) is not a multiple of len(w)")
	C.vk_mul_rows(fp(x), fp(w), i64(len(x)/len(w)), i64(len(w)))
}

// Scale computes x = x·s in place.
func Scale(x []float32, s float32) {
	if len(x) > 0 {
		C.vk_scale(fp(x), i64(len(x)), C.float(s))
	}
}

// AddScaled computes y[i] = (y[i] + a[i])·s in place.
func AddScaled(y, a []float32, s float32) {
	if len(y) == 0 {
		return
	}
	check(len(a) >= len(y), "AddScaled: a too short")
	C.vk_add_scaled(fp(y), fp(a), i64(len(y)), C.float(s))
}

// AltUpPredict mixes the four AltUp streams. h and pred are [4, n, d]
// (stream-major); coef is [n, 16] with A[j][k] = coef[t*16 + 4j + k]:
// pred_j[t] = h_j[t] + Σ_k A[j][k]·h_k[t].
func AltUpPredict(pred, h, coef []float32, n, d int) {
	if n <= 0 || d <= 0 {
		return
	}
	check(len(pred) >= 4*n*d && len(h) >= 4*n*d, "AltUpPredict: pred or h too short")
	check(len(coef) >= 16*n, "AltUpPredict: coef too short")
	C.vk_altup_predict(fp(pred), fp(h), fp(coef), i64(n), i64(d))
}

// AltUpCorrect computes out_i[t] = pred_i[t] + c[t*4+i]·(act[t] − pred_0[t])
// for the four streams; out and pred are [4, n, d], act is [n, d], c is [n, 4].
// out may alias pred.
func AltUpCorrect(out, pred, act, c []float32, n, d int) {
	if n <= 0 || d <= 0 {
		return
	}
	check(len(out) >= 4*n*d && len(pred) >= 4*n*d, "AltUpCorrect: out or pred too short")
	check(len(act) >= n*d && len(c) >= 4*n, "AltUpCorrect: act or c too short")
	C.vk_altup_correct(fp(out), fp(pred), fp(act), fp(c), i64(n), i64(d))
}

// LogSumExp writes out[r] = log Σ exp(x_r) for each row of width dim.
func LogSumExp(out, x []float32, dim int) {
	if len(out) == 0 {
		return
	}
	check(dim > 0 && len(x) >= len(out)*dim, "LogSumExp: x too short")
	C.vk_logsumexp(fp(out), fp(x), i64(len(out)), i64(dim))
}

// Argmax writes out[r] = the index of the largest element of each row of
// width dim (the lowest index on ties).
func Argmax(out []int32, x []float32, dim int) {
	if len(out) == 0 {
		return
	}
	check(dim > 0 && len(x) >= len(out)*dim, "Argmax: x too short")
	C.vk_argmax(ip(out), fp(x), i64(len(out)), i64(dim))
}
