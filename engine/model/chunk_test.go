package model_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"verdict/engine/model"
)

// cutter is a chunks Runner whose model takes a chunk's end only at the
// rows listed in ends (and at the batch's end), or answers with its
// answer when set (a rule that breaks its promise).
type cutter struct {
	chunks
	ends   []int
	answer int
}

func (c *cutter) CutChunk(rows []model.Row, lo, hi int) (int, error) {
	if c.answer != 0 {
		return c.answer, nil
	}
	if hi == len(rows) {
		return hi, nil
	}
	for e := hi; e > lo; e-- {
		if slices.Contains(c.ends, e) {
			return e, nil
		}
	}
	return 0, errors.New("no end")
}

// NextCut clips the caller's end to the runner's rows and the batch, then
// asks the runner's rule; a runner without one takes the clipped end, and
// a rule's answer outside (lo, hi] is refused.
func TestNextCut(t *testing.T) {
	rows := make([]model.Row, 10)
	for _, c := range []struct {
		name   string
		r      model.Runner
		lo, hi int
		want   int
		err    string
	}{
		{"no rule: the runner's rows", &chunks{rows: 4}, 0, 10, 4, ""},
		{"no rule: the caller's end", &chunks{rows: 4}, 2, 5, 5, ""},
		{"no rule: the batch's end", &chunks{rows: 4}, 8, 10, 10, ""},
		{"rule: before the block", &cutter{chunks{rows: 4}, []int{2, 3}, 0}, 0, 10, 3, ""},
		{"rule: the batch's end", &cutter{chunks{rows: 4}, nil, 0}, 7, 10, 10, ""},
		{"rule: no end", &cutter{chunks{rows: 4}, []int{9}, 0}, 0, 10, 0, "no end"},
		{"rule: an end past hi", &cutter{chunks{rows: 4}, nil, 6}, 0, 10, 0, "cut at row 6, outside (0, 4]"},
		{"rule: an end at lo", &cutter{chunks{rows: 4}, nil, 2}, 2, 10, 0, "cut at row 2, outside (2, 6]"},
		{"a runner of no rows", &chunks{rows: 0}, 0, 10, 0, "no chunk from row 0 fits"},
		{"lo past the batch", &chunks{rows: 4}, 10, 10, 0, "from row 10 of a batch of 10"},
		{"lo negative", &chunks{rows: 4}, -1, 10, 0, "from row -1"},
	} {
		got, err := model.NextCut(c.r, rows, c.lo, c.hi)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: %d, %v; want an error with %q", c.name, got, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%s: %d, %v; want %d", c.name, got, err, c.want)
		}
	}
}

// RunAll and Cuts follow the rule: the chunks end where it allows; a batch
// it cannot cut is refused before any chunk runs.
func TestRunAllCuts(t *testing.T) {
	var b model.Batch
	b.Add(nil, []int32{1, 2, 3, 4, 5, 6, 7}, 0)
	r := &cutter{chunks: chunks{rows: 3}, ends: []int{2, 5}}
	if err := model.RunAll(r, &b); err != nil {
		t.Fatal(err)
	}
	if want := [][]int32{{1, 2}, {3, 4, 5}, {6, 7}}; !slices.EqualFunc(r.got, want, slices.Equal) {
		t.Errorf("chunks %v, want %v", r.got, want)
	}
	if cuts, err := model.Cuts(r, &b); err != nil || !slices.Equal(cuts, []int{2, 5, 7}) {
		t.Errorf("Cuts: %v, %v; want [2 5 7]", cuts, err)
	}
	r = &cutter{chunks: chunks{rows: 3}, ends: []int{2}}
	if err := model.RunAll(r, &b); err == nil || len(r.got) != 0 {
		t.Errorf("a batch with no end from row 2: %v after %d chunks; want a refusal before any", err, len(r.got))
	}
}
