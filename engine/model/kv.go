package model

import "fmt"

// KV is a model's paged key/value memory: for each attention kind (global
// and sliding window), blocks of KVBlock positions in every layer of that
// kind that computes keys and values of its own. A sequence (Cache) holds
// blocks; a request is promised the blocks its sequences can take
// (Need, Admit) before it runs, so that it never runs out halfway. Block
// counts are per kind, [KVGlobal, KVSliding].
type KV interface {
	// NewCache returns an empty sequence of the model's pool.
	NewCache() Cache
	// Need is the blocks of each kind that sequences of the given
	// positions (each a sequence of its own, or a fork's own part) can
	// take.
	Need(seqs ...int) [2]int
	// AdmitFits reports whether an empty pool could promise need (nil),
	// or a *KVError whose Free is the pool's whole size: a request it
	// refuses can never be admitted.
	AdmitFits(need [2]int) error
	// Admit promises need blocks to a new ticket, or fails with a
	// *KVError when the pool's unpromised free blocks are too few now.
	Admit(need [2]int) (Ticket, error)
	// KVFree reports the pool's free blocks not promised, per kind.
	KVFree() [2]int
	// KVFits reports whether the pool, with no other sequence in it, could
	// promise a new sequence positions positions (Cache.Reserve): nil, or
	// a *KVError whose Free is the pool's whole size.
	KVFits(positions int) error
	// KVPool reports the pool reserved: positions of each kind, and bytes
	// in all.
	KVPool() (positions int, bytes int64)
	// KVLayout describes the keys and values the model's layers need.
	KVLayout() KVLayout
	// WithKVPositions returns a view of the model (the same weights) with
	// a pool of its own of n positions per kind: a separate budget for
	// one kind of work. Caches of one view do not mix with another's.
	WithKVPositions(n int) (Model, error)
	// CloseView releases what a view holds of its own (its pool, its idle
	// Execs); the view must not be used afterwards.
	CloseView()
}

// The attention kinds, the indexes of block counts.
const (
	KVGlobal  = 0 // global attention: every earlier position
	KVSliding = 1 // a sliding window of recent positions
)

// KVBlock is the number of positions a key/value block holds.
const KVBlock = 16

// KVLayout is what a model's layers need of the pool.
type KVLayout struct {
	// Kinds are the attention kinds, [KVGlobal, KVSliding].
	Kinds [2]KVKind
	// Width is the floats of keys (and as many of values) a layer keeps
	// per position: the widest kind's where kinds differ (KVKind.Width).
	Width int
	// BytesPerPosition is the pool's bytes per position: every layer with
	// keys of its own, keys and values.
	BytesPerPosition int64
}

// KVKind is one attention kind's layers.
type KVKind struct {
	// Window is the positions a query sees (0: global).
	Window int
	// Layers are the layers of the kind that keep keys and values of their
	// own (others read an earlier layer's).
	Layers []int
	// Width is the floats of keys (and as many of values) a layer of the
	// kind keeps per position (0: KVLayout.Width, every kind's).
	Width int
}

// Cache is one sequence's keys and values: blocks of its model's pool.
// Caches forked from one another share their common blocks. A Cache is
// used by one goroutine at a time; Free, or the garbage collector once the
// Cache is unreachable, returns its blocks.
type Cache interface {
	// Len reports the number of positions in the cache.
	Len() int
	// Clone returns a fork of the cache: a sequence with its positions,
	// sharing its blocks. Either may grow afterwards without changing the
	// other.
	Clone() Cache
	// Fork returns a fork of the first n positions, or false when the
	// cache no longer holds keys a later position n would see (a sliding
	// window released them).
	Fork(n int) (Cache, bool)
	// Free returns the cache's blocks and reservation; it is empty after.
	Free()
	// Reserve promises the cache the blocks positions more positions can
	// need, or fails with a *KVError.
	Reserve(positions int) error
	// Bind makes the cache's later blocks come out of t first (nil: out
	// of the pool's free blocks only).
	Bind(t Ticket)
	// Blocks reports the blocks the cache references (shared ones
	// included).
	Blocks() int
	// OnLayer makes every later pass on the cache report the decoder
	// layers done of those it runs (nil stops the reports).
	OnLayer(f func(done, total int))
}

// A Ticket is a request's promise of key/value blocks (KV.Admit), shared by
// the caches bound to it.
type Ticket interface {
	// Release gives back the blocks the ticket still promises; it is
	// idempotent.
	Release()
	// Left reports the blocks the ticket still promises, per kind.
	Left() [2]int
}

// KVError reports that the key/value pool has no room for a sequence.
type KVError struct {
	Need, Free int
	Kind       string // "global" or "sliding-window"
}

func (e *KVError) Error() string {
	return fmt.Sprintf("model: the key/value pool has %d free %s blocks of %d positions, %d needed", e.Free, e.Kind, KVBlock, e.Need)
}

// KindName names an attention kind as a KVError does.
func KindName(k int) string {
	if k == KVSliding {
		return "sliding-window"
	}
	return "global"
}
