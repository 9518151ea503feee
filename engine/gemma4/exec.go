package gemma4

import (
	"fmt"
	"slices"

	"verdict/engine/kvpool"
	"verdict/engine/model"
	"verdict/engine/model/kit"
	"verdict/native"
)

// headRows is the number of output rows the dense head computes at once.
const headRows = kit.HeadRows

// rowSegs is the segments of an Exec's rows description (rowsIn): ids,
// positions, sequences, global slots, sliding slots, wanted rows, the
// per-layer table's ids and the sliding layers' last keys (image blocks).
const rowSegs = 8

// Exec runs forward passes and output heads of a Decoder on one backend
// stream, over scratch reserved once for its largest batch. It is used by
// one goroutine at a time; Decoder.Acquire hands it out, Release takes it
// back. Tensors it returns are its scratch, valid until its next call.
type Exec struct {
	kit.Head   // the output heads (Logits, LogitsRows, SelectLogprobs, Sample, Greedy, CatalogHead)
	kit.Keeper // the values kept with it (Keep, Kept); dropping one drops the loops recorded under its key

	d   *Decoder
	st  *native.Stream
	ar  *native.Arena
	cap int

	// Activations (F32).
	e, h, a, q, k, v, att, o, f, g, u, dn, mo, my, mx, xa, eg, eu, ed, rl, rw native.Tensor
	plTok, plProj, ple, pg, out                                               native.Tensor
	// Int32: the rows' description (one span, uploaded at once), the
	// experts' rows, the key runs, the heads' ids.
	rowsIn, ids, pos, qseq, slot0, slot1, gsel, plIDs, qlim native.Tensor
	eidx, seqEnt, sid                                       native.Tensor
	entAr                                                   *native.Arena
	entBlk, entPos, entLen                                  native.Tensor

	// Host staging, reused.
	hRowsIn                                 []int32
	hIDs, hPos, hQSeq, hGSel, hPLIDs, hQLim []int32
	hSlot                                   [2][]int32 // rows' slots, batch order
	hGrow                                   [2][]int32 // Grow's slots, sequence order
	hSeqEnt, hEnt, hOne, hEIdx              []int32
	hEmb, hHook, hRL, hRW, hPLE             []float32
	runs                                    []kvpool.Run
	caches                                  []*kvpool.Cache
	cnt, lim                                []int // rows per sequence; positions its keys reach
	outs, maxKeys                           int
	keysArg                                 int  // the attention's key capacity in a loop's step (0: maxKeys)
	blocks                                  bool // this Forward has image blocks: the sliding layers read qlim
	loop                                    loopBufs
	lin                                     [3]native.LinearPart   // a layer's products of one input, kept to spare an allocation
	nr                                      [3]native.NormRoPEPart // q's, k's and v's norms and rotations, the same
}

