package gemma4

import (
	"errors"
	"fmt"
	"math"

	"verdict/native"
)

// The vision encoder as operations on a native backend (a native.Stream
// over weights bound once): Vision.Encode's steps, each one or a few of the
// backend's operations, so that it runs on the CPU backend and on CUDA.
// The 2-D RoPE is two 1-D rotations over the halves of each head (RoPE on
// rows of head_dim/2 with one position a row), the GQA attention one
// MQAttention a KV head over the real patches' keys, the pooling gathers of
// each cell's patches, and the clipped linears Clamp, Linear, Clamp.

// maxImageSoftTokens is the largest max_soft_tokens the image processor
// takes (supportedSoftTokens): the ops path's default patch budget is it
// times pooling_kernel_size².
const maxImageSoftTokens = 1120

// opsLinear is a clipLinear bound to a backend.
type opsLinear struct {
	w                            native.Tensor // [out, in]
	clip                         bool
	inMin, inMax, outMin, outMax float32
}

// apply writes y = the clipped x·wᵀ, a tower's batch (Stream.TowerLinear);
// scratch holds at least x.Len() values and must not be x or y.
func (l *opsLinear) apply(st *native.Stream, y, x, scratch native.Tensor) {
	in := x
	if l.clip {
		in = scratch.View(x.Rows(), x.Cols())
		st.Clamp(in, x, l.inMin, l.inMax)
	}
	st.TowerLinear(y, in, l.w)
	if l.clip {
		st.Clamp(y, y, l.outMin, l.outMax)
	}
}

// towerBinder binds a tower's weights to a backend, the first error kept.
type towerBinder struct {
	w   *native.Bound
	err error
}

func (b *towerBinder) vec(x []float32) native.Tensor {
	if b.err != nil {
		return native.Tensor{}
	}
	t, err := b.w.Vector(x)
	if err != nil {
		b.err = err
	}
	return t
}

func (b *towerBinder) mat(x []float32, rows, cols int) native.Tensor {
	if b.err != nil {
		return native.Tensor{}
	}
	if len(x) != rows*cols {
		b.err = fmt.Errorf("a [%d, %d] matrix holds %d values", rows, cols, len(x))
		return native.Tensor{}
	}
	t, err := b.w.Matrix(native.NewF32(rows, cols, x))
	if err != nil {
		b.err = err
	}
	return t
}

func (b *towerBinder) linear(c *clipLinear) opsLinear {
	return opsLinear{w: b.mat(c.W, c.out, c.in), clip: c.clip, inMin: c.inMin, inMax: c.inMax, outMin: c.outMin, outMax: c.outMax}
}

type visionOpsLayer struct {
	inNorm, postAttn, preFF, postFF, qNorm, kNorm native.Tensor
	q, k, v, o, gate, up, down                    opsLinear
}

// VisionOps is a loaded Vision whose encoder runs on a backend: Encode
// gives Vision.Encode's soft tokens within the fixtures' tolerances
// (vision_ops_test.go). It reads the Vision's weights where they are bound
// from, so the Vision must stay unchanged; it is safe for concurrent
// Encode calls, not with Close.
type VisionOps struct {
	v  *Vision
	be *native.Backend
	w  *native.Bound
	// MaxPatches is the most patches Encode takes (default
	// 1120·pooling_kernel_size², the processor's largest budget).
	MaxPatches int

	inputProj, posTable, embedProj native.Tensor
	negStdBias, stdScale           native.Tensor
	invFreq                        native.Tensor // [1, head_dim/4]
	layers                         []visionOpsLayer
	negBias                        []float32 // −std_bias, bound
}

