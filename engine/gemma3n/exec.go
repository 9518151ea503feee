package gemma3n

import (
	"fmt"
	"math"

	"verdict/engine/kvpool"
	"verdict/engine/model"
	"verdict/engine/model/kit"
	"verdict/native"
)

// DefaultBatchRows is the number of rows an Exec runs at once unless the
// model was loaded with another (LoadOptions.BatchRows).
const DefaultBatchRows = 512

// headRows is the number of output rows the dense head computes at once.
const headRows = kit.HeadRows

// Exec runs forward passes and output heads of one model on one backend
// stream, over scratch reserved once for its largest batch. An Exec is used
// by one goroutine at a time; a model hands out as many as run at once
// (Acquire) and takes them back (Release).
type Exec struct {
	kit.Head   // the output heads (Logits, LogitsRows, SelectLogprobs, Sample, Greedy, CatalogHead)
	kit.Keeper // the values kept with it (Keep, Kept); dropping one drops the loops recorded under its key

	m    *Model
	st   *native.Stream
	ar   *native.Arena
	cap  int                    // rows
	step native.AltUpStep       // altupStep's operands, kept to spare an allocation a layer
	nr   [3]native.NormRoPEPart // attention's q, k, v norms (likewise)
	lin  [4]native.LinearPart   // a layer's products of one input (likewise)

	// Activations.
	e, H, H2, pred, an, laur, q, k, v, att, o, x, f, d, g, u, mod, coef, lr, pg native.Tensor
	tok, ple, ple2, target, mag, h                                              native.Tensor
	// Int32 tensors. rowsIn holds ids through oqseq; opos and oqseq are
	// the wanted rows' positions and sequences (the KV-sharing layers'
	// queries when only those rows go on).
	idx, ids, pos, qseq, gsel, slot0, slot1, seqEnt, entBlk, entPos, entLen, sid native.Tensor
	rowsIn, opos, oqseq                                                          native.Tensor

	// Host staging, reused.
	hIDs, hPos, hQSeq, hSlot0, hSlot1, hSeqEnt, hEnt, hOne []int32
	hRowsIn, hGSel, hOPos, hOQSeq                          []int32 // hRowsIn: rowsIn's mirror
	hPLE, hHook                                            []float32
	caches                                                 []*Cache
	cnt, ocnt                                              []int // rows and outputs per sequence
	ns                                                     []int // per sequence: where its slots are, or its length after a pass
	runs                                                   []kvpool.Run
	outs, maxKeys                                          int
	outRows                                                []int32
	hEmbIdx                                                []int32

	// Recorded passes (graph.go).
	graphs   map[graphKey]*recording
	lru      uint64           // the recordings' use clock
	seen     map[graphKey]int // 1: seen once, -1: not recordable
	fails    map[graphKey]int // failed recordings
	keysArg  int              // the attention's key capacity while recording or replaying
	entAr    *native.Arena    // the entry tensors once grown past the first arena's
	noGraphs bool             // the backend does not record

	loop loopBufs // device-driven decodes (loop.go)
}

func (x *Exec) entCap() int { return x.entBlk.Len() }

// rowSegs is the segments of rowsIn: ids, pos, qseq, slot0, slot1, gsel,
// opos, oqseq.
const rowSegs = 8

