package gemma3n

import (
	"fmt"
	"runtime"
	"sync"

	"verdict/engine/model"
	"verdict/native"
)

// KVBlock is the number of positions a key/value block holds
// (model.KVBlock).
const KVBlock = model.KVBlock

// pool is a model's paged key/value memory: for each attention kind (global
// and sliding window), blocks of KVBlock positions in every layer of that
// kind that computes its own keys and values (KV-shared layers read their
// source's). A block id names the same block in all of a kind's layers.
// Sequences (Cache) hold runs of blocks; a fork shares its parent's blocks
// by reference, counted, and writes only into blocks of its own.
type pool struct {
	mu    sync.Mutex
	kinds [2]kvKind // 0: global attention, 1: sliding window
}

// kvKind is one attention kind's blocks.
type kvKind struct {
	window   int // 0: global
	layers   []int
	k, v     []native.Tensor // per model layer (set for own-KV layers of the kind)
	buf      *native.Buffer
	blocks   int
	ref      []int32 // references per block (0: free)
	free     int     // free blocks
	reserved int     // free blocks promised to admitted sequences
	cursor   int     // where the search for a free block starts
}

// KVError reports that the key/value pool has no room for a sequence
// (model.KVError).
type KVError = model.KVError

func kindName(k int) string { return model.KindName(k) }

// newPool reserves blocks for positions positions of each kind in the
// backend's memory (the built-in backend commits pages only when written).
func newPool(m *Model, be *native.Backend, positions int) (*pool, error) {
	cfg := m.Cfg
	kw := cfg.NumKVHeads * cfg.HeadDim
	p := &pool{}
	for i := range m.layers {
		y := &m.layers[i]
		if y.kvSrc != i {
			continue
		}
		k := 0
		if y.sliding {
			k = 1
		}
		p.kinds[k].layers = append(p.kinds[k].layers, i)
	}
	for k := range p.kinds {
		kd := &p.kinds[k]
		if k == 1 {
			kd.window = cfg.SlidingWindow
		}
		kd.k, kd.v = make([]native.Tensor, len(m.layers)), make([]native.Tensor, len(m.layers))
		if len(kd.layers) == 0 {
			continue
		}
		kd.blocks = (positions + KVBlock - 1) / KVBlock
		per := kd.blocks * KVBlock * kw * 4
		buf, err := be.Alloc(2 * per * len(kd.layers))
		if err != nil {
			p.close()
			return nil, err
		}
		kd.buf = buf
		for j, l := range kd.layers {
			kd.k[l] = buf.Tensor(2*j*per, native.F32, kd.blocks*KVBlock, kw)
			kd.v[l] = buf.Tensor((2*j+1)*per, native.F32, kd.blocks*KVBlock, kw)
		}
		kd.ref = make([]int32, kd.blocks)
		kd.free = kd.blocks
	}
	return p, nil
}

func (p *pool) close() {
	for k := range p.kinds {
		p.kinds[k].buf.Free()
		p.kinds[k].buf = nil
	}
}

