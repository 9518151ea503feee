package tokenizer

import (
	"hash/maphash"
	"math/bits"
)

// strTable maps token text to id. It is an open-addressing table of 8-byte
// slots (hash tag, id) over the model's id → text slice: about half the
// memory of a map[string]int32, and usually one cache miss per lookup,
// which matters for the 1.5 million lookups made while loading.
type strTable struct {
	seed  maphash.Seed
	slots []uint64 // 0 = empty; else hash>>32 << 32 | id+1
	mask  uint64
	toks  []string // id → text
	n     int
}

func newStrTable(toks []string, n int) strTable {
	b := max(4, bits.Len(uint(2*n)))
	return strTable{seed: maphash.MakeSeed(), slots: make([]uint64, 1<<b), mask: 1<<b - 1, toks: toks}
}

// add inserts s → id (s must be toks[id]); it reports false if s is present.
func (t *strTable) add(s string, id int32) bool {
	h := maphash.String(t.seed, s)
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		v := t.slots[i]
		if v == 0 {
			t.slots[i] = h>>32<<32 | uint64(uint32(id)+1)
			t.n++
			return true
		}
		if v>>32 == h>>32 && t.toks[int32(uint32(v)-1)] == s {
			return false
		}
	}
}

func (t *strTable) get(s string) (int32, bool) {
	if t.slots == nil {
		return 0, false
	}
	h := maphash.String(t.seed, s)
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		v := t.slots[i]
		if v == 0 {
			return 0, false
		}
		if v>>32 == h>>32 {
			if id := int32(uint32(v) - 1); t.toks[id] == s {
				return id, true
			}
		}
	}
}

func (t *strTable) getBytes(s []byte) (int32, bool) {
	if t.slots == nil {
		return 0, false
	}
	h := maphash.Bytes(t.seed, s)
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		v := t.slots[i]
		if v == 0 {
			return 0, false
		}
		if v>>32 == h>>32 {
			if id := int32(uint32(v) - 1); t.toks[id] == string(s) {
				return id, true
			}
		}
	}
}

func (t *strTable) len() int { return t.n }
