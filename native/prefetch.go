package native

// #include "backend_call.h"
import "C"

// Prefetch tells the backend that the operations after it on the stream
// will read ts, immutable tensors such as weights (a q4 tensor's scales
// with it), so that it may bring them nearer first: the CUDA backend
// asks for them in its L2 cache while the operations before them run,
// the CPU backend does nothing. It changes no result. Empty tensors are
// skipped; more than C.VD_PREFETCH_MAX are asked for in several calls.
func (s *Stream) Prefetch(ts ...Tensor) {
	var p C.vd_prefetch
	flush := func() {
		if p.n > 0 && !s.left(OpPrefetch) {
			C.vdc_prefetch(s.be.t, s.s, p)
		}
		p.n = 0
	}
	for _, t := range ts {
		if t.Nil() || t.Len() == 0 {
			continue
		}
		if p.n == C.VD_PREFETCH_MAX {
			flush()
		}
		p.t[p.n] = t.t
		p.n++
	}
	flush()
}
