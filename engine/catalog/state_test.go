package catalog_test

import (
	"math/rand/v2"
	"slices"
	"testing"

	"verdict/engine/catalog"
)

// TestForcedRun: the forced run after a walk's tokens so far is the
// tokens that walk must take next, one legal token at a time, crossing
// separators, up to STOP or a choice.
func TestForcedRun(t *testing.T) {
	const sep, stop = 107, 106
	tk := func(s string) []int32 { return charTok{}.EncodePlain(s) }
	cases := []struct {
		name  string
		names []string
		k     int
		taken string // tokens chosen before the look-ahead ("\n" is SEP)
		run   []int32
		done  bool
		final []int32 // unless done
	}{
		{"a choice at the root", []string{"ab", "cd"}, 1, "", nil, false, tk("ac")},
		{"a shared prefix", []string{"abc", "abd"}, 1, "", tk("ab"), false, tk("cd")},
		{"the rest of a name, then STOP", []string{"abc", "abd"}, 1, "abc", []int32{stop}, true, nil},
		{"the rest of a name, then a choice", []string{"abcd", "x", "y"}, 2, "a", tk("bcd\n"), false, tk("xy")},
		{"the rest of a name, the last one, STOP", []string{"abcd", "x"}, 2, "a", append(tk("bcd\nx"), stop), true, nil},
		{"across a separator to STOP", []string{"ab", "cd"}, 2, "a", append(tk("b\ncd"), stop), true, nil},
		{"a name that ends inside another", []string{"ab", "abc"}, 1, "a", tk("b"), false, []int32{stop, tk("c")[0]}},
		{"SEP or the longer name", []string{"ab", "abc"}, 2, "ab", nil, false, []int32{sep, tk("c")[0]}},
		{"after SEP, the only name left", []string{"ab", "abc"}, 2, "ab\n", append(tk("abc"), stop), true, nil},
	}
	for _, c := range cases {
		for _, batched := range []bool{false, true} {
			cat, err := catalog.Compile(entries(c.names...), charTok{}, testGrammar)
			if err != nil {
				t.Fatal(err)
			}
			st, err := cat.NewState(c.k, batched, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, x := range tk(c.taken) {
				if _, err := st.Legal(nil); err != nil {
					t.Fatal(err)
				}
				if err := st.Advance(x); err != nil {
					t.Fatalf("%s: %v", c.name, err)
				}
			}
			run, done, final := st.Forced()
			if !slices.Equal(run, c.run) || done != c.done || !slices.Equal(final, c.final) {
				t.Errorf("%s (batched %v): run %v done %v final %v, want %v %v %v", c.name, batched, run, done, final, c.run, c.done, c.final)
			}
		}
	}
}

// snapshot is what a walk shows of itself.
type snapshot struct {
	node    int32
	step    int
	done    bool
	emitted []int32
}

func snap(st *catalog.State) snapshot {
	return snapshot{node: st.Node(), step: st.Step(), done: st.Done(), emitted: slices.Clone(st.Emitted())}
}

func (a snapshot) equal(b snapshot) bool {
	return a.node == b.node && a.step == b.step && a.done == b.done && slices.Equal(a.emitted, b.emitted)
}

// TestForcedLeavesTheWalk: over random catalogs, both no-repeat forms and
// every k, looking ahead (and walking a clone to its end) at every step
// leaves the walk as it was (its next Advance, with no Legal between,
// included), and the walk then takes exactly the forced run, each a step
// of one legal token, ending where the look-ahead said: STOP, or a choice
// of the legal set it named.
func TestForcedLeavesTheWalk(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for trial := 0; trial < 300; trial++ {
		seen := map[string]bool{}
		var names []string
		for len(names) < 1+r.IntN(8) {
			b := make([]byte, 1+r.IntN(6))
			for i := range b {
				b[i] = "abc_"[r.IntN(4)]
			}
			if s := string(b); !seen[s] {
				seen[s] = true
				names = append(names, s)
			}
		}
		cat, err := catalog.Compile(entries(names...), charTok{}, testGrammar)
		if err != nil {
			t.Fatal(err)
		}
		k := 1 + r.IntN(len(names))
		st, _ := cat.NewState(k, trial%2 == 1, 0)
		// step takes the walk's legal set, looks ahead (the look-ahead
		// must leave the walk as it was) and advances with pick's token.
		step := func(pick func(legal []int32) int32) (legal, run []int32, done bool, final []int32) {
			legal, err := st.Legal(nil)
			if err != nil {
				t.Fatal(err)
			}
			before := snap(st)
			run, done, final = st.Forced()
			c := st.Clone()
			for !c.Done() { // the clone walked to its end, the lowest token each step
				l, err := c.Legal(nil)
				if err != nil {
					t.Fatal(err)
				}
				if err := c.Advance(l[0]); err != nil {
					t.Fatal(err)
				}
			}
			if after := snap(st); !after.equal(before) {
				t.Fatalf("%q k=%d: the walk %+v became %+v", names, k, before, after)
			}
			if err := st.Advance(pick(legal)); err != nil {
				t.Fatalf("%q k=%d: after a look-ahead: %v", names, k, err)
			}
			return legal, run, done, final
		}
		for !st.Done() {
			// At a choice: the look-ahead is the run after it, not
			// known yet; take a random legal token, then the run.
			_, _, _, _ = step(func(l []int32) int32 { return l[r.IntN(len(l))] })
			if st.Done() {
				break
			}
			run, done, final := st.Forced()
			for i, x := range run {
				legal, rest, d, f := step(func([]int32) int32 { return x })
				if !slices.Equal(legal, []int32{x}) {
					t.Fatalf("%q k=%d step %d: legal %v, the forced run said %v", names, k, st.Step(), legal, run[i:])
				}
				if !slices.Equal(rest, run[i:]) || d != done || !slices.Equal(f, final) {
					t.Fatalf("%q k=%d: %d tokens into the run %v, the look-ahead is %v %v %v", names, k, i, run, rest, d, f)
				}
			}
			if st.Done() != done {
				t.Fatalf("%q k=%d: done %v after a run that said %v", names, k, st.Done(), done)
			}
			if done {
				break
			}
			if legal, _ := st.Legal(nil); len(legal) < 2 || !slices.Equal(legal, final) {
				t.Fatalf("%q k=%d step %d: legal %v after the run, it said %v", names, k, st.Step(), legal, final)
			}
		}
		if len(st.Emitted()) != k {
			t.Fatalf("%q k=%d: %d entries", names, k, len(st.Emitted()))
		}
	}
}
