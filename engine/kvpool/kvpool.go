// Package kvpool is a paged key/value pool behind the engine's model
// interface (engine/model's KV, Cache and Ticket): for each attention kind
// (global and sliding window), blocks of model.KVBlock positions in every
// layer of that kind that computes keys and values of its own. A block id
// names the same block in all of a kind's layers; the kinds may differ in
// width (a family whose full and sliding layers have other head widths or
// key/value head counts). Sequences (Cache) hold runs of blocks; a fork
// shares its parent's blocks by reference, counted, and writes only into
// blocks of its own. A request is promised blocks (Admit, Reserve) before
// it runs, so that it never runs out halfway.
//
// A family's forward pass asks the pool for its rows' slots (Grow), reads
// each sequence's runs for the paged attention (Runs) and settles the
// sequences after the pass (Settle). Gemma 3n (engine/gemma3n, one width
// for both kinds) and Gemma 4 (engine/gemma4, a width a kind) use it.
package kvpool

import (
	"fmt"
	"runtime"
	"sync"

	"verdict/engine/model"
	"verdict/native"
)

// Block is the number of positions a block holds (model.KVBlock).
const Block = model.KVBlock

// MaxPositions bounds a pool's positions per kind.
const MaxPositions = 1 << 24

// Spec is one attention kind's layers.
type Spec struct {
	// Window is the positions a query sees (0: every earlier one).
	Window int
	// Layers are the model's layers of the kind that keep keys and values
	// of their own.
	Layers []int
	// Width is the floats of keys (and as many of values) such a layer
	// keeps per position.
	Width int
}

// Pool is a model's paged key/value memory (see the package comment).
type Pool struct {
	mu     sync.Mutex
	kinds  [2]kind // model.KVGlobal, model.KVSliding
	rows   int     // the most rows of one pass: what a sliding window may take at once
	closed bool
}

// kind is one attention kind's blocks.
type kind struct {
	window, width int
	layers        []int
	k, v          []native.Tensor // per model layer (set for the kind's layers)
	buf           *native.Buffer
	blocks        int
	ref           []int32 // references per block (0: free)
	free          int     // free blocks
	reserved      int     // free blocks promised to sequences and tickets
	cursor        int     // where the search for a free block starts
}

// New reserves blocks for positions positions of each kind in the
// backend's memory for a model of layers layers; rows is the most rows one
// pass runs (a sliding-window sequence is promised its window and one pass
// of rows). A kind with no layers takes no memory.
func New(be *native.Backend, layers int, specs [2]Spec, positions, rows int) (*Pool, error) {
	if positions <= 0 || positions > MaxPositions {
		return nil, fmt.Errorf("kvpool: a pool of %d positions: want 1 to %d", positions, MaxPositions)
	}
	if rows <= 0 {
		return nil, fmt.Errorf("kvpool: %d rows a pass: want at least 1", rows)
	}
	p := &Pool{rows: rows}
	for k := range p.kinds {
		s, kd := specs[k], &p.kinds[k]
		kd.window, kd.width, kd.layers = s.Window, s.Width, append([]int(nil), s.Layers...)
		kd.k, kd.v = make([]native.Tensor, layers), make([]native.Tensor, layers)
		if len(s.Layers) == 0 {
			continue
		}
		if s.Width <= 0 || s.Window < 0 {
			p.Close()
			return nil, fmt.Errorf("kvpool: %s layers of width %d, window %d", model.KindName(k), s.Width, s.Window)
		}
		kd.blocks = (positions + Block - 1) / Block
		per := kd.blocks * Block * s.Width * 4
		buf, err := be.Alloc(2 * per * len(s.Layers))
		if err != nil {
			p.Close()
			return nil, fmt.Errorf("kvpool: %d %s positions: %w", positions, model.KindName(k), err)
		}
		kd.buf = buf
		for j, l := range s.Layers {
			if l < 0 || l >= layers || !kd.k[l].Nil() {
				p.Close()
				return nil, fmt.Errorf("kvpool: layer %d of %d, or listed twice", l, layers)
			}
			kd.k[l] = buf.Tensor(2*j*per, native.F32, kd.blocks*Block, s.Width)
			kd.v[l] = buf.Tensor((2*j+1)*per, native.F32, kd.blocks*Block, s.Width)
		}
		kd.ref = make([]int32, kd.blocks)
		kd.free = kd.blocks
	}
	return p, nil
}

