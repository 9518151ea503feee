package gemma3n

import (
	"math/bits"
	"os"

	"verdict/native"
)

// Small batches (decode steps, scorer branches) spend more time issuing
// operations than running them on a GPU, so an Exec records the decoder
// part of such a pass once per shape as a backend graph and replays it.
// The shape is everything the recorded operations' arguments depend on:
// the row count, the number of sequences (the entry tables' layout) and
// the attention's key capacity, rounded up to a power of two so that a
// decode re-records once per doubling. The inputs that change from pass
// to pass (tokens' embeddings, positions, key slots, the sequences' key
// runs) live in the Exec's fixed buffers, written before the replay; no
// operation's arithmetic depends on the key capacity, so a replay gives a
// direct run's bits.

// graphRows is the largest batch recorded.
const graphRows = 64

// maxGraphs bounds the graphs an Exec keeps; past it they are dropped.
const maxGraphs = 32

// minGraphKeys is the smallest key capacity recorded.
const minGraphKeys = 256

type graphKey struct{ rows, seqs, keys int }

// graphsOff disables recording (VERDICT_GRAPHS=0), for comparisons.
var graphsOff = os.Getenv("VERDICT_GRAPHS") == "0"

// graphKeys returns the recorded key capacity for maxKeys keys.
func graphKeys(maxKeys int) int {
	if maxKeys <= minGraphKeys {
		return minGraphKeys
	}
	return 1 << bits.Len(uint(maxKeys-1))
}

// decoder runs the pass from the embeddings e through the layers to the
// final norm of the wanted rows, recorded and replayed where it can be.
// It returns the hidden states of the wanted rows.
func (x *Exec) decoder(b *Batch, e native.Tensor, n int) native.Tensor {
	if graphsOff || b.Hook != nil || x.outs != n || n > graphRows || x.noGraphs {
		return x.layers(b, e, n)
	}
	k := graphKey{n, len(x.caches), graphKeys(x.maxKeys)}
	if g := x.graphs[k]; g != nil {
		x.keysArg = k.keys
		x.st.RunGraph(g)
		x.keysArg = 0
		return x.h.Slice(0, n)
	}
	switch x.seen[k] {
	case 0: // a shape seen for the first time runs directly
		if x.seen == nil {
			x.seen = map[graphKey]int{}
		}
		if len(x.seen) >= 4*maxGraphs {
			clear(x.seen)
		}
		x.seen[k] = 1
		return x.layers(b, e, n)
	case -1: // could not be recorded
		return x.layers(b, e, n)
	}
	if !x.st.BeginGraph() {
		x.noGraphs = true // the backend does not record
		return x.layers(b, e, n)
	}
	x.keysArg = k.keys
	h := x.layers(b, e, n)
	g := x.st.EndGraph()
	if g == nil { // not recordable now: run it; a second failure is final
		x.keysArg = 0
		if x.fails == nil {
			x.fails = map[graphKey]int{}
		}
		if x.fails[k]++; x.fails[k] >= 2 {
			x.seen[k] = -1
		} else {
			x.seen[k] = 0 // seen afresh: once directly (buffers grow), then recorded
		}
		return x.layers(b, e, n)
	}
	if x.graphs == nil || len(x.graphs) >= maxGraphs {
		x.freeGraphs()
		x.graphs = map[graphKey]*native.Graph{}
	}
	x.graphs[k] = g
	x.st.RunGraph(g)
	x.keysArg = 0
	return h
}

func (x *Exec) freeGraphs() {
	for _, g := range x.graphs {
		g.Free()
	}
	x.graphs = nil
}
