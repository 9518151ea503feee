package kit

import (
	"io"
	"slices"
)

// MaxKept bounds the values a Keeper holds; past it the oldest is closed.
const MaxKept = 8

// Keeper holds the values a caller keeps with an Exec (model.Loops' Keep
// and Kept), closing them when they are replaced, pushed out or the Exec
// closes.
type Keeper struct {
	// OnDrop, when set, runs with a value's key before the value is closed
	// (a family frees what it recorded under the key).
	OnDrop func(key any)
	kept   []kept
}

type kept struct {
	key any
	v   io.Closer
}

// Keep stores v under key until the Keeper closes, or more values are
// kept, and then closes it (a value stored again under key closes the
// earlier one).
func (k *Keeper) Keep(key any, v io.Closer) {
	for i, e := range k.kept {
		if e.key == key {
			k.drop(i)
			break
		}
	}
	if len(k.kept) >= MaxKept {
		k.drop(0)
	}
	k.kept = append(k.kept, kept{key, v})
}

// Kept returns the value kept under key, or nil.
func (k *Keeper) Kept(key any) io.Closer {
	for _, e := range k.kept {
		if e.key == key {
			return e.v
		}
	}
	return nil
}

// Close closes the kept values, the newest first.
func (k *Keeper) Close() {
	for len(k.kept) > 0 {
		k.drop(len(k.kept) - 1)
	}
}

func (k *Keeper) drop(i int) {
	e := k.kept[i]
	if k.OnDrop != nil {
		k.OnDrop(e.key)
	}
	e.v.Close()
	k.kept = slices.Delete(k.kept, i, i+1)
}
