package native

import (
	"fmt"
	"strings"
)

// OpCalls counts a stream's calls into its backend's op table, by
// operation: the calls that reach the backend, not the operations a
// Stream composes for a backend without an entry (those count as the
// operations they are made of). On a GPU each call is a kernel launch or
// a few (a split product adds its sum, the sparse MLP and the attention
// take several), so a pass's count on the CPU backend is the floor of its
// launches on another, prefetch aside (a hint, which the CUDA backend
// launches nothing for unless VERDICT_PREFETCH=1).
type OpCalls [opCount]int64

// Total is the calls of every operation.
func (c *OpCalls) Total() int64 {
	var t int64
	for _, n := range c {
		t += n
	}
	return t
}

// Sub returns c − d, operation by operation (the calls between two reads).
func (c OpCalls) Sub(d OpCalls) OpCalls {
	for i := range c {
		c[i] -= d[i]
	}
	return c
}

// String lists the operations called, in the table's order, with their
// counts: "linear 7, norm_add 1".
func (c OpCalls) String() string {
	var b strings.Builder
	for op, n := range c {
		if n == 0 {
			continue
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %d", Op(op), n)
	}
	return b.String()
}

// OpCalls reports the calls the stream has made into its backend's op
// table since it was made.
func (s *Stream) OpCalls() OpCalls { return s.calls }

// composed are the operations a Stream composes of others where a
// backend leaves them out (each part's bits those of the composite).
var composed = map[Op]bool{OpLinears: true, OpNormRoPEs: true}

// Apart makes the stream run ops, composite operations (linears,
// norm_ropes), as the operations they are made of, as for a backend
// without them: the same bits, the tests' reference for the composite.
// Apart() gives the backend's own back.
func (s *Stream) Apart(ops ...Op) {
	s.apart = nil
	for _, op := range ops {
		check(composed[op], "Stream.Apart: the Stream composes no "+op.String())
		if s.apart == nil {
			s.apart = map[Op]bool{}
		}
		s.apart[op] = true
	}
}

// left reports whether the stream's backend leaves op out of its table
// (the caller then composes it or runs it on the CPU), or the stream runs
// it apart, and otherwise counts the call the caller is about to make.
func (s *Stream) left(op Op) bool {
	if s.be.lacks[op] || s.apart[op] {
		return true
	}
	s.calls[op]++
	return false
}