// NewVisionOps binds v's weights to backend be (nil: native.Default()).
func NewVisionOps(v *Vision, be *native.Backend) (*VisionOps, error) {
	if v == nil || v.Cfg == nil {
		return nil, errors.New("gemma4: vision ops: no vision tower")
	}
	if be == nil {
		be = native.Default()
	}
	c := v.Cfg
	o := &VisionOps{v: v, be: be, w: be.NewBound(), MaxPatches: maxImageSoftTokens * c.PoolingKernel * c.PoolingKernel}
	b := &towerBinder{w: o.w}
	H := c.Hidden
	o.inputProj = b.mat(v.InputProj, H, 3*c.PatchSize*c.PatchSize)
	o.posTable = b.mat(v.PosTable, 2*c.PositionEmbeddingSize, H)
	o.embedProj = b.mat(v.EmbedProj, c.TextHidden, H)
	o.invFreq = b.vec(v.invFreq)
	if c.Standardize {
		o.negBias = make([]float32, len(v.StdBias))
		for i, x := range v.StdBias {
			o.negBias[i] = -x
		}
		o.negStdBias, o.stdScale = b.vec(o.negBias), b.vec(v.StdScale)
	}
	o.layers = make([]visionOpsLayer, len(v.Layers))
	for i := range v.Layers {
		ly, ol := &v.Layers[i], &o.layers[i]
		ol.inNorm, ol.postAttn, ol.preFF, ol.postFF = b.vec(ly.InputNorm), b.vec(ly.PostAttnNorm), b.vec(ly.PreFFNorm), b.vec(ly.PostFFNorm)
		ol.qNorm, ol.kNorm = b.vec(ly.QNorm), b.vec(ly.KNorm)
		ol.q, ol.k, ol.v, ol.o = b.linear(&ly.Q), b.linear(&ly.K), b.linear(&ly.V), b.linear(&ly.O)
		ol.gate, ol.up, ol.down = b.linear(&ly.Gate), b.linear(&ly.Up), b.linear(&ly.Down)
	}
	if b.err != nil {
		o.w.Free()
		return nil, fmt.Errorf("gemma4: vision ops: binding the weights to %s: %w", be.Name(), b.err)
	}
	return o, nil
}

// Backend is the backend the encoder runs on.
func (o *VisionOps) Backend() *native.Backend { return o.be }

// Close unbinds the weights; Encode must not run during or after it.
func (o *VisionOps) Close() {
	if o.w != nil {
		o.w.Free()
		o.w = nil
	}
}

// visionPlan is the host side of one Encode: the checked positions and the
// index lists the operations read.
type visionPlan struct {
	P, real, n int
	pad        []int32 // padding patches
	keys       []int32 // real patches (attention keys)
	tx, ty     []int32 // position table rows (padding: 0, cleared after)
	ropeQ      []int32 // [P·heads·2]: x then y of each head
	ropeK      []int32 // [P·kv_heads·2]
	slots      [][]int32
}

// plan checks pixels and pos as Vision.Encode does (and the patch budget)
// and lays out the index lists.
func (o *VisionOps) plan(pixels []float32, pos []Patch) (*visionPlan, error) {
	c := o.v.Cfg
	P, pd, k := len(pos), 3*c.PatchSize*c.PatchSize, c.PoolingKernel
	switch {
	case P == 0:
		return nil, errors.New("gemma4: vision: no patches")
	case P > o.MaxPatches:
		return nil, fmt.Errorf("gemma4: vision: %d patches, over the budget of %d", P, o.MaxPatches)
	case len(pixels) != P*pd:
		return nil, fmt.Errorf("gemma4: vision: %d pixel values for %d patches of %d", len(pixels), P, pd)
	case P%(k*k) != 0:
		return nil, fmt.Errorf("gemma4: vision: %d patches is not a multiple of pooling_kernel_size² = %d", P, k*k)
	}
	pl := &visionPlan{P: P, tx: make([]int32, P), ty: make([]int32, P),
		ropeQ: make([]int32, 0, 2*P*c.Heads), ropeK: make([]int32, 0, 2*P*c.KVHeads)}
	maxX := 0
	for i, p := range pos {
		switch {
		case p.X == -1 && p.Y == -1:
			pl.pad = append(pl.pad, int32(i))
		case p.X < 0 || p.Y < 0 || p.X >= c.PositionEmbeddingSize || p.Y >= c.PositionEmbeddingSize:
			return nil, fmt.Errorf("gemma4: vision: patch %d at (%d, %d) is outside the position table [0, %d)", i, p.X, p.Y, c.PositionEmbeddingSize)
		default:
			pl.keys = append(pl.keys, int32(i))
			pl.tx[i], pl.ty[i] = int32(p.X), int32(c.PositionEmbeddingSize+p.Y)
			maxX = max(maxX, p.X)
		}
		for range c.Heads {
			pl.ropeQ = append(pl.ropeQ, int32(p.X), int32(p.Y))
		}
		for range c.KVHeads {
			pl.ropeK = append(pl.ropeK, int32(p.X), int32(p.Y))
		}
	}
	pl.real = len(pl.keys)
	if pl.real == 0 {
		return nil, errors.New("gemma4: vision: every patch is padding")
	}
	// Pooling: cell x/k + (maxX+1)/k · y/k of each patch, as Vision.Encode;
	// a used cell's real patches in patch order, the zero row P for the rest.
	outLen, cols := P/(k*k), (maxX+1)/k
	members := make([][]int32, outLen)
	used := make([]bool, outLen)
	for i, p := range pos {
		x, y := max(p.X, 0), max(p.Y, 0)
		cell := x/k + cols*(y/k)
		if cell >= outLen {
			return nil, fmt.Errorf("gemma4: vision: patch %d at (%d, %d) pools into cell %d of %d", i, p.X, p.Y, cell, outLen)
		}
		used[cell] = true
		if p.X == -1 && p.Y == -1 {
			continue
		}
		if len(members[cell]) == k*k {
			return nil, fmt.Errorf("gemma4: vision: patch %d at (%d, %d) is one more than %d patches pooled into cell %d (repeated positions?)", i, p.X, p.Y, k*k, cell)
		}
		members[cell] = append(members[cell], int32(i))
	}
	m := 1
	for _, l := range members {
		m = max(m, len(l))
	}
	pl.slots = make([][]int32, m)
	for cell, u := range used {
		if !u {
			continue
		}
		for s := range pl.slots {
			at := int32(P)
			if s < len(members[cell]) {
				at = members[cell][s]
			}
			pl.slots[s] = append(pl.slots[s], at)
		}
	}
	pl.n = len(pl.slots[0])
	return pl, nil
}