// take claims a free block for a sequence holding res reserved blocks,
// preferring want (the block after the sequence's last).
func (kd *kvKind) take(want int, res *int) (int, bool) {
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

func (kd *kvKind) drop(b int) {
	kd.ref[b]--
	if kd.ref[b] == 0 {
		kd.free++
	}
}

// run is a sequence's run of keys: len positions from pos in consecutive
// blocks from blk, slots from 0. own: the sequence wrote the run's last
// block and may fill its free slots.
type run struct {
	blk, pos, len int32
	own           bool
}

func (r run) blocks() int { return (int(r.len) + KVBlock - 1) / KVBlock }

// Cache is one sequence's keys and values: runs of blocks of its model's
// pool, per attention kind. Caches forked from one another (Clone) share
// their common blocks. A Cache is used by one goroutine at a time; Free, or
// the garbage collector once the Cache is unreachable, returns its blocks.
type Cache struct {
	s        *seq
	progress func(done, total int)
}

// own is c as a Cache of this package (nil: nil, or another model's).
func own(c model.Cache) *Cache {
	d, _ := c.(*Cache)
	return d
}

// seq is a Cache's state, apart from the Cache so that a cleanup can free
// it when the Cache is collected.
type seq struct {
	m    *Model
	n    int
	runs [2][]run
	res  [2]int  // blocks reserved for this sequence
	tk   *Ticket // the request's ticket, drawn on when res is spent
}

// OnLayer makes every later forward pass on c report the decoder layers
// done of those it runs, after each layer (nil stops the reports): a long
// prefill's progress.
func (c *Cache) OnLayer(f func(done, total int)) { c.progress = f }

// NewCache returns an empty sequence of m's pool.
func (m *Model) NewCache() model.Cache { return m.newCache() }

func (m *Model) newCache() *Cache {
	c := &Cache{s: &seq{m: m}}
	runtime.AddCleanup(c, func(s *seq) { s.free() }, c.s)
	return c
}

// Len reports the number of positions in the cache.
func (c *Cache) Len() int { return c.s.n }

// Clone returns a fork of c: a sequence with c's positions, sharing c's
// blocks by reference. Either may grow afterwards without changing the
// other.
func (c *Cache) Clone() model.Cache {
	s := c.s
	d := s.m.newCache()
	d.s.n = s.n
	p := s.m.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	d.s.tk = s.tk
	for k := range s.runs {
		kd := &p.kinds[k]
		d.s.runs[k] = make([]run, len(s.runs[k]))
		for i, r := range s.runs[k] {
			r.own = false
			d.s.runs[k][i] = r
			for b := 0; b < r.blocks(); b++ {
				kd.ref[int(r.blk)+b]++
			}
		}
	}
	return d
}

// Fork returns a fork of c's first n positions (0 <= n <= c.Len()), sharing
// their blocks by reference, or false when c no longer holds keys a later
// position n would see (a sliding-window layer released them).
func (c *Cache) Fork(n int) (model.Cache, bool) {
	s := c.s
	if n < 0 || n > s.n {
		return nil, false
	}
	p := s.m.pool
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
	d := &Cache{s: &seq{m: s.m, n: n}}
	runtime.AddCleanup(d, func(s *seq) { s.free() }, d.s)
	for k := range s.runs {
		kd := &p.kinds[k]
		for _, r := range s.runs[k] {
			if int(r.pos) >= n {
				break
			}
			r.own = false
			r.len = min(r.len, int32(n)-r.pos)
			d.s.runs[k] = append(d.s.runs[k], r)
			for b := 0; b < r.blocks(); b++ {
				kd.ref[int(r.blk)+b]++
			}
		}
	}
	return d, true
}

// Free returns c's blocks and reservation to the pool; c is empty after.
func (c *Cache) Free() { c.s.free() }

func (s *seq) free() {
	p := s.m.pool
	if p == nil { // the model was closed
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
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

// Reserve admits c for positions more positions: it promises c the blocks
// they can need, so that c never runs out of blocks in the middle of an
// answer, or fails with a *KVError when the pool cannot promise them.
func (c *Cache) Reserve(positions int) error {
	s := c.s
	p := s.m.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	var need [2]int
	for k := range p.kinds {
		kd := &p.kinds[k]
		if len(kd.layers) == 0 {
			continue
		}
		need[k] = max(kd.need(positions, s.m.maxRows)-s.res[k], 0)
		if avail := kd.free - kd.reserved; need[k] > avail {
			return &KVError{Need: need[k], Free: avail, Kind: kindName(k)}
		}
	}
	for k := range p.kinds {
		p.kinds[k].reserved += need[k]
		s.res[k] += need[k]
	}
	return nil
}

// need is the number of blocks a sequence of kind kd is promised for
// positions more positions: a partial block at each end, and for a sliding
// window no more than the window and one batch of rows can reach.
func (kd *kvKind) need(positions, rows int) int {
	n := (positions+KVBlock-1)/KVBlock + 1
	if kd.window > 0 {
		n = min(n, (kd.window+rows)/KVBlock+2)
	}
	return n
}

// KVFits reports whether m's pool, with no other sequence in it, could
// promise a new sequence positions positions (what Reserve promises): nil,
// or a *KVError whose Free is the pool's whole size in blocks of that kind.
// A request it refuses can never be admitted, however long it waits.
func (m *Model) KVFits(positions int) error {
	p := m.pool
	if p == nil {
		return fmt.Errorf("gemma3n: the model is closed")
	}
	for k := range p.kinds {
		kd := &p.kinds[k]
		if len(kd.layers) == 0 {
			continue
		}
		if n := kd.need(positions, m.maxRows); n > kd.blocks {
			return &KVError{Need: n, Free: kd.blocks, Kind: kindName(k)}
		}
	}
	return nil
}

// slots appends n positions to kind k of s (from s.n on) and writes their
// pool rows (block·KVBlock + slot) into dst. On a *KVError nothing changes.
func (s *seq) slots(k int, n int, dst []int32) error {
	kd := &s.m.pool.kinds[k]
	for i := 0; i < n; i++ {
		pos := int32(s.n + i)
		rs := s.runs[k]
		if len(rs) > 0 {
			r := &rs[len(rs)-1]
			if r.own && r.pos+r.len == pos && (int(r.len)%KVBlock != 0) {
				dst[i] = r.blk*KVBlock + r.len
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
			return &KVError{Need: (n - i + KVBlock - 1) / KVBlock, Free: kd.free - kd.reserved, Kind: kindName(k)}
		}
		if b == want {
			r := &rs[len(rs)-1]
			dst[i] = r.blk*KVBlock + r.len
			r.len++
			continue
		}
		s.runs[k] = append(rs, run{blk: int32(b), pos: pos, len: 1, own: true})
		dst[i] = int32(b * KVBlock)
	}
	return nil
}

// trim drops kind k's positions at or after n (slots given out by a
// failed slots call).
func (s *seq) trim(k, n int) {
	kd := &s.m.pool.kinds[k]
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
	kd := &s.m.pool.kinds[1]
	if kd.window <= 0 || len(kd.layers) == 0 {
		return
	}
	lo := int32(s.n - kd.window + 1) // the first position a later query sees
	rs := s.runs[1]
	i := 0
	for ; i < len(rs); i++ {
		r := &rs[i]
		for r.len > 0 {
			n := min(int32(KVBlock), r.len)
			if r.pos+n > lo || (n < KVBlock && i == len(rs)-1) {
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
		s.runs[1] = append(rs[:0], rs[i:]...)
	}
}

// WithKVPositions returns a view of m (the same weights) with a key/value
// pool of its own of the given size in positions per attention kind: a
// separate budget for one kind of work. Caches of one view do not mix with
// another's.
func (m *Model) WithKVPositions(n int) (model.Model, error) {
	if n <= 0 || n > 1<<24 {
		return nil, fmt.Errorf("gemma3n: a key/value pool of %d positions: want 1 to %d", n, 1<<24)
	}
	c := *m
	c.execs = &execPool{}
	p, err := newPool(&c, c.be, n)
	if err != nil {
		return nil, err
	}
	c.pool = p
	return &c, nil
}

// CloseView releases what a view made by WithKVPositions holds of its own:
// its key/value pool and idle Execs; the weights stay with the model it was
// made from. The view must not be used afterwards.
func (m *Model) CloseView() {
	if p := m.execs; p != nil {
		p.mu.Lock()
		for _, x := range p.idle {
			x.close()
		}
		p.idle = nil
		p.mu.Unlock()
	}
	if m.pool != nil {
		m.pool.close()
		m.pool = nil
	}
}
