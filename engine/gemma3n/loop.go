package gemma3n

import (
	"fmt"
	"slices"

	"verdict/engine/model"
	"verdict/native"
)

// A Loop decodes a batch of sequences whose next tokens the backend
// chooses itself (a catalog step, say), one row a sequence, with no host
// work between tokens: every input that changes from step to step is
// derived on the device from a step counter and the chosen tokens. The
// key/value slots of all the steps are reserved up front (their positions
// masked from earlier queries by the attention's causal rule), and the
// per-layer embedding rows of every token the steps can choose are
// uploaded once into a table the step gathers from. One body serves two
// drivers: RunHost issues it step by step and reads a running count after
// each; RunDevice records it once as a backend loop (a graph that repeats
// it until the count is 0) and runs it in one call. Both give the same
// bits, which equal those of Forward decoding the same tokens.
type Loop struct {
	x      *Exec
	caches []*Cache
	base   []int
	steps  int
	done   bool
}

// loopBufs is an Exec's memory for loops, kept between them so that a
// recorded loop can run again: its tensors' addresses are in the
// recording.
type loopBufs struct {
	ar                                        *native.Arena
	rows, steps, table                        int // capacities
	iter, row, pos0, slots0, slots1, lut, ple native.Tensor
	out, done, cond, stop                     native.Tensor // a greedy loop's (decode.go)
	tokens                                    []int32       // the tokens whose rows the table holds, in table order
	any                                       bool          // the table is the model's resident one: any token
	hLUT                                      []int32
	hSlots                                    [2][]int32
	graphs                                    map[loopKey]*native.Graph
	fails                                     map[loopKey]int
	noLoops                                   bool // the backend does not record loops
}

// dropGraphs frees the loops recorded with body as their body's key: the
// Exec's kit.Keeper calls it before closing the value kept under body, so
// that a loop's body state (a catalog's walks) lives as long as the
// recordings that use it.
func (b *loopBufs) dropGraphs(body any) {
	for lk, g := range b.graphs {
		if lk.body == body {
			g.Free()
			delete(b.graphs, lk)
		}
	}
}

type loopKey struct {
	rows, keys, steps int
	body              any
}

func (b *loopBufs) free() {
	b.freeGraphs()
	if b.ar != nil {
		b.ar.Free()
	}
	*b = loopBufs{noLoops: b.noLoops}
}

func (b *loopBufs) freeGraphs() {
	for _, g := range b.graphs {
		g.Free()
	}
	b.graphs, b.fails = nil, nil
}

// ensure gives the buffers room for rows rows, steps steps and a table of
// table tokens; growing them drops the recorded loops.
func (b *loopBufs) ensure(x *Exec, rows, steps, table int) error {
	if b.ar != nil && rows <= b.rows && steps <= b.steps && table <= b.table {
		return nil
	}
	m := x.m
	cfg := m.Cfg
	rows, steps, table = max(rows, b.rows), max(steps, b.steps, 64), max(table, b.table, 256)
	b.free()
	LP := cfg.NumLayers * cfg.PerLayerSize
	ar, err := m.be.NewArena(native.ArenaBytes(1, rows, rows, rows*steps, rows*steps, cfg.VocabSize, table*LP,
		rows*steps, rows, 1, MaxStops))
	if err != nil {
		return fmt.Errorf("gemma3n: a loop's memory (%d rows, %d steps, %d tokens): %w", rows, steps, table, err)
	}
	i := func(r, c int) native.Tensor { return ar.Take(native.I32, r, c) }
	*b = loopBufs{ar: ar, rows: rows, steps: steps, table: table}
	b.iter, b.row, b.pos0 = i(1, 1), i(1, rows), i(1, rows)
	b.slots0, b.slots1, b.lut = i(1, rows*steps), i(1, rows*steps), i(1, cfg.VocabSize)
	b.ple = ar.Take(native.F32, table, LP)
	b.out, b.done, b.cond, b.stop = i(1, rows*steps), i(1, rows), i(1, 1), i(1, MaxStops)
	b.hLUT = make([]int32, cfg.VocabSize)
	b.hSlots = [2][]int32{make([]int32, rows*steps), make([]int32, rows*steps)}
	return nil
}

