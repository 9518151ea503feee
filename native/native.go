// Package native holds Verdict's compute kernels: the operations the engine's
// forward passes are built from. Every slice is row-major float32 unless a
// doc comment says otherwise. Callers own all memory; kernels never allocate
// on the hot path and never keep a slice after they return.
//
// The kernels are C (cpu/kernels.h, cpu/cpu_*.c: package native/cpu), one
// cgo call per operation, run on a persistent thread pool (SetThreads) with
// AVX2+FMA, NEON or portable code picked at run time; the three give
// bit-identical results.
//
// Results do not depend on the number of threads: each output element is
// computed by exactly one thread in a fixed order.
package native

// DType is the element type of a weight matrix.
type DType int

// Weight element types.
const (
	F32 DType = iota
	BF16
	Q4  // packed 4-bit, a float32 scale and offset per group (see NewQ4)
	I32 // int32 (token ids, positions, indices)
)

func (d DType) String() string {
	switch d {
	case F32:
		return "f32"
	case BF16:
		return "bf16"
	case Q4:
		return "q4"
	case I32:
		return "i32"
	}
	return "unknown"
}

// Matrix is a weight matrix of Rows×Cols in PyTorch's Linear layout
// [out, in]. Exactly one of F32, BF16 and Q4 holds its elements; a Q4
// matrix also has Q4SO and Group.
type Matrix struct {
	Rows, Cols int
	DType      DType
	F32        []float32
	BF16       []uint16
	Q4         []byte    // [Rows, Cols/2] nibbles (see NewQ4)
	Q4SO       []float32 // [Rows, Cols/Group, 2] scale and offset
	Group      int       // columns per q4 group
}

// NewF32 wraps float32 elements as a Matrix.
func NewF32(rows, cols int, data []float32) Matrix {
	if len(data) != rows*cols {
		panic("native: NewF32: data length does not match shape")
	}
	return Matrix{Rows: rows, Cols: cols, DType: F32, F32: data}
}

// NewBF16 wraps bfloat16 elements (raw bits) as a Matrix.
func NewBF16(rows, cols int, data []uint16) Matrix {
	if len(data) != rows*cols {
		panic("native: NewBF16: data length does not match shape")
	}
	return Matrix{Rows: rows, Cols: cols, DType: BF16, BF16: data}
}

// AttnParams describes one causal attention call over a key/value cache.
//
// q is [NQ, HeadsQ, HeadDim]; k and v are [NK, HeadsKV, HeadDim] where key j
// sits at position j; out is [NQ, HeadsQ, HeadDim]. Query i sits at position
// QPos[i] and sees keys j with j <= QPos[i] and, when Window > 0,
// j > QPos[i]-Window. Query head h reads key/value head h/(HeadsQ/HeadsKV).
// Scores are scaled by Scale before the softmax.
type AttnParams struct {
	NQ, NK                   int
	HeadsQ, HeadsKV, HeadDim int
	QPos                     []int32
	Window                   int
	Scale                    float32
}
