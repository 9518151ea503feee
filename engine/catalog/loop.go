package catalog

import (
	"context"
	"fmt"
	"slices"
	"time"

	"verdict/engine/model"
	"verdict/native"
)

// LoopMode picks how DecodeLoop drives its steps.
type LoopMode int

const (
	// DeviceLoop runs every step after the first as one backend loop (a
	// recorded graph that repeats the forward pass and the catalog step
	// until every walk is done), or as HostLoop where the backend does not
	// record loops (LoopStats.Device says which ran).
	DeviceLoop LoopMode = iota
	// HostLoop issues the same steps from the host, reading how many walks
	// still run after each.
	HostLoop
)

// MaxLoopBatch is the most requests DecodeLoop decodes at once.
const MaxLoopBatch = 64

// LoopStats describes a DecodeLoop run.
type LoopStats struct {
	Device  bool // the steps ran as a backend loop
	Steps   int  // forward passes after the first token (the loop's iterations)
	Prefill time.Duration
	Decode  time.Duration // the first token's step and the loop
	Total   time.Duration
}

// loopState is a catalog's grammar and walks kept with an Exec across
// DecodeLoop calls, so that a recorded loop (which holds their device
// addresses) runs again.
type loopState struct {
	g       *native.Grammar
	cs      *native.CatalogState
	ar      *native.Arena
	running native.Tensor
}

func (s *loopState) Close() error {
	s.cs.Free()
	s.g.Free()
	s.ar.Free()
	return nil
}

type loopKey struct{ c *Catalog }

func stateFor(x model.Exec, c *Catalog) (*loopState, error) {
	k := loopKey{c}
	if v, ok := x.Kept(k).(*loopState); ok {
		return v, nil
	}
	st, _, _ := x.CatalogHead()
	be := st.Backend()
	if !be.HasCatalogStep() {
		return nil, fmt.Errorf("catalog: the %s backend has no catalog step", be.Name())
	}
	g, err := be.BindGrammar(c.spec())
	if err != nil {
		return nil, fmt.Errorf("catalog: %w", err)
	}
	cs, err := g.NewState(MaxLoopBatch, len(c.Entries), false)
	if err != nil {
		g.Free()
		return nil, err
	}
	ar, err := be.NewArena(native.ArenaBytes(1))
	if err != nil {
		cs.Free()
		g.Free()
		return nil, err
	}
	s := &loopState{g: g, cs: cs, ar: ar, running: ar.Take(native.I32, 1, 1)}
	x.Keep(k, s)
	return s, nil
}

// tokens lists every token a step of c can choose.
func (c *Catalog) tokens() []int32 {
	t := append(slices.Clone(c.Token), c.Grammar.Sep, c.Grammar.Stop)
	slices.Sort(t)
	return slices.Compact(t)
}

