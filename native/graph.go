package native

/*
#include "backend_call.h"
*/
import "C"

import "unsafe"

// Graph is a recording of a stream's operations, replayed by RunGraph
// with the tensors it was recorded with (their contents read at replay
// time). Backends that run operations as they are issued (the CPU) do
// not record.
type Graph struct {
	be *Backend
	g  unsafe.Pointer
}

// BeginGraph starts recording the stream's operations instead of running
// them; false where the backend does not record (nothing changes then).
func (s *Stream) BeginGraph() bool {
	s.recording = C.vdc_graph_begin(s.be.t, s.s) == 0
	return s.recording
}

// EndGraph stops recording and returns the recording, or nil when it
// failed: then nothing recorded has run and the caller issues the
// operations again.
func (s *Stream) EndGraph() *Graph {
	g := C.vdc_graph_end(s.be.t, s.s)
	s.recording = false
	if s.spoiled { // an operation left to the CPU: run them directly
		s.spoiled = false
		if g != nil {
			C.vdc_graph_free(s.be.t, g)
		}
		return nil
	}
	if g == nil {
		return nil
	}
	return &Graph{be: s.be, g: g}
}

// RunGraph replays g on the stream.
func (s *Stream) RunGraph(g *Graph) {
	check(g != nil && g.g != nil && g.be == s.be, "Stream.RunGraph: a graph of another backend, or freed")
	C.vdc_graph_run(s.be.t, s.s, g.g)
}

// Free releases the graph.
func (g *Graph) Free() {
	if g != nil && g.g != nil {
		C.vdc_graph_free(g.be.t, g.g)
		g.g = nil
	}
}
