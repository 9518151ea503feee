package gemma3n

import (
	"verdict/engine/model"
	"verdict/native"
)

// Run is Forward followed by then on x: an Exec is a model.Runner of its
// own.
func (x *Exec) Run(b *Batch, then func(x model.Exec, h native.Tensor) error) error {
	h, err := x.Forward(b)
	if err != nil || then == nil {
		return err
	}
	return then(x, h)
}