// newExec reserves an Exec's scratch for rows rows.
func (d *Decoder) newExec(rows int) (*Exec, error) {
	c := d.cfg
	D, L, P, V, H := c.Hidden, c.Layers, c.PerLayerInput, c.Vocab, c.Heads
	dmax := max(c.HeadDim, c.GlobalHeadDim)
	kvmax := max(c.KVHeads*c.HeadDim, c.GlobalKVHeads*c.GlobalHeadDim)
	I := c.Intermediate
	if c.DoubleWideMLP {
		I *= 2
	}
	E, K, Ie := c.Experts, c.TopK, c.MoEIntermediate
	R := rows
	moeR := 0 // the MoE scratch's rows
	if c.MoE {
		moeR = R
	}
	f32 := []int{
		R * D, R * D, R * D, R * H * dmax, R * kvmax, R * kvmax, R * H * dmax, R * D, R * D, R * I, R * I, R * D,
		moeR * D, moeR * D, moeR * D, moeR * D, moeR * Ie, moeR * Ie, moeR * D, moeR * E, moeR * K,
		R * L * P, R * L * P, L * R * P, R * P, R * D, headRows * V, R, 4 * R,
	}
	i32 := []int{rowSegs * R, moeR * K, 2 * (R + 1), V, R, 4 * R, 4 * R}
	st, err := d.be.NewStream()
	if err != nil {
		return nil, err
	}
	ar, err := d.be.NewArena(native.ArenaBytes(append(f32, i32...)...))
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("gemma4: scratch for %d rows: %w", R, err)
	}
	ft := func(r, c int) native.Tensor { return ar.Take(native.F32, r, c) }
	it := func(r, c int) native.Tensor { return ar.Take(native.I32, r, c) }
	x := &Exec{d: d, st: st, ar: ar, cap: R}
	x.e, x.h, x.a, x.q, x.k, x.v, x.att = ft(R, D), ft(R, D), ft(R, D), ft(R, H*dmax), ft(R, kvmax), ft(R, kvmax), ft(R, H*dmax)
	x.o, x.f, x.g, x.u, x.dn = ft(R, D), ft(R, D), ft(R, I), ft(R, I), ft(R, D)
	x.mo, x.my, x.mx, x.xa, x.eg, x.eu, x.ed = ft(moeR, D), ft(moeR, D), ft(moeR, D), ft(moeR, D), ft(moeR, Ie), ft(moeR, Ie), ft(moeR, D)
	x.rl, x.rw = ft(moeR, E), ft(1, moeR*K)
	x.plTok, x.plProj, x.ple, x.pg = ft(R, L*P), ft(R, L*P), ft(L*R, P), ft(R, P)
	hd := kit.Head{Name: "gemma4", St: st, W: d.t.embed, SoftCap: float32(c.SoftCap), Vocab: V}
	x.out, hd.LogitsBuf, hd.LSE, hd.Sel = ft(R, D), ft(headRows, V), ft(1, R), ft(1, 4*R)
	x.rowsIn = it(1, rowSegs*R)
	seg := func(k int) native.Tensor { return x.rowsIn.Sub(k*R, 1, R) }
	x.ids, x.pos, x.qseq, x.slot0, x.slot1, x.gsel, x.plIDs, x.qlim = seg(0), seg(1), seg(2), seg(3), seg(4), seg(5), seg(6), seg(7)
	x.eidx, x.seqEnt, hd.IDs, x.sid, hd.SRow, hd.SCol = it(1, moeR*K), it(1, 2*(R+1)), it(1, V), it(1, R), it(1, 4*R), it(1, 4*R)
	x.hRowsIn = make([]int32, rowSegs*R)
	hseg := func(k int) []int32 { return x.hRowsIn[k*R : (k+1)*R] }
	x.hIDs, x.hPos, x.hQSeq, x.hSlot[0], x.hSlot[1], x.hGSel, x.hPLIDs, x.hQLim = hseg(0), hseg(1), hseg(2), hseg(3), hseg(4), hseg(5), hseg(6), hseg(7)
	x.hGrow = [2][]int32{make([]int32, R), make([]int32, R)}
	x.hSeqEnt = make([]int32, 2*(R+1))
	hd.HSRow, hd.HSCol, x.hOne = make([]int32, 4*R), make([]int32, 4*R), make([]int32, 4*R)
	hd.Tok, hd.HOne = x.sid, x.hOne // shared with the pass's scatter and the experts' rows
	hd.Hidden, hd.Out = D, x.out
	hd.Input, hd.InputScale, hd.InIDs, hd.InEmb = d.t.embed, d.embScale, x.ids, x.e
	x.Head = hd
	x.OnDrop = x.loop.dropGraphs
	x.hEIdx, x.hRL, x.hRW = make([]int32, moeR*K), make([]float32, moeR*E), make([]float32, moeR*K)
	x.hEmb = make([]float32, R*D)
	x.hPLE = make([]float32, R*L*P)
	if err := x.growEntries(4 * R); err != nil {
		x.close()
		return nil, err
	}
	return x, nil
}

// growEntries makes room for at least n key runs in a batch.
func (x *Exec) growEntries(n int) error {
	c := n
	if x.entAr != nil {
		c = max(2*x.entBlk.Len(), n)
		if err := x.st.Sync(); err != nil { // no queued work reads the old ones
			return err
		}
		x.entAr.Free()
		x.entAr = nil
		x.loop.freeGraphs() // they read the old runs' tensors
	}
	ar, err := x.d.be.NewArena(native.ArenaBytes(c, c, c))
	if err != nil {
		return fmt.Errorf("gemma4: room for %d key runs: %w", c, err)
	}
	x.entAr = ar
	x.entBlk, x.entPos, x.entLen = ar.Take(native.I32, 1, c), ar.Take(native.I32, 1, c), ar.Take(native.I32, 1, c)
	x.hEnt = make([]int32, 3*c)
	return nil
}

// Acquire returns an Exec of d for the caller's exclusive use.
func (d *Decoder) Acquire() (model.Exec, error) {
	x, err := d.acquire()
	if err != nil {
		return nil, err
	}
	return x, nil
}

func (d *Decoder) acquire() (*Exec, error) {
	return d.execs.Get(func() (*Exec, error) { return d.newExec(d.maxRows) })
}

