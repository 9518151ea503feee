package gemma3n

import (
	"verdict/engine/model"
	"verdict/native"
)

// Runners are the engine's (engine/model): an Exec is one of its own.
type (
	Runner       = model.Runner
	GreedyLooper = model.GreedyLooper
)

// ErrBusy is model.ErrBusy.
var ErrBusy = model.ErrBusy

// Run is Forward followed by then on x: an Exec is a Runner of its own.
func (x *Exec) Run(b *Batch, then func(x model.Exec, h native.Tensor) error) error {
	h, err := x.Forward(b)
	if err != nil || then == nil {
		return err
	}
	return then(x, h)
}

// RunAll is model.RunAll.
func RunAll(r Runner, b *Batch) error { return model.RunAll(r, b) }
