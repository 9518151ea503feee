package gemma4

// The decoder's costs, for the benchmarks and the session's info: what
// its weights take as bound (packed or float32), counted as they are
// bound (binder), and what a step reads.

// costRole is what a weight is for, as the costs tell them apart.
type costRole int

const (
	roleEmbed   costRole = iota // the tied embedding: the head, read whole by a decode step
	roleExperts                 // the experts' matrices: a token reads TopK of Experts
	roleRest                    // every other weight, read once a step
	nRoles
)

// costs are the bytes and parameters of the bound weights, by role.
type costs struct {
	bytes, params [nRoles]int64
}

func (c *costs) add(r costRole, bytes, params int64) {
	c.bytes[r] += bytes
	c.params[r] += params
}

// Params counts the decoder's parameters, the per-layer table's included.
func (d *Decoder) Params() int64 {
	var n int64
	for _, p := range d.costs.params {
		n += p
	}
	return n + int64(d.ple.vocab)*int64(d.ple.width)
}

// WeightBytes reports the memory the decoder's weights take as bound:
// packed q4 matrices (nibbles, scales and offsets), float32 ones and the
// vectors. The per-layer table is excluded: it is read by row from where
// it was loaded (ple.go), and a resident copy is ResidentBytes.
func (d *Decoder) WeightBytes() int64 {
	var n int64
	for _, b := range d.costs.bytes {
		n += b
	}
	return n
}

// keys is the number of keys the query at position pos of layer l sees.
func (c *Config) keys(l, pos int) int {
	if c.LayerTypes[l] == Sliding && pos+1 > c.SlidingWindow {
		return c.SlidingWindow
	}
	return pos + 1
}

// DecodeBytes reports the bytes one decode step reads at context length ctx
// (the new token included): every bound weight once (the head is the whole
// embedding) but the experts (the TopK of Experts a token chooses, on
// average), the token's per-layer row as stored, and the float32 keys and
// values every layer attends over.
func (d *Decoder) DecodeBytes(ctx int) int64 {
	c := d.cfg
	b := &d.costs.bytes
	n := b[roleEmbed] + b[roleRest] + int64(d.ple.width)*d.ple.valueBytes()
	if c.MoE {
		n += b[roleExperts] * int64(c.TopK) / int64(c.Experts)
	}
	for l := range c.Layers {
		n += int64(c.keys(l, max(ctx-1, 0))) * int64(c.LayerKVHeads(l)*c.LayerHeadDim(l)) * 2 * 4
	}
	return n
}

// ForwardFLOPs reports the floating-point operations (2 a multiply-add) of
// the matrix products and attention of a pass over n tokens after ctx0
// cached ones, outputs of them reaching the head. Every row runs every
// layer, so consumers does not change it.
func (d *Decoder) ForwardFLOPs(n, ctx0, outputs, consumers int) float64 {
	c := d.cfg
	D := float64(c.Hidden)
	macs := float64(n) * float64(c.Layers*c.PerLayerInput) * D
	for l := range c.Layers {
		y := &d.lay[l]
		hd, kvd := float64(c.Heads*y.headDim), float64(y.kvH*y.headDim)
		per := 2*hd*D + 3*float64(y.intermediate)*D + 2*float64(c.PerLayerInput)*D
		if !c.KVShared(l) {
			per += kvd * D
			if !c.VIsK(l) {
				per += kvd * D
			}
		}
		if c.MoE {
			per += float64(c.Experts)*D + float64(c.TopK)*3*float64(c.MoEIntermediate)*D
		}
		macs += float64(n) * per
		for t := range n {
			macs += 2 * hd * float64(c.keys(l, ctx0+t)) // q·k and p·v
		}
	}
	macs += float64(outputs) * float64(c.Vocab) * D
	return 2 * macs
}

// HeadBytes reports the bytes of weights the dense head reads (the tied
// embedding as bound, packed or float32) and the sparse head reads for
// rows rows (rows of it: every row takes the same bytes).
func (d *Decoder) HeadBytes(rows int) (dense, sparse int64) {
	dense = d.costs.bytes[roleEmbed]
	if V := int64(d.cfg.Vocab); V > 0 {
		sparse = dense / V * int64(rows)
	}
	return dense, sparse
}