// Release gives x back to its decoder (kit.Pool: at most kit.MaxIdle stay
// idle).
func (x *Exec) Release() { x.d.execs.Put(x, (*Exec).close) }

func (x *Exec) close() {
	x.loop.free()
	x.Keeper.Close()
	if x.entAr != nil {
		x.entAr.Free()
	}
	x.ar.Free()
	x.st.Close()
}

// Rows reports the most rows one Forward takes.
func (x *Exec) Rows() int { return x.cap }

// Run is Forward followed by then on x: an Exec is a model.Runner of its
// own (kit.Run).
func (x *Exec) Run(b *model.Batch, then func(x model.Exec, h native.Tensor) error) error {
	return kit.Run(x, b, then)
}

// Forward runs a batch through the decoder: every row's keys and values
// join its sequence, and the final normalised hidden states of the wanted
// rows (every row when the batch has a hook) come back in batch order
// [outputs, D]. Each row's result is the same, bit for bit, whatever batch
// it runs in: every operation is row by row, and the experts of a MoE layer
// run each token's rows alone of the others' weights.
func (x *Exec) Forward(b *model.Batch) (native.Tensor, error) {
	n := len(b.Rows)
	if err := kit.Prepare("gemma4", n, x.cap, func() error { return x.prepare(b) }); err != nil {
		return native.Tensor{}, err
	}
	h, err := x.pass(b, n, native.Tensor{}, native.Tensor{})
	x.blocks = false // a loop's steps, which prepare not, are causal
	if err != nil {
		x.settle(0)
		return native.Tensor{}, err
	}
	x.settle(1)
	return h, x.st.Sync()
}

// settle ends a pass: the sequences take in their rows (keep 1) or give
// their slots back (keep 0).
func (x *Exec) settle(keep int) {
	ns := make([]int, len(x.caches))
	for s, c := range x.caches {
		ns[s] = c.Len() + keep*x.cnt[s]
	}
	x.d.pool.Settle(x.caches, ns)
}

// prepare checks the batch, gives its rows their positions and key/value
// slots, and uploads the rows' description and the key runs.
func (x *Exec) prepare(b *model.Batch) error {
	d, c := x.d, x.d.cfg
	D := c.Hidden
	x.caches, x.cnt = x.caches[:0], x.cnt[:0]
	x.outs = 0
	for r, row := range b.Rows {
		cc := d.pool.Own(row.Cache)
		if cc == nil {
			return fmt.Errorf("gemma4: row %d has no cache of this model", r)
		}
		if row.Embed < 0 {
			if row.Token < 0 || int(row.Token) >= c.Vocab {
				return fmt.Errorf("gemma4: row %d: token id %d outside the vocabulary of %d", r, row.Token, c.Vocab)
			}
		} else if int(row.Embed+1)*D > len(b.Embeds) {
			return fmt.Errorf("gemma4: row %d takes embedding %d of %d", r, row.Embed, len(b.Embeds)/D)
		}
		s := slices.Index(x.caches, cc)
		if s < 0 {
			s = len(x.caches)
			x.caches = append(x.caches, cc)
			x.cnt = append(x.cnt, 0)
		}
		x.hPos[r] = int32(cc.Len() + x.cnt[s])
		x.hQSeq[r] = int32(s)
		x.cnt[s]++
		x.hIDs[r], x.hPLIDs[r] = row.Token, row.Token
		if row.Embed >= 0 {
			// A given embedding's row: its per-layer input is the pad
			// token's, as transformers writes for multimodal positions.
			x.hIDs[r], x.hPLIDs[r] = 0, int32(c.PadID)
		}
		if row.Out || b.Hook != nil {
			x.hGSel[x.outs] = int32(r)
			x.outs++
		}
	}
	if b.Hook != nil && len(x.caches) != 1 {
		return fmt.Errorf("gemma4: a hook needs a batch of one sequence")
	}
	if err := x.imageBlocks(b); err != nil {
		return err
	}
	x.lim = x.lim[:0]
	for s, cc := range x.caches {
		if n, mp := cc.Len()+x.cnt[s], d.maxPositions(); n > mp {
			return model.TooLong("gemma4: %d positions exceed the model's max_position_embeddings of %d", n, mp)
		}
		x.lim = append(x.lim, cc.Len()+x.cnt[s])
	}
	n := len(b.Rows)
	if err := d.pool.Grow(x.caches, x.cnt, [2][]int32{x.hGrow[0][:n], x.hGrow[1][:n]}); err != nil {
		return err
	}
	// Grow wrote the slots sequence by sequence; the rows take them in
	// batch order.
	off := make([]int, len(x.caches)+1)
	for s := range x.caches {
		off[s+1] = off[s] + x.cnt[s]
	}
	for r := range b.Rows {
		s := x.hQSeq[r]
		for k := range 2 {
			x.hSlot[k][r] = x.hGrow[k][off[s]]
		}
		off[s]++
	}
	if err := x.entries(); err != nil {
		x.settle(0)
		return err
	}
	R := x.cap
	x.st.UploadI32(x.rowsIn, x.hRowsIn[:rowSegs*R])
	return nil
}

