package gemma3n_test

import (
	"errors"
	"testing"

	"verdict/engine/fixture/testmodel"
	"verdict/engine/gemma3n"
)

// TestKVFits: KVFits refuses exactly the sizes a fresh sequence's Reserve
// refuses in an empty pool, with the pool's whole size as Free.
func TestKVFits(t *testing.T) {
	m, err := testmodel.Tiny(t).WithKVPositions(6 * gemma3n.KVBlock)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		positions int
		fits      bool
	}{
		{0, true}, {1, true}, {4 * gemma3n.KVBlock, true}, {5 * gemma3n.KVBlock, true},
		{5*gemma3n.KVBlock + 1, false}, {6 * gemma3n.KVBlock, false}, {100 * gemma3n.KVBlock, false},
	} {
		err := m.KVFits(tc.positions)
		c := m.NewCache()
		rerr := c.Reserve(tc.positions)
		c.Free()
		if (err == nil) != tc.fits || (rerr == nil) != tc.fits {
			t.Errorf("%d positions: KVFits %v, Reserve %v, want fits = %v", tc.positions, err, rerr, tc.fits)
			continue
		}
		var kv *gemma3n.KVError
		if !tc.fits && (!errors.As(err, &kv) || kv.Free != 6 || kv.Need <= kv.Free) {
			t.Errorf("%d positions: %v, want a KVError naming the pool's 6 blocks", tc.positions, err)
		}
	}
	// Room held by another sequence does not count: KVFits is about ever.
	a := m.NewCache()
	if err := a.Reserve(4 * gemma3n.KVBlock); err != nil {
		t.Fatal(err)
	}
	if err := m.KVFits(4 * gemma3n.KVBlock); err != nil {
		t.Errorf("with another sequence admitted: %v", err)
	}
	a.Free()
}
