package native

/*
#include "backend_call.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"unsafe"
)

// CatalogMaxEdges is the most edges a trie node of a bound grammar may
// have: the step's per-sequence buffers hold that many tokens.
const CatalogMaxEdges = C.VD_CAT_MAX_EDGES

// GrammarSpec is a compiled catalog's trie as the backend's catalog step
// reads it (backend.h, vd_grammar): node n's edges First[n] <= e <
// First[n+1], sorted by token; Child[e] a node or -1 (SEP) / -2 (STOP);
// Ends[n] the entry ending at n or -1; Count[e] and Mask[e·Words:(e+1)·Words]
// the entries below token edge e; Path[PathFirst[i]:PathFirst[i+1]] entry
// i's token edges from the root.
type GrammarSpec struct {
	First, Token, Child, Ends, Count []int32
	Mask                             []uint64
	Entries, Words                   int
	PathFirst, Path                  []int32
}

// Catalog step error codes (a walk's Err; BindGrammar's refusals).
const (
	CatEmpty = C.VD_CAT_EEMPTY // the legal set is empty
	CatEdge  = C.VD_CAT_EEDGE  // the winner sits on no live edge
	CatNaN   = C.VD_CAT_ENAN   // a legal token's logit is NaN
	CatTrie  = C.VD_CAT_ETRIE  // a malformed trie
	CatFull  = C.VD_CAT_EFULL  // k out of range, or more entries than the emitted buffer holds
	CatShape = C.VD_CAT_ESHAPE // inconsistent sizes, a node over CatalogMaxEdges edges
	CatMem   = C.VD_CAT_EMEM   // out of memory
)

// CatalogError describes a catalog step error code.
func CatalogError(code int) string {
	switch code {
	case CatEmpty:
		return "empty mask"
	case CatEdge:
		return "the winner is on no live edge"
	case CatNaN:
		return "a legal token's logit is NaN"
	case CatTrie:
		return "malformed trie (a child, token or entry out of range)"
	case CatFull:
		return "k out of range or the emitted buffer full"
	case CatShape:
		return "inconsistent trie sizes or a node over 256 edges"
	case CatMem:
		return "out of memory"
	}
	return fmt.Sprintf("error %d", code)
}

// Grammar is a catalog trie bound to a backend for its catalog step. It
// is read-only and serves any number of states and streams; Free it when
// no stream uses it any more.
type Grammar struct {
	be                           *Backend
	g                            *C.vd_gram
	nodes, edges, entries, words int
}

// HasCatalogStep reports whether the backend implements the catalog step.
func (b *Backend) HasCatalogStep() bool {
	return b.Supports(OpGrammarBind) && b.Supports(OpCatalogStep) && b.Supports(OpCatalogInit) && b.Supports(OpGrammarFree)
}

// BindGrammar checks sp's shape and copies it into the backend.
func (b *Backend) BindGrammar(sp GrammarSpec) (*Grammar, error) {
	if !b.HasCatalogStep() {
		return nil, fmt.Errorf("native: %s: no catalog step", b.Name())
	}
	nodes := len(sp.First) - 1
	if nodes < 1 || len(sp.Ends) != nodes || len(sp.Child) != len(sp.Token) || len(sp.Count) != len(sp.Token) ||
		sp.Entries < 1 || len(sp.PathFirst) != sp.Entries+1 || len(sp.Mask) != len(sp.Token)*sp.Words ||
		int(sp.PathFirst[sp.Entries]) != len(sp.Path) || sp.PathFirst[sp.Entries] < 0 {
		return nil, fmt.Errorf("native: BindGrammar: inconsistent sizes (%d nodes, %d edges, %d entries, %d words, %d path edges)",
			nodes, len(sp.Token), sp.Entries, sp.Words, len(sp.Path))
	}
	var pin runtime.Pinner
	defer pin.Unpin()
	p32 := func(x []int32) *C.int32_t {
		if len(x) == 0 {
			return nil
		}
		pin.Pin(unsafe.SliceData(x))
		return (*C.int32_t)(unsafe.Pointer(unsafe.SliceData(x)))
	}
	var mask *C.uint64_t
	if len(sp.Mask) > 0 {
		pin.Pin(unsafe.SliceData(sp.Mask))
		mask = (*C.uint64_t)(unsafe.Pointer(unsafe.SliceData(sp.Mask)))
	}
	cg := &C.vd_grammar{nodes: C.int32_t(nodes), edges: C.int32_t(len(sp.Token)), entries: C.int32_t(sp.Entries),
		words: C.int32_t(sp.Words), first: p32(sp.First), token: p32(sp.Token), child: p32(sp.Child),
		ends: p32(sp.Ends), count: p32(sp.Count), mask: mask, path_first: p32(sp.PathFirst), path: p32(sp.Path)}
	var out *C.vd_gram
	if rc := C.vdc_grammar_bind(b.t, cg, &out); rc != 0 {
		return nil, fmt.Errorf("native: %s: BindGrammar: %s", b.Name(), CatalogError(int(rc)))
	}
	return &Grammar{be: b, g: out, nodes: nodes, edges: len(sp.Token), entries: sp.Entries, words: sp.Words}, nil
}

// Free releases the grammar.
func (g *Grammar) Free() {
	if g != nil && g.g != nil {
		C.vdc_grammar_free(g.be.t, g.g)
		g.g = nil
	}
}

// CatalogState is the backend memory of up to Slots walks over one
// grammar: every walk's fields, banned set, live counts (the counts form),
// emitted entries, and the last step's legal set, logits and chosen token.
// Hidden rows and slots of a step are staged in it too; a state serves one
// stream at a time.
type CatalogState struct {
	g                                                     *Grammar
	slots, kmax                                           int
	counts                                                bool
	ar                                                    *Arena
	seq, banned, live, emitted, legal, logits, next, hrow Tensor
	slot, k                                               Tensor
	// in holds hrow, slot and k, and rd seq, emitted, legal, logits and
	// next, each block one span of the arena, so that a step's inputs go
	// up in one copy and CatalogRead's results come down in one.
	in, rd           Tensor
	hIn              []int32 // hHrow, hSlot, hK in turn
	hHrow, hSlot, hK []int32
	// Host copies of the last CatalogRead (views of hRd).
	hRd                           []int32
	hSeq, hEmitted, hLegal, hNext []int32
	hLogits                       []float32
}

// NewState reserves the memory of slots walks of at most kmax entries
// each, in the counts form (per-edge live counts) or the mask form (a
// banned set over the grammar's per-edge masks).
func (g *Grammar) NewState(slots, kmax int, counts bool) (*CatalogState, error) {
	if slots < 1 || kmax < 1 {
		return nil, fmt.Errorf("native: Grammar.NewState: %d slots of %d entries", slots, kmax)
	}
	liveN := 1
	if counts {
		liveN = slots * g.edges
	}
	F, E := C.VD_SEQ_FIELDS, CatalogMaxEdges
	ar, err := g.be.NewArena(ArenaBytes(slots*F, slots*2*g.words, liveN, slots*kmax, slots*2*E, slots*E, slots, slots, slots, slots))
	if err != nil {
		return nil, err
	}
	cs := &CatalogState{g: g, slots: slots, kmax: kmax, counts: counts, ar: ar}
	// The read block: its parts' word offsets in it.
	r0 := ar.used
	at := func() int { return (ar.used - r0) / 4 }
	oSeq := at()
	cs.seq = ar.Take(I32, slots, F)
	oEm := at()
	cs.emitted = ar.Take(I32, slots, kmax)
	oLeg := at()
	cs.legal = ar.Take(I32, slots, 2*E)
	oLog := at()
	cs.logits = ar.Take(F32, slots, E)
	oNext := at()
	cs.next = ar.Take(I32, 1, slots)
	cs.rd = ar.buf.Tensor(r0, I32, 1, at())
	cs.hRd = make([]int32, at())
	cs.hSeq, cs.hEmitted = cs.hRd[oSeq:oSeq+slots*F], cs.hRd[oEm:oEm+slots*kmax]
	cs.hLegal, cs.hNext = cs.hRd[oLeg:oLeg+slots*2*E], cs.hRd[oNext:oNext+slots]
	cs.hLogits = unsafe.Slice((*float32)(unsafe.Pointer(&cs.hRd[oLog])), slots*E)
	cs.in = ar.Take(I32, 1, 3*slots)
	cs.hrow, cs.slot, cs.k = cs.in.Sub(0, 1, slots), cs.in.Sub(slots, 1, slots), cs.in.Sub(2*slots, 1, slots)
	cs.hIn = make([]int32, 3*slots)
	cs.hHrow, cs.hSlot, cs.hK = cs.hIn[:slots], cs.hIn[slots:2*slots], cs.hIn[2*slots:]
	cs.banned = ar.Take(I32, slots, 2*g.words)
	cs.live = ar.Take(I32, 1, liveN)
	if counts {
		cs.live = cs.live.View(slots, g.edges)
	}
	return cs, nil
}

// Free releases the state's memory.
func (cs *CatalogState) Free() {
	if cs != nil && cs.ar != nil {
		cs.ar.Free()
		cs.ar = nil
	}
}

// Slots reports the walks the state holds.
func (cs *CatalogState) Slots() int { return cs.slots }

func (cs *CatalogState) step(h, w Tensor, softcap float32, n int) C.vd_cat_step {
	c := C.vd_cat_step{h: h.t, w: w.t, softcap: C.float(softcap), n: C.int64_t(n),
		hrow: cs.hrow.Sub(0, 1, n).t, slot: cs.slot.Sub(0, 1, n).t, k: cs.k.Sub(0, 1, n).t,
		seq: cs.seq.t, banned: cs.banned.t, emitted: cs.emitted.t, legal: cs.legal.t, logits: cs.logits.t, next: cs.next.t}
	if cs.counts {
		c.counts, c.live = 1, cs.live.t
	}
	return c
}

func (cs *CatalogState) checkSlots(slots []int32, what string) {
	check(len(slots) <= cs.slots, what+": more sequences than slots")
	for _, s := range slots {
		check(s >= 0 && int(s) < cs.slots, what+": slot out of range")
	}
}

// CatalogInit starts a walk in each of slots, walk i owing ks[i] entries
// (a k outside 1..min(entries, kmax) is the walk's error CatFull).
func (s *Stream) CatalogInit(cs *CatalogState, slots, ks []int32) {
	check(len(ks) == len(slots), "Stream.CatalogInit: slots and ks differ")
	cs.checkSlots(slots, "Stream.CatalogInit")
	n := len(slots)
	if n == 0 {
		return
	}
	copy(cs.hSlot, slots)
	copy(cs.hK, ks)
	s.UploadI32(cs.in.Sub(cs.slots, 1, 2*cs.slots), cs.hIn[cs.slots:]) // slot and k
	C.vdc_catalog_init(s.be.t, s.s, cs.g.g, cs.step(Tensor{}, Tensor{}, 0, n))
}

// CatalogStep chooses the next token of the walks in slots, walk i
// reading row hrows[i] of the hidden states h [rows, D]: its legal set,
// the logits of those tokens through the output head w (F32, BF16 or Q4
// [vocab, D]; the values Linear gives, then softcap·tanh(x/softcap) when
// softcap > 0), the argmax (ties: the lower token) and the walk's advance.
// Walks that are done or failed are left as they are. CatalogRead brings
// the results back.
func (s *Stream) CatalogStep(cs *CatalogState, h, w Tensor, softcap float32, hrows, slots []int32) {
	check(len(hrows) == len(slots), "Stream.CatalogStep: hrows and slots differ")
	cs.checkSlots(slots, "Stream.CatalogStep")
	check(h.DType() == F32 && h.Cols() == w.Cols(), "Stream.CatalogStep: hidden states and head differ")
	for _, r := range hrows {
		check(r >= 0 && int(r) < h.Rows(), "Stream.CatalogStep: hidden row out of range")
	}
	n := len(slots)
	if n == 0 {
		return
	}
	copy(cs.hHrow, hrows)
	copy(cs.hSlot, slots)
	s.UploadI32(cs.in.Sub(0, 1, 2*cs.slots), cs.hIn[:2*cs.slots]) // hrow and slot
	C.vdc_catalog_step(s.be.t, s.s, cs.g.g, cs.step(h, w, softcap, n))
}

// CatalogStepAll is CatalogStep of walks 0..n−1 reading hidden rows
// 0..n−1, with nothing staged from the host (so it can be recorded in a
// graph or a loop): it also writes into running (I32 [1, 1]; nil: not
// written) how many of those walks are neither done nor failed after it.
func (s *Stream) CatalogStepAll(cs *CatalogState, h, w Tensor, softcap float32, n int, running Tensor) {
	check(n >= 0 && n <= cs.slots && n <= h.Rows(), "Stream.CatalogStepAll: more walks than slots or hidden rows")
	check(h.DType() == F32 && h.Cols() == w.Cols(), "Stream.CatalogStepAll: hidden states and head differ")
	check(running.Nil() || (running.DType() == I32 && running.Len() >= 1), "Stream.CatalogStepAll: running is I32 [1, 1]")
	if n == 0 {
		return
	}
	c := cs.step(h, w, softcap, n)
	c.hrow, c.slot, c.running = C.vd_tensor{}, C.vd_tensor{}, running.t
	C.vdc_catalog_step(s.be.t, s.s, cs.g.g, c)
}

// Next returns the state's chosen tokens, I32 [1, Slots] (walk i's at i).
func (cs *CatalogState) Next() Tensor { return cs.next }

// CatalogRead downloads every walk of the state and waits for the stream.
func (s *Stream) CatalogRead(cs *CatalogState) error {
	s.DownloadI32(cs.hRd, cs.rd)
	return s.Sync()
}

// CatalogWalk is one walk as the last CatalogRead found it.
type CatalogWalk struct {
	Node, K, Step int
	Done          bool
	Err, ErrNode  int     // a Cat* code (0: none) and the node where it arose
	Emitted       []int32 // the entries completed, in order
	Legal, Edges  []int32 // the last step's legal tokens (ascending) and their edges
	Logits        []float32
	Best          int   // the winner's index in Legal
	Entry         int   // the entry the last step completed, or -1
	Next          int32 // the chosen token
}

// Walk returns slot's walk from the last CatalogRead (slices into the
// state's host copies, valid until the next read).
func (cs *CatalogState) Walk(slot int) CatalogWalk {
	check(slot >= 0 && slot < cs.slots, "CatalogState.Walk: slot out of range")
	f := cs.hSeq[slot*C.VD_SEQ_FIELDS : (slot+1)*C.VD_SEQ_FIELDS]
	nl, ne := int(f[C.VD_SEQ_NLEGAL]), int(f[C.VD_SEQ_NEMIT])
	nl = max(0, min(nl, CatalogMaxEdges))
	ne = max(0, min(ne, cs.kmax))
	E := CatalogMaxEdges
	lg := cs.hLegal[slot*2*E : (slot+1)*2*E]
	return CatalogWalk{Node: int(f[C.VD_SEQ_NODE]), K: int(f[C.VD_SEQ_K]), Step: int(f[C.VD_SEQ_STEP]),
		Done: f[C.VD_SEQ_DONE] != 0, Err: int(f[C.VD_SEQ_ERR]), ErrNode: int(f[C.VD_SEQ_ENODE]),
		Emitted: cs.hEmitted[slot*cs.kmax : slot*cs.kmax+ne], Legal: lg[:nl], Edges: lg[E : E+nl],
		Logits: cs.hLogits[slot*E : slot*E+nl], Best: int(f[C.VD_SEQ_BEST]), Entry: int(f[C.VD_SEQ_ENTRY]),
		Next: cs.hNext[slot]}
}