// newExec reserves an Exec's scratch for rows rows.
func (m *Model) newExec(rows int) (*Exec, error) {
	cfg := m.Cfg
	D, P, L := cfg.HiddenSize, cfg.PerLayerSize, cfg.NumLayers
	qd, kd := cfg.NumHeads*cfg.HeadDim, cfg.NumKVHeads*cfg.HeadDim
	I := 0
	for _, v := range cfg.IntermediateSize {
		I = max(I, v)
	}
	V := cfg.VocabSize
	R := rows
	ents := 4 * R // run entries: grown on demand (growEntries)
	sizes := []int{
		R * D, 4 * R * D, 4 * R * D, 4 * R * D, R * D, R * D, R * qd, R * kd, R * kd, R * qd, R * D, R * D, R * D, R * D,
		R * I, R * I, R * 4, R * 16, R * cfg.LaurelRank, R * P,
		R * max(L*P, D), L * R * P, L * R * P, R, 3 * R, R * D, headRows * V, R, R * 4,
		R * I, rowSegs * R, 2 * (R + 1), ents, ents, ents, V, R, 4 * R, 4 * R,
	}
	st, err := m.be.NewStream()
	if err != nil {
		return nil, err
	}
	ar, err := m.be.NewArena(native.ArenaBytes(sizes...))
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("gemma3n: scratch for %d rows: %w", R, err)
	}
	f := func(r, c int) native.Tensor { return ar.Take(native.F32, r, c) }
	i := func(r, c int) native.Tensor { return ar.Take(native.I32, r, c) }
	x := &Exec{m: m, st: st, ar: ar, cap: R}
	x.e, x.H, x.H2, x.pred = f(R, D), f(4*R, D), f(4*R, D), f(4*R, D)
	x.an, x.laur, x.q, x.k, x.v, x.att = f(R, D), f(R, D), f(R, qd), f(R, kd), f(R, kd), f(R, qd)
	x.o, x.x, x.f, x.d = f(R, D), f(R, D), f(R, D), f(R, D)
	x.g, x.u, x.mod, x.coef, x.lr, x.pg = f(R, I), f(R, I), f(R, 4), f(R, 16), f(R, cfg.LaurelRank), f(R, P)
	x.tok, x.ple, x.ple2, x.target, x.mag, x.h = f(R, max(L*P, D)), f(L*R, P), f(L*R, P), f(1, R), f(1, 3*R), f(R, D)
	hd := kit.Head{Name: "gemma3n", St: st, W: m.t.embed, SoftCap: float32(cfg.FinalLogitSoftcap), Vocab: V}
	hd.LogitsBuf, hd.LSE, hd.Sel = f(headRows, V), f(1, R), f(1, R*4)
	// The rows' descriptions, one span (rowSegs segments of R) so that a
	// batch's go up in one copy, mirrored on the host.
	x.idx, x.rowsIn = i(R, I), i(1, rowSegs*R)
	seg := func(k int) native.Tensor { return x.rowsIn.Sub(k*R, 1, R) }
	x.ids, x.pos, x.qseq, x.slot0, x.slot1, x.gsel, x.opos, x.oqseq = seg(0), seg(1), seg(2), seg(3), seg(4), seg(5), seg(6), seg(7)
	x.hRowsIn = make([]int32, rowSegs*R)
	hseg := func(k int) []int32 { return x.hRowsIn[k*R : (k+1)*R] }
	x.hIDs, x.hPos, x.hQSeq, x.hSlot0, x.hSlot1, x.hGSel, x.hOPos, x.hOQSeq = hseg(0), hseg(1), hseg(2), hseg(3), hseg(4), hseg(5), hseg(6), hseg(7)
	x.seqEnt, x.entBlk, x.entPos, x.entLen, hd.IDs, x.sid = i(1, 2*(R+1)), i(1, ents), i(1, ents), i(1, ents), i(1, V), i(1, R)
	hd.SRow, hd.SCol = i(1, 4*R), i(1, 4*R)
	hd.HSRow, hd.HSCol = make([]int32, 4*R), make([]int32, 4*R)
	x.hSeqEnt = make([]int32, 2*(R+1))
	x.hEnt, x.hOne = make([]int32, 3*ents), make([]int32, 4*R)
	hd.Tok, hd.HOne = x.sid, x.hOne // shared with the pass's scatter and Grow's slots
	hd.Hidden, hd.Out = D, x.h
	hd.Input, hd.InputScale, hd.InIDs, hd.InEmb = m.t.embed, m.embedScale, x.ids, x.e
	x.Head = hd
	x.OnDrop = x.loop.dropGraphs
	x.hPLE = make([]float32, R*max(L*P, D))
	x.caches, x.cnt, x.ocnt = make([]*Cache, 0, R), make([]int, 0, R), make([]int, 0, R)
	x.ns = make([]int, 0, R)
	x.outRows, x.hEmbIdx = make([]int32, 0, R), make([]int32, 0, R)
	return x, nil
}

// Acquire returns an Exec of m for the caller's exclusive use.
func (m *Model) Acquire() (model.Exec, error) {
	x, err := m.acquire()
	if err != nil {
		return nil, err
	}
	return x, nil
}

