package gemma4

import (
	"fmt"
	"math/bits"
	"slices"

	"verdict/engine/kvpool"
	"verdict/engine/model"
	"verdict/engine/model/kit"
	"verdict/native"
)

// Device loops. A dense Gemma 4 step needs nothing from the host: the
// positions, key/value slots and per-layer rows of the chosen tokens are
// derived on the device (LoopRows, a gather from a per-layer table there),
// so its decodes are recorded as backend loops, as Gemma 3n's: DecodeGreedy
// a greedy loop, a Loop (the catalog decoder's) its caller's step. A MoE
// step reads the router's choice on the host (the experts' rows are
// gathered by host-built indices), so a MoE model decodes from the host:
// GreedyLoops is false, DecodeGreedy runs Forward and Greedy a step at a
// time, and a Loop's RunDevice declines. Every way gives Forward's bits.

// maxLoopGraphs bounds the loops an Exec keeps recorded.
const maxLoopGraphs = 64

// minLoopKeys is the smallest key capacity a loop is recorded for.
const minLoopKeys = 256

// loopKeys is the key capacity a loop reaching maxKeys keys is recorded
// for: a power of two, so that a decode re-records once per doubling. No
// operation's arithmetic depends on it, so every capacity gives the same
// bits.
func loopKeys(maxKeys int) int {
	if maxKeys <= minLoopKeys {
		return minLoopKeys
	}
	return 1 << bits.Len(uint(maxKeys-1))
}

// deviceSteps reports why a step of the decoder cannot run without the
// host ("" when it can): a MoE layer's routing, or a per-layer table not
// resident when any token may be fed (anyToken).
func (d *Decoder) deviceSteps(anyToken bool) string {
	switch {
	case d.cfg.MoE:
		return "a mixture-of-experts layer's routing is read on the host"
	case anyToken && !d.InputsResident():
		return "the per-layer table is not resident on the backend"
	}
	return ""
}

// GreedyLoops reports whether DecodeGreedy runs as one device loop: a
// dense model whose per-layer table is resident, on a backend of a device
// that records loops. (DecodeGreedy runs everywhere: the same body from
// the host a step at a time where the backend does not record loops, as
// on the built-in one; Forward and Greedy a step at a time for a MoE
// model.)
func (x *Exec) GreedyLoops() bool {
	if x.d.deviceSteps(true) != "" || x.loop.noLoops {
		return false
	}
	_, onDevice := x.d.be.Info()
	return onDevice
}

// DecodeGreedy decodes up to steps tokens of each of caches greedily: row
// i feeds next[i], then each token it chooses, and ends after a token of
// stop. A dense model with its per-layer table resident runs the steps as
// a greedy loop (the device's where the backend records loops, else the
// same body from the host); otherwise it runs Forward and Greedy a step at
// a time. It returns each row's chosen tokens; each cache has taken in
// next[i] and every chosen token but the last.
func (x *Exec) DecodeGreedy(caches []model.Cache, next []int32, steps int, stop []int32) ([][]int32, error) {
	n := len(caches)
	switch {
	case len(next) != n:
		return nil, fmt.Errorf("gemma4: DecodeGreedy: %d first tokens for %d sequences", len(next), n)
	case len(stop) > model.MaxStops:
		return nil, fmt.Errorf("gemma4: DecodeGreedy: %d stop tokens, at most %d", len(stop), model.MaxStops)
	case n > headRows || n > x.cap:
		return nil, fmt.Errorf("gemma4: DecodeGreedy: %d sequences, at most %d", n, min(headRows, x.cap))
	case steps < 0:
		return nil, fmt.Errorf("gemma4: DecodeGreedy: %d steps", steps)
	}
	for i, c := range caches {
		if x.d.pool.Own(c) == nil {
			return nil, fmt.Errorf("gemma4: DecodeGreedy: sequence %d has no cache of this model", i)
		}
		if slices.Contains(caches[:i], c) {
			return nil, fmt.Errorf("gemma4: DecodeGreedy: sequence %d repeats a cache", i)
		}
	}
	for i, id := range next {
		if id < 0 || int(id) >= x.d.cfg.Vocab {
			return nil, fmt.Errorf("gemma4: DecodeGreedy: sequence %d's token id %d is outside the vocabulary of %d", i, id, x.d.cfg.Vocab)
		}
	}
	if n == 0 || steps == 0 {
		return make([][]int32, n), nil
	}
	if x.d.deviceSteps(true) == "" {
		return x.greedyLoop(caches, next, steps, stop)
	}
	return x.greedySteps(caches, next, steps, stop)
}