// Close frees the pool's memory; its caches are empty afterwards and it
// must not run passes.
func (p *Pool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for k := range p.kinds {
		if p.kinds[k].buf != nil {
			p.kinds[k].buf.Free()
			p.kinds[k].buf = nil
		}
	}
}

// Tensors returns the pool's keys and values of kind k's layer l [blocks·
// Block, width] (zero tensors for a layer without keys of its own).
func (p *Pool) Tensors(k, l int) (keys, values native.Tensor) {
	return p.kinds[k].k[l], p.kinds[k].v[l]
}

// Has reports whether kind k has layers.
func (p *Pool) Has(k int) bool { return len(p.kinds[k].layers) > 0 }

// Size reports the pool reserved: positions of each kind, and bytes in all.
func (p *Pool) Size() (positions int, bytes int64) {
	for k := range p.kinds {
		kd := &p.kinds[k]
		if len(kd.layers) == 0 {
			continue
		}
		positions = max(positions, kd.blocks*Block)
		bytes += int64(kd.blocks*Block) * int64(len(kd.layers)) * 2 * int64(kd.width) * 4
	}
	return positions, bytes
}

// BytesPerPosition is the pool's bytes a position: every layer with keys
// of its own, keys and values.
func (p *Pool) BytesPerPosition() int64 {
	var n int64
	for k := range p.kinds {
		n += int64(len(p.kinds[k].layers)) * 2 * int64(p.kinds[k].width) * 4
	}
	return n
}

// take claims a free block for a holder of res reserved blocks, preferring
// want (the block after the sequence's last).
func (kd *kind) take(want int, res *int) (int, bool) {
	if *res > 0 {
		*res--
		kd.reserved--
	} else if kd.free-kd.reserved <= 0 {
		return 0, false
	}
	b := -1
	if want >= 0 && want < kd.blocks && kd.ref[want] == 0 {
		b = want
	} else {
		for i := 0; i < kd.blocks; i++ {
			c := (kd.cursor + i) % kd.blocks
			if kd.ref[c] == 0 {
				b = c
				break
			}
		}
	}
	kd.ref[b] = 1
	kd.free--
	kd.cursor = (b + 1) % kd.blocks
	return b, true
}

func (kd *kind) drop(b int) {
	kd.ref[b]--
	if kd.ref[b] == 0 {
		kd.free++
	}
}

// need is the blocks a sequence of kind kd is promised for positions more
// positions: a partial block at each end, and for a sliding window no more
// than the window and one pass of rows can reach.
func (kd *kind) need(positions, rows int) int {
	n := (positions+Block-1)/Block + 1
	if kd.window > 0 {
		n = min(n, (kd.window+rows)/Block+2)
	}
	return n
}

// Need is the blocks of each kind that sequences of the given positions
// (each a sequence of its own, or a fork's own part) can take.
func (p *Pool) Need(seqs ...int) [2]int {
	var need [2]int
	for k := range p.kinds {
		kd := &p.kinds[k]
		if len(kd.layers) == 0 {
			continue
		}
		for _, n := range seqs {
			need[k] += kd.need(n, p.rows)
		}
	}
	return need
}

// AdmitFits reports whether an empty pool could promise need (nil), or a
// *model.KVError whose Free is the pool's whole size of that kind.
func (p *Pool) AdmitFits(need [2]int) error {
	for k := range p.kinds {
		if need[k] > p.kinds[k].blocks {
			return &model.KVError{Need: need[k], Free: p.kinds[k].blocks, Kind: model.KindName(k)}
		}
	}
	return nil
}

// Fits reports whether the pool, with no other sequence in it, could
// promise a new sequence positions positions (Cache.Reserve): nil, or a
// *model.KVError whose Free is the pool's whole size of that kind.
func (p *Pool) Fits(positions int) error {
	for k := range p.kinds {
		kd := &p.kinds[k]
		if len(kd.layers) == 0 {
			continue
		}
		if n := kd.need(positions, p.rows); n > kd.blocks {
			return &model.KVError{Need: n, Free: kd.blocks, Kind: model.KindName(k)}
		}
	}
	return nil
}