// imageBlocks sets each row's last key on the sliding layers (hQLim) under
// use_bidirectional_attention "vision": a row that is an image placeholder
// with its soft token given (Token the image id, Embed set) sees up to the
// last row of its block, the run of such rows its sequence has back to back
// (blockLimits); every other row its own position. blocks says whether any
// row sees past itself. A block must end inside the batch: one that reaches
// its sequence's last row here could go on in the next Forward, which would
// see none of it, so it is refused (Prefill cuts its chunks before blocks).
func (x *Exec) imageBlocks(b *model.Batch) error {
	n := len(b.Rows)
	copy(x.hQLim[:n], x.hPos[:n])
	x.blocks = false
	t := x.d.media
	if t == nil || !t.VisionBidirectional {
		return nil
	}
	open := make([][]int, len(x.caches)) // each sequence's open block: its rows
	for r, row := range b.Rows {
		s := x.hQSeq[r]
		if row.Embed >= 0 && int(row.Token) == t.Image {
			open[s] = append(open[s], r)
			continue
		}
		x.closeBlock(open[s])
		open[s] = open[s][:0]
	}
	for s, rs := range open {
		if len(rs) > 0 {
			return fmt.Errorf("gemma4: row %d: an image block of sequence %d (use_bidirectional_attention \"vision\") reaches the end of the batch; a block and the token after it must be in one Forward", rs[len(rs)-1], s)
		}
	}
	return nil
}

// closeBlock gives the rows rs of one image block their block's last
// position.
func (x *Exec) closeBlock(rs []int) {
	if len(rs) < 2 {
		return
	}
	last := x.hPos[rs[len(rs)-1]]
	for _, r := range rs {
		x.hQLim[r] = last
	}
	x.blocks = true
}

// entries uploads the key runs of the batch's sequences (both kinds,
// sequences in batch order): kind k's sequence s owns entries
// seqEnt[k·(S+1)+s] .. seqEnt[k·(S+1)+s+1]-1. Sequence s's runs reach
// x.lim[s] positions; maxKeys is the largest.
func (x *Exec) entries() error {
	S := len(x.caches)
	if 2*(S+1) > x.seqEnt.Len() {
		return fmt.Errorf("gemma4: a batch of %d sequences, more than the %d an Exec describes", S, x.seqEnt.Len()/2-1)
	}
	x.runs = x.runs[:0]
	se := x.hSeqEnt[:2*(S+1)]
	var err error
	x.maxKeys = 0
	for k := range 2 {
		for s, c := range x.caches {
			se[k*(S+1)+s] = int32(len(x.runs))
			if x.runs, err = x.d.pool.Runs(x.runs, c, k, x.lim[s]); err != nil {
				return fmt.Errorf("gemma4: sequence %d: %w", s, err)
			}
			x.maxKeys = max(x.maxKeys, x.lim[s])
		}
		se[k*(S+1)+S] = int32(len(x.runs))
	}
	total := len(x.runs)
	if total > x.entBlk.Len() {
		if err := x.growEntries(total); err != nil {
			return err
		}
	}
	c := x.entBlk.Len()
	blk, pos, ln := x.hEnt[:total], x.hEnt[c:c+total], x.hEnt[2*c:2*c+total]
	for i, r := range x.runs {
		blk[i], pos[i], ln[i] = r.Blk, r.Pos, r.Len
	}
	st := x.st
	st.UploadI32(x.seqEnt.Sub(0, 1, len(se)), se)
	if total > 0 {
		st.UploadI32(x.entBlk.Sub(0, 1, total), blk)
		st.UploadI32(x.entPos.Sub(0, 1, total), pos)
		st.UploadI32(x.entLen.Sub(0, 1, total), ln)
	}
	return nil
}