// setTable uploads the per-layer rows of tokens (and token 0, row 0) and
// the token → row table, unless they are already there; nil tokens mean
// any token, the rows of the model's resident table.
func (b *loopBufs) setTable(x *Exec, tokens []int32) error {
	if tokens == nil {
		return b.setAny(x)
	}
	want := append([]int32{0}, tokens...)
	slices.Sort(want[1:])
	want = slices.Compact(want)
	if !b.any && slices.Equal(want, b.tokens) {
		return nil
	}
	if err := b.ensure(x, b.rows, b.steps, len(want)); err != nil {
		return err
	}
	cfg := x.m.Cfg
	LP := cfg.NumLayers * cfg.PerLayerSize
	rows := make([]float32, len(want)*LP)
	clear(b.hLUT)
	for r, id := range want {
		if id < 0 || int(id) >= cfg.VocabSize {
			return fmt.Errorf("gemma3n: a loop's token %d is outside the vocabulary of %d", id, cfg.VocabSize)
		}
		if err := x.m.pleRow(id, rows[r*LP:(r+1)*LP]); err != nil {
			return err
		}
		b.hLUT[id] = int32(r)
	}
	x.st.Upload(b.ple.Sub(0, len(want), LP), rows)
	x.st.UploadI32(b.lut, b.hLUT)
	b.tokens, b.any = want, false
	return x.st.Sync()
}

// setAny points the loop at the model's resident per-layer table: token
// id's row is id (token 0's past the per-layer vocabulary, as pleRow).
func (b *loopBufs) setAny(x *Exec) error {
	if !x.m.PLEResident() {
		return fmt.Errorf("gemma3n: a loop over any token needs the per-layer table on the device")
	}
	if b.any {
		return nil
	}
	for id := range b.hLUT {
		b.hLUT[id] = 0
		if id < x.m.Cfg.VocabSizePerLayer {
			b.hLUT[id] = int32(id)
		}
	}
	x.st.UploadI32(b.lut, b.hLUT)
	b.tokens, b.any = nil, true
	return x.st.Sync()
}

// rowsOf is the per-layer table the loop's rows index.
func (b *loopBufs) rowsOf(x *Exec) native.Tensor {
	if b.any {
		return x.m.ple
	}
	return b.ple
}

// NewLoop prepares x to decode up to steps tokens of each of caches (row i
// feeding caches[i], which continues at its length), every fed token one
// of tokens (nil: any token, which needs the per-layer table resident on
// the device: Model.PLEResident): it reserves the steps' key/value slots (a *KVError when the
// pool cannot give them) and uploads the loop's tables. The first tokens
// go into IDs before a run. Close ends the loop.
func (x *Exec) NewLoop(caches []model.Cache, steps int, tokens []int32) (model.Loop, error) {
	l, err := x.newLoop(caches, steps, tokens)
	if err != nil {
		return nil, err
	}
	return l, nil
}

func (x *Exec) newLoop(seqs []model.Cache, steps int, tokens []int32) (*Loop, error) {
	m := x.m
	caches := make([]*Cache, len(seqs))
	for i, c := range seqs {
		caches[i] = m.pool.Own(c)
	}
	n := len(caches)
	switch {
	case n == 0:
		return nil, fmt.Errorf("gemma3n: a loop of no sequences")
	case n > x.cap || n > graphRows:
		return nil, fmt.Errorf("gemma3n: a loop of %d sequences exceeds the %d it takes", n, min(x.cap, graphRows))
	case steps < 1:
		return nil, fmt.Errorf("gemma3n: a loop of %d steps", steps)
	}
	for i, c := range caches {
		if c == nil {
			return nil, fmt.Errorf("gemma3n: loop sequence %d has no cache of this model", i)
		}
		if slices.Contains(caches[:i], c) {
			return nil, fmt.Errorf("gemma3n: loop sequence %d repeats a cache", i)
		}
		if err := m.checkPositions(c.Len() + steps); err != nil {
			return nil, err
		}
	}
	b := &x.loop
	if err := b.ensure(x, n, steps, len(tokens)+1); err != nil {
		return nil, err
	}
	if err := b.setTable(x, tokens); err != nil {
		return nil, err
	}
	l := &Loop{x: x, caches: caches, base: make([]int, n), steps: steps}
	x.caches, x.cnt, x.ocnt, x.outRows = x.caches[:0], x.cnt[:0], x.ocnt[:0], x.outRows[:0]
	x.maxKeys = 0
	for i, c := range caches {
		l.base[i] = c.Len()
		x.caches = append(x.caches, c)
		x.cnt, x.ocnt = append(x.cnt, 1), append(x.ocnt, 1)
		x.outRows = append(x.outRows, int32(i))
		x.hQSeq[i], x.hPos[i] = int32(i), int32(c.Len())
		x.maxKeys = max(x.maxKeys, c.Len()+steps)
	}
	x.outs = n
	slots := [2][]int32{b.hSlots[0][:n*steps], b.hSlots[1][:n*steps]}
	clear(slots[0])
	clear(slots[1])
	x.ns = x.ns[:0]
	for range caches {
		x.ns = append(x.ns, steps)
	}
	if err := m.pool.Grow(caches, x.ns, slots); err != nil {
		return nil, err
	}
	if err := x.entries(steps); err != nil {
		x.settle(false)
		return nil, err
	}
	st := x.st
	// The slots tensors are laid out [rows, steps] by this loop's steps.
	s0, s1 := b.slots0.Sub(0, 1, n*steps), b.slots1.Sub(0, 1, n*steps)
	st.UploadI32(s0, b.hSlots[0][:n*steps])
	st.UploadI32(s1, b.hSlots[1][:n*steps])
	st.UploadI32(b.pos0.Sub(0, 1, n), x.hPos[:n])
	st.UploadI32(x.qseq.Sub(0, 1, n), x.hQSeq[:n])
	st.UploadI32(b.iter, []int32{0})
	return l, st.Sync()
}

