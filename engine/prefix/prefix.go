// Package prefix keeps computed token prefixes across requests: a radix
// tree over token ids whose entries are key/value sequences (forks sharing
// their blocks), so that the longest cached prefix of a new request is
// forked instead of recomputed. Entries are bounded by the blocks they
// reference and evicted least recently used first. Where requests part, a
// caller can keep a sequence of exactly the shared part (Lookup's Split),
// which later requests fork whatever sliding-window keys the longer ones
// have released. A fork continues exactly as a computation of the whole
// prompt would: a row's result does not depend on how a sequence's tokens
// were cut into passes.
package prefix

import (
	"slices"
	"sync"

	"verdict/engine/model"
)

// Stats describe a cache's use.
type Stats struct {
	Lookups     int64 // requests looked up
	Hits        int64 // lookups that forked a kept prefix
	TokensAsked int64 // tokens looked up
	TokensFound int64 // tokens forked instead of computed
	Entries     int   // kept sequences
	Blocks      int   // blocks they reference (shared ones once per entry)
	Budget      int
	Evicted     int64
}

// HitRate is the share of lookups that forked a kept prefix.
func (s Stats) HitRate() float64 {
	if s.Lookups == 0 {
		return 0
	}
	return float64(s.Hits) / float64(s.Lookups)
}

// Cache is a radix tree of kept prefixes of one model. It is safe for
// concurrent use.
type Cache struct {
	mu     sync.Mutex
	root   *node
	budget int // blocks
	clock  uint64
	stats  Stats
}

// node is a radix tree node: the tokens from its parent, its children by
// their first token, and the sequence kept of exactly its prefix.
type node struct {
	parent *node
	edge   []int32
	depth  int
	kids   map[int32]*node
	seq    model.Cache
	blocks int
	used   uint64
}

// New returns an empty cache that keeps sequences referencing at most
// budget blocks in all.
func New(budget int) *Cache {
	return &Cache{root: &node{kids: map[int32]*node{}}, budget: budget}
}

// match walks ids down the tree: the deepest node wholly matched, and how
// many tokens match in all (into an edge below it, possibly).
func (c *Cache) match(ids []int32) (*node, int) {
	n, d := c.root, 0
	for d < len(ids) {
		k := n.kids[ids[d]]
		if k == nil {
			return n, d
		}
		e := 0
		for e < len(k.edge) && d+e < len(ids) && k.edge[e] == ids[d+e] {
			e++
		}
		if e < len(k.edge) {
			return n, d + e
		}
		n, d = k, d+e
	}
	return n, d
}

// Lookup returns a fork of the longest kept prefix of ids of at most max
// tokens (nil when none is kept), its length, and split: the most tokens
// ids shares with any kept sequence (at most max), where keeping a
// sequence of exactly ids[:split] would serve the requests that share it.
func (c *Cache) Lookup(ids []int32, max int) (seq model.Cache, n, split int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stats.Lookups++
	c.stats.TokensAsked += int64(min(len(ids), max))
	if max > len(ids) {
		max = len(ids)
	}
	at, m := c.match(ids[:max])
	split = m
	c.clock++
	// Deepest first: a kept sequence below the match point, forked at m;
	// else the entries on the path, each of exactly its depth.
	if m > at.depth || at.seq == nil {
		var below []*node
		start := at
		if m > at.depth {
			start = at.kids[ids[at.depth]]
		}
		collect(start, &below)
		slices.SortFunc(below, func(a, b *node) int { return int(b.used) - int(a.used) })
		for _, e := range below {
			if m == 0 {
				break
			}
			if f, ok := e.seq.Fork(m); ok {
				e.used = c.clock
				c.hit(m)
				return f, m, split
			}
		}
	}
	for p := at; p != nil && p != c.root; p = p.parent {
		if p.seq == nil {
			continue
		}
		if f, ok := p.seq.Fork(p.depth); ok {
			p.used = c.clock
			c.hit(p.depth)
			return f, p.depth, split
		}
	}
	return nil, 0, split
}

