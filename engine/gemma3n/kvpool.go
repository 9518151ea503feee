package gemma3n

import (
	"fmt"

	"verdict/engine/kvpool"
	"verdict/engine/model"
	"verdict/engine/model/kit"
	"verdict/native"
)

// KVBlock is the number of positions a key/value block holds
// (model.KVBlock).
const KVBlock = model.KVBlock

// KVError reports that the key/value pool has no room for a sequence
// (model.KVError).
type KVError = model.KVError

// Cache is one sequence's keys and values: runs of blocks of its model's
// pool (engine/kvpool), per attention kind. Caches forked from one another
// share their common blocks.
type Cache = kvpool.Cache

// A Ticket is a request's promise of key/value blocks (Model.Admit), shared
// by the caches bound to it.
type Ticket = kvpool.Ticket

// newPool reserves blocks for positions positions of each attention kind
// in the backend's memory (the built-in backend commits pages only when
// written), in every layer that computes keys and values of its own (the
// KV-sharing layers read their source's).
func newPool(m *Model, be *native.Backend, positions int) (*kvpool.Pool, error) {
	cfg := m.Cfg
	var specs [2]kvpool.Spec
	for k := range specs {
		specs[k].Width = cfg.NumKVHeads * cfg.HeadDim
	}
	specs[model.KVSliding].Window = cfg.SlidingWindow
	for i := range m.layers {
		y := &m.layers[i]
		if y.kvSrc != i {
			continue
		}
		k := model.KVGlobal
		if y.sliding {
			k = model.KVSliding
		}
		specs[k].Layers = append(specs[k].Layers, i)
	}
	return kvpool.New(be, len(m.layers), specs, positions, m.maxRows)
}

// NewCache returns an empty sequence of m's pool.
func (m *Model) NewCache() model.Cache { return m.pool.NewCache() }

// Need is the blocks of each attention kind that sequences of the given
// positions (each a sequence of its own, or a fork's own part) can take.
func (m *Model) Need(seqs ...int) [2]int {
	if m.pool == nil {
		return [2]int{}
	}
	return m.pool.Need(seqs...)
}

// AdmitFits reports whether an empty pool could promise need (nil), or a
// *KVError naming the kind, the blocks needed and the pool's whole size: a
// request it refuses can never be admitted, however long it waits.
func (m *Model) AdmitFits(need [2]int) error {
	if m.pool == nil {
		return errClosed
	}
	return m.pool.AdmitFits(need)
}

// Admit promises need blocks of each kind (Need) to a new ticket, or fails
// with a *KVError when the pool's unpromised free blocks are too few now.
func (m *Model) Admit(need [2]int) (model.Ticket, error) {
	if m.pool == nil {
		return nil, errClosed
	}
	t, err := m.pool.Admit(need)
	if err != nil {
		return nil, err
	}
	return t, nil
}

// KVFree reports the pool's free blocks not promised to any sequence or
// ticket, per kind (global, sliding window).
func (m *Model) KVFree() [2]int {
	if m.pool == nil {
		return [2]int{}
	}
	return m.pool.FreeBlocks()
}

// KVFits reports whether m's pool, with no other sequence in it, could
// promise a new sequence positions positions (what Cache.Reserve
// promises): nil, or a *KVError whose Free is the pool's whole size in
// blocks of that kind. A request it refuses can never be admitted,
// however long it waits.
func (m *Model) KVFits(positions int) error {
	if m.pool == nil {
		return errClosed
	}
	return m.pool.Fits(positions)
}

// KVPool reports the key/value pool reserved: positions of each attention
// kind, and bytes in all.
func (m *Model) KVPool() (positions int, bytes int64) {
	if m.pool == nil {
		return 0, 0
	}
	return m.pool.Size()
}

// errClosed is the pool's answer once the model is closed.
var errClosed = fmt.Errorf("gemma3n: the model is closed")

// WithKVPositions returns a view of m (the same weights) with a key/value
// pool of its own of the given size in positions per attention kind: a
// separate budget for one kind of work. Caches of one view do not mix with
// another's.
func (m *Model) WithKVPositions(n int) (model.Model, error) {
	if n <= 0 || n > kvpool.MaxPositions {
		return nil, fmt.Errorf("gemma3n: a key/value pool of %d positions: want 1 to %d", n, kvpool.MaxPositions)
	}
	c := *m
	c.execs = &kit.Pool[*Exec]{}
	p, err := newPool(&c, c.be, n)
	if err != nil {
		return nil, err
	}
	c.pool = p
	return &c, nil
}

// CloseView releases what a view made by WithKVPositions holds of its own:
// its key/value pool and idle Execs; the weights stay with the model it was
// made from. The view must not be used afterwards.
func (m *Model) CloseView() {
	if m.execs != nil {
		m.execs.Close((*Exec).close)
	}
	if m.pool != nil {
		m.pool.Close()
		m.pool = nil
	}
}
