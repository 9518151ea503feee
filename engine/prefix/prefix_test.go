package prefix_test

import (
	"testing"

	"verdict/engine/fixture/testmodel"
	"verdict/engine/model"
	"verdict/engine/prefix"
)

// computed returns a sequence of m holding exactly ids.
func computed(t *testing.T, m model.Model, ids []int32) model.Cache {
	t.Helper()
	c := m.NewCache()
	var b model.Batch
	b.Add(c, ids, 0)
	x, err := m.Acquire()
	if err != nil {
		t.Fatal(err)
	}
	defer x.Release()
	if err := model.RunAll(x, &b); err != nil {
		t.Fatal(err)
	}
	return c
}

func seq(from, n int) []int32 {
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32(from + i)
	}
	return ids
}

func TestLookupSplitAndEvict(t *testing.T) {
	base := *testmodel.Tiny(t)
	base.Cfg.SlidingWindow = 1 << 10 // wide: every fork point holds its keys
	m, err := base.WithKVPositions(1 << 12)
	if err != nil {
		t.Fatal(err)
	}
	defer m.CloseView()
	shared := seq(10, 40)
	a := append(append([]int32{}, shared...), seq(100, 20)...)
	b := append(append([]int32{}, shared...), seq(200, 25)...)
	ca := computed(t, m, a)
	defer ca.Free()
	pc := prefix.New(1 << 10)
	if f, n, split := pc.Lookup(b, len(b)-1); f != nil || n != 0 || split != 0 {
		t.Fatalf("an empty cache: fork %v of %d, split %d", f != nil, n, split)
	}
	pc.Keep(a, ca)
	f, n, split := pc.Lookup(b, len(b)-1)
	if f == nil || n != len(shared) || split != len(shared) || f.Len() != n {
		t.Fatalf("b after a: a fork of %d (%v), split %d; want %d", n, f != nil, split, len(shared))
	}
	f.Free()
	// The whole of a, capped below its length by max.
	f, n, _ = pc.Lookup(a, len(a)-1)
	if f == nil || n != len(a)-1 {
		t.Fatalf("a itself: a fork of %d, want %d", n, len(a)-1)
	}
	f.Free()
	// The shared part kept on its own splits the tree; both entries serve.
	cs := computed(t, m, shared)
	pc.Keep(shared, cs)
	cs.Free()
	if st := pc.Stats(); st.Entries != 2 {
		t.Fatalf("%d entries, want 2", st.Entries)
	}
	f, n, _ = pc.Lookup(append(append([]int32{}, shared...), 7, 8, 9), 43)
	if f == nil || n != len(shared) {
		t.Fatalf("a third request: a fork of %d, want %d", n, len(shared))
	}
	f.Free()
	// A budget of the shared part's blocks alone evicts the older entry.
	small := prefix.New(pc.Stats().Blocks - 1)
	small.Keep(a, ca)
	cs = computed(t, m, shared)
	small.Keep(shared, cs)
	cs.Free()
	if st := small.Stats(); st.Entries != 1 || st.Evicted != 1 || st.Blocks > st.Budget {
		t.Fatalf("over budget: %+v", st)
	}
	if f, n, _ := small.Lookup(a, len(a)-1); n != len(shared) {
		t.Fatalf("after evicting a: a fork of %d, want the shared %d", n, len(shared))
	} else {
		f.Free()
	}
	free := m.KVFree()
	pc.Drop()
	small.Drop()
	if after := m.KVFree(); after[0] <= free[0] {
		t.Errorf("Drop freed no blocks: %v then %v", free, after)
	}
}