// pass runs the prepared rows of b (nil: a loop's step, token rows only)
// from their embeddings to the final norm of the wanted rows, whose hidden
// states it returns [outs, D]. The rows' per-layer table rows are read on
// the host (table nil), or gathered from table by the row indices rows (a
// loop's step: no host work).
func (x *Exec) pass(b *model.Batch, n int, table, rows native.Tensor) (native.Tensor, error) {
	d, c, st := x.d, x.d.cfg, x.st
	D := c.Hidden
	if err := x.embed(b, n); err != nil {
		return native.Tensor{}, err
	}
	var hook model.Hook
	if b != nil {
		hook = b.Hook
	}
	h := x.h.Slice(0, n)
	st.Copy(h, x.e.Slice(0, n))
	if hook != nil {
		x.hook(hook, -1, h)
	}
	if LP := c.Layers * c.PerLayerInput; LP > 0 && !table.Nil() {
		st.Embed(x.plTok.Sub(0, n, LP), table, rows.Sub(0, 1, n), 1)
		x.perLayerOps(n)
	} else if err := x.perLayer(n); err != nil {
		return native.Tensor{}, err
	}
	for l := range c.Layers {
		if err := x.layer(l, n); err != nil {
			return native.Tensor{}, err
		}
		if hook != nil {
			x.hook(hook, l, h)
		}
		for _, cc := range x.caches {
			if p := cc.Progress(); p != nil {
				p(l+1, c.Layers)
			}
		}
	}
	if x.outs == 0 {
		return x.out.Slice(0, 0), nil
	}
	out := x.out.Slice(0, x.outs)
	if x.outs == n && isIota(x.hGSel[:n]) {
		st.Copy(out, h)
	} else {
		st.Gather(out, h, x.gsel.Sub(0, 1, x.outs))
	}
	st.RMSNorm(out, out, d.t.norm, D, float32(c.Eps))
	return out, nil
}

func isIota(s []int32) bool {
	for i, v := range s {
		if int(v) != i {
			return false
		}
	}
	return true
}

func (x *Exec) hook(h model.Hook, layer int, t native.Tensor) {
	n := t.Len()
	if cap(x.hHook) < n {
		x.hHook = make([]float32, n)
	}
	x.st.Download(x.hHook[:n], t)
	if err := x.st.Sync(); err == nil {
		h(layer, x.hHook[:n])
	}
}

// embed writes the rows' input embeddings into x.e: the scaled token
// embeddings, then the given ones over their rows.
func (x *Exec) embed(b *model.Batch, n int) error {
	d, st := x.d, x.st
	D := d.cfg.Hidden
	e := x.e.Slice(0, n)
	st.Embed(e, d.t.embed, x.ids.Sub(0, 1, n), d.embScale)
	if b == nil || len(b.Embeds) == 0 {
		return nil
	}
	idx := x.hOne[:0]
	k := 0
	for r, row := range b.Rows {
		if row.Embed >= 0 {
			idx = append(idx, int32(r))
			copy(x.hEmb[k*D:(k+1)*D], b.Embeds[int(row.Embed)*D:int(row.Embed+1)*D])
			k++
		}
	}
	if k == 0 {
		return nil
	}
	st.Upload(x.o.Slice(0, k), x.hEmb[:k*D])
	st.UploadI32(x.sid.Sub(0, 1, k), idx)
	st.Scatter(e, x.o.Slice(0, k), x.sid.Sub(0, 1, k))
	return st.Sync() // the staging is reused
}

// perLayer reads the per-layer table's rows of the n rows' ids (hPLIDs)
// on the host, uploads them and computes the rows' per-layer inputs from
// them (perLayerOps). The host rows are next written by the next batch,
// after Forward's closing sync, so the pass goes on without a wait here.
func (x *Exec) perLayer(n int) error {
	d := x.d
	LP := d.cfg.Layers * d.cfg.PerLayerInput
	if LP == 0 {
		return nil
	}
	for r := range n {
		if err := d.ple.row(x.hPLIDs[r], x.hPLE[r*LP:(r+1)*LP]); err != nil {
			return err
		}
	}
	x.st.Upload(x.plTok.Sub(0, n, LP), x.hPLE[:n*LP])
	x.perLayerOps(n)
	return nil
}

