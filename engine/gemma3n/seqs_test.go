package gemma3n_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"verdict/engine/fixture/testmodel"
	"verdict/engine/gemma3n"
	"verdict/native"
)

// TestForwardSeqs: sequences batched together, prefill chunks and decode
// steps mixed, give each sequence exactly (bit for bit) what it gets alone.
func TestForwardSeqs(t *testing.T) {
	m := testmodel.Tiny(t)
	D := m.Cfg.HiddenSize
	r := rand.New(rand.NewPCG(7, 9))
	tokens := func(n int) []int32 {
		ids := make([]int32, n)
		for i := range ids {
			ids[i] = int32(2 + r.IntN(262000))
		}
		return ids
	}
	// Three sequences; rounds of work: (prefill length or 1 for a step, keep).
	type step struct{ n, keep int }
	plans := [][]step{
		{{30, 1}, {1, 1}, {1, 1}, {5, 2}},
		{{1, 1}, {20, 0}, {1, 1}, {1, 1}},
		{{3, 3}, {1, 1}, {40, 1}, {1, 1}},
	}
	alone := make([]*gemma3n.Cache, 3)
	batch := make([]*gemma3n.Cache, 3)
	for s := range alone {
		alone[s], batch[s] = m.NewCache(), m.NewCache()
	}
	for round := 0; round < 4; round++ {
		var seqs []gemma3n.Seq
		var want [][]float32
		for s, plan := range plans {
			if round == 1 && s == 2 {
				continue // a sequence idle this round
			}
			ids := tokens(plan[round].n)
			h, err := m.ForwardLast(alone[s], ids, plan[round].keep)
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, h)
			seqs = append(seqs, gemma3n.Seq{Cache: batch[s], IDs: ids, Keep: plan[round].keep})
		}
		got, err := m.ForwardSeqs(seqs)
		if err != nil {
			t.Fatal(err)
		}
		for i := range seqs {
			if len(got[i]) != len(want[i]) || len(got[i]) != seqs[i].Keep*D {
				t.Fatalf("round %d seq %d: %d values, alone %d", round, i, len(got[i]), len(want[i]))
			}
			for j := range got[i] {
				if math.Float32bits(got[i][j]) != math.Float32bits(want[i][j]) {
					t.Fatalf("round %d seq %d value %d: batched %v, alone %v", round, i, j, got[i][j], want[i][j])
				}
			}
		}
	}
	for s := range alone {
		if alone[s].Len() != batch[s].Len() {
			t.Fatalf("seq %d: cache %d positions batched, %d alone", s, batch[s].Len(), alone[s].Len())
		}
	}
	c := m.NewCache()
	if _, err := m.ForwardSeqs([]gemma3n.Seq{{Cache: c, IDs: []int32{5}}, {Cache: c, IDs: []int32{6}}}); err == nil {
		t.Fatal("two sequences over one cache were accepted")
	}
	if _, err := m.ForwardSeqs([]gemma3n.Seq{{Cache: m.NewCache(), IDs: []int32{-1}}}); err == nil {
		t.Fatal("a negative token id was accepted")
	}
}

// TestLogitsRows: the sparse head's logits equal the dense head's at the
// same ids, bit for bit, for f32 and q4 heads.
func TestLogitsRows(t *testing.T) {
	m := testmodel.Tiny(t)
	h, err := m.ForwardLast(m.NewCache(), []int32{2, 105, 2364, 107, 9000}, 3)
	if err != nil {
		t.Fatal(err)
	}
	ids := []int32{0, 106, 107, 262399, 5000, 106}
	for _, q4 := range []bool{false, true} {
		mm := m
		if q4 {
			mm = m.WithQ4Head(64)
		}
		dense := mm.Logits(h, 3)
		got := make([]float32, 3*len(ids))
		var s native.RowScratch
		mm.LogitsRows(got, h, 3, ids, &s)
		V := m.Cfg.VocabSize
		for tk := 0; tk < 3; tk++ {
			for j, id := range ids {
				if a, b := got[tk*len(ids)+j], dense[tk*V+int(id)]; math.Float32bits(a) != math.Float32bits(b) {
					t.Fatalf("q4=%v token %d id %d: sparse %v, dense %v", q4, tk, id, a, b)
				}
			}
		}
	}
}
