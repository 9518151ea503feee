package native

// RowScratch holds the rows LinearRows gathers, reused across calls so that
// a decode step allocates nothing once it has grown.
type RowScratch struct {
	f32 []float32
	b16 []uint16
	q   []byte
	so  []float32
}

// LinearRows is Linear over the listed rows of w only: y[t, j] =
// Σ_c x[t, c]·W[rows[j], c] for t < n, y [n, len(rows)]. Every value is
// bit-identical to Linear's y[t, rows[j]] (a dot product depends on its row
// and x alone). It reads len(rows) rows of w instead of all of them: the
// sparse output head of constrained decoding. s may be nil.
func LinearRows(y, x []float32, w Matrix, rows []int32, n int, s *RowScratch) {
	if n <= 0 || len(rows) == 0 {
		return
	}
	check(len(y) >= n*len(rows), "LinearRows: y too short")
	for _, r := range rows {
		check(r >= 0 && int(r) < w.Rows, "LinearRows: row out of range")
	}
	if s == nil {
		s = &RowScratch{}
	}
	R, C := len(rows), w.Cols
	sub := Matrix{Rows: R, Cols: C, DType: w.DType, Group: w.Group}
	switch w.DType {
	case F32:
		s.f32 = grow(s.f32, R*C)
		for j, r := range rows {
			copy(s.f32[j*C:(j+1)*C], w.F32[int(r)*C:(int(r)+1)*C])
		}
		sub.F32 = s.f32[:R*C]
	case BF16:
		s.b16 = grow(s.b16, R*C)
		for j, r := range rows {
			copy(s.b16[j*C:(j+1)*C], w.BF16[int(r)*C:(int(r)+1)*C])
		}
		sub.BF16 = s.b16[:R*C]
	case Q4:
		w.checkQ4("LinearRows")
		qb, sf := C/2, 2*(C/w.Group)
		s.q, s.so = grow(s.q, R*qb), grow(s.so, R*sf)
		for j, r := range rows {
			copy(s.q[j*qb:(j+1)*qb], w.Q4[int(r)*qb:(int(r)+1)*qb])
			copy(s.so[j*sf:(j+1)*sf], w.Q4SO[int(r)*sf:(int(r)+1)*sf])
		}
		sub.Q4, sub.Q4SO = s.q[:R*qb], s.so[:R*sf]
	default:
		panic("native: LinearRows: unknown dtype")
	}
	Linear(y, x, sub, n)
}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}
