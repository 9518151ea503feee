package gemma3n

import (
	"errors"
	"fmt"

	"verdict/native"
)

// A Runner runs forward passes over batches of rows: an Exec of the
// caller's own, or a scheduler that merges the passes of many requests into
// one. Run calls then with the batch's wanted outputs [outputs, D], on the
// Exec that computed them, before any other pass overwrites them; then may
// run heads on them (Exec.SelectLogprobs, Sample, Logits, ...). A row's
// result is the same, bit for bit, whatever batch it runs in, so a
// request's results do not depend on what it was merged with.
type Runner interface {
	// Rows reports the most rows one Run takes.
	Rows() int
	// Run runs b; then (nil: no head) reads the outputs.
	Run(b *Batch, then func(x *Exec, h native.Tensor) error) error
}

// Run is Forward followed by then on x: an Exec is a Runner of its own.
func (x *Exec) Run(b *Batch, then func(x *Exec, h native.Tensor) error) error {
	h, err := x.Forward(b)
	if err != nil || then == nil {
		return err
	}
	return then(x, h)
}

// RunAll runs b's rows on r in chunks of r.Rows(), its outputs unread:
// a prompt's keys and values, however long.
func RunAll(r Runner, b *Batch) error {
	if len(b.Rows) == 0 {
		return fmt.Errorf("gemma3n: empty input")
	}
	for lo := 0; lo < len(b.Rows); lo += r.Rows() {
		part := Batch{Rows: b.Rows[lo:min(lo+r.Rows(), len(b.Rows))], Embeds: b.Embeds, Hook: b.Hook}
		if err := r.Run(&part, nil); err != nil {
			return err
		}
	}
	return nil
}

// A GreedyLooper is a Runner that can decode greedy tokens a chunk at a
// time in a device loop (Exec.DecodeGreedy): an Exec, or a scheduler's
// request while no other request runs.
type GreedyLooper interface {
	Runner
	GreedyLoops() bool
	DecodeGreedy(caches []*Cache, next []int32, steps int, stop []int32) ([][]int32, error)
}

// ErrBusy is a GreedyLooper's answer when other work shares it now: the
// caller decodes the tokens a pass at a time instead (the same tokens).
var ErrBusy = errors.New("gemma3n: the runner is shared by other requests now")