// perLayerOps computes the per-layer inputs of n rows, whose table rows
// are in x.plTok, into x.ple, layer-major [L, n, P]:
// (RMSNorm_P(W h⁰ · D^-½) + E_pl[id] · √P) · 2^-½.
func (x *Exec) perLayerOps(n int) {
	d, st := x.d, x.st
	c := d.cfg
	L, P := c.Layers, c.PerLayerInput
	proj := x.plProj.Sub(0, n, L*P)
	st.Linear(proj, x.e.Slice(0, n), d.t.plProj)
	st.Scale(proj, proj, d.projScale)
	st.RMSNorm(proj, proj, d.t.plNorm, P, float32(c.Eps))
	tok := x.plTok.Sub(0, n, L*P)
	st.Scale(tok, tok, d.pleScale)
	st.Add(tok, proj, tok)
	st.Scale(tok, tok, d.inScale)
	for l := range L {
		st.Copy2D(x.ple.Sub(l*n*P, n, P), P, tok.Sub(l*P, 1, (n-1)*L*P+P), L*P, n, P)
	}
}

// layer runs decoder layer l over the n rows of x.h in place (GEMMA4.md
// §3-5, as Model.layer computes it).
func (x *Exec) layer(l, n int) error {
	d, st := x.d, x.st
	c := d.cfg
	w, ly := &d.t.layers[l], &d.lay[l]
	D, H, hd := c.Hidden, c.Heads, ly.headDim
	eps := float32(c.Eps)
	rows := func(t native.Tensor) native.Tensor { return t.Slice(0, n) }
	h := rows(x.h)

	// Attention, its MLP's weights asked for ahead (a decode step's).
	a := rows(x.a)
	st.RMSNorm(a, h, w.inNorm, D, eps)
	if n <= prefetchRows {
		st.Prefetch(w.gate, w.up, w.down, w.pleGate, w.pleProj)
	}
	x.attention(l, a, n)
	o := rows(x.o)
	st.Linear(o, x.att.Sub(0, n, H*hd), w.o)
	st.NormAdd(h, o, w.postAttnNorm, h, native.Tensor{}, D, eps, 0)

	// Feed-forward: the dense MLP, the experts, the per-layer input.
	f := rows(x.f)
	st.RMSNorm(f, h, w.preFF, D, eps)
	if n <= prefetchRows && l+1 < len(d.t.layers) { // the next layer's attention
		nw := &d.t.layers[l+1]
		st.Prefetch(nw.q, nw.k, nw.v, nw.o)
	}
	I := ly.intermediate
	g, u, dn := x.g.Sub(0, n, I), x.u.Sub(0, n, I), rows(x.dn)
	x.gatedUp(f, g, u, w.gate, w.up)
	st.Linear(dn, g, w.down)
	if c.MoE {
		mo, err := x.moe(l, n)
		if err != nil {
			return err
		}
		st.RMSNorm(dn, dn, w.postFF1, D, eps)
		st.RMSNorm(mo, mo, w.postFF2, D, eps)
		st.Add(dn, dn, mo)
	}
	st.NormAdd(h, dn, w.postFF, h, native.Tensor{}, D, eps, 0)
	if P := c.PerLayerInput; P > 0 {
		pg := x.pg.Sub(0, n, P)
		x.lin[0] = native.LinearPart{Y: pg, W: w.pleGate, GeluMul: x.ple.Sub(l*n*P, n, P)} // gelu(gate(h))·ple
		x.st.Linears(h, x.lin[:1])
		st.Linear(o, pg, w.pleProj)
		st.NormAdd(h, o, w.pleNorm, h, native.Tensor{}, D, eps, 0)
	}
	st.Scale(h, h, ly.scalar)
	return nil
}

// prefetchRows is the most rows a pass asks for its weights ahead
// (Stream.Prefetch): a decode step's, whose products wait on their
// weights; a prefill's products are long enough to stream their own.
const prefetchRows = 64

// gatedUp writes g = gelu_tanh(in·gateᵀ)·(in·upᵀ), an MLP's gated
// product (u keeps the up product): the gate's product, then the up
// product with the GELU product into it (linears' GeluInto on an earlier
// part's Y), in one call: one pass where the backend pairs them.
func (x *Exec) gatedUp(in, g, u, gate, up native.Tensor) {
	x.lin[0] = native.LinearPart{Y: g, W: gate}
	x.lin[1] = native.LinearPart{Y: u, W: up, GeluMul: g, GeluInto: true}
	x.st.Linears(in, x.lin[:2])
}

// setApart makes the layers' grouped calls (Linears, NormRoPEs) run as
// the operations they stand for (on), the tests' reference, or grouped.
func (x *Exec) setApart(on bool) {
	if on {
		x.st.Apart(native.OpLinears, native.OpNormRoPEs)
	} else {
		x.st.Apart()
	}
}

