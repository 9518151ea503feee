package catalog

import (
	"fmt"
	"slices"

	"verdict/native"
)

// StepMode picks where a sparse-head decode step runs.
type StepMode int

const (
	// BackendStep runs each step inside the model's backend (its catalog
	// step: legal set, sparse head, argmax and the walk's advance on the
	// device) when the backend has one, and the host replays every step
	// through State and Pick, failing on any difference. The default.
	BackendStep StepMode = iota
	// HostStep is the reference: legal sets and walks on the host, the
	// sparse head through LogitsRows.
	HostStep
)

// spec is the catalog's trie as a backend binds it.
func (c *Catalog) spec() native.GrammarSpec {
	sp := native.GrammarSpec{First: c.First, Token: c.Token, Child: c.Child, Ends: c.Ends, Count: c.Count,
		Mask: c.Mask, Entries: len(c.Entries), Words: c.Words, PathFirst: make([]int32, len(c.Entries)+1)}
	for i, p := range c.path {
		sp.Path = append(sp.Path, p...)
		sp.PathFirst[i+1] = int32(len(sp.Path))
	}
	return sp
}

// devSteps is a decode's backend state: per catalog its bound grammar and
// walks (one slot per running sequence).
type devSteps struct {
	st      *native.Stream
	w       native.Tensor
	softcap float32
	slots   int
	counts  bool
	grams   map[*Catalog]*devGram
	order   []*Catalog
}

type devGram struct {
	g    *native.Grammar
	cs   *native.CatalogState
	free []int32
}

func newDevSteps(st *native.Stream, w native.Tensor, softcap float32, slots int, counts bool) *devSteps {
	return &devSteps{st: st, w: w, softcap: softcap, slots: slots, counts: counts, grams: map[*Catalog]*devGram{}}
}

func (d *devSteps) close() {
	for _, c := range d.order {
		d.grams[c].cs.Free()
		d.grams[c].g.Free()
	}
}

// admit binds c when first seen and starts a walk of k entries in a free
// slot.
func (d *devSteps) admit(c *Catalog, k int) (int32, error) {
	dg := d.grams[c]
	if dg == nil {
		g, err := d.st.Backend().BindGrammar(c.spec())
		if err != nil {
			return 0, fmt.Errorf("catalog: %w", err)
		}
		cs, err := g.NewState(d.slots, len(c.Entries), d.counts)
		if err != nil {
			g.Free()
			return 0, err
		}
		dg = &devGram{g: g, cs: cs}
		for s := d.slots - 1; s >= 0; s-- {
			dg.free = append(dg.free, int32(s))
		}
		d.grams[c] = dg
		d.order = append(d.order, c)
	}
	if len(dg.free) == 0 {
		return 0, fmt.Errorf("catalog: no free walk slot of %d", d.slots)
	}
	slot := dg.free[len(dg.free)-1]
	dg.free = dg.free[:len(dg.free)-1]
	d.st.CatalogInit(dg.cs, []int32{slot}, []int32{int32(k)})
	return slot, nil
}

func (d *devSteps) release(s *seq) {
	dg := d.grams[s.st.cat]
	dg.free = append(dg.free, s.slot)
}

// step runs one backend step for every sequence of act (hidden row
// rows[i] of h for act[i]), one call per catalog, and replays it on the
// host: the device's error, else its legal set against State.Legal and its
// winner against Pick. It fills each sequence's legal set and logits[i].
func (d *devSteps) step(act []*seq, rows []int32, h native.Tensor, logits [][]float32, best []int) error {
	var cats []*Catalog
	for _, s := range act {
		if !slices.Contains(cats, s.st.cat) {
			cats = append(cats, s.st.cat)
		}
	}
	for _, c := range cats {
		var hrows, slots []int32
		for i, s := range act {
			if s.st.cat == c {
				hrows, slots = append(hrows, rows[i]), append(slots, s.slot)
			}
		}
		dg := d.grams[c]
		d.st.CatalogStep(dg.cs, h, d.w, d.softcap, hrows, slots)
		if err := d.st.CatalogRead(dg.cs); err != nil {
			return err
		}
		for i, s := range act {
			if s.st.cat != c {
				continue
			}
			w := dg.cs.Walk(int(s.slot))
			if w.Err != 0 {
				if w.Err == native.CatEmpty {
					return fmt.Errorf("request %d: catalog: sequence %d, step %d: empty mask at trie node %d (backend step)", s.req, s.st.seq, w.Step, w.ErrNode)
				}
				return fmt.Errorf("request %d: catalog: sequence %d, step %d: trie node %d: %s (backend step)", s.req, s.st.seq, w.Step, w.ErrNode, native.CatalogError(w.Err))
			}
			var err error
			if s.legal, err = s.st.Legal(s.legal[:0]); err != nil {
				return fmt.Errorf("request %d: %w (the backend step found a legal set %v)", s.req, err, w.Legal)
			}
			if !slices.Equal(s.legal, w.Legal) {
				return fmt.Errorf("catalog: request %d, step %d: the backend's legal set %v differs from the host's %v", s.req, s.st.Step(), w.Legal, s.legal)
			}
			logits[i] = slices.Clone(w.Logits)
			best[i] = w.Best
			if w.Next != s.legal[w.Best] {
				return fmt.Errorf("catalog: request %d, step %d: the backend chose token %d, its winner is %d", s.req, s.st.Step(), w.Next, s.legal[w.Best])
			}
		}
	}
	return nil
}

// check compares the walk of s after the host's Advance with the device's.
func (d *devSteps) check(s *seq) error {
	w := d.grams[s.st.cat].cs.Walk(int(s.slot))
	if w.Node != int(s.st.Node()) || w.Done != s.st.Done() || w.Step != s.st.Step() || !slices.Equal(w.Emitted, s.st.Emitted()) {
		return fmt.Errorf("catalog: request %d, step %d: the backend's walk (node %d, done %v, emitted %v) differs from the host's (node %d, done %v, emitted %v)",
			s.req, s.st.Step(), w.Node, w.Done, w.Emitted, s.st.Node(), s.st.Done(), s.st.Emitted())
	}
	return nil
}
