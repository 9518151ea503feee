package gemma3n

import (
	"verdict/engine/model"
	"verdict/engine/model/kit"
	"verdict/native"
)

// Run is Forward followed by then on x: an Exec is a model.Runner of its
// own (kit.Run).
func (x *Exec) Run(b *Batch, then func(x model.Exec, h native.Tensor) error) error {
	return kit.Run(x, b, then)
}
