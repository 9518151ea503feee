package tokenizer

import (
	"bytes"
	"fmt"
	"math/bits"
	"runtime"
	"sync"
)

// Loading spends most of its time on the 515k merges: three vocabulary
// lookups each (left, right, merged) and one insertion, all cache misses.
// The merges are therefore read in three phases: a sequential scan that
// only records where each string is, parallel vocabulary lookups, and a
// parallel build of a sharded pair table.

// mergeList is the scanned "merges" array. Each element has two string
// references; a reference is off<<32 | len into the JSON data, with bit 63
// set when the string had escapes and was decoded into arena. An element
// in the old "a b" form has noRef as its second reference.
type mergeList struct {
	data  []byte
	arena []byte
	refs  []uint64
}

const (
	inArena = 1 << 63
	noRef   = ^uint64(0)
)

func (l *mergeList) str(ref uint64) []byte {
	off, n := ref>>32&^(inArena>>32), ref&0xFFFFFFFF
	if ref&inArena != 0 {
		return l.arena[off : off+n]
	}
	return l.data[off : off+n]
}

// strRef reads one JSON string and returns its reference.
func (l *mergeList) strRef(sc *scanner) (uint64, error) {
	if sc.peek() != '"' {
		return 0, sc.errorf("want a string")
	}
	start := sc.pos + 1
	s, err := sc.str()
	if err != nil {
		return 0, err
	}
	if len(s) >= 1<<31 || start >= 1<<31 || len(l.arena) >= 1<<31 {
		return 0, sc.errorf("merges too large")
	}
	if sc.pos == start+len(s)+1 { // no escapes: s is data[start:start+len(s)]
		return uint64(start)<<32 | uint64(len(s)), nil
	}
	off := len(l.arena)
	l.arena = append(l.arena, s...)
	return inArena | uint64(off)<<32 | uint64(len(s)), nil
}

func (l *mergeList) scan(sc *scanner) error {
	l.data = sc.data
	l.refs = l.refs[:0]
	return sc.array(func() error {
		if sc.peek() != '[' {
			r, err := l.strRef(sc)
			l.refs = append(l.refs, r, noRef)
			return err
		}
		n := 0
		err := sc.array(func() error {
			r, err := l.strRef(sc)
			if n < 2 {
				l.refs = append(l.refs, r)
			}
			n++
			return err
		})
		if err == nil && n != 2 {
			err = fmt.Errorf("model.merges[%d]: want a pair of strings, got %d", len(l.refs)/2, n)
		}
		return err
	})
}

// buildMerges resolves the scanned merges against the vocabulary. As in
// HF, a merge whose parts or result are not in the vocabulary is an error,
// and a pair listed twice keeps its last rank.
func (m *bpeModel) buildMerges(l *mergeList) error {
	n := len(l.refs) / 2
	if n >= 1<<31 {
		return fmt.Errorf("model.merges: too many merges")
	}
	entries := make([]pairSlot, n) // key = pair, val = rank<<32 | merged id
	workers := max(1, min(runtime.GOMAXPROCS(0), 8, n/4096))
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var cat []byte
			lo, hi := w*n/workers, (w+1)*n/workers
			for i := lo; i < hi; i++ {
				a, b := l.str(l.refs[2*i]), []byte(nil)
				if l.refs[2*i+1] == noRef {
					parts := bytes.Split(a, []byte(" "))
					if len(parts) != 2 {
						errs[w] = fmt.Errorf("model.merges[%d]: %q is not two tokens", i, a)
						return
					}
					a, b = parts[0], parts[1]
				} else {
					b = l.str(l.refs[2*i+1])
				}
				cat = append(append(cat[:0], a...), b...)
				ia, ok1 := m.vocab.getBytes(a)
				ib, ok2 := m.vocab.getBytes(b)
				ic, ok3 := m.vocab.getBytes(cat)
				if !ok1 || !ok2 || !ok3 {
					missing := a
					if ok1 {
						missing = b
					}
					if ok1 && ok2 {
						missing = cat
					}
					errs[w] = fmt.Errorf("model.merges[%d]: %q is not in the vocabulary", i, missing)
					return
				}
				entries[i] = pairSlot{pairKey(ia, ib), uint64(i)<<32 | uint64(uint32(ic))}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	m.merges.build(entries, workers)
	return nil
}

// pairTable is an open-addressing hash table from uint64 pair keys to
// uint64 values, split into shards that can be filled in parallel.
type pairTable struct {
	shards [pairShards]pairShard
}

const pairShardBits = 2
const pairShards = 1 << pairShardBits

type pairShard struct {
	slots []pairSlot // key+1 in key, so that zero means empty
	mask  uint64
	shift uint
}

type pairSlot struct{ key, val uint64 }

func pairHash(key uint64) uint64 { return key * 0x9E3779B97F4A7C15 }

// build fills the table from entries in order (a later duplicate key wins).
func (t *pairTable) build(entries []pairSlot, workers int) {
	var counts [pairShards]int
	for _, e := range entries {
		counts[pairHash(e.key)>>(64-pairShardBits)]++
	}
	for s := range t.shards {
		// At most half full.
		b := max(4, bits.Len(uint(2*counts[s])))
		t.shards[s] = pairShard{slots: make([]pairSlot, 1<<b), mask: 1<<b - 1, shift: uint(64 - pairShardBits - b)}
	}
	var wg sync.WaitGroup
	workers = max(1, min(workers, pairShards))
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, e := range entries {
				h := pairHash(e.key)
				s := int(h >> (64 - pairShardBits))
				if s%workers == w {
					t.shards[s].put(h, e.key, e.val)
				}
			}
		}()
	}
	wg.Wait()
}

func (s *pairShard) put(h, key, val uint64) {
	for i := h >> s.shift & s.mask; ; i = (i + 1) & s.mask {
		sl := &s.slots[i]
		if sl.key == 0 || sl.key == key+1 {
			sl.key, sl.val = key+1, val
			return
		}
	}
}

func (t *pairTable) get(key uint64) (uint64, bool) {
	h := pairHash(key)
	s := &t.shards[h>>(64-pairShardBits)]
	if s.slots == nil {
		return 0, false
	}
	for i := h >> s.shift & s.mask; ; i = (i + 1) & s.mask {
		sl := &s.slots[i]
		if sl.key == key+1 {
			return sl.val, true
		}
		if sl.key == 0 {
			return 0, false
		}
	}
}
