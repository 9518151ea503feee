package gemma3n

import (
	"math/bits"
	"os"

	"verdict/native"
)

// Small batches (decode steps, scorer branches, short prompt chunks) spend
// more time issuing operations than running them on a GPU, so an Exec
// records the decoder part of such a pass once per shape as a backend
// graph and replays it. The shape is everything the recorded operations'
// arguments depend on: the row count, the wanted outputs' count, the
// number of sequences (the entry tables' layout) and the attention's key
// capacity, rounded up to a power of two so that a decode re-records once
// per doubling. The inputs that change from pass to pass (tokens'
// embeddings, positions, key slots, the sequences' key runs, which rows
// are wanted) live in the Exec's fixed buffers, written before the
// replay; no
// operation's arithmetic depends on the key capacity, so a replay gives a
// direct run's bits.

// graphRows is the largest batch recorded.
const graphRows = 64

// maxGraphs bounds the graphs an Exec keeps; past it the least recently
// replayed is dropped.
const maxGraphs = 128

// minGraphKeys is the smallest key capacity recorded.
const minGraphKeys = 256

// graphKey is a recorded pass's shape: its rows, wanted outputs (the rows
// the KV-sharing layers run: a prompt chunk wants its last or none),
// sequences and key capacity.
type graphKey struct{ rows, outs, seqs, keys int }

// recording is a recorded pass: its graph, the tensor its hidden states
// land in, and when it was last replayed.
type recording struct {
	g    *native.Graph
	h    native.Tensor
	used uint64
}

// graphsOff disables recording (VERDICT_GRAPHS=0), for comparisons.
var graphsOff = os.Getenv("VERDICT_GRAPHS") == "0"

// graphKeys returns the recorded key capacity for maxKeys keys.
func graphKeys(maxKeys int) int {
	if maxKeys <= minGraphKeys {
		return minGraphKeys
	}
	return 1 << bits.Len(uint(maxKeys-1))
}

// recordable reports whether the pass of n rows of b may be recorded: a
// small batch without a hook or a prefill's progress reports (both run on
// the host between layers).
func (x *Exec) recordable(b *Batch, n int) bool {
	if graphsOff || b.Hook != nil || n > graphRows || x.noGraphs {
		return false
	}
	for _, c := range x.caches {
		if c.Progress() != nil {
			return false
		}
	}
	return true
}

// decoder runs the pass from the embeddings e and the per-layer token rows
// through the layers to the final norm of the wanted rows, recorded and
// replayed where it can be.
// It returns the hidden states of the wanted rows.
func (x *Exec) decoder(b *Batch, e native.Tensor, n int) native.Tensor {
	if !x.recordable(b, n) {
		return x.pass(b, e, n)
	}
	k := graphKey{n, x.outs, len(x.caches), graphKeys(x.maxKeys)}
	if r := x.graphs[k]; r != nil {
		x.lru++
		r.used = x.lru
		x.keysArg = k.keys
		x.st.RunGraph(r.g)
		x.keysArg = 0
		return r.h
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
		return x.pass(b, e, n)
	case -1: // could not be recorded
		return x.pass(b, e, n)
	}
	if !x.st.BeginGraph() {
		x.noGraphs = true // the backend does not record
		return x.pass(b, e, n)
	}
	x.keysArg = k.keys
	h := x.pass(b, e, n)
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
		return x.pass(b, e, n)
	}
	if x.graphs == nil {
		x.graphs = map[graphKey]*recording{}
	}
	if len(x.graphs) >= maxGraphs {
		x.dropOldest()
	}
	x.lru++
	x.graphs[k] = &recording{g: g, h: h, used: x.lru}
	x.st.RunGraph(g)
	x.keysArg = 0
	return h
}

// dropOldest frees the least recently replayed recording.
func (x *Exec) dropOldest() {
	var old graphKey
	var oldest *recording
	for k, r := range x.graphs {
		if oldest == nil || r.used < oldest.used {
			old, oldest = k, r
		}
	}
	if oldest != nil {
		oldest.g.Free()
		delete(x.graphs, old)
	}
}

func (x *Exec) freeGraphs() {
	for _, r := range x.graphs {
		r.g.Free()
	}
	x.graphs = nil
}