// FreeBlocks reports the free blocks not promised, per kind.
func (p *Pool) FreeBlocks() [2]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	var free [2]int
	for k := range p.kinds {
		free[k] = p.kinds[k].free - p.kinds[k].reserved
	}
	return free
}

// Unheld reports the blocks no sequence holds, per kind, promised or not.
func (p *Pool) Unheld() [2]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return [2]int{p.kinds[0].free, p.kinds[1].free}
}

// Admit promises need blocks of each kind to a new ticket, or fails with a
// *model.KVError when the pool's unpromised free blocks are too few now.
func (p *Pool) Admit(need [2]int) (*Ticket, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, fmt.Errorf("kvpool: the pool is closed")
	}
	for k := range p.kinds {
		if need[k] < 0 {
			return nil, fmt.Errorf("kvpool: a ticket for %d %s blocks", need[k], model.KindName(k))
		}
		kd := &p.kinds[k]
		if avail := kd.free - kd.reserved; need[k] > avail {
			return nil, &model.KVError{Need: need[k], Free: avail, Kind: model.KindName(k)}
		}
	}
	for k := range p.kinds {
		p.kinds[k].reserved += need[k]
	}
	return &Ticket{p: p, res: need}, nil
}

// A Ticket is a request's promise of blocks (Pool.Admit), shared by the
// caches bound to it: their blocks come out of it first.
type Ticket struct {
	p   *Pool
	res [2]int
}

// Release gives back the blocks t still promises; it is idempotent.
func (t *Ticket) Release() {
	if t == nil {
		return
	}
	p := t.p
	p.mu.Lock()
	defer p.mu.Unlock()
	for k := range t.res {
		p.kinds[k].reserved -= t.res[k]
		t.res[k] = 0
	}
}

// Left reports the blocks t still promises, per kind.
func (t *Ticket) Left() [2]int {
	t.p.mu.Lock()
	defer t.p.mu.Unlock()
	return t.res
}

// run is a sequence's run of keys: len positions from pos in consecutive
// blocks from blk, slots from 0. own: the sequence wrote the run's last
// block and may fill its free slots.
type run struct {
	blk, pos, len int32
	own           bool
}

func (r run) blocks() int { return (int(r.len) + Block - 1) / Block }

// Run is a run of a sequence's keys for the paged attention: Len
// positions from Pos, in consecutive blocks from Blk.
type Run struct{ Blk, Pos, Len int32 }

// Cache is one sequence's keys and values: runs of blocks of its pool, per
// kind. A Cache is used by one goroutine at a time; Free, or the garbage
// collector once the Cache is unreachable, returns its blocks.
type Cache struct {
	s        *seq
	progress func(done, total int)
}

// seq is a Cache's state, apart from the Cache so that a cleanup can free
// it when the Cache is collected.
type seq struct {
	p    *Pool
	n    int
	runs [2][]run
	res  [2]int  // blocks reserved for this sequence
	tk   *Ticket // the request's ticket, drawn on when res is spent
}

// Own is c as a Cache of pool p, or nil (nil, another family's, or another
// pool's).
func (p *Pool) Own(c model.Cache) *Cache {
	d, _ := c.(*Cache)
	if d == nil || d.s.p != p {
		return nil
	}
	return d
}

// NewCache returns an empty sequence of p.
func (p *Pool) NewCache() *Cache { return newCache(&seq{p: p}) }

func newCache(s *seq) *Cache {
	c := &Cache{s: s}
	runtime.AddCleanup(c, func(s *seq) { s.free() }, s)
	return c
}

// Len reports the number of positions in the cache.
func (c *Cache) Len() int { return c.s.n }

// OnLayer makes every later pass on c report the layers done (nil stops
// the reports).
func (c *Cache) OnLayer(f func(done, total int)) { c.progress = f }

// Progress is the function OnLayer set (nil: none).
func (c *Cache) Progress() func(done, total int) { return c.progress }

// Clone returns a fork of c: a sequence with c's positions, sharing its
// blocks by reference.
func (c *Cache) Clone() model.Cache {
	s := c.s
	p := s.p
	p.mu.Lock()
	defer p.mu.Unlock()
	d := &seq{p: p, n: s.n, tk: s.tk}
	for k := range s.runs {
		kd := &p.kinds[k]
		d.runs[k] = make([]run, len(s.runs[k]))
		for i, r := range s.runs[k] {
			r.own = false
			d.runs[k][i] = r
			for b := 0; b < r.blocks(); b++ {
				kd.ref[int(r.blk)+b]++
			}
		}
	}
	return newCache(d)
}