// attention computes layer l's queries (and, on a layer with keys of its
// own, its keys and values, written to the pool) from the normed rows a,
// and the paged attention into x.att.
func (x *Exec) attention(l int, a native.Tensor, n int) {
	d, st := x.d, x.st
	c := d.cfg
	w, ly := &d.t.layers[l], &d.lay[l]
	H, hd, kvH := c.Heads, ly.headDim, ly.kvH
	eps := float32(c.Eps)
	typ := c.LayerTypes[l]
	inv := d.t.invFreq[typ]
	kind := c.kvKind(l)
	pos := x.pos.Sub(0, 1, n)
	slot := x.slot0
	if kind == model.KVSliding {
		slot = x.slot1
	}
	q := x.q.Sub(0, n, H*hd)
	shared := c.KVShared(l)
	k, v := x.k.Sub(0, n, kvH*hd), x.v.Sub(0, n, kvH*hd)
	if shared {
		st.Linear(q, a, w.q)
	} else { // the products of a in one call: q, k and (unless k is v) v
		x.lin[0] = native.LinearPart{Y: q, W: w.q}
		x.lin[1] = native.LinearPart{Y: k, W: w.k}
		parts := x.lin[:2]
		if !w.v.Nil() {
			x.lin[2] = native.LinearPart{Y: v, W: w.v}
			parts = x.lin[:3]
		}
		x.st.Linears(a, parts)
	}
	if shared {
		st.NormRoPE(q, w.qNorm, eps, pos, H, hd, inv, native.Tensor{}, native.Tensor{})
	} else { // q's, k's and v's norms and rotations (k's and v's written to the pool) in one call
		pk, pv := d.pool.Tensors(kind, l)
		if w.v.Nil() {
			st.Copy(v, k) // attention_k_eq_v: V is the raw K projection
		}
		x.nr[0] = native.NormRoPEPart{X: q, W: w.qNorm, InvFreq: inv, Heads: H}
		x.nr[1] = native.NormRoPEPart{X: k, W: w.kNorm, InvFreq: inv, To: pk, Heads: kvH}
		x.nr[2] = native.NormRoPEPart{X: v, To: pv, Heads: kvH}
		st.NormRoPEs(x.nr[:], eps, pos, hd, slot.Sub(0, 1, n))
	}
	pk, pv := d.pool.Tensors(kind, c.KVSource(l))
	window := 0
	var qlim native.Tensor
	if typ == Sliding {
		window = c.SlidingWindow
		if x.blocks {
			qlim = x.qlim.Sub(0, 1, n)
		}
	}
	S := len(x.caches)
	keys := x.maxKeys
	if x.keysArg > 0 {
		keys = x.keysArg
	}
	st.Attention(&native.PagedAttn{
		Out: x.att.Sub(0, n, H*hd), Q: q, K: pk, V: pv,
		QPos: pos, QSeq: x.qseq.Sub(0, 1, n), SeqEnt: x.seqEnt.Sub(kind*(S+1), 1, S+1),
		EntBlk: x.entBlk, EntPos: x.entPos, EntLen: x.entLen,
		HeadsQ: H, HeadsKV: kvH, HeadDim: hd, Block: model.KVBlock,
		Window: window, MaxKeys: keys, Scale: 1, QLim: qlim,
	})
}

