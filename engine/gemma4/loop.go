package gemma4

import (
	"fmt"
	"slices"

	"verdict/engine/kvpool"
	"verdict/engine/model"
	"verdict/native"
)

// Gemma 4's decodes are driven from the host: a MoE layer's routing reads
// the router's output on the host, so a step cannot be recorded as one
// device loop yet. GreedyLoops is false (callers decode a pass at a time),
// DecodeGreedy runs Forward and Greedy step by step, and a Loop runs its
// steps from the host (RunHost; RunDevice declines). All give Forward's
// bits.

// GreedyLoops is false: DecodeGreedy is not one device loop.
func (x *Exec) GreedyLoops() bool { return false }

// DecodeGreedy decodes up to steps tokens of each of caches greedily, a
// Forward and a Greedy a step: row i feeds next[i], then each token it
// chooses, and ends after a token of stop. It returns each row's chosen
// tokens; each cache has taken in next[i] and every chosen token but the
// last.
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
// operations choose (a catalog step), from the host: each step reads the
// rows' tokens (IDs), runs them through the decoder and hands their hidden
// states to the caller's step. The key/value slots of every step are taken
// up front (NewLoop) and the ones past each sequence's end given back at
// Close.
type Loop struct {
	x      *Exec
	caches []*kvpool.Cache
	base   []int
	steps  int
	slots  [2][]int32 // row i's step t: [i·steps+t]
	done   bool
}

// NewLoop prepares x to decode up to steps tokens of each of caches, every
// fed token one of tokens (nil: any token). It takes the steps' key/value
// slots (a *model.KVError when the pool cannot give them).
func (x *Exec) NewLoop(seqs []model.Cache, steps int, tokens []int32) (model.Loop, error) {
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
			return nil, fmt.Errorf("gemma4: %d positions exceed the model's max_position_embeddings of %d", p, d.maxPositions())
		}
		l.caches[i], l.base[i], add[i] = cc, cc.Len(), steps
	}
	l.slots = [2][]int32{make([]int32, n*steps), make([]int32, n*steps)}
	if err := d.pool.Grow(l.caches, add, l.slots); err != nil {
		return nil, err
	}
	x.hIter[0] = 0
	x.st.UploadI32(x.iter, x.hIter)
	return l, x.st.Sync()
}

// IDs is where the rows' next tokens go, I32 [1, rows]: the first ones
// before a run, then each step's choice.
func (l *Loop) IDs() native.Tensor { return l.x.ids.Sub(0, 1, len(l.caches)) }

// Iter is the loop's step counter, I32 [1, 1]: the steps run so far (set
// before each step's head runs).
func (l *Loop) Iter() native.Tensor { return l.x.iter }

// Steps reports the most steps the loop runs.
func (l *Loop) Steps() int { return l.steps }

// body runs step t: the rows' tokens IDs through the decoder to their final
// hidden states, which step turns into the next tokens (into IDs).
func (l *Loop) body(t int, step func(h native.Tensor)) error {
	x, d := l.x, l.x.d
	st, n := x.st, len(l.caches)
	st.DownloadI32(x.hIDs[:n], l.IDs())
	if err := st.Sync(); err != nil {
		return err
	}
	x.caches, x.cnt, x.lim = append(x.caches[:0], l.caches...), x.cnt[:0], x.lim[:0]
	for i := range n {
		id := x.hIDs[i]
		if id < 0 || int(id) >= d.cfg.Vocab {
			return fmt.Errorf("gemma4: loop step %d: row %d's token %d is outside the vocabulary of %d", t, i, id, d.cfg.Vocab)
		}
		x.hPLIDs[i], x.hPos[i], x.hQSeq[i], x.hGSel[i] = id, int32(l.base[i]+t), int32(i), int32(i)
		for k := range 2 {
			x.hSlot[k][i] = l.slots[k][i*l.steps+t]
		}
		x.cnt, x.lim = append(x.cnt, 1), append(x.lim, l.base[i]+l.steps)
	}
	x.outs = n
	if err := x.entries(); err != nil {
		return err
	}
	st.UploadI32(x.rowsIn, x.hRowsIn)
	h, err := x.pass(nil, n)
	if err != nil {
		return err
	}
	x.hIter[0] = int32(t + 1)
	st.UploadI32(x.iter, x.hIter)
	step(h)
	return nil
}

// RunHost runs the loop a step at a time, reading running (I32 [1, 1],
// which step writes) after each, until it reads 0 or the steps are spent.
// It returns the steps run.
func (l *Loop) RunHost(step func(h native.Tensor), running native.Tensor) (int, error) {
	if l.done {
		return 0, fmt.Errorf("gemma4: a closed loop")
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

// RunDevice declines (false, having run nothing): the caller runs RunHost.
func (l *Loop) RunDevice(step func(h native.Tensor), running native.Tensor, key any) (bool, error) {
	return false, nil
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