// greedyLoop is DecodeGreedy as a loop (kit.GreedyDecode, as Gemma 3n's).
func (x *Exec) greedyLoop(caches []model.Cache, next []int32, steps int, stop []int32) ([][]int32, error) {
	l, err := x.newLoop(caches, steps, nil)
	if err != nil {
		return nil, err
	}
	b := &x.loop
	return kit.GreedyDecode(x.st, l, kit.GreedyBufs{Iter: b.iter, Out: b.out, Done: b.done, Cond: b.cond, Stop: b.stop},
		x.Dense, next, stop, steps)
}

// greedySteps is DecodeGreedy from the host: a Forward and a Greedy a
// step.
func (x *Exec) greedySteps(caches []model.Cache, next []int32, steps int, stop []int32) ([][]int32, error) {
	n := len(caches)
	res := make([][]int32, n)
	tok := slices.Clone(next)
	live := make([]int, n)
	for i := range live {
		live[i] = i
	}
	out := make([]int32, n)
	var b model.Batch
	for s := 0; s < steps && len(live) > 0; s++ {
		b.Reset()
		for _, i := range live {
			b.Add(caches[i], tok[i:i+1], 1)
		}
		h, err := x.Forward(&b)
		if err != nil {
			return res, err
		}
		if err := x.Greedy(out[:len(live)], h); err != nil {
			return res, err
		}
		still := live[:0]
		for j, i := range live {
			t := out[j]
			res[i] = append(res[i], t)
			tok[i] = t
			if !slices.Contains(stop, t) {
				still = append(still, i)
			}
		}
		live = still
	}
	return res, nil
}

// A Loop decodes a batch of sequences whose next tokens the stream's own
// operations choose (a catalog step, a greedy head), one row a sequence.
// The key/value slots of every step are taken up front (NewLoop; their
// positions are masked from earlier queries by the attention's causal
// rule) and the ones past each sequence's end given back at Close. Each
// step's positions and slots are derived on the device from the step
// counter (LoopRows). On a dense model the per-layer rows are gathered on
// the device too, from a table of the loop's tokens' rows (or the resident
// table when any token may be fed), so the step can be recorded as a
// device loop (RunDevice) and run from the host (RunHost) alike, with the
// same bits. Otherwise (deviceSteps says why) each step reads its tokens on
// the host, and RunDevice declines.
type Loop struct {
	x      *Exec
	caches []*kvpool.Cache
	base   []int
	steps  int
	device bool // the step needs no host work
	done   bool
}

// loopBufs is an Exec's memory for loops, kept between them so that a
// recorded loop can run again: its tensors' addresses are in the
// recording.
type loopBufs struct {
	ar                                        *native.Arena
	rows, steps, table                        int // capacities
	iter, row, pos0, slots0, slots1, lut, ple native.Tensor
	out, done, cond, stop                     native.Tensor // the greedy loop's
	tokens                                    []int32       // the tokens whose rows ple holds, in table order
	any                                       bool          // the table is the decoder's resident one: any token
	hLUT                                      []int32
	hSlots                                    [2][]int32
	graphs                                    map[loopKey]*native.Graph
	fails                                     map[loopKey]int
	noLoops                                   bool // the backend does not record loops
}

type loopKey struct {
	rows, keys, steps int
	body              any
}

// dropGraphs frees the loops recorded with body as their body's key (the
// Keeper's OnDrop: a kept value's loops go with it).
func (b *loopBufs) dropGraphs(body any) {
	for k, g := range b.graphs {
		if k.body == body {
			g.Free()
			delete(b.graphs, k)
		}
	}
}

