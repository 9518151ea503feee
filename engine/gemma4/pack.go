package gemma4

import (
	"context"
	"fmt"

	"verdict/engine/model"
	"verdict/engine/packcache"
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
// The packed matrices live in one arena outside the Go heap
// (engine/packcache, shared with Gemma 3n): anonymous memory, or with
// Options.CacheDir and CacheKey a cache file that the next Open of the same
// checkpoint and group maps instead of packing again. The binder's first
// walk lists the matrices to pack (their checkpoint names and shapes); the
// arena is laid out from that list, and the second walk packs each matrix
// into its place as it is read (Open reads one layer at a time), or, from
// a cache file, binds the place without reading the float32 tensor at all.
// A file whose key, group, matrix list, size or checksums disagree is
// refused and rebuilt; a model whose packed matrices take less than
// packMinCache gets no file.

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

// packMinCache is the smallest packed size worth a cache file.
var packMinCache = packcache.DefaultMin

// packer packs the matrices of a q4 bind one at a time into the arena,
// checking ctx before each and telling progress (when set) the weights
// packed of the total counted beforehand (binder's counting walk, which
// lists the matrices in ms).
type packer struct {
	group       int // 0: nothing is packed
	ctx         context.Context
	progress    func(done, total int64)
	done, total int64

	ms       []packcache.Matrix // listed by the counting walk
	es       []packcache.Entry  // their places in area
	area     []byte
	fromDisk bool            // area holds them already: nothing to read or pack
	skip     map[string]bool // with fromDisk: the tensors a loader need not read
	next     int             // the next entry
}

// packs reports whether a rows×cols matrix is packed: with q4 weights,
// when it is large and its columns fit the groups.
func (p *packer) packs(rows, cols int) bool {
	return p.group > 0 && rows*cols >= q4MinElems && native.Q4Fits(cols, p.group)
}

// arena lays out the matrices listed and opens their arena (a cache file
// when opt asks for one and the model is large enough).
func (p *packer) arena(opt Options) (*packcache.Arena, error) {
	es, size := packcache.Layout(p.ms, p.group)
	a, err := packcache.Open(packcache.Options{
		Dir: opt.CacheDir, Key: opt.CacheKey, Name: opt.CacheName, Group: p.group,
		Min: packMinCache, Log: opt.Log,
	}, es, size)
	if err != nil {
		return nil, err
	}
	p.es, p.area, p.fromDisk = es, a.Area(), a.FromDisk
	if p.fromDisk {
		p.skip = make(map[string]bool, len(p.ms))
		for _, m := range p.ms {
			p.skip[m.Name] = true
		}
	}
	return a, nil
}

// pack quantizes the rows×cols matrix src into its place in the arena (name
// is its checkpoint name); from a cache file it only binds the place, and
// src is not read.
func (p *packer) pack(name string, src []float32, rows, cols int) (native.Matrix, error) {
	if p.ctx != nil {
		if err := p.ctx.Err(); err != nil {
			return native.Matrix{}, err
		}
	}
	if p.next >= len(p.es) {
		return native.Matrix{}, fmt.Errorf("packing %s: more matrices than the %d counted", name, len(p.es))
	}
	e := &p.es[p.next]
	if e.Name != name || e.Rows != rows || e.Cols != cols {
		return native.Matrix{}, fmt.Errorf("packing %s %dx%d: the count listed %s %dx%d here", name, rows, cols, e.Name, e.Rows, e.Cols)
	}
	p.next++
	q, so := packcache.View(p.area, e)
	if !p.fromDisk {
		if len(src) != rows*cols {
			return native.Matrix{}, fmt.Errorf("packing %s: %d weights, its shape %dx%d wants %d", name, len(src), rows, cols, rows*cols)
		}
		native.QuantizeQ4(q, so, src, rows, cols, p.group)
	}
	p.done += int64(rows) * int64(cols)
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

// PackedCache reports the packed-weights cache file ("" when none) and
// whether it was mapped from disk rather than packed by this load.
func (d *Decoder) PackedCache() (path string, fromDisk bool) {
	if d.arena == nil {
		return "", false
	}
	return d.arena.Path, d.arena.FromDisk
}

// PackedBytes reports the memory the packed matrices take (0 for float32
// weights): nibbles, scales and offsets.
func (d *Decoder) PackedBytes() int64 {
	var n int64
	for _, m := range d.packed {
		n += m.Bytes()
	}
	return n
}