// Encode is Vision.Encode on the backend: the soft tokens [n, TextHidden]
// of the n pooled cells that hold a patch, trace (may be nil) filled the
// same way. Inputs Vision.Encode refuses are refused with its errors; more
// patches than MaxPatches, and more than pooling_kernel_size² real patches
// in one cell (repeated positions), are refused too.
func (o *VisionOps) Encode(pixels []float32, pos []Patch, trace *VisionTrace) (soft []float32, n int, err error) {
	if o.w == nil {
		return nil, 0, errors.New("gemma4: vision ops: closed")
	}
	pl, err := o.plan(pixels, pos)
	if err != nil {
		return nil, 0, err
	}
	c := o.v.Cfg
	P, H, hd, I := pl.P, c.Hidden, c.HeadDim, c.Intermediate
	nq, nkv, pd := c.Heads*hd, c.KVHeads*hd, 3*c.PatchSize*c.PatchSize
	group := c.Heads / c.KVHeads
	R, npad, n := pl.real, len(pl.pad), pl.n
	wide := max(H, nq, I, pd)

	// One arena entry a Take below.
	sizes := []int{P * pd, (P + 1) * H, P * H, P * H, P, P, npad * H, npad,
		P * H, P * wide, P * nq, P * nkv, P * nkv, P * nq, P * H, P * I, P * I, len(pl.ropeQ), len(pl.ropeK),
		R, R * nkv, R * nkv, R * hd, R * hd, P * group * hd, P * group * hd, n * H, n * H, n * H, n * c.TextHidden}
	for range pl.slots {
		sizes = append(sizes, n)
	}
	st, err := o.be.NewStream()
	if err != nil {
		return nil, 0, fmt.Errorf("gemma4: vision ops: %w", err)
	}
	defer st.Close()
	ar, err := o.be.NewArena(native.ArenaBytes(sizes...))
	if err != nil {
		return nil, 0, fmt.Errorf("gemma4: vision ops: %w", err)
	}
	defer ar.Free()
	i32 := func(x []int32) native.Tensor {
		t := ar.Take(native.I32, 1, len(x))
		st.UploadI32(t, x)
		return t
	}
	// down downloads t into a new slice, filled once the stream syncs.
	down := func(t native.Tensor) []float32 {
		x := make([]float32, t.Len())
		st.Download(x, t)
		return x
	}

	// Patch embeddings: input_proj(2(x − 0.5)) + table[0][x] + table[1][y]
	// (padding rows: no position), and the zero row P that pooling reads.
	pix := ar.Take(native.F32, P, pd)
	st.Upload(pix, pixels)
	st.AddConst(pix, pix, -0.5)
	st.Scale(pix, pix, 2)
	hAll := ar.Take(native.F32, P+1, H)
	h := hAll.Slice(0, P)
	st.Upload(hAll.Slice(P, P+1), make([]float32, H))
	st.TowerLinear(h, pix, o.inputProj)
	tx, ty := ar.Take(native.F32, P, H), ar.Take(native.F32, P, H)
	st.Gather(tx, o.posTable, i32(pl.tx))
	st.Gather(ty, o.posTable, i32(pl.ty))
	st.Add(tx, tx, ty)
	var padIdx native.Tensor
	if npad > 0 {
		zeros := ar.Take(native.F32, npad, H)
		st.Upload(zeros, make([]float32, npad*H))
		padIdx = i32(pl.pad)
		st.Scatter(tx, zeros, padIdx)
	}
	st.Add(h, h, tx)
	var hidden [][]float32
	if trace != nil {
		hidden = append(hidden, down(h))
	}

	s := &visionScratch{st: st, P: P, R: R, group: group,
		xn: ar.Take(native.F32, P, H), clip: ar.Take(native.F32, P, wide),
		q: ar.Take(native.F32, P, nq), k: ar.Take(native.F32, P, nkv), v: ar.Take(native.F32, P, nkv),
		att: ar.Take(native.F32, P, nq), o: ar.Take(native.F32, P, H),
		gate: ar.Take(native.F32, P, I), up: ar.Take(native.F32, P, I),
		ropeQ: i32(pl.ropeQ), ropeK: i32(pl.ropeK)}
	if npad > 0 {
		s.keys = i32(pl.keys)
		s.kr, s.vr = ar.Take(native.F32, R, nkv), ar.Take(native.F32, R, nkv)
	}
	if c.KVHeads > 1 {
		s.kg, s.vg = ar.Take(native.F32, R, hd), ar.Take(native.F32, R, hd)
		s.qg, s.og = ar.Take(native.F32, P, group*hd), ar.Take(native.F32, P, group*hd)
	}
	for l := range o.layers {
		o.layer(s, &o.layers[l], h)
		if trace != nil {
			hidden = append(hidden, down(h))
		}
	}

	// Pooling: each used cell's patches summed (its empty slots read the
	// zero row), /k², ·√hidden; then standardize and embed_vision.
	k := c.PoolingKernel
	pooled, g := ar.Take(native.F32, n, H), ar.Take(native.F32, n, H)
	for si, slot := range pl.slots {
		idx := i32(slot)
		if si == 0 {
			st.Gather(pooled, hAll, idx)
			continue
		}
		st.Gather(g, hAll, idx)
		st.Add(pooled, pooled, g)
	}
	st.Scale(pooled, pooled, float32(1)/float32(k*k))
	st.Scale(pooled, pooled, float32(math.Sqrt(float64(H))))
	var pooledOut []float32
	if trace != nil {
		pooledOut = down(pooled)
	}
	if c.Standardize {
		st.AddRep(pooled, pooled, o.negStdBias)
		st.MulRep(pooled, pooled, o.stdScale)
	}
	var towerOut []float32
	if trace != nil {
		towerOut = down(pooled)
	}
	nrm := ar.Take(native.F32, n, H)
	st.RMSNorm(nrm, pooled, native.Tensor{}, H, float32(c.Eps))
	out := ar.Take(native.F32, n, c.TextHidden)
	st.TowerLinear(out, nrm, o.embedProj)
	soft = down(out)
	if err := st.Sync(); err != nil {
		return nil, 0, fmt.Errorf("gemma4: vision ops on %s: %w", o.be.Name(), err)
	}
	if trace != nil {
		trace.Hidden, trace.Pooled, trace.TowerOut = hidden, pooledOut, towerOut
	}
	return soft, n, nil
}