// moe computes layer l's experts for the n rows of x.h into x.mo (GEMMA4.md
// §5, as Model.moe): the router's logits come to the host, which picks each
// row's top K (route); each expert then runs on the rows that chose it, and
// each row sums its experts' weighted outputs in ascending expert id.
func (x *Exec) moe(l, n int) (native.Tensor, error) {
	d, st := x.d, x.st
	c := d.cfg
	w, ly := &d.t.layers[l], &d.lay[l]
	D, E, K, Ie := c.Hidden, c.Experts, c.TopK, c.MoEIntermediate
	eps := float32(c.Eps)
	rows := func(t native.Tensor) native.Tensor { return t.Slice(0, n) }
	h, xr, rl := rows(x.h), rows(x.mx), rows(x.rl)
	st.RMSNorm(xr, h, native.Tensor{}, D, eps)
	st.MulRep(xr, xr, w.routerScale)
	st.Scale(xr, xr, d.rootD)
	st.Linear(rl, xr, w.routerProj)
	st.Download(x.hRL[:n*E], rl)
	if err := st.Sync(); err != nil {
		return native.Tensor{}, err
	}
	// Slot j of row i is its j-th smallest chosen expert: exps[j·n+i],
	// weight hRW[j·n+i].
	exps := make([]int, K*n)
	for i := range n {
		idx, wt := route(x.hRL[i*E:(i+1)*E], K, ly.expertScale)
		ord := make([]int, K)
		for k := range ord {
			ord[k] = k
		}
		slices.SortFunc(ord, func(a, b int) int { return idx[a] - idx[b] })
		for j, k := range ord {
			exps[j*n+i], x.hRW[j*n+i] = idx[k], wt[k]
		}
	}
	// The rows of each (slot, expert) group, consecutive in hEIdx.
	type group struct{ slot, e, off, m int }
	var groups []group
	off := 0
	for j := range K {
		for e := range E {
			m := 0
			for i := range n {
				if exps[j*n+i] == e {
					x.hEIdx[off+m] = int32(i)
					m++
				}
			}
			if m > 0 {
				groups = append(groups, group{j, e, off, m})
				off += m
			}
		}
	}
	st.UploadI32(x.eidx.Sub(0, 1, off), x.hEIdx[:off])
	st.Upload(x.rw.Sub(0, 1, K*n), x.hRW[:K*n])
	a2, mo, my := rows(x.a), rows(x.mo), rows(x.my)
	st.RMSNorm(a2, h, w.preFF2, D, eps)
	gi := 0
	for j := range K {
		for ; gi < len(groups) && groups[gi].slot == j; gi++ {
			gr := groups[gi]
			idx := x.eidx.Sub(gr.off, 1, gr.m)
			xa, g, u, y := x.xa.Slice(0, gr.m), x.eg.Slice(0, gr.m), x.eu.Slice(0, gr.m), x.ed.Slice(0, gr.m)
			st.Gather(xa, a2, idx)
			b := gr.e * 2 * Ie
			x.gatedUp(xa, g, u, w.gateUp.Slice(b, b+Ie), w.gateUp.Slice(b+Ie, b+2*Ie))
			st.Linear(y, g, w.expDown.Slice(gr.e*D, (gr.e+1)*D))
			st.Scatter(my, y, idx)
		}
		st.ScaleRows(my, x.rw.Sub(j*n, 1, n), D)
		if j == 0 {
			st.Copy(mo, my)
		} else {
			st.Add(mo, mo, my)
		}
	}
	return mo, nil
}

// Prefill runs the batch's rows through Forward in chunks of up to the
// Exec's rows, cut where CutChunk allows, and returns the wanted outputs on
// the host [outputs, D] (kit.Prefill: the cuts are chosen before anything
// runs, so a refusal runs nothing).
func (x *Exec) Prefill(b *model.Batch) ([]float32, error) { return kit.Prefill("gemma4", x, b) }

// CutChunk is where a chunk of rows beginning at lo may end, at most at hi
// (model.ChunkCutter): anywhere, except under use_bidirectional_attention
// "vision", where an image block and the row after it must share a
// Forward (imageBlocks refuses a batch that ends inside one). The chunk
// then ends at the largest end in (lo, hi] where no sequence's last row in
// it is an image placeholder, that is before the block it would cut (or
// before the block's last row, so that the row after it comes along); an
// end at len(rows) is taken as it is. A block that with the row after it
// does not fit in (lo, hi] is refused, naming its first row.
func (x *Exec) CutChunk(rows []model.Row, lo, hi int) (int, error) {
	t := x.d.media
	if t == nil || !t.VisionBidirectional {
		return hi, nil
	}
	return cutChunk(rows, lo, hi, t.Image)
}

var _ model.ChunkCutter = (*Exec)(nil)

// cutChunk is CutChunk for image id image. It reads rows[lo:hi] once: open
// holds, for each sequence whose last row so far is a placeholder (a row
// with the image id and its embedding given, as imageBlocks counts them),
// the first row of its block.
func cutChunk(rows []model.Row, lo, hi, image int) (int, error) {
	if hi >= len(rows) {
		return hi, nil
	}
	open := map[model.Cache]int{}
	end := lo
	for r := lo; r < hi; r++ {
		row := rows[r]
		if row.Embed >= 0 && int(row.Token) == image {
			if _, ok := open[row.Cache]; !ok {
				open[row.Cache] = r
			}
		} else {
			delete(open, row.Cache)
		}
		if len(open) == 0 {
			end = r + 1
		}
	}
	if end > lo {
		return end, nil
	}
	first := hi
	for _, r := range open {
		first = min(first, r)
	}
	return 0, fmt.Errorf("gemma4: an image block from row %d with the row after it is longer than the %d rows a chunk from row %d may take (use_bidirectional_attention \"vision\": a block and the row after it must be in one Forward)", first, hi-lo, lo)
}
