package gemma3n_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"verdict/engine/fixture/testmodel"
	"verdict/engine/gemma3n"
	"verdict/engine/model"
	"verdict/native"
)

func randTokens(r *rand.Rand, n int) []int32 {
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32(2 + r.IntN(262000))
	}
	return ids
}

// TestBatchMixed: sequences batched together, prefill chunks and decode
// steps mixed, give each sequence exactly (bit for bit) what it gets alone.
func TestBatchMixed(t *testing.T) {
	m := testmodel.Tiny(t)
	D := m.Cfg.HiddenSize
	r := rand.New(rand.NewPCG(7, 9))
	// Three sequences; rounds of work: (prefill length or 1 for a step, outputs).
	type step struct{ n, keep int }
	plans := [][]step{
		{{30, 1}, {1, 1}, {1, 1}, {5, 2}},
		{{1, 1}, {20, 0}, {1, 1}, {1, 1}},
		{{3, 3}, {1, 1}, {40, 1}, {1, 1}},
	}
	x, err := m.Acquire()
	if err != nil {
		t.Fatal(err)
	}
	defer x.Release()
	alone := make([]model.Cache, 3)
	batch := make([]model.Cache, 3)
	for s := range alone {
		alone[s], batch[s] = m.NewCache(), m.NewCache()
	}
	for round := 0; round < 4; round++ {
		var b gemma3n.Batch
		var want []float32
		for s, plan := range plans {
			if round == 1 && s == 2 {
				continue // a sequence idle this round
			}
			ids := randTokens(r, plan[round].n)
			var a gemma3n.Batch
			a.Add(alone[s], ids, plan[round].keep)
			h, err := x.Prefill(&a)
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, h...)
			b.Add(batch[s], ids, plan[round].keep)
		}
		got, err := x.Prefill(&b)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) || len(got) != b.Outputs()*D {
			t.Fatalf("round %d: %d values, alone %d", round, len(got), len(want))
		}
		for j := range got {
			if math.Float32bits(got[j]) != math.Float32bits(want[j]) {
				t.Fatalf("round %d value %d: batched %v, alone %v", round, j, got[j], want[j])
			}
		}
	}
	for s := range alone {
		if alone[s].Len() != batch[s].Len() {
			t.Fatalf("seq %d: cache %d positions batched, %d alone", s, batch[s].Len(), alone[s].Len())
		}
	}
	var b gemma3n.Batch
	b.Add(m.NewCache(), []int32{-1}, 1)
	if _, err := x.Forward(&b); err == nil {
		t.Fatal("a negative token id was accepted")
	}
	b.Reset()
	b.Rows = append(b.Rows, gemma3n.Row{Cache: m.NewCache(), Embed: 3, Out: true})
	if _, err := x.Forward(&b); err == nil {
		t.Fatal("a row taking a missing embedding was accepted")
	}
}