// Fork returns a fork of c's first n positions, or false when c no longer
// holds keys a later position n would see (a sliding window released
// them).
func (c *Cache) Fork(n int) (model.Cache, bool) {
	s := c.s
	if n < 0 || n > s.n {
		return nil, false
	}
	p := s.p
	p.mu.Lock()
	defer p.mu.Unlock()
	for k := range s.runs {
		kd := &p.kinds[k]
		if len(kd.layers) == 0 || n == 0 {
			continue
		}
		lo := 0
		if kd.window > 0 {
			lo = max(0, n-kd.window+1)
		}
		if rs := s.runs[k]; len(rs) == 0 || int(rs[0].pos) > lo {
			return nil, false
		}
	}
	d := &seq{p: p, n: n}
	for k := range s.runs {
		kd := &p.kinds[k]
		for _, r := range s.runs[k] {
			if int(r.pos) >= n {
				break
			}
			r.own = false
			r.len = min(r.len, int32(n)-r.pos)
			d.runs[k] = append(d.runs[k], r)
			for b := 0; b < r.blocks(); b++ {
				kd.ref[int(r.blk)+b]++
			}
		}
	}
	return newCache(d), true
}

// Free returns c's blocks and reservation to the pool; c is empty after.
func (c *Cache) Free() { c.s.free() }

func (s *seq) free() {
	p := s.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		s.runs, s.res, s.n = [2][]run{}, [2]int{}, 0
		return
	}
	for k := range s.runs {
		kd := &p.kinds[k]
		for _, r := range s.runs[k] {
			for b := 0; b < r.blocks(); b++ {
				kd.drop(int(r.blk) + b)
			}
		}
		s.runs[k] = s.runs[k][:0]
		kd.reserved -= s.res[k]
		s.res[k] = 0
	}
	s.n = 0
}

// Reserve promises c the blocks positions more positions can need, or
// fails with a *model.KVError when the pool cannot promise them.
func (c *Cache) Reserve(positions int) error {
	s := c.s
	p := s.p
	p.mu.Lock()
	defer p.mu.Unlock()
	var need [2]int
	for k := range p.kinds {
		kd := &p.kinds[k]
		if len(kd.layers) == 0 {
			continue
		}
		need[k] = max(kd.need(positions, p.rows)-s.res[k], 0)
		if avail := kd.free - kd.reserved; need[k] > avail {
			return &model.KVError{Need: need[k], Free: avail, Kind: model.KindName(k)}
		}
	}
	for k := range p.kinds {
		p.kinds[k].reserved += need[k]
		s.res[k] += need[k]
	}
	return nil
}

// Bind makes c's later blocks come out of t first (nil: out of the pool's
// free blocks only). It panics on a ticket of another family or pool.
func (c *Cache) Bind(t model.Ticket) {
	tk, ok := t.(*Ticket)
	if t != nil && (!ok || tk.p != c.s.p) {
		panic("kvpool: Cache.Bind: a ticket of another model")
	}
	p := c.s.p
	p.mu.Lock()
	c.s.tk = tk
	p.mu.Unlock()
}

// Blocks reports the blocks c references (shared ones included).
func (c *Cache) Blocks() int {
	p := c.s.p
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

// resFor is the reservation a new block of kind k of s comes out of: the
// sequence's own, else its ticket's.
func (s *seq) resFor(k int) *int {
	if s.res[k] == 0 && s.tk != nil {
		return &s.tk.res[k]
	}
	return &s.res[k]
}

// Grow gives each of cs add[i] positions past its length, in both kinds:
// the pool rows (block·Block + slot) of cs[i]'s new positions go to
// dst[k][o_i:o_i+add[i]], o_i the sum of add before i. The caches' lengths
// do not change (Settle does that); on an error (a *model.KVError when the
// pool is full) nothing changes.
func (p *Pool) Grow(cs []*Cache, add []int, dst [2][]int32) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return fmt.Errorf("kvpool: the pool is closed")
	}
	for k := range p.kinds {
		if len(p.kinds[k].layers) == 0 {
			continue
		}
		o := 0
		for i, c := range cs {
			if err := c.s.slots(k, add[i], dst[k][o:o+add[i]]); err != nil {
				for _, c := range cs {
					for k := range c.s.runs {
						c.s.trim(k, c.s.n)
					}
				}
				return err
			}
			o += add[i]
		}
	}
	return nil
}

