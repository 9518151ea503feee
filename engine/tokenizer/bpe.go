package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"unicode/utf8"
)

// bpeModel is HF's BPE model restricted to what Gemma uses: no subword
// prefix or word suffix, no dropout; byte fallback, unk fusing and
// ignore_merges are supported.
type bpeModel struct {
	vocab     strTable
	idToToken []string
	present   []bool // present[id]: idToToken[id] is a vocabulary entry
	maxID     int32

	// merges maps a pair (left<<32 | right) to (rank<<32 | merged id).
	merges pairTable

	byteIDs      [256]int32 // id of "<0xNN>", or -1
	unkID        int32      // -1 when there is no unk token
	fuseUnk      bool
	byteFallback bool
	ignoreMerges bool

	scratch sync.Pool // *bpeScratch
}

type symbol struct {
	id         int32
	prev, next int32
	dead       bool
}

// mergeItem is a candidate merge of the symbol at pos with its successor.
// key = rank<<32 | pos orders the heap: lowest rank first, then leftmost,
// exactly like HF's Word::merge_all.
type mergeItem struct {
	key   uint64
	newID int32
}

type bpeScratch struct {
	syms []symbol
	heap []mergeItem
}

func (m *bpeModel) token(id int32) (string, bool) {
	if id < 0 || int(id) >= len(m.idToToken) || !m.present[id] {
		return "", false
	}
	return m.idToToken[id], true
}

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// encodeWord appends the ids of one pre-tokenized word to out.
func (m *bpeModel) encodeWord(w string, out []int32) []int32 {
	if w == "" {
		return out
	}
	if m.ignoreMerges {
		if id, ok := m.vocab.get(w); ok {
			return append(out, id)
		}
	}
	sc, _ := m.scratch.Get().(*bpeScratch)
	if sc == nil {
		sc = &bpeScratch{}
	}
	syms := sc.syms[:0]
	add := func(id int32) {
		n := int32(len(syms))
		syms = append(syms, symbol{id: id, prev: n - 1, next: n + 1})
	}
	// Initial symbols: one per character, or its bytes (byte fallback), or
	// unk; a pending unk is flushed only before a vocabulary character and
	// at the end, as in HF's merge_word.
	unkPending := false
	for i := 0; i < len(w); {
		_, size := utf8.DecodeRuneInString(w[i:])
		c := w[i : i+size]
		i += size
		if id, ok := m.vocab.get(c); ok {
			if unkPending {
				add(m.unkID)
				unkPending = false
			}
			add(id)
			continue
		}
		if m.byteFallback && m.hasBytes(c) {
			for j := 0; j < len(c); j++ {
				add(m.byteIDs[c[j]])
			}
			continue
		}
		if m.unkID >= 0 {
			if unkPending && !m.fuseUnk {
				add(m.unkID)
			}
			unkPending = true
		}
	}
	if unkPending {
		add(m.unkID)
	}
	if len(syms) == 0 {
		sc.syms = syms
		m.scratch.Put(sc)
		return out
	}
	syms[len(syms)-1].next = -1

	heap := sc.heap[:0]
	for i := 0; i+1 < len(syms); i++ {
		if v, ok := m.merges.get(pairKey(syms[i].id, syms[i+1].id)); ok {
			heap = append(heap, mergeItem{key: v&^0xFFFFFFFF | uint64(i), newID: int32(uint32(v))})
		}
	}
	heapInit(heap)
	for len(heap) > 0 {
		top := heap[0]
		heap = heapPop(heap)
		pos := int32(uint32(top.key))
		s := &syms[pos]
		if s.dead || s.next < 0 {
			continue
		}
		next := s.next
		// Skip stale entries: the pair at pos must still merge into newID.
		if v, ok := m.merges.get(pairKey(s.id, syms[next].id)); !ok || int32(uint32(v)) != top.newID {
			continue
		}
		s.id = top.newID
		syms[next].dead = true
		s.next = syms[next].next
		if s.next >= 0 {
			syms[s.next].prev = pos
		}
		if p := s.prev; p >= 0 {
			if v, ok := m.merges.get(pairKey(syms[p].id, s.id)); ok {
				heap = heapPush(heap, mergeItem{key: v&^0xFFFFFFFF | uint64(p), newID: int32(uint32(v))})
			}
		}
		if n := s.next; n >= 0 {
			if v, ok := m.merges.get(pairKey(s.id, syms[n].id)); ok {
				heap = heapPush(heap, mergeItem{key: v&^0xFFFFFFFF | uint64(pos), newID: int32(uint32(v))})
			}
		}
	}
	for i := int32(0); i >= 0; i = syms[i].next {
		out = append(out, syms[i].id)
	}
	sc.syms, sc.heap = syms, heap
	m.scratch.Put(sc)
	return out
}