// visionScratch is one Encode's activations and stream.
type visionScratch struct {
	st                 *native.Stream
	P, R, group        int
	xn, clip, q, k, v  native.Tensor
	att, o, gate, up   native.Tensor
	ropeQ, ropeK, keys native.Tensor // I32; keys nil without padding
	kr, vr             native.Tensor // the real patches' keys and values
	kg, vg, qg, og     native.Tensor // one KV head's columns (KVHeads > 1)
}

// layer is Vision.layer on the backend: h [P, hidden] in place.
func (o *VisionOps) layer(s *visionScratch, ly *visionOpsLayer, h native.Tensor) {
	c := o.v.Cfg
	st, P, H, hd := s.st, s.P, c.Hidden, c.HeadDim
	nq, nkv := c.Heads*hd, c.KVHeads*hd
	eps := float32(c.Eps)
	st.RMSNorm(s.xn, h, ly.inNorm, H, eps)
	ly.q.apply(st, s.q, s.xn, s.clip)
	ly.k.apply(st, s.k, s.xn, s.clip)
	ly.v.apply(st, s.v, s.xn, s.clip)
	st.RMSNorm(s.q, s.q, ly.qNorm, hd, eps)
	st.RMSNorm(s.k, s.k, ly.kNorm, hd, eps)
	st.RMSNorm(s.v, s.v, native.Tensor{}, hd, eps)
	// Axial RoPE: each half head a row of hd/2 rotated NeoX-style by its
	// axis' position (x for the first half, y for the second).
	st.RoPE(s.q.View(P*c.Heads*2, hd/2), s.ropeQ, 1, hd/2, o.invFreq)
	st.RoPE(s.k.View(P*c.KVHeads*2, hd/2), s.ropeK, 1, hd/2, o.invFreq)
	// Bidirectional attention, scaling 1, over the real patches' keys; one
	// multi-query attention a KV head.
	kr, vr := s.k, s.v
	if !s.keys.Nil() {
		kr, vr = s.kr, s.vr
		st.Gather(kr, s.k, s.keys)
		st.Gather(vr, s.v, s.keys)
	}
	if c.KVHeads == 1 {
		st.MQAttention(s.att, s.q, kr, vr, c.Heads, 1)
	} else {
		gw := s.group * hd
		for g := range c.KVHeads {
			st.Copy2D(s.qg, gw, s.q.Sub(g*gw, 1, s.q.Len()-g*gw), nq, P, gw)
			st.Copy2D(s.kg, hd, kr.Sub(g*hd, 1, kr.Len()-g*hd), nkv, s.R, hd)
			st.Copy2D(s.vg, hd, vr.Sub(g*hd, 1, vr.Len()-g*hd), nkv, s.R, hd)
			st.MQAttention(s.og, s.qg, s.kg, s.vg, s.group, 1)
			st.Copy2D(s.att.Sub(g*gw, 1, s.att.Len()-g*gw), nq, s.og, gw, P, gw)
		}
	}
	ly.o.apply(st, s.o, s.att, s.clip)
	st.RMSNorm(s.o, s.o, ly.postAttn, H, eps)
	st.Add(h, h, s.o)
	// The gated GELU-tanh MLP.
	st.RMSNorm(s.xn, h, ly.preFF, H, eps)
	ly.gate.apply(st, s.gate, s.xn, s.clip)
	ly.up.apply(st, s.up, s.xn, s.clip)
	st.GeluMul(s.gate, s.gate, s.up)
	ly.down.apply(st, s.o, s.gate, s.clip)
	st.RMSNorm(s.o, s.o, ly.postFF, H, eps)
	st.Add(h, h, s.o)
}

// visionOpsUses are the operations VisionOps runs.
var visionOpsUses = []native.Op{native.OpLinear, native.OpRMSNorm, native.OpEW, native.OpRoPE, native.OpGather,
	native.OpScatter, native.OpCopy2D, native.OpMQA, native.OpClamp}

// Unsupported lists the encoder's operations that its backend leaves to
// the CPU backend (native/fallback.go runs them there): none on the CPU
// backend and on CUDA.
func (o *VisionOps) Unsupported() []native.Op { return unsupportedOf(o.be, visionOpsUses) }

func unsupportedOf(be *native.Backend, ops []native.Op) []native.Op {
	var l []native.Op
	for _, op := range ops {
		if !be.Supports(op) {
			l = append(l, op)
		}
	}
	return l
}
