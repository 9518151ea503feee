package native

import (
	"slices"
	"testing"
)

// TestLoopEmit: a greedy loop step's bookkeeping on the built-in backend
// keeps each row's token at its step, marks rows done on stop tokens (and
// keeps them done), ignores the stop list's padding, and counts the rows
// left; a step outside the loop's steps writes no token.
func TestLoopEmit(t *testing.T) {
	be := Default()
	st, err := be.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	const n, steps = 3, 4
	for _, tc := range []struct {
		name      string
		iter      int32
		ids, done []int32
		stop      []int32
		wantOut   []int32 // row i's step-t token, or -9 untouched
		wantDone  []int32
		wantCond  int32
	}{
		{"first step, no stop", 1, []int32{5, 6, 7}, []int32{0, 0, 0}, []int32{-1, -1}, []int32{5, -9, -9, -9, 6, -9, -9, -9, 7, -9, -9, -9}, []int32{0, 0, 0}, 3},
		{"a stop token", 2, []int32{5, 9, 7}, []int32{0, 0, 0}, []int32{9, -1}, []int32{-9, 5, -9, -9, -9, 9, -9, -9, -9, 7, -9, -9}, []int32{0, 1, 0}, 2},
		{"done stays done", 4, []int32{5, 6, 9}, []int32{1, 0, 0}, []int32{-1, 9}, []int32{-9, -9, -9, 5, -9, -9, -9, 6, -9, -9, -9, 9}, []int32{1, 0, 1}, 1},
		{"padding matches nothing", 3, []int32{-1, 6, 2}, []int32{0, 0, 0}, []int32{-1, -1}, []int32{-9, -9, -1, -9, -9, -9, 6, -9, -9, -9, 2, -9}, []int32{0, 0, 0}, 3},
		{"past the steps", 5, []int32{9, 9, 9}, []int32{0, 0, 0}, []int32{9}, slices.Repeat([]int32{-9}, n*steps), []int32{1, 1, 1}, 0},
	} {
		out := slices.Repeat([]int32{-9}, n*steps)
		done, cond := slices.Clone(tc.done), []int32{-5}
		iter := []int32{tc.iter}
		st.LoopEmit(&LoopEmit{N: n, Steps: steps, Iter: be.hostI32(iter), IDs: be.hostI32(tc.ids), Stop: be.hostI32(tc.stop),
			Out: be.hostI32(out), Done: be.hostI32(done), Cond: be.hostI32(cond)})
		if err := st.Sync(); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(out, tc.wantOut) || !slices.Equal(done, tc.wantDone) || cond[0] != tc.wantCond {
			t.Errorf("%s: out %v done %v cond %d; want %v %v %d", tc.name, out, done, cond[0], tc.wantOut, tc.wantDone, tc.wantCond)
		}
	}
}
