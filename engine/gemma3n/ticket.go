package gemma3n

import (
	"fmt"

	"verdict/engine/model"
)

// A Ticket is a request's promise of key/value blocks (Model.Admit), shared
// by the caches bound to it: the blocks they take come out of it first, so
// that an admitted request never runs out of blocks halfway. Clones of a
// bound cache are bound to the same ticket.
type Ticket struct {
	m   *Model
	res [2]int // blocks still promised, per kind
}

// Need is the blocks of each attention kind that sequences of the given
// positions (each a sequence of its own, or a fork's own part) can take.
func (m *Model) Need(seqs ...int) [2]int {
	var need [2]int
	p := m.pool
	if p == nil {
		return need
	}
	for k := range p.kinds {
		kd := &p.kinds[k]
		if len(kd.layers) == 0 {
			continue
		}
		for _, n := range seqs {
			need[k] += kd.need(n, m.maxRows)
		}
	}
	return need
}

// AdmitFits reports whether an empty pool could promise need (nil), or a
// *KVError naming the kind, the blocks needed and the pool's whole size: a
// request it refuses can never be admitted, however long it waits.
func (m *Model) AdmitFits(need [2]int) error {
	p := m.pool
	if p == nil {
		return fmt.Errorf("gemma3n: the model is closed")
	}
	for k := range p.kinds {
		if need[k] > p.kinds[k].blocks {
			return &KVError{Need: need[k], Free: p.kinds[k].blocks, Kind: kindName(k)}
		}
	}
	return nil
}

// Admit promises need blocks of each kind (Need) to a new ticket, or fails
// with a *KVError when the pool's unpromised free blocks are too few now.
func (m *Model) Admit(need [2]int) (model.Ticket, error) {
	p := m.pool
	if p == nil {
		return nil, fmt.Errorf("gemma3n: the model is closed")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for k := range p.kinds {
		kd := &p.kinds[k]
		if avail := kd.free - kd.reserved; need[k] > avail {
			return nil, &KVError{Need: need[k], Free: avail, Kind: kindName(k)}
		}
	}
	t := &Ticket{m: m, res: need}
	for k := range p.kinds {
		p.kinds[k].reserved += need[k]
	}
	return t, nil
}

// Release gives back the blocks t still promises; caches bound to it take
// later blocks from the pool's free ones. Release is idempotent.
func (t *Ticket) Release() {
	if t == nil {
		return
	}
	p := t.m.pool
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for k := range t.res {
		p.kinds[k].reserved -= t.res[k]
		t.res[k] = 0
	}
}

// Left reports the blocks t still promises, per kind.
func (t *Ticket) Left() [2]int {
	p := t.m.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	return t.res
}

// Bind makes c's later blocks come out of t first (nil: out of the pool's
// free blocks only); t is a ticket of c's model.
func (c *Cache) Bind(t model.Ticket) {
	tk, ok := t.(*Ticket)
	if t != nil && !ok {
		panic("gemma3n: Cache.Bind: a ticket of another model")
	}
	p := c.s.m.pool
	if p == nil {
		return
	}
	p.mu.Lock()
	c.s.tk = tk
	p.mu.Unlock()
}

// resFor is the reservation a new block of kind k of s comes out of: the
// sequence's own, else its ticket's.
func (s *seq) resFor(k int) *int {
	if s.res[k] == 0 && s.tk != nil {
		return &s.tk.res[k]
	}
	return &s.res[k]
}

// KVFree reports the pool's free blocks not promised to any sequence or
// ticket, per kind (global, sliding window).
func (m *Model) KVFree() [2]int {
	var free [2]int
	p := m.pool
	if p == nil {
		return free
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for k := range p.kinds {
		free[k] = p.kinds[k].free - p.kinds[k].reserved
	}
	return free
}

// Blocks reports the key/value blocks c references (shared ones included).
func (c *Cache) Blocks() int {
	p := c.s.m.pool
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for k := range c.s.runs {
		for _, r := range c.s.runs[k] {
			n += r.blocks()
		}
	}
	return n
}
