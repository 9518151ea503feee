package native

/*
#include "backend_call.h"
*/
import "C"

// The operations added for Gemma 4's towers (engine/gemma4's vision_ops.go
// and audio_ops.go), over tensors.

// Clamp computes y = min(max(x, lo), hi) elementwise, a NaN kept: a
// clipped linear's bounds, or a ReLU with lo 0 and hi +Inf. y may be x.
// Like Go's min(max(x, lo), hi), lo above hi gives hi everywhere.
func (s *Stream) Clamp(y, x Tensor, lo, hi float32) {
	if y.Len() == 0 {
		return
	}
	check(x.DType() == F32 && y.DType() == F32 && x.Len() == y.Len(), "Stream.Clamp: shapes differ")
	if s.be.lacks[OpClamp] {
		s.onCPU(1, func(c *Stream, h []Tensor) { c.Clamp(h[0], h[1], lo, hi) }, y, x)
		return
	}
	C.vdc_clamp(s.be.t, s.s, y.t, x.t, C.float(lo), C.float(hi))
}
