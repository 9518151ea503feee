package native

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// tinyGrammar is the trie of the entries "ab" (tokens 3 4), "a" (3, a
// prefix of the first) and "c" (5), with SEP 1 and STOP 2, laid out as
// engine/catalog compiles it.
func tinyGrammar() GrammarSpec {
	return GrammarSpec{
		First:   []int32{0, 2, 5, 7, 9},
		Token:   []int32{3, 5, 1, 2, 4, 1, 2, 1, 2},
		Child:   []int32{1, 3, -1, -2, 2, -1, -2, -1, -2},
		Ends:    []int32{-1, 1, 0, 2},
		Count:   []int32{2, 1, 0, 0, 1, 0, 0, 0, 0},
		Mask:    []uint64{3, 4, 0, 0, 1, 0, 0, 0, 0},
		Entries: 3, Words: 1,
		PathFirst: []int32{0, 2, 3, 4},
		Path:      []int32{0, 4, 0, 1},
	}
}

// oneHot is a head whose row t is the unit vector e_t: token t's logit
// is h[t].
func oneHot(t *testing.T, be *Backend, v int) (Tensor, *Bound) {
	w := make([]float32, v*v)
	for i := 0; i < v; i++ {
		w[i*v+i] = 1
	}
	b := be.NewBound()
	wt, err := b.Matrix(NewF32(v, v, w))
	if err != nil {
		t.Fatal(err)
	}
	return wt, b
}

// TestCatalogStepWalk: one walk of k = 3 over the tiny trie, steered by
// its hidden rows, in both no-repeat forms: the legal sets (SEP only while
// entries are owed, STOP only for the last, a finished prefix entry's
// control edges masked while its subtree stays walkable, a spent subtree
// gone), ties to the lower token, the emitted entries.
func TestCatalogStepWalk(t *testing.T) {
	be := Default()
	st, err := be.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	g, err := be.BindGrammar(tinyGrammar())
	if err != nil {
		t.Fatal(err)
	}
	defer g.Free()
	const V = 8
	w, wb := oneHot(t, be, V)
	defer wb.Free()
	hb, err := be.Alloc(4 * V)
	if err != nil {
		t.Fatal(err)
	}
	defer hb.Free()
	h := hb.Tensor(0, F32, 1, V)
	row := func(favor ...int) []float32 {
		x := make([]float32, V)
		for _, f := range favor {
			x[f] = 1
		}
		return x
	}
	steps := []struct {
		h      []float32
		legal  []int32
		chosen int32
		entry  int
	}{
		{row(3, 5), []int32{3, 5}, 3, -1}, // a tie: the lower token
		{row(1), []int32{1, 4}, 1, 1},     // "a" ends here: SEP, or walk on to "ab"
		{row(5), []int32{3, 5}, 5, -1},
		{row(1), []int32{1}, 1, 2},  // "c": SEP (one more owed)
		{row(5), []int32{3}, 3, -1}, // "c" spent
		{row(1), []int32{4}, 4, -1}, // "a" spent: no control edges at its node
		{row(1), []int32{2}, 2, 0},  // the last: STOP only
	}
	for _, counts := range []bool{true, false} {
		cs, err := g.NewState(2, 3, counts)
		if err != nil {
			t.Fatal(err)
		}
		st.CatalogInit(cs, []int32{1}, []int32{3})
		for i, s := range steps {
			st.Upload(h, s.h)
			st.CatalogStep(cs, h, w, 0, []int32{0}, []int32{1})
			if err := st.CatalogRead(cs); err != nil {
				t.Fatal(err)
			}
			wk := cs.Walk(1)
			if wk.Err != 0 || !slices.Equal(wk.Legal, s.legal) || wk.Next != s.chosen || wk.Entry != s.entry || wk.Step != i+1 {
				t.Fatalf("counts=%v step %d: %+v, want legal %v chosen %d entry %d", counts, i, wk, s.legal, s.chosen, s.entry)
			}
			for j, tok := range wk.Legal {
				if wk.Logits[j] != s.h[tok] {
					t.Fatalf("counts=%v step %d: logit of %d is %v, want %v", counts, i, tok, wk.Logits[j], s.h[tok])
				}
			}
		}
		wk := cs.Walk(1)
		if !wk.Done || !slices.Equal(wk.Emitted, []int32{1, 2, 0}) {
			t.Fatalf("counts=%v: done %v emitted %v, want done [1 2 0]", counts, wk.Done, wk.Emitted)
		}
		// A finished walk is left as it is.
		st.CatalogStep(cs, h, w, 0, []int32{0}, []int32{1})
		if err := st.CatalogRead(cs); err != nil {
			t.Fatal(err)
		}
		if again := cs.Walk(1); again.Step != wk.Step || !again.Done {
			t.Fatalf("counts=%v: a step after STOP changed the walk: %+v", counts, again)
		}
		cs.Free()
	}
}