func (m *bpeModel) hasBytes(c string) bool {
	for j := 0; j < len(c); j++ {
		if m.byteIDs[c[j]] < 0 {
			return false
		}
	}
	return true
}

// A binary min-heap on mergeItem.key (container/heap's interface calls cost
// more than the merges themselves).

func heapInit(h []mergeItem) {
	for i := len(h)/2 - 1; i >= 0; i-- {
		heapDown(h, i)
	}
}

func heapPush(h []mergeItem, it mergeItem) []mergeItem {
	h = append(h, it)
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if h[p].key <= h[i].key {
			break
		}
		h[p], h[i] = h[i], h[p]
		i = p
	}
	return h
}

func heapPop(h []mergeItem) []mergeItem {
	n := len(h) - 1
	h[0] = h[n]
	h = h[:n]
	heapDown(h, 0)
	return h
}

func heapDown(h []mergeItem, i int) {
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		c := l
		if r := l + 1; r < len(h) && h[r].key < h[l].key {
			c = r
		}
		if h[i].key <= h[c].key {
			return
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
}

// parseModel reads the "model" member straight into m.
func parseModel(sc *scanner, m *bpeModel) error {
	var typ string
	var unk *string
	var merges mergeList
	haveVocab := false
	err := sc.object(func(key []byte) error {
		k := string(key)
		switch k {
		case "vocab":
			haveVocab = true
			return m.parseVocab(sc)
		case "merges":
			return merges.scan(sc)
		}
		raw, err := sc.raw()
		if err != nil {
			return err
		}
		var sp *string
		switch k {
		case "type":
			err = json.Unmarshal(raw, &typ)
		case "dropout":
			var d *float64
			if err = json.Unmarshal(raw, &d); err == nil && d != nil && *d != 0 {
				return unsupported("model", "BPE dropout %v", *d)
			}
		case "unk_token":
			err = json.Unmarshal(raw, &unk)
		case "continuing_subword_prefix", "end_of_word_suffix":
			if err = json.Unmarshal(raw, &sp); err == nil && sp != nil && *sp != "" {
				return unsupported("model", "BPE %s %q", k, *sp)
			}
		case "fuse_unk":
			err = json.Unmarshal(raw, &m.fuseUnk)
		case "byte_fallback":
			err = json.Unmarshal(raw, &m.byteFallback)
		case "ignore_merges":
			err = json.Unmarshal(raw, &m.ignoreMerges)
		default:
			return unsupported("model", "key %q", k)
		}
		if err != nil {
			return fmt.Errorf("model.%s: %w", k, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if typ != "BPE" {
		return unsupported("model", "type %q (only BPE)", typ)
	}
	if !haveVocab {
		return errors.New("model has no vocab")
	}
	m.unkID = -1
	if unk != nil {
		id, ok := m.vocab.get(*unk)
		if !ok {
			return fmt.Errorf("model: unk_token %q is not in the vocabulary", *unk)
		}
		m.unkID = id
	}
	for b := range m.byteIDs {
		m.byteIDs[b] = -1
		if id, ok := m.vocab.get(fmt.Sprintf("<0x%02X>", b)); ok {
			m.byteIDs[b] = id
		}
	}
	return m.buildMerges(&merges)
}

// maxVocabID bounds token ids, so that a corrupt file cannot make Load
// allocate an id table of gigabytes.
const maxVocabID = 1 << 24

// parseVocab reads {"token": id, ...}. Token texts are gathered in one
// arena and sliced from a single string, to keep allocations down.
func (m *bpeModel) parseVocab(sc *scanner) error {
	type entry struct {
		off, n uint32
		id     int32
	}
	var entries []entry
	var arena []byte
	m.maxID = -1
	err := sc.object(func(key []byte) error {
		id, err := sc.integer()
		if err != nil {
			return err
		}
		if id < 0 || id >= maxVocabID {
			return fmt.Errorf("vocab: id %d out of range [0, %d)", id, maxVocabID)
		}
		entries = append(entries, entry{off: uint32(len(arena)), n: uint32(len(key)), id: int32(id)})
		arena = append(arena, key...)
		m.maxID = max(m.maxID, int32(id))
		return nil
	})
	if err != nil {
		return fmt.Errorf("model.vocab: %w", err)
	}
	all := string(arena)
	m.idToToken = make([]string, m.maxID+1)
	m.present = make([]bool, m.maxID+1)
	m.vocab = newStrTable(m.idToToken, len(entries))
	for _, e := range entries {
		s := all[e.off : e.off+e.n]
		if m.present[e.id] {
			return fmt.Errorf("model.vocab: id %d is given to %q and %q", e.id, m.idToToken[e.id], s)
		}
		m.idToToken[e.id] = s
		m.present[e.id] = true
		if !m.vocab.add(s, e.id) {
			return fmt.Errorf("model.vocab: token %q appears twice", s)
		}
	}
	return nil
}
