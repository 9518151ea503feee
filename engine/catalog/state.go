package catalog

import (
	"fmt"
	"math"
	"slices"
)

// State is one sequence's walk through a catalog's trie: the node it is at,
// the entries emitted so far and the no-repeat state. The serial form keeps
// per-edge counts of the live entries below each edge (decremented along a
// completed entry's path); the batched form reads the catalog's per-edge
// masks and keeps only a banned set of its own. Both give the same legal
// sets; a finished terminal's control edges are masked by its entry's
// spent flag while its subtree stays walkable.
type State struct {
	cat     *Catalog
	seq     int // the sequence's number, for error messages
	k       int
	node    int32
	step    int
	done    bool
	emitted []int32
	spent   []bool
	live    []int32  // serial form: per-edge live counts; nil in the batched form
	banned  []uint64 // batched form: the emitted entries
	edges   []int32  // the current step's legal edges, parallel to its tokens
}

// KError is a k outside 1..N for a catalog of N entries.
type KError struct{ K, N int }

func (e *KError) Error() string {
	if e.K < 1 {
		return fmt.Sprintf("k = %d: k must be at least 1 (the number of distinct entries to name)", e.K)
	}
	return fmt.Sprintf("k = %d, but the catalog has %d entries (k must be at most %d)", e.K, e.N, e.N)
}

// CheckK returns a *KError unless 1 <= k <= the number of entries.
func (c *Catalog) CheckK(k int) error {
	if k < 1 || k > len(c.Entries) {
		return &KError{k, len(c.Entries)}
	}
	return nil
}

// NewState starts a walk that must emit k distinct entries. batched picks the
// no-repeat form (per-sequence banned set over shared masks) instead of
// per-edge counts; seq names the sequence in errors.
func (c *Catalog) NewState(k int, batched bool, seq int) (*State, error) {
	if err := c.CheckK(k); err != nil {
		return nil, fmt.Errorf("catalog: %w", err)
	}
	s := &State{cat: c, seq: seq, k: k, spent: make([]bool, len(c.Entries)), edges: make([]int32, 0, MaxEdges)}
	if batched {
		s.banned = make([]uint64, c.Words)
	} else {
		s.live = append([]int32(nil), c.Count...)
	}
	return s, nil
}

// Node reports the trie node the walk is at.
func (s *State) Node() int32 { return s.node }

// Done reports whether the walk has emitted its STOP.
func (s *State) Done() bool { return s.done }

// Emitted returns the entries completed so far, in order.
func (s *State) Emitted() []int32 { return s.emitted }

// Step reports the number of tokens chosen so far.
func (s *State) Step() int { return s.step }

func (s *State) liveEdge(e int32) bool {
	if s.live != nil {
		return s.live[e] > 0
	}
	m := s.cat.Mask[int(e)*s.cat.Words : int(e+1)*s.cat.Words]
	for w, bits := range m {
		if bits&^s.banned[w] != 0 {
			return true
		}
	}
	return false
}

// Legal appends the current step's legal tokens to dst in increasing order
// and returns it: the node's edges with an unemitted entry below them, plus
// at a node that ends an unemitted entry SEP while more entries are owed or
// STOP when none are. An empty legal set is an error naming the sequence,
// step and node.
func (s *State) Legal(dst []int32) ([]int32, error) {
	if s.done {
		return dst, fmt.Errorf("catalog: sequence %d: the walk has already stopped", s.seq)
	}
	c := s.cat
	s.edges = s.edges[:0]
	n0 := len(dst)
	for e := c.First[s.node]; e < c.First[s.node+1]; e++ {
		ok := false
		switch c.Child[e] {
		case ChildSep, ChildStop:
			end := c.Ends[s.node]
			last := len(s.emitted)+1 == s.k
			ok = end >= 0 && !s.spent[end] && (c.Child[e] == ChildStop) == last
		default:
			ok = s.liveEdge(e)
		}
		if ok {
			dst = append(dst, c.Token[e])
			s.edges = append(s.edges, e)
		}
	}
	if len(dst) == n0 {
		return dst, fmt.Errorf("catalog: sequence %d, step %d: empty mask at trie node %d", s.seq, s.step, s.node)
	}
	return dst, nil
}