// TestHeads: the sparse head's logits and SelectLogprobs' values equal the
// dense head's at the same ids, bit for bit, for f32 and q4 heads.
func TestHeads(t *testing.T) {
	m := testmodel.Tiny(t)
	ids := []int32{0, 106, 107, 262399, 5000, 106}
	V := m.Cfg.VocabSize
	for _, q4 := range []bool{false, true} {
		mm := m
		if q4 {
			mm = m.WithQ4Head(64)
		}
		x, err := mm.Acquire()
		if err != nil {
			t.Fatal(err)
		}
		var b gemma3n.Batch
		b.Add(mm.NewCache(), []int32{2, 105, 2364, 107, 9000}, 3)
		h, err := x.Forward(&b)
		if err != nil {
			t.Fatal(err)
		}
		dense := make([]float32, 3*V)
		if err := x.Logits(dense, h); err != nil {
			t.Fatal(err)
		}
		got := make([]float32, 3*len(ids))
		if err := x.LogitsRows(got, h, ids); err != nil {
			t.Fatal(err)
		}
		for tk := 0; tk < 3; tk++ {
			for j, id := range ids {
				if a, b := got[tk*len(ids)+j], dense[tk*V+int(id)]; math.Float32bits(a) != math.Float32bits(b) {
					t.Fatalf("q4=%v token %d id %d: sparse %v, dense %v", q4, tk, id, a, b)
				}
			}
		}
		row, col := []int32{0, 0, 1, 2, 2, 2}, []int32{5, 262399, 106, 0, 1, 2}
		sel, lse := make([]float32, len(row)), make([]float32, 3)
		if err := x.SelectLogprobs(sel, lse, h, row, col); err != nil {
			t.Fatal(err)
		}
		want := make([]float32, 3)
		native.LogSumExp(want, dense, V)
		for r := range lse {
			if math.Float32bits(lse[r]) != math.Float32bits(want[r]) {
				t.Fatalf("q4=%v row %d: log-sum-exp %v, dense %v", q4, r, lse[r], want[r])
			}
		}
		for j := range sel {
			if a, b := sel[j], dense[int(row[j])*V+int(col[j])]; math.Float32bits(a) != math.Float32bits(b) {
				t.Fatalf("q4=%v wanted %d: %v, dense %v", q4, j, a, b)
			}
		}
		if err := x.SelectLogprobs(sel[:2], lse, h, []int32{1, 0}, []int32{5, 6}); err == nil {
			t.Error("rows out of order were accepted")
		}
		// Greedy: each row's argmax of the dense logits (lowest id on ties).
		best := make([]int32, 3)
		if err := x.Greedy(best, h); err != nil {
			t.Fatal(err)
		}
		for r := range best {
			w := int32(0)
			for j := 1; j < V; j++ {
				if dense[r*V+j] > dense[r*V+int(w)] {
					w = int32(j)
				}
			}
			if best[r] != w {
				t.Errorf("q4=%v row %d: Greedy %d, the dense argmax %d", q4, r, best[r], w)
			}
		}
		if err := x.Greedy(best[:2], h); err == nil {
			t.Error("Greedy took 2 outputs for 3 rows")
		}
		x.Release()
	}
}

// TestKVPool: forks share their parent's blocks, Free gives blocks back, a
// long decode holds a bounded number of sliding-window blocks, admission
// refuses what the pool cannot promise, and a pass that finds the pool full
// fails with a KVError leaving every cache as it was.
func TestKVPool(t *testing.T) {
	base := testmodel.Tiny(t)
	v, err := base.WithKVPositions(64 * gemma3n.KVBlock)
	if err != nil {
		t.Fatal(err)
	}
	m := v.(*gemma3n.Model)
	r := rand.New(rand.NewPCG(1, 2))
	free0 := m.FreeBlocks()
	c := m.NewCache()
	if _, err := m.Forward(c, randTokens(r, 40), nil); err != nil {
		t.Fatal(err)
	}
	used := func() [2]int { f := m.FreeBlocks(); return [2]int{free0[0] - f[0], free0[1] - f[1]} }
	u := used()
	if u[0] != 3 { // 40 positions: 3 blocks of 16
		t.Fatalf("a 40-position prefill holds %d global blocks, want 3", u[0])
	}
	var forks []model.Cache
	for i := 0; i < 10; i++ {
		f := c.Clone()
		if _, err := m.Forward(f, randTokens(r, 3), nil); err != nil {
			t.Fatal(err)
		}
		forks = append(forks, f)
	}
	if got := used()[0]; got != u[0]+10 {
		t.Errorf("10 forks of 3 tokens each hold %d global blocks beyond the prefix, want 10", got-u[0])
	}
	for _, f := range forks {
		f.Free()
	}
	if got := used(); got != u {
		t.Errorf("after freeing the forks %v blocks are held, want %v", got, u)
	}
	// Decoding 200 tokens keeps the sliding-window layers' blocks bounded.
	one := []int32{7}
	for i := 0; i < 200; i++ {
		if _, err := m.Forward(c, one, nil); err != nil {
			t.Fatal(err)
		}
	}
	W := m.Cfg.SlidingWindow
	if got, bound := used()[1], W/gemma3n.KVBlock+2; got > bound {
		t.Errorf("a 240-position sequence holds %d sliding-window blocks, want at most %d", got, bound)
	}
	c.Free()
	if got := used(); got != [2]int{} {
		t.Errorf("after Free %v blocks are held", got)
	}
	// Admission.
	a := m.NewCache()
	var kv *gemma3n.KVError
	if err := a.Reserve(100 * gemma3n.KVBlock); !errors.As(err, &kv) {
		t.Fatalf("reserving beyond the pool: %v", err)
	}
	if err := a.Reserve(40 * gemma3n.KVBlock); err != nil {
		t.Fatal(err)
	}
	b := m.NewCache()
	if _, err := m.Forward(b, randTokens(r, 30*gemma3n.KVBlock), nil); !errors.As(err, &kv) {
		t.Fatalf("a pass beyond the unreserved blocks: %v", err)
	}
	if b.Len() != 0 || used() != [2]int{} {
		t.Errorf("a refused pass left %d positions and %v blocks held", b.Len(), used())
	}
	if _, err := m.Forward(a, randTokens(r, 40*gemma3n.KVBlock), nil); err != nil {
		t.Errorf("the admitted sequence could not use its blocks: %v", err)
	}
	a.Free()
	if _, err := m.Forward(b, randTokens(r, 30*gemma3n.KVBlock), nil); err != nil {
		t.Errorf("after the admitted sequence freed its blocks: %v", err)
	}
}

