package gemma3n

import (
	"fmt"

	"verdict/native"
)

// Branch is one row that continues a shared prefix: its own tokens, of
// which the final hidden states of the last Outputs are wanted.
type Branch struct {
	IDs     []int32
	Outputs int
	// Parent is the row of the parent Segments this row extends (when
	// ForwardBranches is given parent segments).
	Parent int
}

// Segments are the keys and values of a batch of branch rows, which rows
// of a later batch can extend. They are only read once made.
type Segments struct {
	stride int         // keys per row
	lens   []int       // tokens of each row
	k, v   [][]float32 // per layer with its own keys: [rows·stride, kvHeads·headDim]
}

// Len reports the number of tokens of row r.
func (s *Segments) Len(r int) int { return s.lens[r] }

// ForwardBranches runs rows that each continue the prefix held in c, and,
// when parent is not nil, row Parent of parent after it; c and parent are
// only read. A row attends to the prefix, its parent row and its own tokens,
// never to another row. The rows run as one batch of their tokens (no
// padding); each row's outputs equal a full forward pass over prefix,
// parent row and row, bit for bit.
//
// With gather, only the wanted positions go through the KV-sharing layers:
// those layers write no keys or values, so every other position's work there
// is unused, and the result is the same. It returns, per row, the final
// hidden states [Outputs, D], and the rows' keys and values as Segments.
func (m *Model) ForwardBranches(c *Cache, parent *Segments, rows []Branch, gather bool) ([][]float32, *Segments, error) {
	cfg := m.Cfg
	D, P := cfg.HiddenSize, cfg.PerLayerSize
	if c.n == 0 {
		return nil, nil, fmt.Errorf("gemma3n: branches need a non-empty prefix")
	}
	L := 0
	for r, b := range rows {
		if len(b.IDs) == 0 || b.Outputs < 0 || b.Outputs > len(b.IDs) {
			return nil, nil, fmt.Errorf("gemma3n: branch %d has %d tokens and wants %d outputs", r, len(b.IDs), b.Outputs)
		}
		if parent != nil && (b.Parent < 0 || b.Parent >= len(parent.lens)) {
			return nil, nil, fmt.Errorf("gemma3n: branch %d extends row %d of %d parent rows", r, b.Parent, len(parent.lens))
		}
		L = max(L, len(b.IDs))
	}
	if len(rows) == 0 {
		return nil, nil, nil
	}
	// Only the rows' real tokens run (no right padding); their keys and
	// values land in row-strided segments (row r's key j at r·L + j).
	R := len(rows)
	n := 0
	for _, b := range rows {
		n += len(b.IDs)
	}
	ids := make([]int32, 0, n)
	qrow, qidx, pos := make([]int32, 0, n), make([]int32, 0, n), make([]int32, 0, n)
	slot := make([]int, 0, n) // each token's key slot r·L + j
	var midRow, midLen []int32
	if parent != nil {
		midRow, midLen = make([]int32, 0, n), make([]int32, 0, n)
	}
	seg := &Segments{stride: L, lens: make([]int, R), k: make([][]float32, len(m.layers)), v: make([][]float32, len(m.layers))}
	first0 := make([]int, R) // each row's first token index
	for r, b := range rows {
		seg.lens[r] = len(b.IDs)
		first0[r] = len(ids)
		off := 0
		if parent != nil {
			off = parent.lens[b.Parent]
		}
		for j, id := range b.IDs {
			ids = append(ids, id)
			qrow, qidx, pos = append(qrow, int32(r)), append(qidx, int32(j)), append(pos, int32(c.n+off+j))
			slot = append(slot, r*L+j)
			if parent != nil {
				midRow, midLen = append(midRow, int32(b.Parent)), append(midLen, int32(off))
			}
		}
	}
	for _, id := range ids {
		if id < 0 || int(id) >= cfg.VocabSize {
			return nil, nil, fmt.Errorf("gemma3n: token id %d outside the vocabulary of %d", id, cfg.VocabSize)
		}
	}
	for _, p := range pos {
		if err := m.checkPositions(int(p) + 1); err != nil {
			return nil, nil, err
		}
	}
	e, err := m.Embed(ids)
	if err != nil {
		return nil, nil, err
	}
	ple, err := m.perLayerInputs(ids, e)
	if err != nil {
		return nil, nil, err
	}
	H := m.streams(e, n)
	w := newWork(m, n)
	sk, sv := seg.k, seg.v

	first := cfg.NumLayers - cfg.NumKVSharedLayers
	cur := n
	var sel []int // token index of each current position, once gathered
	for i := range m.layers {
		if gather && i == first && cfg.NumKVSharedLayers > 0 {
			for r, b := range rows {
				for j := len(b.IDs) - b.Outputs; j < len(b.IDs); j++ {
					sel = append(sel, first0[r]+j)
				}
			}
			H = gatherRows(H, sel, 4, cur, D)
			ple = gatherLayers(ple, sel, first, cfg.NumLayers, cur, P)
			qrow, qidx, pos = gather32(qrow, sel), gather32(qidx, sel), gather32(pos, sel)
			if parent != nil {
				midRow, midLen = gather32(midRow, sel), gather32(midLen, sel)
			}
			cur = len(sel)
			if cur == 0 {
				break
			}
			w = newWork(m, cur)
		}
		m.layer(i, H, ple[i*cur*P:(i+1)*cur*P], cur, w, func(y *layer) {
			hd := cfg.HeadDim
			qd, kd := cur*cfg.NumHeads*hd, cur*cfg.NumKVHeads*hd
			native.RoPE(w.q[:qd], pos, cfg.NumHeads, hd, y.invFreq)
			if y.kvSrc == i {
				native.RoPE(w.k[:kd], pos, cfg.NumKVHeads, hd, y.invFreq)
				kw := cfg.NumKVHeads * hd
				sk[i], sv[i] = make([]float32, R*L*kw), make([]float32, R*L*kw)
				for t, sl := range slot {
					copy(sk[i][sl*kw:(sl+1)*kw], w.k[t*kw:(t+1)*kw])
					copy(sv[i][sl*kw:(sl+1)*kw], w.v[t*kw:(t+1)*kw])
				}
			}
			s := y.kvSrc
			p := native.BranchAttnParams{
				NQ: cur, HeadsQ: cfg.NumHeads, HeadsKV: cfg.NumKVHeads, HeadDim: hd,
				Prefix: c.n, SufLen: L, QRow: qrow, QIdx: qidx, Window: y.window(cfg), Scale: 1,
			}
			var mk, mv []float32
			if parent != nil {
				p.MidStride, p.MidRow, p.MidLen = parent.stride, midRow, midLen
				mk, mv = parent.k[s], parent.v[s]
			}
			native.BranchAttention(w.att[:qd], w.q[:qd], c.k[s], c.v[s], mk, mv, sk[s], sv[s], p)
		})
	}
	if cur == 0 {
		return make([][]float32, R), seg, nil
	}
	h := m.unmix(H, cur, w)

	out := make([][]float32, R)
	k := 0
	for r, b := range rows {
		o := make([]float32, 0, b.Outputs*D)
		for j := len(b.IDs) - b.Outputs; j < len(b.IDs); j++ {
			t := first0[r] + j
			if sel != nil {
				t = k
				k++
			}
			o = append(o, h[t*D:(t+1)*D]...)
		}
		out[r] = o
	}
	return out, seg, nil
}

// gatherRows keeps rows sel of each of the s blocks [n, d] of x.
func gatherRows(x []float32, sel []int, s, n, d int) []float32 {
	out := make([]float32, s*len(sel)*d)
	for b := 0; b < s; b++ {
		for k, t := range sel {
			copy(out[(b*len(sel)+k)*d:(b*len(sel)+k+1)*d], x[(b*n+t)*d:(b*n+t+1)*d])
		}
	}
	return out
}

// gatherLayers is gatherRows for the per-layer inputs [layers, n, P] of the
// layers from..to-1; the other layers' blocks are left empty.
func gatherLayers(x []float32, sel []int, from, to, n, p int) []float32 {
	out := make([]float32, to*len(sel)*p)
	for l := from; l < to; l++ {
		for k, t := range sel {
			copy(out[(l*len(sel)+k)*p:(l*len(sel)+k+1)*p], x[(l*n+t)*p:(l*n+t+1)*p])
		}
	}
	return out
}

func gather32(x []int32, sel []int) []int32 {
	out := make([]int32, len(sel))
	for k, t := range sel {
		out[k] = x[t]
	}
	return out
}
