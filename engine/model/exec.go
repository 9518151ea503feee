package model

import (
	"errors"
	"fmt"
	"io"

	"verdict/native"
)

// Exec runs forward passes and output heads of one model on one backend
// stream, over scratch reserved for its largest batch. An Exec is used by
// one goroutine at a time; Model.Acquire hands it out, Release takes it
// back. Tensors it returns are its scratch, valid until its next call.
type Exec interface {
	// Rows reports the most rows one Forward takes; Run is Forward
	// followed by then: an Exec is a Runner of its own.
	Runner
	// Forward runs a batch: every row's keys and values join its
	// sequence, and the final hidden states of the wanted rows come back
	// in batch order [outputs, Hidden]. Each row's result is the same, bit
	// for bit, whatever batch it runs in.
	Forward(b *Batch) (native.Tensor, error)
	// Prefill runs b in chunks of up to Rows, cut where the model allows
	// (Cuts), and returns the wanted outputs on the host [outputs, Hidden].
	Prefill(b *Batch) ([]float32, error)
	// Upload places host hidden states [n, Hidden] in the Exec's output
	// tensor, for the heads; Download copies an output tensor to the host.
	Upload(h []float32) (native.Tensor, error)
	Download(dst []float32, t native.Tensor) error
	// Release gives the Exec back to its model.
	Release()

	Heads
	Loops
}

// Heads are the output heads an Exec runs on hidden states h [n, Hidden]
// of its own outputs; each returns only what its caller reads.
type Heads interface {
	// Logits writes the output logits [n, Vocab] into out.
	Logits(out []float32, h native.Tensor) error
	// LogitsRows writes the logits of the token ids only, out[t, j] for
	// ids[j] and row t [n, len(ids)]: each equal to Logits' bit for bit.
	LogitsRows(out []float32, h native.Tensor, ids []int32) error
	// SelectLogprobs is the scorer's head: for each wanted token j (id
	// col[j] at row row[j], rows in increasing order) its logit sel[j], and
	// each row's log-sum-exp lse[r]: log P = sel[j] − lse[row[j]].
	SelectLogprobs(sel, lse []float32, h native.Tensor, row, col []int32) error
	// Sample chooses the next token from the last row of h: the argmax at
	// temperature 0, else a draw under p.
	Sample(h native.Tensor, p native.Sampling) (int32, error)
	// Greedy writes each row's most likely token into out.
	Greedy(out []int32, h native.Tensor) error
	// CatalogHead is what a caller needs to run a head of its own on the
	// backend (the catalog decoder's sparse step): the Exec's stream, the
	// output head's weights [Vocab, Hidden] and the final logit soft-cap (0:
	// none), such that Linear by w then the soft-cap gives Logits' values
	// bit for bit.
	CatalogHead() (st *native.Stream, w native.Tensor, softcap float32)
}

// Loops are an Exec's device-driven decodes: tokens chosen on the backend
// with no host work between them.
type Loops interface {
	// GreedyLoops reports whether DecodeGreedy runs as one device loop.
	GreedyLoops() bool
	// DecodeGreedy decodes up to steps tokens of each of caches greedily:
	// row i feeds next[i], then each token it chooses, and ends after a
	// token of stop (at most MaxStops). It returns each row's chosen
	// tokens; the caches have taken in the tokens they fed.
	DecodeGreedy(caches []Cache, next []int32, steps int, stop []int32) ([][]int32, error)
	// NewLoop prepares a Loop decoding up to steps tokens of each of
	// caches, every fed token one of tokens (nil: any token, which needs
	// Model.InputsResident).
	NewLoop(caches []Cache, steps int, tokens []int32) (Loop, error)
	// Keep stores v with the Exec under key until the Exec is closed or
	// more values are kept (then v is closed); loops recorded with key as
	// their body's key go with it. Kept returns the value under key, or
	// nil.
	Keep(key any, v io.Closer)
	Kept(key any) io.Closer
}

// MaxStops bounds the stop tokens of a greedy loop.
const MaxStops = 64

// GreedyChunk is the tokens a greedy device loop decodes a run, for its
// callers (generation, the benchmarks) to share one recorded shape.
const GreedyChunk = 16

// A Loop decodes a batch of sequences whose next tokens the backend
// chooses itself, one row a sequence: IDs holds the rows' tokens (the first
// set before a run), Iter the step counter. A step function issues the
// head's work on the loop's hidden states h; RunHost drives it step by
// step, reading the running count after each; RunDevice records it once
// (under key) as a backend loop. Both give the bits Forward gives. Close
// ends the loop, given the tokens each sequence fed.
type Loop interface {
	IDs() native.Tensor
	Iter() native.Tensor
	Steps() int
	RunHost(step func(h native.Tensor), running native.Tensor) (int, error)
	RunDevice(step func(h native.Tensor), running native.Tensor, key any) (bool, error)
	Close(fed []int) error
}

// A Runner runs forward passes over batches of rows: an Exec of the
// caller's own, or a scheduler that merges the passes of many requests into
// one. Run calls then with the batch's wanted outputs [outputs, Hidden], on
// the Exec that computed them, before any other pass overwrites them; then
// may run heads on them. A row's result is the same, bit for bit, whatever
// batch it runs in, so a request's results do not depend on what it was
// merged with.
type Runner interface {
	// Rows reports the most rows one Run takes.
	Rows() int
	// Run runs b; then (nil: no head) reads the outputs.
	Run(b *Batch, then func(x Exec, h native.Tensor) error) error
}

// RunAll runs b's rows on r in chunks of up to r.Rows(), cut where r's
// model allows (Cuts), its outputs unread: a prompt's keys and values,
// however long. A batch no chunking keeps whole is refused before any
// chunk runs.
func RunAll(r Runner, b *Batch) error {
	if len(b.Rows) == 0 {
		return fmt.Errorf("model: empty input")
	}
	cuts, err := Cuts(r, b)
	if err != nil {
		return err
	}
	lo := 0
	for _, hi := range cuts {
		part := Batch{Rows: b.Rows[lo:hi], Embeds: b.Embeds, Hook: b.Hook}
		if err := r.Run(&part, nil); err != nil {
			return err
		}
		lo = hi
	}
	return nil
}

// A GreedyLooper is a Runner that can decode greedy tokens a chunk at a
// time in a device loop (Exec.DecodeGreedy): an Exec, or a scheduler's
// request while no other request runs.
type GreedyLooper interface {
	Runner
	GreedyLoops() bool
	DecodeGreedy(caches []Cache, next []int32, steps int, stop []int32) ([][]int32, error)
}

// ErrBusy is a GreedyLooper's answer when other work shares it now: the
// caller decodes the tokens a pass at a time instead (the same tokens).
var ErrBusy = errors.New("model: the runner is shared by other requests now")
