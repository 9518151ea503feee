package kvpool

import (
	"errors"
	"strings"
	"testing"

	"verdict/engine/model"
	"verdict/native"
)

// newPool is a pool of 4 layers: global layer 2 of width 8, sliding layers
// 0 and 1 of width 4 with a window of 16, positions positions a kind.
func newPool(t *testing.T, positions int) *Pool {
	t.Helper()
	var s [2]Spec
	s[model.KVGlobal] = Spec{Layers: []int{2}, Width: 8}
	s[model.KVSliding] = Spec{Window: 16, Layers: []int{0, 1}, Width: 4}
	p, err := New(native.Default(), 4, s, positions, 8)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// grow adds n positions to c and settles them, returning the slots.
func grow(t *testing.T, p *Pool, c *Cache, n int) [2][]int32 {
	t.Helper()
	dst := [2][]int32{make([]int32, n), make([]int32, n)}
	if err := p.Grow([]*Cache{c}, []int{n}, dst); err != nil {
		t.Fatal(err)
	}
	p.Settle([]*Cache{c}, []int{c.Len() + n})
	return dst
}

func runs(t *testing.T, p *Pool, c *Cache, k int) []Run {
	t.Helper()
	r, err := p.Runs(nil, c, k, c.Len())
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestNewLayout(t *testing.T) {
	p := newPool(t, 100) // 7 blocks a kind
	for _, tc := range []struct{ kind, layer, width int }{
		{model.KVGlobal, 2, 8}, {model.KVSliding, 0, 4}, {model.KVSliding, 1, 4},
	} {
		k, v := p.Tensors(tc.kind, tc.layer)
		if k.Cols() != tc.width || v.Cols() != tc.width || k.Rows() != 7*Block {
			t.Errorf("kind %d layer %d: keys %d×%d, values %d cols; want %d×%d", tc.kind, tc.layer, k.Rows(), k.Cols(), v.Cols(), 7*Block, tc.width)
		}
	}
	if k, _ := p.Tensors(model.KVGlobal, 0); !k.Nil() {
		t.Error("a sliding layer has global tensors")
	}
	pos, bytes := p.Size()
	if pos != 7*Block || bytes != int64(7*Block)*(8+4+4)*2*4 || p.BytesPerPosition() != (8+4+4)*2*4 {
		t.Errorf("Size %d positions %d bytes, %d bytes a position", pos, bytes, p.BytesPerPosition())
	}
	for _, tc := range []struct {
		name      string
		spec      [2]Spec
		positions int
		want      string
	}{
		{"positions", [2]Spec{{Layers: []int{0}, Width: 4}}, 0, "positions"},
		{"width", [2]Spec{{Layers: []int{0}, Width: 0}}, 16, "width 0"},
		{"layer", [2]Spec{{Layers: []int{4}, Width: 4}}, 16, "layer 4 of 4"},
		{"twice", [2]Spec{{Layers: []int{1, 1}, Width: 4}}, 16, "listed twice"},
	} {
		if _, err := New(native.Default(), 4, tc.spec, tc.positions, 8); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
	}
}

// TestGrowSettle: positions fill blocks run by run, the sliding kind gives
// back the blocks no later query sees, forks share blocks.
func TestGrowSettle(t *testing.T) {
	p := newPool(t, 128) // 8 blocks a kind
	c := p.NewCache()
	s := grow(t, p, c, 20)
	if s[0][0] != s[0][19]-19 || s[1][0] != s[1][19]-19 {
		t.Errorf("20 positions of an empty pool are not consecutive slots: %v", s)
	}
	s2 := grow(t, p, c, 20) // 40 positions: sliding keeps those from 25 on
	if s2[0][0] != s[0][19]+1 {
		t.Errorf("the next position's global slot is %d, want %d", s2[0][0], s[0][19]+1)
	}
	g, sl := runs(t, p, c, model.KVGlobal), runs(t, p, c, model.KVSliding)
	if len(g) != 1 || g[0].Pos != 0 || g[0].Len != 40 {
		t.Errorf("global runs %v, want one of 40 from 0", g)
	}
	if len(sl) != 1 || sl[0].Pos != 16 || sl[0].Len != 24 {
		t.Errorf("sliding runs %v, want 24 from 16 (the first block released)", sl)
	}
	if free := p.FreeBlocks(); free != [2]int{5, 6} || c.Blocks() != 5 {
		t.Errorf("free %v, the cache holds %d blocks; want [5 6] and 5", free, c.Blocks())
	}
	if _, ok := c.Fork(10); ok {
		t.Error("Fork(10) after the sliding window released position 0")
	}
	f, ok := c.Fork(38)
	if !ok || f.Len() != 38 {
		t.Fatalf("Fork(38): %v, %d positions", ok, f.Len())
	}
	d := c.Clone().(*Cache)
	if free := p.FreeBlocks(); free != [2]int{5, 6} {
		t.Errorf("forks took blocks: free %v", free)
	}
	// The clone's next position goes into a block of its own (the shared
	// last block is c's).
	sd := grow(t, p, d, 1)
	sc := grow(t, p, c, 1)
	if sd[0][0]/Block == sc[0][0]/Block || sc[0][0] != s2[0][19]+1 {
		t.Errorf("clone slot %d, cache slot %d (after %d): the clone wrote into the shared block", sd[0][0], sc[0][0], s2[0][19])
	}
	f.Free()
	d.Free()
	c.Free()
	if free := p.FreeBlocks(); free != [2]int{8, 8} {
		t.Errorf("after freeing every cache: free %v, want [8 8]", free)
	}
}

// TestPromises: admission, reservations and tickets, and a full pool's
// *model.KVError leaving the cache as it was.
func TestPromises(t *testing.T) {
	p := newPool(t, 64) // 4 blocks a kind
	if err := p.Fits(64); err == nil {
		t.Error("Fits(64): 5 blocks (a partial one at each end) in a pool of 4")
	}
	if err := p.Fits(40); err != nil {
		t.Error(err)
	}
	// 40 positions: 3 blocks and a partial one at each end; sliding: at
	// most the window and a pass of 8 rows, 24/16+2.
	if n := p.Need(40, 1); n != [2]int{4 + 2, 3 + 2} {
		t.Errorf("Need(40, 1) = %v", n)
	}
	var kv *model.KVError
	if err := p.AdmitFits([2]int{5, 0}); !errors.As(err, &kv) || kv.Free != 4 || kv.Kind != "global" {
		t.Errorf("AdmitFits past the pool: %v", err)
	}
	tk, err := p.Admit([2]int{2, 1})
	if err != nil {
		t.Fatal(err)
	}
	if free, unheld := p.FreeBlocks(), p.Unheld(); free != [2]int{2, 3} || unheld != [2]int{4, 4} {
		t.Errorf("free %v, unheld %v after a ticket of [2 1]; want [2 3] and [4 4]", free, unheld)
	}
	c := p.NewCache()
	c.Bind(tk)
	grow(t, p, c, 17) // two blocks of each kind, the ticket's first (17 < the window + 1: none released)
	if l := tk.Left(); l != [2]int{0, 0} {
		t.Errorf("the ticket has %v left after its cache took 2 blocks a kind", l)
	}
	tk.Release()
	tk.Release()
	if free, unheld := p.FreeBlocks(), p.Unheld(); free != [2]int{2, 2} || unheld != free {
		t.Errorf("free %v, unheld %v after the ticket's release; want [2 2] both", free, unheld)
	}
	if err := c.Reserve(40); !errors.As(err, &kv) {
		t.Errorf("Reserve past the free blocks: %v", err)
	}
	dst := [2][]int32{make([]int32, 48), make([]int32, 48)}
	if err := p.Grow([]*Cache{c}, []int{48}, dst); !errors.As(err, &kv) {
		t.Errorf("Grow past the pool: %v, want a *model.KVError", err)
	}
	if c.Len() != 17 || c.Blocks() != 4 || p.FreeBlocks() != [2]int{2, 2} {
		t.Errorf("a failed Grow changed the cache: %d positions, %d blocks, free %v", c.Len(), c.Blocks(), p.FreeBlocks())
	}
	if _, err := p.Runs(nil, c, model.KVGlobal, 10); err == nil || !strings.Contains(err.Error(), "inconsistent") {
		t.Errorf("runs past the limit: %v", err)
	}
	q := newPool(t, 64)
	if q.Own(c) != nil || p.Own(c) != c {
		t.Error("Own does not tell pools apart")
	}
	defer func() {
		if recover() == nil {
			t.Error("binding another pool's ticket did not panic")
		}
	}()
	tq, _ := q.Admit([2]int{1, 1})
	c.Bind(tq)
}