func (m *Model) acquire() (*Exec, error) {
	return m.execs.Get(func() (*Exec, error) { return m.newExec(m.maxRows) })
}

// Release gives x back to its model (kit.Pool: at most kit.MaxIdle stay
// idle, their scratch committed).
func (x *Exec) Release() { x.m.execs.Put(x, (*Exec).close) }

func (x *Exec) close() {
	x.freeGraphs()
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

// Forward runs a batch through the decoder: every row's keys and values
// join its sequence, and the final normalised hidden states of the rows
// whose output is wanted come back, in batch order, as a tensor [outputs,
// D] of the Exec's scratch that stays valid until the next call. Rows of the KV-sharing layers
// run only for wanted outputs (those layers write no keys or values). Each
// row's result is the same, bit for bit, whatever batch it runs in.
func (x *Exec) Forward(b *Batch) (native.Tensor, error) {
	n := len(b.Rows)
	if err := kit.Prepare("gemma3n", n, x.cap, func() error { return x.prepare(b) }); err != nil {
		return native.Tensor{}, err
	}
	st := x.st
	if err := x.embed(b, n); err != nil {
		x.abandon()
		return native.Tensor{}, err
	}
	e := x.e.Slice(0, n)
	if b.Hook != nil {
		x.hook(b.Hook, -1, e)
	}
	if err := x.perLayer(n); err != nil {
		st.Sync() // the uploads are done with the host rows
		x.abandon()
		return native.Tensor{}, err
	}
	h := x.decoder(b, e, n)
	x.finish()
	return h, st.Sync()
}

// pass is the part of Forward a recording holds: the per-layer inputs
// from their uploaded rows, then layers.
func (x *Exec) pass(b *Batch, e native.Tensor, n int) native.Tensor {
	x.perLayerOps(n)
	return x.layers(b, e, n)
}

// layers runs the decoder from the embeddings e: the AltUp streams, every
// layer, and the final norm of the wanted rows, whose hidden states it
// returns (none when no row's output is wanted).
func (x *Exec) layers(b *Batch, e native.Tensor, n int) native.Tensor {
	m, cfg, st := x.m, x.m.Cfg, x.st
	P, L := cfg.PerLayerSize, cfg.NumLayers
	x.streams(e, n)

	first := L - cfg.NumKVSharedLayers
	cur := n
	H, ple := x.H, x.ple
	pend := -1 // a layer whose per-layer input the next one adds (layer)
	for i := range m.layers {
		if i == first && cfg.NumKVSharedLayers > 0 && x.outs < n && b.Hook == nil {
			if pend >= 0 { // the streams whole before they are gathered
				x.pleAdd(pend, H, cur)
				pend = -1
			}
			// Only the wanted rows go on: the layers from here on read the
			// source layers' keys and values, all written.
			cur = x.outs
			if cur == 0 {
				break
			}
			gs := x.gsel.Sub(0, 1, cur)
			for s := 0; s < 4; s++ {
				st.Gather(x.H2.Slice(s*cur, (s+1)*cur), H.Slice(s*n, (s+1)*n), gs)
			}
			for l := first; l < L; l++ {
				st.Gather(x.ple2.Sub(l*cur*P, cur, P), ple.Sub(l*n*P, n, P), gs)
			}
			H, ple = x.H2, x.ple2
			// The queries' positions and sequences are the wanted rows'
			// (prepare uploaded them).
			x.pos, x.opos = x.opos, x.pos
			x.qseq, x.oqseq = x.oqseq, x.qseq
			defer func() {
				x.pos, x.opos = x.opos, x.pos
				x.qseq, x.oqseq = x.oqseq, x.qseq
			}()
		}
		pend = x.layer(i, H, ple.Sub(i*cur*P, cur, P), cur, pend)
		if b.Hook != nil {
			x.hook(b.Hook, i, H.Slice(0, cur))
		}
		for s, c := range x.caches {
			if f := c.Progress(); f != nil {
				runs := L
				if x.ocnt[s] == 0 && cfg.NumKVSharedLayers > 0 && b.Hook == nil {
					runs = first
				}
				if i < runs {
					f(i+1, runs)
				}
			}
		}
	}
	if x.outs == 0 {
		return x.h.Slice(0, 0)
	}
	h := x.unmix(H, cur)
	if cur > x.outs { // every row ran every layer: keep the wanted ones
		st.Gather(x.H2.Slice(0, x.outs), h, x.gsel.Sub(0, 1, x.outs))
		h = x.H2.Slice(0, x.outs)
	}
	return h
}

// prepare checks the batch, gives its rows their positions and key/value
// slots, and uploads the rows' descriptions.
func (x *Exec) prepare(b *Batch) error {
	m, cfg := x.m, x.m.Cfg
	D := cfg.HiddenSize
	x.caches, x.cnt, x.ocnt, x.outRows = x.caches[:0], x.cnt[:0], x.ocnt[:0], x.outRows[:0]
	for r, row := range b.Rows {
		c := m.pool.Own(row.Cache)
		if c == nil {
			return fmt.Errorf("gemma3n: row %d has no cache of this model", r)
		}
		if row.Embed < 0 {
			if row.Token < 0 || int(row.Token) >= cfg.VocabSize {
				return fmt.Errorf("gemma3n: token id %d outside the vocabulary of %d", row.Token, cfg.VocabSize)
			}
		} else if int(row.Embed+1)*D > len(b.Embeds) {
			return fmt.Errorf("gemma3n: row %d takes embedding %d of %d", r, row.Embed, len(b.Embeds)/D)
		}
		s := -1
		for j, d := range x.caches { // batches hold few sequences
			if d == c {
				s = j
				break
			}
		}
		if s < 0 {
			s = len(x.caches)
			x.caches = append(x.caches, c)
			x.cnt, x.ocnt = append(x.cnt, 0), append(x.ocnt, 0)
		}
		x.hPos[r] = int32(c.Len() + x.cnt[s])
		x.hQSeq[r] = int32(s)
		x.cnt[s]++
		x.hIDs[r] = row.Token
		if row.Embed >= 0 {
			x.hIDs[r] = 0 // replaced by the given embedding
		}
		if row.Out || b.Hook != nil {
			x.outRows = append(x.outRows, int32(r))
			x.ocnt[s]++
		}
	}
	if b.Hook != nil && len(x.caches) != 1 {
		return fmt.Errorf("gemma3n: a hook needs a batch of one sequence")
	}
	x.outs = len(x.outRows)
	x.maxKeys = 0
	for s, c := range x.caches {
		if err := m.checkPositions(c.Len() + x.cnt[s]); err != nil {
			return err
		}
		x.maxKeys = max(x.maxKeys, c.Len()+x.cnt[s])
	}
	n := len(b.Rows)
	// Slots, sequence by sequence (a sequence's rows are consecutive
	// positions), then back to the rows in batch order.
	grown := [2][]int32{x.hOne[:n], x.hOne[n : 2*n]}
	if err := m.pool.Grow(x.caches, x.cnt, grown); err != nil {
		return err
	}
	for k, dst := range [2][]int32{x.hSlot0, x.hSlot1} {
		if !m.pool.Has(k) {
			continue
		}
		x.ns = x.ns[:0]
		o := 0
		for _, c := range x.cnt {
			x.ns = append(x.ns, o)
			o += c
		}
		for r := range b.Rows {
			s := x.hQSeq[r]
			dst[r] = grown[k][x.ns[s]]
			x.ns[s]++
		}
	}
	if err := x.entries(0); err != nil {
		x.settle(false) // a sequence never keeps slots past its positions
		return err
	}
	segs := 5 // ids, pos, qseq, slot0, slot1
	if o := x.outs; o > 0 && o < n {
		// Every operation's inputs are on the device before the layers
		// run, so a pass with fewer outputs than rows records too.
		copy(x.hGSel, x.outRows)
		for j, r := range x.outRows {
			x.hOPos[j], x.hOQSeq[j] = x.hPos[r], x.hQSeq[r]
		}
		segs = rowSegs
	}
	R := x.cap
	x.st.UploadI32(x.rowsIn.Sub(0, 1, segs*R), x.hRowsIn[:segs*R])
	return nil
}

// abandon gives back the slots of a prepared pass that does not run.
func (x *Exec) abandon() { x.settle(false) }

// growEntries makes room for at least n key runs in a batch: new entry
// tensors (twice the old room, or n) in an arena of their own. The graphs
// recorded with the old ones are dropped; the stream is idle first, so no
// queued work reads the old ones.
func (x *Exec) growEntries(n int) error {
	c := max(2*x.entCap(), n)
	if err := x.st.Sync(); err != nil {
		return err
	}
	ar, err := x.m.be.NewArena(native.ArenaBytes(c, c, c))
	if err != nil {
		return fmt.Errorf("gemma3n: room for %d key runs: %w", c, err)
	}
	x.freeGraphs()
	x.loop.freeGraphs()
	if x.entAr != nil {
		x.entAr.Free()
	}
	x.entAr = ar
	x.entBlk, x.entPos, x.entLen = ar.Take(native.I32, 1, c), ar.Take(native.I32, 1, c), ar.Take(native.I32, 1, c)
	x.hEnt = make([]int32, 3*c)
	return nil
}

// settle ends a pass on the batch's sequences: each takes in its rows
// (ran), or gives back the slots prepare gave it past its positions
// (!ran); the sliding-window blocks no later position sees are released.
func (x *Exec) settle(ran bool) {
	x.ns = x.ns[:0]
	for s, c := range x.caches {
		n := c.Len()
		if ran {
			n += x.cnt[s]
		}
		x.ns = append(x.ns, n)
	}
	x.m.pool.Settle(x.caches, x.ns)
}

// entries writes the batch's sequences' key runs (both kinds, sequences in
// batch order) into the entry tensors: kind k's sequence s owns entries
// seqEnt[k·(S+1)+s] .. seqEnt[k·(S+1)+s+1]-1. Each sequence holds its
// positions and the batch's rows, or steps more (a loop's) when that is more.
func (x *Exec) entries(steps int) error {
	S := len(x.caches)
	if 2*(S+1) > x.seqEnt.Len() {
		return fmt.Errorf("gemma3n: a batch of %d sequences, more than the %d an Exec describes", S, x.seqEnt.Len()/2-1)
	}
	se := x.hSeqEnt[:2*(S+1)]
	x.runs = x.runs[:0]
	for k := 0; k < 2; k++ {
		for s, c := range x.caches {
			se[k*(S+1)+s] = int32(len(x.runs))
			// A query sees each position once (Runs checks it): within
			// the sequence's positions and the batch's rows, or a loop's
			// steps when more.
			var err error
			if x.runs, err = x.m.pool.Runs(x.runs, c, k, c.Len()+max(x.cnt[s], steps)); err != nil {
				return fmt.Errorf("gemma3n: sequence %d: %w", s, err)
			}
		}
		se[k*(S+1)+S] = int32(len(x.runs))
	}
	total := len(x.runs)
	if total > x.entCap() {
		if err := x.growEntries(total); err != nil {
			return err
		}
	}
	blk, pos, ln := x.hEnt[:total], x.hEnt[x.entCap():x.entCap()+total], x.hEnt[2*x.entCap():2*x.entCap()+total]
	for e, r := range x.runs {
		blk[e], pos[e], ln[e] = r.Blk, r.Pos, r.Len
	}
	st := x.st
	st.UploadI32(x.seqEnt.Sub(0, 1, len(se)), se)
	st.UploadI32(x.entBlk.Sub(0, 1, total), blk)
	st.UploadI32(x.entPos.Sub(0, 1, total), pos)
	st.UploadI32(x.entLen.Sub(0, 1, total), ln)
	return nil
}

// finish advances the batch's sequences past its rows and releases the
// sliding-window blocks they no longer see.
func (x *Exec) finish() { x.settle(true) }

func (x *Exec) hook(h Hook, layer int, t native.Tensor) {
	n := t.Len()
	if cap(x.hHook) < n {
		x.hHook = make([]float32, n)
	}
	x.st.Download(x.hHook[:n], t)
	if err := x.st.Sync(); err == nil {
		h(layer, x.hHook[:n])
	}
}

// embed writes the rows' input embeddings into x.e: scaled token
// embeddings, then the given ones over their rows (the multimodal merge).
func (x *Exec) embed(b *Batch, n int) error {
	m, st := x.m, x.st
	D := m.Cfg.HiddenSize
	e := x.e.Slice(0, n)
	st.Embed(e, m.t.embed, x.ids.Sub(0, 1, n), m.embedScale)
	x.hEmbIdx = x.hEmbIdx[:0]
	k := 0
	for r, row := range b.Rows {
		if row.Embed >= 0 {
			x.hEmbIdx = append(x.hEmbIdx, int32(r))
			copy(x.hPLE[k*D:(k+1)*D], b.Embeds[int(row.Embed)*D:int(row.Embed+1)*D])
			k++
		}
	}
	if k > 0 {
		// Given rows go through the per-layer staging area, then land on
		// their rows.
		st.Upload(x.tok.Sub(0, k, D), x.hPLE[:k*D])
		st.UploadI32(x.sid.Sub(0, 1, k), x.hEmbIdx)
		st.Scatter(e, x.tok.Sub(0, k, D), x.sid.Sub(0, 1, k))
		if err := st.Sync(); err != nil { // the staging area is reused next
			return err
		}
	}
	return nil
}

// perLayer reads the batch's per-layer token embeddings on the host and
// uploads them (perLayerTok); perLayerOps, the decoder's first part, makes
// the per-layer inputs of them. The host rows are next written by the next
// batch, after Forward's closing sync, so the pass goes on without a wait
// here.
func (x *Exec) perLayer(n int) error {
	m, cfg := x.m, x.m.Cfg
	L, P := cfg.NumLayers, cfg.PerLayerSize
	for t := 0; t < n; t++ {
		if err := m.pleRow(x.hIDs[t], x.hPLE[t*L*P:(t+1)*L*P]); err != nil {
			return err
		}
	}
	x.st.Upload(x.perLayerTok(n), x.hPLE[:n*L*P])
	return nil
}

// pleRow reads token id's per-layer embedding row [L·P] into dst (ids
// outside the per-layer vocabulary read token 0's).
func (m *Model) pleRow(id int32, dst []float32) error {
	if id < 0 || int(id) >= m.Cfg.VocabSizePerLayer {
		id = 0
	}
	if err := m.store.Rows(m.pleName, int(id), dst); err != nil {
		return fmt.Errorf("gemma3n: per-layer embedding of token %d: %w", id, err)
	}
	return nil
}

// perLayerTok is where the per-layer token rows of n rows go, [n, L·P]:
// the ple2 area, free until the KV-sharing layers' gather.
func (x *Exec) perLayerTok(n int) native.Tensor {
	cfg := x.m.Cfg
	return x.ple2.Sub(0, n, cfg.NumLayers*cfg.PerLayerSize)
}

// perLayerFrom computes the per-layer inputs of n rows whose token rows
// rows writes into perLayerTok (gathered on the device).
func (x *Exec) perLayerFrom(n int, rows func(tok native.Tensor)) {
	rows(x.perLayerTok(n))
	x.perLayerOps(n)
}

// perLayerOps computes Gemma 3n's per-layer inputs of n rows into x.ple,
// layer-major [L, n, P], from their embeddings and their per-layer token
// rows in perLayerTok.
func (x *Exec) perLayerOps(n int) {
	m, st := x.m, x.st
	cfg := m.Cfg
	D, P, L := cfg.HiddenSize, cfg.PerLayerSize, cfg.NumLayers
	proj := x.tok.Sub(0, n, L*P)
	st.Linear(proj, x.e.Slice(0, n), m.t.pleProj)
	st.Scale(proj, proj, float32(1/math.Sqrt(float64(D))))
	st.RMSNorm(proj, proj, m.t.pleNorm, P, float32(cfg.RMSNormEps))
	tok := x.perLayerTok(n)
	st.Scale(tok, tok, m.pleScale)
	c := float32(1 / math.Sqrt2)
	if n == 1 { // [1, L, P] is [L, 1, P]: the sum and its scale in one pass, as Add then Scale
		st.AddScaled(x.ple.Sub(0, L, P), tok.View(L, P), proj.View(L, P), c)
		return
	}
	st.Add(tok, tok, proj)
	for l := 0; l < L; l++ {
		st.Copy2D(x.ple.Sub(l*n*P, n, P), P, tok.Sub(l*P, 1, (n-1)*L*P+P), L*P, n, P)
	}
	pl := x.ple.Sub(0, L*n, P)
	st.Scale(pl, pl, c)
}
