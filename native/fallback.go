package native

/*
#include <stdlib.h>
#include "backend_call.h"
*/
import "C"

import (
	"sort"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// An operation a backend leaves out of its op table (a NULL entry of
// backend_ops.h: Supports is false) runs on the CPU backend: the stream
// waits for what came before, the memory of every tensor the operation
// touches is copied to the host (each stretch of memory once, however many
// tensors view it: in-place operations and aliases stay what they are),
// the CPU backend runs the operation there, and the memory of the tensors
// it writes is copied back before the call returns. Weights bound to the
// backend (Bind) are read where they were bound from, with no copy. The
// results are the CPU backend's, bit for bit. The time and the bytes are
// counted (Stream.Fallbacks, Backend.Fallbacks); inside a recording
// (BeginGraph, BeginLoop) such an operation cannot run, so the recording
// fails (EndGraph returns nil) and the caller runs the operations directly.

// FallbackStats count the operations a backend left to the CPU backend.
type FallbackStats struct {
	Ops   int64         `json:"ops"`     // operations run on the CPU
	Bytes int64         `json:"bytes"`   // bytes copied to the host and back
	Time  time.Duration `json:"time_ns"` // the waits, the copies and the CPU's work
}

type fallbackCounters struct{ ops, bytes, ns atomic.Int64 }

func (c *fallbackCounters) add(bytes int64, d time.Duration) {
	c.ops.Add(1)
	c.bytes.Add(bytes)
	c.ns.Add(int64(d))
}

func (c *fallbackCounters) stats() FallbackStats {
	return FallbackStats{Ops: c.ops.Load(), Bytes: c.bytes.Load(), Time: time.Duration(c.ns.Load())}
}

// Fallbacks reports the operations this stream ran on the CPU backend for
// its own, with their copies and time.
func (s *Stream) Fallbacks() FallbackStats { return s.fb.stats() }

// Fallbacks reports the operations every stream of the backend ran on the
// CPU backend, with their copies and time.
func (b *Backend) Fallbacks() FallbackStats { return b.fb.stats() }

// newBackend wraps a table, noting the operations it leaves out.
func newBackend(t *C.vd_backend) *Backend {
	b := &Backend{t: t}
	for op := Op(0); op < opCount; op++ {
		b.lacks[op] = C.vd_supports(t, C.int(op)) == 0
	}
	return b
}

// boundRange is host memory bound to a backend: p..p+n in its memory.
type boundRange struct {
	p, n uintptr
	host unsafe.Pointer
}

// boundSet is a backend's bound ranges, sorted by p.
type boundSet struct {
	mu sync.RWMutex
	r  []boundRange
}

func (s *boundSet) add(p unsafe.Pointer, n int, host unsafe.Pointer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := sort.Search(len(s.r), func(i int) bool { return s.r[i].p >= uintptr(p) })
	s.r = append(s.r, boundRange{})
	copy(s.r[i+1:], s.r[i:])
	s.r[i] = boundRange{uintptr(p), uintptr(n), host}
}

func (s *boundSet) remove(p unsafe.Pointer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := sort.Search(len(s.r), func(i int) bool { return s.r[i].p >= uintptr(p) })
	if i < len(s.r) && s.r[i].p == uintptr(p) {
		s.r = append(s.r[:i], s.r[i+1:]...)
	}
}

// host returns the host memory of p..p+n where it lies inside one bound
// range, else nil.
func (s *boundSet) host(p uintptr, n int) unsafe.Pointer {
	s.mu.RLock()
	defer s.mu.RUnlock()
	i := sort.Search(len(s.r), func(i int) bool { return s.r[i].p > p }) - 1
	if i < 0 || p+uintptr(n) > s.r[i].p+s.r[i].n {
		return nil
	}
	return unsafe.Add(s.r[i].host, p-s.r[i].p)
}

// tensorSpans are the byte lengths of t's elements and, for q4, of its
// scales and offsets.
func tensorSpans(t Tensor) (data, aux int) {
	switch t.DType() {
	case Q4:
		nb, sf := Q4Sizes(t.Rows(), t.Cols(), int(t.t.group))
		return nb, 4 * sf
	case BF16:
		return 2 * t.Len(), 0
	}
	return 4 * t.Len(), 0
}

// span is a stretch of the backend's memory copied to the host: n bytes
// from lo.
type span struct {
	lo    unsafe.Pointer
	n     uintptr
	write bool
	host  unsafe.Pointer
}

func (sp *span) end() uintptr { return uintptr(sp.lo) + sp.n }

// onCPU runs an operation the stream's backend leaves out on the CPU
// backend: run gets the CPU's stream and ts over host memory; ts[:nw] are
// the tensors the operation writes (whole or in part), the others it
// reads.
func (s *Stream) onCPU(nw int, run func(c *Stream, h []Tensor), ts ...Tensor) {
	if s.recording {
		s.spoiled = true // a recording cannot wait for the host
		return
	}
	if s.fbErr != nil {
		return
	}
	t0 := time.Now()
	type ref struct {
		i   int
		aux bool
		p   unsafe.Pointer
		n   int
		h   unsafe.Pointer
	}
	var refs []ref
	var spans []span
	for i, t := range ts {
		if t.Nil() || t.Len() == 0 {
			continue
		}
		nd, na := tensorSpans(t)
		rs := []ref{{i: i, p: t.t.data, n: nd}}
		if na > 0 {
			rs = append(rs, ref{i: i, aux: true, p: t.t.aux, n: na})
		}
		for _, r := range rs {
			if i >= nw {
				r.h = s.be.bound.host(uintptr(r.p), r.n)
			}
			if r.h == nil {
				spans = append(spans, span{lo: r.p, n: uintptr(r.n), write: i < nw})
			}
			refs = append(refs, r)
		}
	}
	// Overlapping stretches become one.
	sort.Slice(spans, func(a, b int) bool { return uintptr(spans[a].lo) < uintptr(spans[b].lo) })
	merged := spans[:0]
	for _, sp := range spans {
		if k := len(merged) - 1; k >= 0 && uintptr(sp.lo) < merged[k].end() {
			if e := sp.end(); e > merged[k].end() {
				merged[k].n = e - uintptr(merged[k].lo)
			}
			merged[k].write = merged[k].write || sp.write
			continue
		}
		merged = append(merged, sp)
	}
	var bytes int64
	defer func() {
		for _, sp := range merged {
			C.free(sp.host)
		}
	}()
	for k := range merged {
		sp := &merged[k]
		if sp.host = C.malloc(C.size_t(sp.n)); sp.host == nil {
			panic("native: out of host memory for an operation on the CPU")
		}
		C.vdc_download(s.be.t, s.s, sp.host, sp.lo, C.size_t(sp.n))
		bytes += int64(sp.n)
	}
	if err := s.syncBackend(); err != nil {
		s.fbErr = err
		return
	}
	h := append([]Tensor(nil), ts...)
	for _, r := range refs {
		p := r.h
		if p == nil {
			k := sort.Search(len(merged), func(k int) bool { return merged[k].end() > uintptr(r.p) })
			p = unsafe.Add(merged[k].host, uintptr(r.p)-uintptr(merged[k].lo))
		}
		if r.aux {
			h[r.i].t.aux = p
		} else {
			h[r.i].t.data = p
		}
	}
	if s.cpu == nil {
		c, err := Default().NewStream()
		if err != nil {
			s.fbErr = err
			return
		}
		s.cpu = c
	}
	run(s.cpu, h)
	if err := s.cpu.Sync(); err != nil {
		s.fbErr = err
		return
	}
	for _, sp := range merged {
		if sp.write {
			C.vdc_upload(s.be.t, s.s, sp.lo, sp.host, C.size_t(sp.n))
			bytes += int64(sp.n)
		}
	}
	if err := s.syncBackend(); err != nil {
		s.fbErr = err
		return
	}
	d := time.Since(t0)
	s.fb.add(bytes, d)
	s.be.fb.add(bytes, d)
}