// DecodeLoop decodes reqs (1 to MaxLoopBatch requests of catalog c) as one
// batch whose steps run back to back on the backend: the prompts are
// prefilled (a shared prefix once), the first tokens chosen from their
// hidden states, then each step is a forward pass of one row a sequence
// and the backend's catalog step, the chosen tokens feeding the next
// step on the device. Each result's entries and tokens are Decode's; its
// Steps holds the last step only (its legal set, chosen token and
// logits). Every request must fit the key/value pool at once.
func DecodeLoop(ctx context.Context, m model.Model, c *Catalog, reqs []Request, mode LoopMode) ([]Result, LoopStats, error) {
	start := time.Now()
	var ls LoopStats
	n := len(reqs)
	if n == 0 || n > MaxLoopBatch {
		return nil, ls, fmt.Errorf("catalog: a loop decodes 1 to %d requests, not %d", MaxLoopBatch, n)
	}
	if c == nil {
		return nil, ls, fmt.Errorf("catalog: no catalog")
	}
	steps := 0 // the loop's iterations: every answer token but the first
	answer := make([]int, n)
	for i, r := range reqs {
		switch {
		case r.Catalog != nil && r.Catalog != c:
			return nil, ls, fmt.Errorf("catalog: request %d has a catalog of its own; a loop decodes one catalog", i)
		case r.Cache != nil:
			return nil, ls, fmt.Errorf("catalog: request %d continues a cache; a loop starts from prompts", i)
		}
		var err error
		if answer[i], err = checkRequest(m, c, i, r); err != nil {
			return nil, ls, err
		}
		steps = max(steps, answer[i]-1)
	}
	steps = max(steps, 1)
	x, err := m.Acquire()
	if err != nil {
		return nil, ls, err
	}
	defer x.Release()
	shared, fed, err := sharedPrefix(x, m, reqs)
	if err != nil {
		return nil, ls, err
	}
	if shared != nil {
		defer shared.Free()
	}
	caches := make([]model.Cache, n)
	defer func() {
		for _, c := range caches {
			if c != nil {
				c.Free()
			}
		}
	}()
	for i, r := range reqs {
		if shared != nil {
			caches[i] = shared.Clone()
		} else {
			caches[i] = m.NewCache()
		}
		if err := caches[i].Reserve(len(r.Prompt) - fed + answer[i]); err != nil {
			return nil, ls, fmt.Errorf("catalog: request %d: %w", i, err)
		}
	}
	// The prompts, as many at once as a pass takes; each request's last
	// prompt row gives its first step's hidden state.
	D := m.Config().Hidden
	hs := make([]float32, n*D)
	var b model.Batch
	var who []int
	flush := func() error {
		if len(b.Rows) == 0 {
			return nil
		}
		h, err := x.Prefill(&b)
		if err != nil {
			return err
		}
		for j, i := range who {
			copy(hs[i*D:(i+1)*D], h[j*D:(j+1)*D])
		}
		b.Reset()
		who = who[:0]
		return nil
	}
	for i, r := range reqs {
		if err := ctx.Err(); err != nil {
			return nil, ls, err
		}
		p := r.Prompt[fed:]
		if len(b.Rows)+len(p) > x.Rows() {
			if err := flush(); err != nil {
				return nil, ls, err
			}
		}
		b.Add(caches[i], p, 1)
		who = append(who, i)
	}
	if err := flush(); err != nil {
		return nil, ls, err
	}
	ls.Prefill = time.Since(start)

	t0 := time.Now()
	s, err := stateFor(x, c)
	if err != nil {
		return nil, ls, err
	}
	l, err := x.NewLoop(caches, steps, c.tokens())
	if err != nil {
		return nil, ls, err
	}
	fedSteps := make([]int, n)
	defer func() { l.Close(fedSteps) }()
	st, w, softcap := x.CatalogHead()
	slots, ks := make([]int32, n), make([]int32, n)
	for i, r := range reqs {
		slots[i], ks[i] = int32(i), int32(r.K)
	}
	st.CatalogInit(s.cs, slots, ks)
	h0, err := x.Upload(hs)
	if err != nil {
		return nil, ls, err
	}
	ids := l.IDs()
	next := s.cs.Next().Sub(0, 1, n)
	step := func(h native.Tensor) {
		st.CatalogStepAll(s.cs, h, w, softcap, n, s.running)
		st.Copy(ids, next)
	}
	step(h0) // the first tokens
	if mode == DeviceLoop {
		if ls.Device, err = l.RunDevice(step, s.running, s); err != nil {
			return nil, ls, err
		}
	}
	if !ls.Device {
		if _, err := l.RunHost(step, s.running); err != nil {
			return nil, ls, err
		}
	}
	if err := st.CatalogRead(s.cs); err != nil {
		return nil, ls, err
	}
	iters := []int32{0}
	st.DownloadI32(iters, l.Iter())
	if err := st.Sync(); err != nil {
		return nil, ls, err
	}
	ls.Steps = int(iters[0])
	ls.Decode = time.Since(t0)
	out := make([]Result, n)
	g := c.Grammar
	for i, r := range reqs {
		wk := s.cs.Walk(i)
		if wk.Err != 0 {
			return nil, ls, fmt.Errorf("request %d: catalog: step %d: trie node %d: %s (loop)", i, wk.Step, wk.ErrNode, native.CatalogError(wk.Err))
		}
		if !wk.Done {
			return nil, ls, fmt.Errorf("request %d: catalog: the loop ended after %d steps with the walk unfinished (%d of %d entries)", i, ls.Steps, len(wk.Emitted), r.K)
		}
		res := &out[i]
		res.Prompt = len(r.Prompt)
		res.Entries = slices.Clone(wk.Emitted)
		for j, e := range res.Entries {
			res.Names = append(res.Names, c.Entries[e].Name)
			res.Tokens = append(res.Tokens, c.Entries[e].TokenIDs...)
			if j+1 < len(res.Entries) {
				res.Tokens = append(res.Tokens, g.Sep)
			} else {
				res.Tokens = append(res.Tokens, g.Stop)
			}
		}
		if len(res.Tokens) != wk.Step {
			return nil, ls, fmt.Errorf("request %d: catalog: the loop's walk took %d steps for %d tokens", i, wk.Step, len(res.Tokens))
		}
		res.Steps = []Step{{Node: -1, Legal: slices.Clone(wk.Legal), Chosen: wk.Next, Logits: slices.Clone(wk.Logits), Entry: int32(wk.Entry)}}
		res.Prefill, res.Decode = ls.Prefill, ls.Decode
		fedSteps[i] = wk.Step - 1 // the last chosen token is never fed
	}
	ls.Total = time.Since(start)
	return out, ls, nil
}