// TestDecodeAllocs: a decode step (forward pass and token choice) allocates
// nothing once its Exec is warm.
func TestDecodeAllocs(t *testing.T) {
	m := testmodel.Tiny(t)
	x, err := m.Acquire()
	if err != nil {
		t.Fatal(err)
	}
	defer x.Release()
	c := m.NewCache()
	defer c.Free()
	var b gemma3n.Batch
	b.Add(c, []int32{2, 105, 2364, 107}, 1)
	if _, err := x.Forward(&b); err != nil {
		t.Fatal(err)
	}
	one := []int32{9}
	step := func() {
		b.Reset()
		b.Add(c, one, 1)
		h, err := x.Forward(&b)
		if err != nil {
			t.Fatal(err)
		}
		if one[0], err = x.Sample(h, native.Sampling{}); err != nil {
			t.Fatal(err)
		}
	}
	step()
	if n := testing.AllocsPerRun(50, step); n != 0 {
		t.Errorf("a decode step allocates %v times", n)
	}
}

// BenchmarkDecodeStep times one decode step (forward pass and greedy
// choice) after a short prompt; -benchmem shows its allocations.
func BenchmarkDecodeStep(b *testing.B) {
	m := testmodel.Tiny(b)
	x, err := m.Acquire()
	if err != nil {
		b.Fatal(err)
	}
	defer x.Release()
	c := m.NewCache()
	defer c.Free()
	var bt gemma3n.Batch
	bt.Add(c, []int32{2, 105, 2364, 107}, 1)
	if _, err := x.Forward(&bt); err != nil {
		b.Fatal(err)
	}
	one := []int32{9}
	b.ReportAllocs()
	for b.Loop() {
		if c.Len() >= 1000 {
			b.StopTimer()
			c.Free()
			bt.Reset()
			bt.Add(c, []int32{2, 105, 2364, 107}, 1)
			if _, err := x.Forward(&bt); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
		bt.Reset()
		bt.Add(c, one, 1)
		h, err := x.Forward(&bt)
		if err != nil {
			b.Fatal(err)
		}
		if one[0], err = x.Sample(h, native.Sampling{}); err != nil {
			b.Fatal(err)
		}
	}
}

// TestOutputsWithoutGather: when the rows are not gathered before the
// KV-sharing layers (a view whose config says none are shared, so every row
// runs every layer), the wanted rows picked at the end are the same bits.
func TestOutputsWithoutGather(t *testing.T) {
	m := testmodel.Tiny(t)
	flat := *m
	flat.Cfg.NumKVSharedLayers = 0
	view, err := flat.WithKVPositions(1 << 12)
	if err != nil {
		t.Fatal(err)
	}
	v := view.(*gemma3n.Model)
	ids := randTokens(rand.New(rand.NewPCG(5, 6)), 21)
	get := func(m *gemma3n.Model) []float32 {
		x, err := m.Acquire()
		if err != nil {
			t.Fatal(err)
		}
		defer x.Release()
		c := m.NewCache()
		defer c.Free()
		var b gemma3n.Batch
		b.Add(c, ids, 3)
		b.Rows[4].Out = true
		h, err := x.Prefill(&b)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	want, got := get(m), get(v)
	if len(got) != 4*m.Cfg.HiddenSize || len(got) != len(want) {
		t.Fatalf("%d and %d values", len(got), len(want))
	}
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("value %d: %v without the gather, %v with it", i, got[i], want[i])
		}
	}
}