// IDs is where the rows' next tokens go, I32 [1, rows]: the first ones
// before a run, then each step's choice.
func (l *Loop) IDs() native.Tensor { return l.x.ids.Sub(0, 1, len(l.caches)) }

// Iter is the loop's step counter, I32 [1, 1]: the steps run so far.
func (l *Loop) Iter() native.Tensor { return l.x.loop.iter }

// Steps reports the most steps the loop runs.
func (l *Loop) Steps() int { return l.steps }

// body issues one step: the rows' tokens IDs through the decoder to their
// final hidden states, which step turns into the next tokens (into IDs)
// and a running count.
func (l *Loop) body(step func(h native.Tensor)) {
	x, m := l.x, l.x.m
	st, b, n := x.st, &x.loop, len(l.caches)
	st.LoopRows(&native.LoopRows{N: n, Steps: l.steps, Iter: b.iter, IDs: x.ids, LUT: b.lut, Row: b.row,
		Pos0: b.pos0, Pos: x.pos, Slots0: b.slots0, Slots1: b.slots1, Slot0: x.slot0, Slot1: x.slot1})
	e := x.e.Slice(0, n)
	st.Embed(e, m.t.embed, x.ids.Sub(0, 1, n), m.embedScale)
	x.perLayerFrom(n, func(tok native.Tensor) { st.Embed(tok, b.rowsOf(x), b.row.Sub(0, 1, n), 1) })
	x.keysArg = graphKeys(x.maxKeys)
	h := x.layers(&Batch{}, e, n)
	x.keysArg = 0
	step(h)
}

// RunHost runs the loop from the host: a step, then a read of running
// (I32 [1, 1], which step writes), until it reads 0 or the loop's steps
// are spent. It returns the steps run.
func (l *Loop) RunHost(step func(h native.Tensor), running native.Tensor) (int, error) {
	st := l.x.st
	one := []int32{0}
	for it := 1; it <= l.steps; it++ {
		l.body(step)
		st.DownloadI32(one, running)
		if err := st.Sync(); err != nil {
			return it, err
		}
		if one[0] == 0 {
			return it, nil
		}
	}
	return l.steps, nil
}

// RunDevice runs the loop as one backend loop, recorded on first use for
// its shape and body (key names the body: the same key, the same
// operations on the same tensors) and replayed after. It returns false,
// having run nothing, where the backend does not record loops, or the
// recording failed (the caller runs RunHost instead; a shape that fails
// twice is not tried again).
func (l *Loop) RunDevice(step func(h native.Tensor), running native.Tensor, key any) (bool, error) {
	x := l.x
	st, b := x.st, &x.loop
	if graphsOff || b.noLoops {
		return false, nil
	}
	k := loopKey{len(l.caches), graphKeys(x.maxKeys), l.steps, key}
	g := b.graphs[k]
	if g == nil {
		if b.fails[k] >= 2 {
			return false, nil
		}
		if !st.BeginLoop() {
			b.noLoops = true
			return false, nil
		}
		l.body(step)
		st.LoopWhile(running, b.iter, l.steps)
		if g = st.EndGraph(); g == nil {
			if b.fails == nil {
				b.fails = map[loopKey]int{}
			}
			b.fails[k]++
			return false, nil
		}
		if b.graphs == nil || len(b.graphs) >= maxGraphs {
			for _, old := range b.graphs {
				old.Free()
			}
			b.graphs = map[loopKey]*native.Graph{}
		}
		b.graphs[k] = g
	}
	st.RunGraph(g)
	return true, st.Sync()
}

// Close ends the loop: sequence i keeps the keys and values of the first
// fed[i] steps' tokens (the tokens it took in; steps past its end wrote
// into slots that are given back now) and continues after them.
func (l *Loop) Close(fed []int) error {
	if l.done {
		return nil
	}
	l.done = true
	if len(fed) != len(l.caches) {
		return fmt.Errorf("gemma3n: Loop.Close: %d counts for %d sequences", len(fed), len(l.caches))
	}
	ns := make([]int, len(l.caches))
	for i := range l.caches {
		ns[i] = l.base[i] + min(max(fed[i], 0), l.steps)
	}
	l.x.m.pool.Settle(l.caches, ns)
	return nil
}
