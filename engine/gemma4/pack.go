package gemma4

import (
	"context"
	"fmt"

	"verdict/engine/model"
	"verdict/native"
)

// Packing the decoder's large matrices to 4 bits (Options.Weights q4).
//
// With q4 weights the matrices a pass reads whole are packed in native's
// q4 format (groups of Group columns sharing a float32 scale and offset)
// from the float32 weights as read, and the packed copies are bound in
// their place: the attention projections, the dense MLP, the experts'
// gate-up and down matrices, the per-layer projections and the tied
// embedding (the head, the largest matrix every output row reads; a lookup
// dequantizes one row). What stays float32, as in Gemma 3n: norms, scales
// and rotary frequencies (vectors); the per-layer embedding table (a pass
// reads one row of it a token, so packing saves no reading); the MoE router
// (it picks the experts, and is small next to them, as Gemma 3n's AltUp
// router is); and matrices under q4MinElems elements or whose columns do
// not fit the group size.
//
// A matrix is packed as it is bound (Open reads one layer at a time), and
// only its packed copy is kept. There is no packed-weights cache: Gemma
// 3n's is built around its own loader's store.

// DefaultGroup is the q4 group size (columns per scale and offset): Gemma
// 3n's, chosen by measurement (docs/architecture.md, Weights).
const DefaultGroup = 64

// q4MinElems: smaller matrices stay float32 (they cost nothing to read).
const q4MinElems = 4096

// CheckWeights checks weights and a q4 group size as NewDecoder will (a
// loader checks them before it reads the checkpoint).
func CheckWeights(w model.Weights, group int) error {
	_, _, err := weightsOf(Options{Weights: w, Group: group})
	return err
}

// weightsOf checks opt's weights and group size and returns them with the
// defaults filled in: f32 when unset, DefaultGroup for q4 (0 for f32).
func weightsOf(opt Options) (model.Weights, int, error) {
	w := opt.Weights
	if w == "" {
		w = model.WeightsF32
	}
	if _, err := model.ParseWeights(string(w)); err != nil {
		return "", 0, fmt.Errorf("gemma4: %w", err)
	}
	if w != model.WeightsQ4 {
		return w, 0, nil
	}
	g := opt.Group
	if g == 0 {
		g = DefaultGroup
	}
	if g < 32 || g > 512 || g&(g-1) != 0 {
		return "", 0, fmt.Errorf("gemma4: q4 group size %d: want a power of two from 32 to 512", g)
	}
	return w, g, nil
}

// packer packs the matrices of a q4 bind one at a time, checking ctx
// before each and telling progress (when set) the weights packed of the
// total counted beforehand (binder's counting walk).
type packer struct {
	group       int // 0: nothing is packed
	ctx         context.Context
	progress    func(done, total int64)
	done, total int64
}

// packs reports whether a rows×cols matrix is packed: with q4 weights,
// when it is large and its columns fit the groups.
func (p *packer) packs(rows, cols int) bool {
	return p.group > 0 && rows*cols >= q4MinElems && native.Q4Fits(cols, p.group)
}

// pack quantizes the rows×cols matrix src (name is for errors).
func (p *packer) pack(name string, src []float32, rows, cols int) (native.Matrix, error) {
	if len(src) != rows*cols {
		return native.Matrix{}, fmt.Errorf("packing %s: %d weights, its shape %dx%d wants %d", name, len(src), rows, cols, rows*cols)
	}
	if p.ctx != nil {
		if err := p.ctx.Err(); err != nil {
			return native.Matrix{}, err
		}
	}
	nq, ns := native.Q4Sizes(rows, cols, p.group)
	q, so := make([]byte, nq), make([]float32, ns)
	native.QuantizeQ4(q, so, src, rows, cols, p.group)
	p.done += int64(len(src))
	if p.progress != nil {
		p.progress(p.done, p.total)
	}
	return native.NewQ4(rows, cols, p.group, q, so), nil
}

// Weights reports how the decoder keeps its large matrices: float32 or
// packed to q4.
func (d *Decoder) Weights() model.Weights { return d.weights }

// Group reports the q4 group size (0 for float32 weights).
func (d *Decoder) Group() int { return d.group }

// PackedCache is none: packed weights are not cached (see the top of
// pack.go).
func (d *Decoder) PackedCache() (string, bool) { return "", false }

// PackedBytes reports the memory the packed matrices take (0 for float32
// weights): nibbles, scales and offsets.
func (d *Decoder) PackedBytes() int64 {
	var n int64
	for _, m := range d.packed {
		n += m.Bytes()
	}
	return n
}