func (b *loopBufs) freeGraphs() {
	for _, g := range b.graphs {
		g.Free()
	}
	b.graphs, b.fails = nil, nil
}

func (b *loopBufs) free() {
	b.freeGraphs()
	if b.ar != nil {
		b.ar.Free()
	}
	*b = loopBufs{noLoops: b.noLoops}
}

// ensure gives the buffers room for rows rows, steps steps and a table of
// table tokens; growing them drops the recorded loops.
func (b *loopBufs) ensure(x *Exec, rows, steps, table int) error {
	if b.ar != nil && rows <= b.rows && steps <= b.steps && table <= b.table {
		return nil
	}
	c := x.d.cfg
	rows, steps, table = max(rows, b.rows), max(steps, b.steps, 64), max(table, b.table, 64)
	if err := x.st.Sync(); err != nil { // no queued work reads the old ones
		return err
	}
	b.free()
	LP := c.Layers * c.PerLayerInput
	ar, err := x.d.be.NewArena(native.ArenaBytes(1, rows, rows, rows*steps, rows*steps, c.Vocab, table*max(LP, 1),
		rows*steps, rows, 1, model.MaxStops))
	if err != nil {
		return fmt.Errorf("gemma4: a loop's memory (%d rows, %d steps, %d tokens): %w", rows, steps, table, err)
	}
	i := func(r, c int) native.Tensor { return ar.Take(native.I32, r, c) }
	*b = loopBufs{ar: ar, rows: rows, steps: steps, table: table, noLoops: b.noLoops}
	b.iter, b.row, b.pos0 = i(1, 1), i(1, rows), i(1, rows)
	b.slots0, b.slots1, b.lut = i(1, rows*steps), i(1, rows*steps), i(1, c.Vocab)
	b.ple = ar.Take(native.F32, table, max(LP, 1))
	b.out, b.done, b.cond, b.stop = i(1, rows*steps), i(1, rows), i(1, 1), i(1, model.MaxStops)
	b.hLUT = make([]int32, c.Vocab)
	b.hSlots = [2][]int32{make([]int32, rows*steps), make([]int32, rows*steps)}
	return nil
}

