package gemma3n

import (
	"fmt"
	"slices"

	"verdict/engine/model"
	"verdict/native"
)

// MaxStops bounds the stop tokens of a greedy loop (model.MaxStops).
const MaxStops = model.MaxStops

// greedyBody names the greedy loop's body among the recorded loops.
type greedyBody struct{}

// GreedyLoops reports whether DecodeGreedy runs on the device with no
// host work between tokens: the per-layer table is resident and the
// backend is a device's that records loops. (It runs elsewhere too, from
// the host, a step at a time.)
func (x *Exec) GreedyLoops() bool {
	if graphsOff || x.loop.noLoops || !x.m.PLEResident() {
		return false
	}
	return x.m.onDevice
}

// DecodeGreedy decodes up to steps tokens of each of caches greedily: row
// i feeds next[i], then each token it chooses, and ends after choosing a
// token of stop (at most 64 of them). It needs the per-layer table
// resident (Model.PLEResident). The steps run as one device loop where
// the backend records loops, else from the host a step at a time; both
// give Forward and Greedy's tokens. It returns each row's chosen tokens,
// the last a stop token where one ended it; each cache has then taken in
// the tokens it fed: next[i] and every chosen token but the last.
func (x *Exec) DecodeGreedy(caches []model.Cache, next []int32, steps int, stop []int32) ([][]int32, error) {
	n := len(caches)
	switch {
	case len(next) != n:
		return nil, fmt.Errorf("gemma3n: DecodeGreedy: %d first tokens for %d sequences", len(next), n)
	case len(stop) > MaxStops:
		return nil, fmt.Errorf("gemma3n: DecodeGreedy: %d stop tokens, at most %d", len(stop), MaxStops)
	case n > headRows:
		return nil, fmt.Errorf("gemma3n: DecodeGreedy: %d sequences, at most %d", n, headRows)
	}
	V := x.m.Cfg.VocabSize
	for _, id := range next {
		if id < 0 || int(id) >= V {
			return nil, fmt.Errorf("gemma3n: DecodeGreedy: token id %d outside the vocabulary of %d", id, V)
		}
	}
	l, err := x.newLoop(caches, steps, nil)
	if err != nil {
		return nil, err
	}
	fed := make([]int, n)
	defer func() { l.Close(fed) }()
	st, b := x.st, &x.loop
	hStop := make([]int32, MaxStops)
	for i := range hStop {
		hStop[i] = -1
	}
	copy(hStop, stop)
	st.UploadI32(l.IDs(), slices.Clone(next)) // next may sit in memory with Go pointers
	st.UploadI32(b.stop, hStop)
	st.UploadI32(b.done.Sub(0, 1, n), make([]int32, n))
	st.UploadI32(b.cond, []int32{int32(n)})
	out, done := b.out.Sub(0, 1, n*steps), b.done.Sub(0, 1, n)
	step := func(h native.Tensor) {
		ids := l.IDs()
		st.Argmax(ids.View(n, 1), x.Dense(h))
		st.LoopEmit(&native.LoopEmit{N: n, Steps: steps, Iter: b.iter, IDs: ids, Stop: b.stop, Out: out, Done: done, Cond: b.cond})
	}
	ok, err := l.RunDevice(step, b.cond, greedyBody{})
	if err == nil && !ok {
		_, err = l.RunHost(step, b.cond)
	}
	if err != nil {
		return nil, err
	}
	it := []int32{0}
	toks := make([]int32, n*steps)
	st.DownloadI32(it, b.iter)
	st.DownloadI32(toks, out)
	if err := st.Sync(); err != nil {
		return nil, err
	}
	ran := min(max(int(it[0]), 0), steps)
	res := make([][]int32, n)
	for i := range res {
		row := toks[i*steps : i*steps+ran]
		for j, id := range row {
			if slices.Contains(stop, id) {
				row = row[:j+1]
				break
			}
		}
		res[i] = slices.Clone(row)
		fed[i] = len(row)
	}
	return res, nil
}
