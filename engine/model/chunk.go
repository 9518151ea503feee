package model

import "fmt"

// A ChunkCutter is a Runner whose model restricts where a chunk of a
// batch's rows may end: some rows' results depend on rows after them that
// must share their Forward (Gemma 4's bidirectional image blocks, under
// use_bidirectional_attention "vision"). An Exec of such a model implements
// it, and so does a Runner over one (a scheduler's request); a Runner
// without it takes a chunk's end anywhere.
type ChunkCutter interface {
	// CutChunk returns the largest end in (lo, hi] at which the chunk of
	// rows beginning at lo may end, rows being the whole batch its chunks
	// are cut from (hi ≤ len(rows); an end at len(rows) is always taken,
	// since no row follows it there); or an error naming the rows that no
	// end in (lo, hi] keeps whole.
	CutChunk(rows []Row, lo, hi int) (int, error)
}

// NextCut returns the end of the chunk of rows beginning at lo that runs
// next on r: the largest end in (lo, hi] r's model takes (ChunkCutter),
// after hi is clipped to r.Rows() rows from lo and to len(rows); hi itself
// for a Runner without the rule. Every caller that runs a batch's rows in
// chunks cuts them here, so that a model's rule holds wherever it runs.
func NextCut(r Runner, rows []Row, lo, hi int) (int, error) {
	if lo < 0 || lo >= len(rows) {
		return 0, fmt.Errorf("model: a chunk from row %d of a batch of %d rows", lo, len(rows))
	}
	hi = min(hi, lo+r.Rows(), len(rows))
	if hi <= lo {
		return 0, fmt.Errorf("model: no chunk from row %d fits: the runner takes %d rows, the chunk may end at %d", lo, r.Rows(), hi)
	}
	c, ok := r.(ChunkCutter)
	if !ok {
		return hi, nil
	}
	end, err := c.CutChunk(rows, lo, hi)
	if err != nil {
		return 0, err
	}
	if end <= lo || end > hi {
		return 0, fmt.Errorf("model: the chunk from row %d was cut at row %d, outside (%d, %d]", lo, end, lo, hi)
	}
	return end, nil
}

// Cuts returns the ends of the chunks b's rows run in on r, in order (the
// last is len(b.Rows)), each from NextCut: all of them before anything
// runs, so that a batch no chunking keeps whole is refused untouched.
func Cuts(r Runner, b *Batch) ([]int, error) {
	var cuts []int
	for lo := 0; lo < len(b.Rows); {
		hi, err := NextCut(r, b.Rows, lo, len(b.Rows))
		if err != nil {
			return nil, err
		}
		cuts = append(cuts, hi)
		lo = hi
	}
	return cuts, nil
}
