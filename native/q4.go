package native

// #include "cpu/kernels.h"
import "C"

import (
	"fmt"
	"math/bits"
	"unsafe"
)

// Packed 4-bit weights (Q4). Each row is cut into groups of Group columns
// (32, 64, 128, ...: a power of two, at least 32, dividing Cols); a group
// stores a float32 scale s and offset o and one nibble q (0..15) per
// weight, which stands for fmaf(s, q, o) exactly. In each block of 32
// columns (16 bytes) byte b holds column b in its low nibble and column
// 16 + b in its high one, the order the vector kernels unpack fastest.

// Q4Sizes returns the storage of a rows×cols Q4 matrix: bytes of nibbles
// and floats of scales and offsets.
func Q4Sizes(rows, cols, group int) (nibbleBytes, scaleFloats int) {
	return rows * cols / 2, rows * (cols / group) * 2
}

// Q4Fits reports whether a matrix of cols columns can be packed in groups
// of group columns.
func Q4Fits(cols, group int) bool {
	return group >= 32 && group&(group-1) == 0 && cols > 0 && cols%group == 0
}

// NewQ4 wraps packed storage as a Q4 Matrix (see Q4Sizes).
func NewQ4(rows, cols, group int, q []byte, so []float32) Matrix {
	if !Q4Fits(cols, group) {
		panic(fmt.Sprintf("native: NewQ4: %d columns do not fit groups of %d", cols, group))
	}
	nq, ns := Q4Sizes(rows, cols, group)
	if len(q) != nq || len(so) != ns {
		panic("native: NewQ4: storage does not match shape")
	}
	return Matrix{Rows: rows, Cols: cols, DType: Q4, Q4: q, Q4SO: so, Group: group}
}

// QuantizeQ4 packs the float32 rows w [rows, cols] into q and so (sized by
// Q4Sizes): per group, offset and scale from the minimum and maximum,
// refined by least squares while that lowers the squared error. The result
// depends neither on the thread count nor on the machine.
func QuantizeQ4(q []byte, so []float32, w []float32, rows, cols, group int) {
	if rows == 0 {
		return
	}
	check(Q4Fits(cols, group), "QuantizeQ4: columns do not fit the group size")
	nq, ns := Q4Sizes(rows, cols, group)
	check(len(q) >= nq && len(so) >= ns && len(w) >= rows*cols, "QuantizeQ4: buffer too short")
	C.vk_q4_quantize(bp(q), fp(so), fp(w), i64(rows), i64(cols), C.int(log2(group)))
}

// Quantize returns a Q4 copy of the float32 matrix m.
func Quantize(m Matrix, group int) Matrix {
	check(m.DType == F32, "Quantize: not a float32 matrix")
	nq, ns := Q4Sizes(m.Rows, m.Cols, group)
	q, so := make([]byte, nq), make([]float32, ns)
	QuantizeQ4(q, so, m.F32, m.Rows, m.Cols, group)
	return NewQ4(m.Rows, m.Cols, group, q, so)
}

// ReadRows writes rows [row0, row0+len(dst)/Cols) of m as float32 into dst
// (bf16 widened, q4 dequantized).
func (m Matrix) ReadRows(dst []float32, row0 int) {
	if len(dst) == 0 {
		return
	}
	check(m.Cols > 0 && len(dst)%m.Cols == 0, "ReadRows: dst is not whole rows")
	n := len(dst) / m.Cols
	check(row0 >= 0 && row0+n <= m.Rows, "ReadRows: rows out of range")
	switch m.DType {
	case F32:
		copy(dst, m.F32[row0*m.Cols:(row0+n)*m.Cols])
	case BF16:
		BF16ToF32(dst, m.BF16[row0*m.Cols:(row0+n)*m.Cols])
	case Q4:
		m.checkQ4("ReadRows")
		ng := m.Cols / m.Group
		C.vk_q4_dequant(fp(dst), bp(m.Q4[row0*m.Cols/2:]), fp(m.Q4SO[row0*ng*2:]),
			i64(n), i64(m.Cols), C.int(log2(m.Group)))
	default:
		panic("native: ReadRows: unknown dtype")
	}
}

// Dequantize returns m's weights as a float32 matrix.
func (m Matrix) Dequantize() Matrix {
	out := make([]float32, m.Rows*m.Cols)
	m.ReadRows(out, 0)
	return NewF32(m.Rows, m.Cols, out)
}

// Bytes reports the memory m's elements take.
func (m Matrix) Bytes() int64 {
	return int64(len(m.F32))*4 + int64(len(m.BF16))*2 + int64(len(m.Q4)) + int64(len(m.Q4SO))*4
}

func (m Matrix) checkQ4(op string) {
	nq, ns := Q4Sizes(m.Rows, m.Cols, m.Group)
	check(Q4Fits(m.Cols, m.Group) && len(m.Q4) >= nq && len(m.Q4SO) >= ns, op+": malformed q4 matrix")
}

func bp(b []byte) *C.uint8_t { return (*C.uint8_t)(unsafe.Pointer(unsafe.SliceData(b))) }

func log2(n int) int { return bits.TrailingZeros(uint(n)) }

// SparseMLPQ4 is Gemma 3n's MLP for a layer with activation sparsity over
// q4 weights, reading only the rows that survive the cutoff. For each token
// t (x [n, d], gate outputs g [n, inter]): cut = mean + population std · z
// of g_t; for each i with g_ti − cut > 0, h_i = gelu(g_ti − cut)·(x_t·up_i);
// y_t = Σ_i h_i·downT_i in increasing i (downT is down_proj transposed,
// [inter, d]). up_i·x_t is Linear's dot product, bit for bit; each token's
// result depends neither on n nor on the thread count. g is overwritten; h
// and idx are scratch of n·inter elements.
func SparseMLPQ4(y, g, h []float32, idx []int32, x []float32, up, downT Matrix, n int, z float32) {
	if n <= 0 {
		return
	}
	up.checkQ4("SparseMLPQ4")
	downT.checkQ4("SparseMLPQ4")
	inter, d := up.Rows, up.Cols
	check(downT.Rows == inter && downT.Cols == d && downT.Group == up.Group, "SparseMLPQ4: up and downT shapes differ")
	check(len(y) >= n*d && len(x) >= n*d, "SparseMLPQ4: x or y too short")
	check(len(g) >= n*inter && len(h) >= n*inter && len(idx) >= n*inter, "SparseMLPQ4: g, h or idx too short")
	cnt := make([]int32, 2*n+1)
	C.vk_sparse_mlp_q4(fp(y), fp(g), fp(h), ip(idx), ip(cnt[:n]), ip(cnt[n:]), fp(x),
		bp(up.Q4), fp(up.Q4SO), bp(downT.Q4), fp(downT.Q4SO), i64(n), i64(inter), i64(d), C.float(z),
		C.int(log2(up.Group)))
}