// slots appends n positions to kind k of s (from s.n on) and writes their
// pool rows into dst. On a *model.KVError nothing of kind k changes.
func (s *seq) slots(k int, n int, dst []int32) error {
	kd := &s.p.kinds[k]
	for i := 0; i < n; i++ {
		pos := int32(s.n + i)
		rs := s.runs[k]
		if len(rs) > 0 {
			r := &rs[len(rs)-1]
			if r.own && r.pos+r.len == pos && int(r.len)%Block != 0 {
				dst[i] = r.blk*Block + r.len
				r.len++
				continue
			}
		}
		want := -1
		if len(rs) > 0 {
			if r := rs[len(rs)-1]; r.own && r.pos+r.len == pos {
				want = int(r.blk) + r.blocks()
			}
		}
		b, ok := kd.take(want, s.resFor(k))
		if !ok {
			s.trim(k, s.n)
			return &model.KVError{Need: (n - i + Block - 1) / Block, Free: kd.free - kd.reserved, Kind: model.KindName(k)}
		}
		if b == want {
			r := &rs[len(rs)-1]
			dst[i] = r.blk*Block + r.len
			r.len++
			continue
		}
		s.runs[k] = append(rs, run{blk: int32(b), pos: pos, len: 1, own: true})
		dst[i] = int32(b * Block)
	}
	return nil
}

// trim drops kind k's positions at or after n.
func (s *seq) trim(k, n int) {
	kd := &s.p.kinds[k]
	rs := s.runs[k]
	for len(rs) > 0 {
		r := &rs[len(rs)-1]
		end := r.pos + r.len
		if end <= int32(n) {
			break
		}
		old := r.blocks()
		r.len -= end - max(int32(n), r.pos)
		for b := r.blocks(); b < old; b++ {
			kd.drop(int(r.blk) + b)
		}
		if r.len == 0 {
			rs = rs[:len(rs)-1]
		}
	}
	s.runs[k] = rs
}

// release drops the sliding-window blocks no later position can see.
func (s *seq) release() {
	kd := &s.p.kinds[model.KVSliding]
	if kd.window <= 0 || len(kd.layers) == 0 {
		return
	}
	lo := int32(s.n - kd.window + 1) // the first position a later query sees
	rs := s.runs[model.KVSliding]
	i := 0
	for ; i < len(rs); i++ {
		r := &rs[i]
		for r.len > 0 {
			n := min(int32(Block), r.len)
			if r.pos+n > lo || (n < Block && i == len(rs)-1) {
				break
			}
			kd.drop(int(r.blk))
			r.blk++
			r.pos += n
			r.len -= n
		}
		if r.len > 0 {
			break
		}
	}
	if i > 0 {
		s.runs[model.KVSliding] = append(rs[:0], rs[i:]...)
	}
}

// Settle ends a pass: cs[i] holds ns[i] positions (the slots Grow gave
// past them are given back) and drops the sliding-window blocks no later
// position sees. Settle(cs, lengths) abandons a pass that did not run.
func (p *Pool) Settle(cs []*Cache, ns []int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	for i, c := range cs {
		for k := range c.s.runs {
			c.s.trim(k, ns[i])
		}
		c.s.n = ns[i]
		c.s.release()
	}
}

// Runs appends c's runs of kind k to dst, checked: in order, apart, and
// within the first limit positions (else a query would see keys twice, or
// another sequence's).
func (p *Pool) Runs(dst []Run, c *Cache, k, limit int) ([]Run, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	end := int32(-1)
	for _, r := range c.s.runs[k] {
		if r.len <= 0 || r.pos < end || int(r.pos+r.len) > limit {
			return dst, fmt.Errorf("kvpool: a sequence's %s key runs are inconsistent (a run of %d from %d after %d, %d positions)",
				model.KindName(k), r.len, r.pos, end, limit)
		}
		end = r.pos + r.len
		dst = append(dst, Run{r.blk, r.pos, r.len})
	}
	return dst, nil
}