// loopSizes are the batch sizes of the loop gates.
var loopSizes = []int{1, 2, 7, 32, 64}

// loopGates adds the loop decoder's gates to Gates: the host-driven loop
// against the reference (ref[i] decodes reqs[i] alone), the device loop
// against the host loop bit for bit, and a recorded loop run again
// against its first run.
func loopGates(ctx context.Context, m model.Model, c *Catalog, reqs []Request, ref []Result, add func(string) *Gate) error {
	batch := func(n, off int) ([]Request, []int) {
		rs, idx := make([]Request, n), make([]int, n)
		for j := range rs {
			idx[j] = (off + j) % len(reqs)
			rs[j] = reqs[idx[j]]
		}
		return rs, idx
	}
	host, dev, again := &Gate{Name: "host loop = alone (entries, tokens, last step)"}, &Gate{Name: "device loop = host loop, bit for bit"},
		&Gate{Name: "a replayed device loop = its first run"}
	devRuns := 0
	for _, n := range loopSizes {
		rs, idx := batch(n, n)
		h, _, err := DecodeLoop(ctx, m, c, rs, HostLoop)
		if err != nil {
			return err
		}
		d, st, err := DecodeLoop(ctx, m, c, rs, DeviceLoop)
		if err != nil {
			return err
		}
		r, st2, err := DecodeLoop(ctx, m, c, rs, DeviceLoop)
		if err != nil {
			return err
		}
		if st.Device && st2.Device {
			devRuns++
		}
		for j, i := range idx {
			want := ref[i]
			last := want.Steps[len(want.Steps)-1] // a copy: ref is not changed
			last.Node = -1
			want.Steps = []Step{last}
			host.check(differ(h[j], want) == "", "batch of %d, request %d: %s", n, i, differ(h[j], want))
			dev.check(differ(d[j], h[j]) == "", "batch of %d, request %d: %s", n, i, differ(d[j], h[j]))
			again.check(differ(r[j], d[j]) == "", "batch of %d, request %d: %s", n, i, differ(r[j], d[j]))
		}
	}
	dev.Name += fmt.Sprintf(" (a backend loop in %d of %d sizes)", devRuns, len(loopSizes))
	for _, g := range []*Gate{host, dev, again} {
		*add(g.Name) = *g
	}
	return nil
}

// SwitchGate alternates device loops of two catalogs (so each replay of a
// recorded loop finds the other grammar bound last) and checks every run
// against the host loop of the same catalog.
func SwitchGate(ctx context.Context, m model.Model, a, b *Catalog, reqs []Request) (Gate, error) {
	g := Gate{Name: "grammars switched between device loops and inside replays = host loop"}
	rs := slices.Clone(reqs[:min(len(reqs), 7)])
	for i := range rs {
		rs[i].K = min(rs[i].K, len(a.Entries), len(b.Entries))
		rs[i].Catalog = nil
	}
	want := map[*Catalog][]Result{}
	for _, c := range []*Catalog{a, b} {
		h, _, err := DecodeLoop(ctx, m, c, rs, HostLoop)
		if err != nil {
			return g, err
		}
		want[c] = h
	}
	for round := 0; round < 6; round++ {
		c := a
		if round%2 == 1 {
			c = b
		}
		d, _, err := DecodeLoop(ctx, m, c, rs, DeviceLoop)
		if err != nil {
			return g, err
		}
		for j := range d {
			g.check(differ(d[j], want[c][j]) == "", "round %d, request %d: %s", round, j, differ(d[j], want[c][j]))
		}
	}
	return g, nil
}