// TestCatalogStepErrors: the walk's error flag for a lying trie (an empty
// mask), a NaN logit and a k out of range; BindGrammar's refusals.
func TestCatalogStepErrors(t *testing.T) {
	be := Default()
	st, err := be.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	const V = 8
	w, wb := oneHot(t, be, V)
	defer wb.Free()
	hb, err := be.Alloc(4 * V)
	if err != nil {
		t.Fatal(err)
	}
	defer hb.Free()
	h := hb.Tensor(0, F32, 1, V)
	lie := tinyGrammar()
	lie.Count[4], lie.Mask[4] = 0, 0 // "ab" claims nothing below its second token
	g, err := be.BindGrammar(lie)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Free()
	x := make([]float32, V)
	x[3] = 1
	for _, counts := range []bool{true, false} {
		cs, err := g.NewState(1, 3, counts)
		if err != nil {
			t.Fatal(err)
		}
		st.CatalogInit(cs, []int32{0}, []int32{3})
		x[1] = 1
		st.Upload(h, x)
		for i := 0; i < 4; i++ { // a, SEP ("a"), a: its node now has nothing legal
			st.CatalogStep(cs, h, w, 0, []int32{0}, []int32{0})
		}
		if err := st.CatalogRead(cs); err != nil {
			t.Fatal(err)
		}
		if wk := cs.Walk(0); wk.Err != CatEmpty || wk.ErrNode != 1 || wk.Step != 3 {
			t.Fatalf("counts=%v: %+v, want an empty mask at node 1 after 3 steps", counts, wk)
		}
		cs.Free()
	}
	x[1], x[3] = 0, float32(math.NaN())
	cs, err := g.NewState(2, 3, false)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Free()
	st.CatalogInit(cs, []int32{0, 1}, []int32{1, 4})
	st.Upload(h, x)
	st.CatalogStep(cs, h, w, 0, []int32{0, 0}, []int32{0, 1})
	if err := st.CatalogRead(cs); err != nil {
		t.Fatal(err)
	}
	if wk := cs.Walk(0); wk.Err != CatNaN {
		t.Fatalf("a NaN logit: %+v", wk)
	}
	if wk := cs.Walk(1); wk.Err != CatFull {
		t.Fatalf("k = 4 of 3 entries: %+v", wk)
	}

	wide := GrammarSpec{First: []int32{0, 257}, Ends: []int32{-1}, Entries: 1, Words: 1, PathFirst: []int32{0, 0}}
	for i := 0; i < 257; i++ {
		wide.Token, wide.Child, wide.Count = append(wide.Token, int32(3+i)), append(wide.Child, 0), append(wide.Count, 0)
		wide.Mask = append(wide.Mask, 0)
	}
	bad := tinyGrammar()
	bad.Child[0] = 9
	short := tinyGrammar()
	short.Mask = short.Mask[:3]
	for _, c := range []struct {
		name string
		sp   GrammarSpec
		want string
	}{{"a node of 257 edges", wide, "over 256 edges"}, {"a child out of range", bad, "malformed trie"}, {"a short mask", short, "inconsistent sizes"}} {
		if g, err := be.BindGrammar(c.sp); err == nil || !strings.Contains(err.Error(), c.want) {
			g.Free()
			t.Errorf("%s: %v, want an error containing %q", c.name, err, c.want)
		}
	}
}

// TestCatalogStepDense: the step's logits are the dense head's (Linear,
// then the soft-cap) at the legal tokens, bit for bit, for f32, bf16 and
// q4 heads, several sequences at once reading rows of h out of order.
func TestCatalogStepDense(t *testing.T) {
	be := Default()
	st, err := be.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	g, err := be.BindGrammar(tinyGrammar())
	if err != nil {
		t.Fatal(err)
	}
	defer g.Free()
	r := rand.New(rand.NewPCG(1, 2))
	const V, D, n = 40, 128, 3
	f := make([]float32, V*D)
	for i := range f {
		f[i] = r.Float32()*0.2 - 0.1
	}
	bf := make([]uint16, V*D)
	for i, v := range f {
		bf[i] = uint16(math.Float32bits(v) >> 16)
	}
	for _, m := range []Matrix{NewF32(V, D, f), NewBF16(V, D, bf), Quantize(NewF32(V, D, f), 64)} {
		b := be.NewBound()
		w, err := b.Matrix(m)
		if err != nil {
			t.Fatal(err)
		}
		x := make([]float32, n*D)
		for i := range x {
			x[i] = r.Float32()*2 - 1
		}
		hb, _ := be.Alloc(4 * n * D)
		db, _ := be.Alloc(4 * n * V)
		h, dense := hb.Tensor(0, F32, n, D), db.Tensor(0, F32, n, V)
		st.Upload(h, x)
		st.Linear(dense, h, w)
		st.Softcap(dense, dense, 30)
		want := make([]float32, n*V)
		st.Download(want, dense)
		cs, _ := g.NewState(n, 3, true)
		slots, rows := []int32{2, 0, 1}, []int32{1, 2, 0}
		st.CatalogInit(cs, slots, []int32{1, 2, 3})
		st.CatalogStep(cs, h, w, 30, rows, slots)
		if err := st.CatalogRead(cs); err != nil {
			t.Fatal(err)
		}
		for i, s := range slots {
			wk := cs.Walk(int(s))
			best := 0
			for j, tok := range wk.Legal {
				d := want[int(rows[i])*V+int(tok)]
				if math.Float32bits(wk.Logits[j]) != math.Float32bits(d) {
					t.Fatalf("%v: slot %d token %d: %v, dense %v", m.DType, s, tok, wk.Logits[j], d)
				}
				if d > want[int(rows[i])*V+int(wk.Legal[best])] {
					best = j
				}
			}
			if !slices.Equal(wk.Legal, []int32{3, 5}) || wk.Best != best {
				t.Fatalf("%v: slot %d: legal %v best %d, want [3 5] and %d", m.DType, s, wk.Legal, wk.Best, best)
			}
		}
		cs.Free()
		hb.Free()
		db.Free()
		b.Free()
	}
}
