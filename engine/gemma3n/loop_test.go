package gemma3n_test

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"verdict/engine/fixture/testmodel"
	"verdict/engine/gemma3n"
	"verdict/engine/model"
	"verdict/native"
)

// TestLoopMatchesForward: a loop fed a schedule of tokens (its step writes
// each next token and the running count from the host) gives, step by
// step, the hidden states that Forward gives decoding the same tokens one
// at a time, bit for bit, for two sequences at once; Close keeps each
// sequence's fed positions, gives the rest of the reserved slots back, and
// nothing is left in the pool once the caches are freed.
func TestLoopMatchesForward(t *testing.T) {
	m := testmodel.Tiny(t)
	D := m.Cfg.HiddenSize
	r := rand.New(rand.NewPCG(3, 4))
	free0 := m.FreeBlocks()
	x, err := m.Acquire()
	if err != nil {
		t.Fatal(err)
	}
	defer x.Release()
	const steps = 40
	fed := []int{steps, 5} // the second sequence stops early
	prompts := [][]int32{randTokens(r, 37), randTokens(r, 20)}
	sched := [][]int32{randTokens(r, steps), randTokens(r, steps)}
	var tokens []int32
	ref := make([][][]float32, 2) // [sequence][step] hidden state
	loopC := make([]model.Cache, 2)
	for s := range prompts {
		tokens = append(tokens, sched[s]...)
		alone := m.NewCache()
		var b gemma3n.Batch
		b.Add(alone, prompts[s], 0)
		if _, err := x.Prefill(&b); err != nil {
			t.Fatal(err)
		}
		loopC[s] = alone.Clone()
		for i := 0; i < fed[s]; i++ {
			var b gemma3n.Batch
			b.Add(alone, sched[s][i:i+1], 1)
			h, err := x.Prefill(&b)
			if err != nil {
				t.Fatal(err)
			}
			ref[s] = append(ref[s], h)
		}
		alone.Free()
	}
	l, err := x.NewLoop(loopC, steps, tokens)
	if err != nil {
		t.Fatal(err)
	}
	reserved := m.FreeBlocks()
	st, _, _ := x.CatalogHead()
	be := st.Backend()
	ar, err := be.NewArena(native.ArenaBytes(1))
	if err != nil {
		t.Fatal(err)
	}
	defer ar.Free()
	running := ar.Take(native.I32, 1, 1)
	ids := l.IDs()
	st.UploadI32(ids, []int32{sched[0][0], sched[1][0]})
	step, got := 0, make([]float32, 2*D)
	var bad int
	n, err := l.RunHost(func(h native.Tensor) {
		st.Download(got, h)
		if err := st.Sync(); err != nil {
			t.Fatal(err)
		}
		for s := range prompts {
			if step >= fed[s] {
				continue
			}
			for j, v := range got[s*D : (s+1)*D] {
				if math.Float32bits(v) != math.Float32bits(ref[s][step][j]) {
					bad++
				}
			}
		}
		step++
		next := []int32{0, 0}
		for s := range next {
			if step < steps {
				next[s] = sched[s][step]
			}
		}
		live := int32(0)
		if step < fed[0] {
			live = 1
		}
		st.UploadI32(ids, next)
		st.UploadI32(running, []int32{live})
	}, running)
	if err != nil {
		t.Fatal(err)
	}
	if n != fed[0] || bad != 0 {
		t.Fatalf("%d steps (want %d), %d values differ from Forward's", n, fed[0], bad)
	}
	if ok, err := l.RunDevice(func(native.Tensor) {}, running, "none"); ok || err != nil {
		t.Errorf("RunDevice on the CPU: %v, %v (want false, nil)", ok, err)
	}
	if err := l.Close(fed); err != nil {
		t.Fatal(err)
	}
	if after := m.FreeBlocks(); after[0] <= reserved[0] {
		t.Errorf("free global blocks %d after Close, %d with every step reserved: the unfed steps' slots were kept", after[0], reserved[0])
	}
	for s, c := range loopC {
		if want := len(prompts[s]) + fed[s]; c.Len() != want {
			t.Errorf("sequence %d: %d positions after Close, want %d", s, c.Len(), want)
		}
		c.Free()
	}
	if got := m.FreeBlocks(); got != free0 {
		t.Errorf("free blocks %v after the loop, %v before", got, free0)
	}
}

// TestLoopRefuses: loops the Exec cannot run are refused by name.
func TestLoopRefuses(t *testing.T) {
	m := testmodel.Tiny(t)
	x, err := m.Acquire()
	if err != nil {
		t.Fatal(err)
	}
	defer x.Release()
	c := m.NewCache()
	defer c.Free()
	for _, tc := range []struct {
		name   string
		caches []model.Cache
		steps  int
		want   string
	}{
		{"none", nil, 4, "no sequences"},
		{"no steps", []model.Cache{c}, 0, "0 steps"},
		{"repeated", []model.Cache{c, c}, 4, "repeats a cache"},
		{"nil cache", []model.Cache{nil}, 4, "no cache of this model"},
		{"too many", make([]model.Cache, 65), 4, "exceeds"},
	} {
		if _, err := x.NewLoop(tc.caches, tc.steps, []int32{5}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
	}
}