// setTable uploads the per-layer rows of tokens (and token 0's, row 0)
// and the token → row table, unless they are there already; nil tokens
// mean any token: the decoder's resident table, row id for token id.
func (b *loopBufs) setTable(x *Exec, tokens []int32) error {
	d := x.d
	if tokens == nil {
		if b.any {
			return nil
		}
		for id := range b.hLUT {
			b.hLUT[id] = int32(id)
		}
		x.st.UploadI32(b.lut, b.hLUT)
		b.tokens, b.any = nil, true
		return x.st.Sync()
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
	LP := d.ple.width
	rows := make([]float32, len(want)*LP)
	clear(b.hLUT)
	for r, id := range want {
		if LP > 0 {
			if err := d.ple.row(id, rows[r*LP:(r+1)*LP]); err != nil {
				return err
			}
		}
		b.hLUT[id] = int32(r)
	}
	if LP > 0 {
		x.st.Upload(b.ple.Sub(0, len(want), LP), rows)
	}
	x.st.UploadI32(b.lut, b.hLUT)
	b.tokens, b.any = want, false
	return x.st.Sync()
}

// rowsOf is the per-layer table the loop's rows index.
func (b *loopBufs) rowsOf(x *Exec) native.Tensor {
	if b.any {
		return x.d.ple.res
	}
	return b.ple
}

// NewLoop prepares x to decode up to steps tokens of each of caches, every
// fed token one of tokens (nil: any token). It takes the steps' key/value
// slots (a *model.KVError when the pool cannot give them). The first
// tokens go into IDs before a run; Close ends the loop.
func (x *Exec) NewLoop(seqs []model.Cache, steps int, tokens []int32) (model.Loop, error) {
	l, err := x.newLoop(seqs, steps, tokens)
	if err != nil {
		return nil, err
	}
	return l, nil
}

func (x *Exec) newLoop(seqs []model.Cache, steps int, tokens []int32) (*Loop, error) {
	d := x.d
	n := len(seqs)
	switch {
	case n == 0:
		return nil, fmt.Errorf("gemma4: a loop of no sequences")
	case n > x.cap || n > headRows:
		return nil, fmt.Errorf("gemma4: a loop of %d sequences exceeds the %d it takes", n, min(x.cap, headRows))
	case steps < 1:
		return nil, fmt.Errorf("gemma4: a loop of %d steps", steps)
	}
	for _, id := range tokens {
		if id < 0 || int(id) >= d.cfg.Vocab {
			return nil, fmt.Errorf("gemma4: a loop's token %d is outside the vocabulary of %d", id, d.cfg.Vocab)
		}
	}
	l := &Loop{x: x, caches: make([]*kvpool.Cache, n), base: make([]int, n), steps: steps}
	l.device = d.deviceSteps(tokens == nil) == ""
	add := make([]int, n)
	for i, c := range seqs {
		cc := d.pool.Own(c)
		if cc == nil {
			return nil, fmt.Errorf("gemma4: loop sequence %d has no cache of this model", i)
		}
		if slices.Contains(l.caches[:i], cc) {
			return nil, fmt.Errorf("gemma4: loop sequence %d repeats a cache", i)
		}
		if p := cc.Len() + steps; p > d.maxPositions() {
			return nil, model.TooLong("gemma4: %d positions exceed the model's max_position_embeddings of %d", p, d.maxPositions())
		}
		l.caches[i], l.base[i], add[i] = cc, cc.Len(), steps
	}
	b := &x.loop
	if err := b.ensure(x, n, steps, len(tokens)+1); err != nil {
		return nil, err
	}
	if l.device && d.cfg.PerLayerInput > 0 {
		if err := b.setTable(x, tokens); err != nil {
			return nil, err
		}
	}
	// Grow writes each sequence's steps' slots consecutively: [rows, steps].
	slots := [2][]int32{b.hSlots[0][:n*steps], b.hSlots[1][:n*steps]}
	if err := d.pool.Grow(l.caches, add, slots); err != nil {
		return nil, err
	}
	st := x.st
	pos0 := make([]int32, n)
	for i := range n {
		pos0[i] = int32(l.base[i])
	}
	st.UploadI32(b.slots0.Sub(0, 1, n*steps), slots[0])
	st.UploadI32(b.slots1.Sub(0, 1, n*steps), slots[1])
	st.UploadI32(b.pos0.Sub(0, 1, n), pos0)
	st.UploadI32(b.iter, []int32{0})
	return l, st.Sync()
}

// IDs is where the rows' next tokens go, I32 [1, rows]: the first ones
// before a run, then each step's choice.
func (l *Loop) IDs() native.Tensor { return l.x.ids.Sub(0, 1, len(l.caches)) }

// Iter is the loop's step counter, I32 [1, 1]: the steps run so far (set
// before each step's head runs).
func (l *Loop) Iter() native.Tensor { return l.x.loop.iter }

// Steps reports the most steps the loop runs.
func (l *Loop) Steps() int { return l.steps }

// prepare sets the Exec up for the loop's steps before a run: its
// sequences (one row each, every step's keys reachable, the later ones
// masked by position), their key runs and the rows' sequence indices.
func (l *Loop) prepare() error {
	if l.done {
		return fmt.Errorf("gemma4: a closed loop")
	}
	x, n := l.x, len(l.caches)
	x.caches, x.cnt, x.lim = append(x.caches[:0], l.caches...), x.cnt[:0], x.lim[:0]
	for i := range n {
		x.hQSeq[i], x.hGSel[i] = int32(i), int32(i)
		x.cnt, x.lim = append(x.cnt, 1), append(x.lim, l.base[i]+l.steps)
	}
	x.outs = n
	if err := x.entries(); err != nil {
		return err
	}
	x.st.UploadI32(x.qseq.Sub(0, 1, n), x.hQSeq[:n])
	return nil
}

// body issues step t: LoopRows sets the rows' positions, slots and table
// rows and advances Iter; the rows' tokens IDs go through the decoder to
// their final hidden states, which step turns into the next tokens (into
// IDs). A step that is not the device's reads its tokens on the host for
// their per-layer rows (and its MoE layers route there).
func (l *Loop) body(t int, step func(h native.Tensor)) error {
	x, d := l.x, l.x.d
	st, b, n := x.st, &x.loop, len(l.caches)
	st.LoopRows(&native.LoopRows{N: n, Steps: l.steps, Iter: b.iter, IDs: x.ids, LUT: b.lut, Row: b.row,
		Pos0: b.pos0, Pos: x.pos, Slots0: b.slots0, Slots1: b.slots1, Slot0: x.slot0, Slot1: x.slot1})
	var table native.Tensor
	if l.device {
		table = b.rowsOf(x)
	} else {
		st.DownloadI32(x.hPLIDs[:n], l.IDs())
		if err := st.Sync(); err != nil {
			return err
		}
		for i, id := range x.hPLIDs[:n] {
			if id < 0 || int(id) >= d.cfg.Vocab {
				return fmt.Errorf("gemma4: loop step %d: row %d's token %d is outside the vocabulary of %d", t, i, id, d.cfg.Vocab)
			}
		}
	}
	x.keysArg = loopKeys(x.maxKeys)
	h, err := x.pass(nil, n, table, b.row)
	x.keysArg = 0
	if err != nil {
		return err
	}
	step(h)
	return nil
}

// RunHost runs the loop a step at a time, reading running (I32 [1, 1],
// which step writes) after each, until it reads 0 or the steps are spent.
// It returns the steps run.
func (l *Loop) RunHost(step func(h native.Tensor), running native.Tensor) (int, error) {
	if err := l.prepare(); err != nil {
		return 0, err
	}
	st := l.x.st
	one := []int32{0}
	for it := 1; it <= l.steps; it++ {
		if err := l.body(it-1, step); err != nil {
			return it, err
		}
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
// having run nothing, where the step needs the host (a MoE model, or any
// token without the resident table: deviceSteps), the backend does not
// record loops (the built-in one), or the recording failed (a shape that
// fails twice is not tried again); the caller then runs RunHost, which
// gives the same bits.
func (l *Loop) RunDevice(step func(h native.Tensor), running native.Tensor, key any) (bool, error) {
	x := l.x
	st, b := x.st, &x.loop
	if !l.device || b.noLoops {
		return false, nil
	}
	if err := l.prepare(); err != nil {
		return false, err
	}
	k := loopKey{len(l.caches), loopKeys(x.maxKeys), l.steps, key}
	g := b.graphs[k]
	if g == nil {
		if b.fails[k] >= 2 {
			return false, nil
		}
		if !st.BeginLoop() {
			b.noLoops = true
			return false, nil
		}
		err := l.body(0, step)
		st.LoopWhile(running, b.iter, l.steps)
		if g = st.EndGraph(); g == nil || err != nil {
			if g != nil {
				g.Free()
			}
			if b.fails == nil {
				b.fails = map[loopKey]int{}
			}
			b.fails[k]++
			return false, nil
		}
		if b.graphs == nil || len(b.graphs) >= maxLoopGraphs {
			b.freeGraphs()
			b.graphs = map[loopKey]*native.Graph{}
		}
		b.graphs[k] = g
	}
	st.RunGraph(g)
	return true, st.Sync()
}

// Close ends the loop: sequence i keeps the keys and values of the first
// fed[i] steps' tokens and continues after them.
func (l *Loop) Close(fed []int) error {
	if l.done {
		return nil
	}
	l.done = true
	ns := make([]int, len(l.caches))
	for i := range ns {
		f := 0
		if i < len(fed) {
			f = min(max(fed[i], 0), l.steps)
		}
		ns[i] = l.base[i] + f
	}
	l.x.d.pool.Settle(l.caches, ns)
	if len(fed) != len(l.caches) {
		return fmt.Errorf("gemma4: Loop.Close: %d counts for %d sequences", len(fed), len(l.caches))
	}
	return nil
}