// Advance takes token t, which must be one of the legal tokens Legal last
// returned: it moves to the child, or for SEP/STOP completes the entry
// ending here (its path's counts decremented, or it is banned) and returns
// to the root. A token on no live edge is an error naming sequence, step,
// node and token: the decode stops instead of emitting a plausible answer.
func (s *State) Advance(t int32) error {
	c := s.cat
	e := int32(-1)
	for _, x := range s.edges {
		if c.Token[x] == t {
			e = x
		}
	}
	if e < 0 {
		return fmt.Errorf("catalog: sequence %d, step %d: token %d is on no live edge of trie node %d", s.seq, s.step, t, s.node)
	}
	s.step++
	s.edges = s.edges[:0]
	switch c.Child[e] {
	case ChildSep, ChildStop:
		end := c.Ends[s.node]
		s.emitted = append(s.emitted, end)
		s.spent[end] = true
		if s.live != nil {
			for _, x := range c.path[end] {
				s.live[x]--
			}
		} else {
			s.banned[end/64] |= 1 << (end % 64)
		}
		s.node = 0
		s.done = c.Child[e] == ChildStop
	default:
		s.node = c.Child[e]
	}
	return nil
}

// Pick returns the index of the largest of logits (one per legal token, in
// the legal set's increasing token order): the first one wins ties, so ties
// go to the lower token id; one pass in that order is the fixed reduction.
// margin is the gap to the runner-up (NaN with one candidate). A NaN logit
// is an error.
func Pick(logits []float32) (best int, margin float64, err error) {
	if len(logits) == 0 {
		return -1, math.NaN(), fmt.Errorf("catalog: no logits to pick from")
	}
	second := math.Inf(-1)
	for i, v := range logits {
		if v != v {
			return -1, math.NaN(), fmt.Errorf("catalog: the logit of candidate %d is NaN", i)
		}
		if i == 0 {
			continue
		}
		if v > logits[best] {
			second = float64(logits[best])
			best = i
		} else if float64(v) > second {
			second = float64(v)
		}
	}
	if len(logits) == 1 {
		return 0, math.NaN(), nil
	}
	return best, float64(logits[best]) - second, nil
}

// clone returns a deep copy of s: walking the copy leaves s as it is.
func (s *State) clone() *State {
	c := *s
	c.emitted = slices.Clone(s.emitted)
	c.spent = slices.Clone(s.spent)
	c.live = slices.Clone(s.live)
	c.banned = slices.Clone(s.banned)
	c.edges = append(make([]int32, 0, MaxEdges), s.edges...)
	return &c
}

// forcedRun is a forced run found by State.forced.
type forcedRun struct {
	tokens []int32 // the forced tokens, in order
	done   bool    // the last of them is STOP
	final  []int32 // unless done, the legal set after them (nil: none found)
}

// forced walks a clone of s through its forced run into r (its buffers
// reused): while the clone is not done and has exactly one legal token, it
// takes that token. A legal set the clone cannot find ends the run without
// an error (final nil): the real walk meets it and reports it. s does not
// change.
func (s *State) forced(r *forcedRun) {
	r.tokens, r.final, r.done = r.tokens[:0], r.final[:0], s.done
	if s.done {
		return
	}
	c := s.clone()
	for !c.done {
		l, err := c.Legal(r.final[:0])
		if err != nil {
			r.final = nil
			return
		}
		r.final = l
		if len(l) != 1 {
			return
		}
		if c.Advance(l[0]) != nil {
			r.final = nil
			return
		}
		r.tokens = append(r.tokens, l[0])
	}
	r.final, r.done = r.final[:0], true
}
