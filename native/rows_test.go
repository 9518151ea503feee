package native

import (
	"math"
	"testing"
)

// TestLinearRows holds LinearRows to Linear's values at the same rows, bit
// for bit, for every dtype, kernel set and a range of shapes.
func TestLinearRows(t *testing.T) {
	r := newRand(41)
	cases := []struct {
		dt            DType
		rows, cols, n int
		pick          []int32
	}{
		{F32, 300, 64, 1, []int32{0, 5, 299, 7, 7}},
		{F32, 97, 1000, 3, []int32{96, 1, 50}},
		{BF16, 130, 2048, 2, []int32{3, 129, 64, 0}},
		{Q4, 262, 64, 1, []int32{261, 0, 100, 101, 102}},
		{Q4, 70, 2048, 5, []int32{69, 33}},
		{Q4, 40, 512, 32, []int32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 39}},
	}
	for _, c := range cases {
		var w Matrix
		if c.dt == Q4 {
			w = Quantize(randMatrix(r, F32, c.rows, c.cols), 64)
		} else {
			w = randMatrix(r, c.dt, c.rows, c.cols)
		}
		x := randVec(r, c.n*c.cols, 1)
		simdLevels(t, func(t *testing.T) {
			full := make([]float32, c.n*c.rows)
			Linear(full, x, w, c.n)
			got := make([]float32, c.n*len(c.pick))
			var s RowScratch
			LinearRows(got, x, w, c.pick, c.n, &s)
			for tk := 0; tk < c.n; tk++ {
				for j, row := range c.pick {
					g, want := got[tk*len(c.pick)+j], full[tk*c.rows+int(row)]
					if math.Float32bits(g) != math.Float32bits(want) {
						t.Fatalf("%v %dx%d n=%d: token %d row %d: %v, Linear gives %v", c.dt, c.rows, c.cols, c.n, tk, row, g, want)
					}
				}
			}
		})
	}
}

func TestLinearRowsRange(t *testing.T) {
	w := NewF32(4, 8, make([]float32, 32))
	defer func() {
		if recover() == nil {
			t.Fatal("a row outside the matrix did not panic")
		}
	}()
	LinearRows(make([]float32, 1), make([]float32, 8), w, []int32{4}, 1, nil)
}
