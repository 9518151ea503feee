package gemma3n

import (
	"fmt"

	"verdict/engine/model"
	"verdict/engine/model/kit"
)

// MaxStops bounds the stop tokens of a greedy loop (model.MaxStops).
const MaxStops = model.MaxStops

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
	b := &x.loop
	return kit.GreedyDecode(x.st, l, kit.GreedyBufs{Iter: b.iter, Out: b.out, Done: b.done, Cond: b.cond, Stop: b.stop},
		x.Dense, next, stop, steps)
}
