package native

/*
#include "backend_call.h"
*/
import "C"

// A loop is a graph whose one run repeats its body on the device until a
// condition clears: a decode whose tokens the device chooses never waits
// for the host between tokens. BeginLoop starts recording the body
// (false where the backend cannot: the CPU, whose callers run the same
// body from the host), LoopWhile ends it, and EndGraph returns the loop;
// RunGraph runs it and Free releases it, as for any graph.

// BeginLoop starts recording a loop's body instead of running the
// stream's operations; false where the backend does not record loops.
func (s *Stream) BeginLoop() bool {
	s.recording = C.vdc_loop_begin(s.be.t, s.s) == 0
	return s.recording
}

// LoopWhile ends a loop's body: a run of the loop runs the body again
// while cond[0] != 0 and iter[0] < limit (I32 [1, 1] each, read after
// every run of the body). Outside a loop's recording it does nothing.
func (s *Stream) LoopWhile(cond, iter Tensor, limit int) {
	check(cond.DType() == I32 && iter.DType() == I32 && cond.Len() >= 1 && iter.Len() >= 1, "Stream.LoopWhile: cond and iter are I32 [1, 1]")
	C.vdc_loop_while(s.be.t, s.s, cond.t, iter.t, C.int64_t(limit))
}

// LoopRows is the row set-up of step t = Iter[0] of a decode of N rows
// whose tokens IDs [1, N] the device chose: Pos[i] = Pos0[i] + t,
// Slot0[i] = Slots0[i, t] and Slot1[i] = Slots1[i, t] ([N, Steps]: the
// key/value slots reserved for each step; t past Steps−1 reads the last),
// Row[i] = LUT[IDs[i]] (0 for an id outside LUT); then Iter[0] = t+1.
// Every tensor is I32.
type LoopRows struct {
	N, Steps                                                     int
	Iter, IDs, LUT, Row, Pos0, Pos, Slots0, Slots1, Slot0, Slot1 Tensor
}

// LoopRows enqueues r's set-up.
func (s *Stream) LoopRows(r *LoopRows) {
	if r.N == 0 {
		return
	}
	check(r.Steps > 0, "Stream.LoopRows: no steps")
	for _, t := range []Tensor{r.Iter, r.IDs, r.LUT, r.Row, r.Pos0, r.Pos, r.Slots0, r.Slots1, r.Slot0, r.Slot1} {
		check(t.DType() == I32 && !t.Nil(), "Stream.LoopRows: every tensor is I32")
	}
	for _, t := range []Tensor{r.IDs, r.Row, r.Pos0, r.Pos, r.Slot0, r.Slot1} {
		check(t.Len() >= r.N, "Stream.LoopRows: a row tensor shorter than N")
	}
	check(r.Slots0.Len() >= r.N*r.Steps && r.Slots1.Len() >= r.N*r.Steps && r.Iter.Len() >= 1, "Stream.LoopRows: slots shorter than N·Steps")
	if s.be.lacks[OpLoopRows] {
		s.onCPU(5, func(c *Stream, h []Tensor) {
			q := *r
			q.Iter, q.Row, q.Pos, q.Slot0, q.Slot1, q.IDs, q.LUT, q.Pos0, q.Slots0, q.Slots1 = h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7], h[8], h[9]
			c.LoopRows(&q)
		}, r.Iter, r.Row, r.Pos, r.Slot0, r.Slot1, r.IDs, r.LUT, r.Pos0, r.Slots0, r.Slots1)
		return
	}
	C.vdc_loop_rows(s.be.t, s.s, C.vd_loop_rows{n: C.int64_t(r.N), steps: C.int64_t(r.Steps),
		iter: r.Iter.t, ids: r.IDs.t, lut: r.LUT.t, row: r.Row.t, pos0: r.Pos0.t, pos: r.Pos.t,
		slots0: r.Slots0.t, slots1: r.Slots1.t, slot0: r.Slot0.t, slot1: r.Slot1.t})
}

// LoopEmit is the bookkeeping of step t = Iter[0]−1 of a loop of N rows
// (after LoopRows advanced Iter) whose chosen tokens are IDs [1, N]:
// Out[i, t] = IDs[i] ([N, Steps]; nothing for t outside 0..Steps−1); a
// row whose token is one of Stop's (−1 pads it) is done (Done[i] = 1, and
// stays 1); then Cond[0] = the rows not done. Every tensor is I32.
type LoopEmit struct {
	N, Steps                         int
	Iter, IDs, Stop, Out, Done, Cond Tensor
}

// LoopEmit enqueues e's bookkeeping.
func (s *Stream) LoopEmit(e *LoopEmit) {
	if e.N == 0 {
		return
	}
	check(e.Steps > 0, "Stream.LoopEmit: no steps")
	for _, t := range []Tensor{e.Iter, e.IDs, e.Stop, e.Out, e.Done, e.Cond} {
		check(t.DType() == I32 && !t.Nil(), "Stream.LoopEmit: every tensor is I32")
	}
	check(e.IDs.Len() >= e.N && e.Done.Len() >= e.N && e.Out.Len() >= e.N*e.Steps && e.Iter.Len() >= 1 && e.Cond.Len() >= 1,
		"Stream.LoopEmit: a tensor shorter than its rows")
	if s.be.lacks[OpLoopEmit] {
		s.onCPU(3, func(c *Stream, h []Tensor) {
			q := *e
			q.Out, q.Done, q.Cond, q.Iter, q.IDs, q.Stop = h[0], h[1], h[2], h[3], h[4], h[5]
			c.LoopEmit(&q)
		}, e.Out, e.Done, e.Cond, e.Iter, e.IDs, e.Stop)
		return
	}
	C.vdc_loop_emit(s.be.t, s.s, C.vd_loop_emit{n: C.int64_t(e.N), steps: C.int64_t(e.Steps),
		iter: e.Iter.t, ids: e.IDs.t, stop: e.Stop.t, out: e.Out.t, done: e.Done.t, cond: e.Cond.t})
}