func (c *Cache) hit(n int) {
	c.stats.Hits++
	c.stats.TokensFound += int64(n)
}

// collect appends the nodes with a kept sequence at or below n.
func collect(n *node, out *[]*node) {
	if n == nil {
		return
	}
	if n.seq != nil {
		*out = append(*out, n)
	}
	for _, k := range n.kids {
		collect(k, out)
	}
}

// Keep keeps a fork of seq, which holds exactly the tokens ids, for later
// requests (replacing one kept for the same ids), then evicts the least
// recently used entries beyond the budget. A sequence larger than the
// whole budget is not kept.
func (c *Cache) Keep(ids []int32, seq model.Cache) {
	if len(ids) == 0 || seq.Len() != len(ids) {
		return
	}
	blocks := seq.Blocks()
	if blocks > c.budget {
		return
	}
	f := seq.Clone()
	f.Bind(nil) // kept past its request: no ticket's blocks
	c.mu.Lock()
	n := c.insert(ids)
	old := n.seq
	if old != nil {
		c.stats.Blocks -= n.blocks
		c.stats.Entries--
	}
	c.clock++
	n.seq, n.blocks, n.used = f, blocks, c.clock
	c.stats.Blocks += blocks
	c.stats.Entries++
	var evicted []model.Cache
	for c.stats.Blocks > c.budget {
		e := c.oldest(c.root, n)
		if e == nil {
			break
		}
		evicted = append(evicted, c.remove(e))
	}
	c.mu.Unlock()
	if old != nil {
		old.Free()
	}
	for _, e := range evicted {
		e.Free()
	}
}

// insert returns the node of exactly ids, splitting an edge where ids ends
// or parts inside it.
func (c *Cache) insert(ids []int32) *node {
	n, d := c.root, 0
	for d < len(ids) {
		k := n.kids[ids[d]]
		if k == nil {
			leaf := &node{parent: n, edge: slices.Clone(ids[d:]), depth: len(ids), kids: map[int32]*node{}}
			n.kids[ids[d]] = leaf
			return leaf
		}
		e := 0
		for e < len(k.edge) && d+e < len(ids) && k.edge[e] == ids[d+e] {
			e++
		}
		if e < len(k.edge) { // split k's edge at e
			mid := &node{parent: n, edge: k.edge[:e:e], depth: d + e, kids: map[int32]*node{}}
			n.kids[ids[d]] = mid
			k.edge = k.edge[e:]
			k.parent = mid
			mid.kids[k.edge[0]] = k
			k = mid
		}
		n, d = k, d+e
	}
	return n
}

// oldest is the least recently used entry at or below n other than keep.
func (c *Cache) oldest(n, keep *node) *node {
	var all []*node
	collect(n, &all)
	var best *node
	for _, e := range all {
		if e != keep && (best == nil || e.used < best.used) {
			best = e
		}
	}
	return best
}

// remove drops n's entry and prunes the nodes left with neither an entry
// nor children; it returns the sequence to free.
func (c *Cache) remove(n *node) model.Cache {
	s := n.seq
	n.seq = nil
	c.stats.Blocks -= n.blocks
	c.stats.Entries--
	c.stats.Evicted++
	n.blocks = 0
	for n != c.root && n.seq == nil && len(n.kids) == 0 {
		delete(n.parent.kids, n.edge[0])
		n = n.parent
	}
	return s
}

// Drop frees every kept sequence, reporting whether there were any.
func (c *Cache) Drop() bool {
	c.mu.Lock()
	var all []*node
	collect(c.root, &all)
	var seqs []model.Cache
	for _, e := range all {
		seqs = append(seqs, c.remove(e))
	}
	c.mu.Unlock()
	for _, s := range seqs {
		s.Free()
	}
	return len(seqs) > 0
}

// Stats reports the cache's use so far.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.stats
	st.Budget = c.budget
	return st
}
