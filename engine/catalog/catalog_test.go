package catalog_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"verdict/engine/catalog"
)

// charTok is a tokenizer for tests: one token per rune (id = rune + 1000),
// except that "\n" is 107; optional merges map a string to one token.
type charTok struct{ merges map[string]int32 }

func (c charTok) EncodePlain(s string) []int32 {
	var out []int32
	for i := 0; i < len(s); {
		matched := false
		for m, id := range c.merges {
			if strings.HasPrefix(s[i:], m) {
				out, i, matched = append(out, id), i+len(m), true
				break
			}
		}
		if matched {
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == '\n' {
			out = append(out, 107)
		} else {
			out = append(out, r+1000)
		}
		i += size
	}
	return out
}

var testGrammar = catalog.Grammar{Sep: 107, SepText: "\n", Stop: 106}

func entries(names ...string) []catalog.Entry {
	out := make([]catalog.Entry, len(names))
	for i, n := range names {
		out[i] = catalog.Entry{Name: n}
	}
	return out
}

func TestCompileErrors(t *testing.T) {
	merge := charTok{merges: map[string]int32{"x\nx": 5000}}
	cases := []struct {
		name    string
		entries []catalog.Entry
		tok     catalog.Tokenizer
		want    string
	}{
		{"empty catalog", nil, charTok{}, "no entries"},
		{"empty name", entries("a", ""), charTok{}, "entry 1 has an empty name"},
		{"a name of one space", entries("a", " "), charTok{}, `entry 1 has an empty name: " " is only white space`},
		{"a name of white space", entries("\t\n ", "b"), charTok{}, `entry 0 has an empty name: "\t\n " is only white space`},
		{"duplicate", entries("ab", "cd", "ab"), charTok{}, `entries 0 and 2 have the same name "ab"`},
		{"merging separator", entries("x", "b"), merge, "the separator"},
		{"control token inside", entries("a\nb"), charTok{}, "control token 107"},
		{"wrong token_ids", []catalog.Entry{{Name: "ab", TokenIDs: []int32{1, 2}}}, charTok{}, "token_ids [1 2]"},
		{"node over 256 edges", entriesOver256(), charTok{}, "more than 256"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := catalog.Compile(c.entries, c.tok, testGrammar)
			if err == nil || !errors.Is(err, catalog.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
		})
	}
	cat, err := catalog.Compile(entries("a", "b"), charTok{}, testGrammar)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		k    int
		want string
	}{
		{0, "catalog: k = 0: k must be at least 1 (the number of distinct entries to name)"},
		{-1, "catalog: k = -1: k must be at least 1 (the number of distinct entries to name)"},
		{3, "catalog: k = 3, but the catalog has 2 entries (k must be at most 2)"},
	} {
		_, err := cat.NewState(c.k, false, 0)
		var ke *catalog.KError
		if !errors.As(err, &ke) || ke.K != c.k || err.Error() != c.want {
			t.Errorf("k = %d: error %v, want %q", c.k, err, c.want)
		}
	}
}

// entriesOver256 gives 257 names of two tokens under one first token, so
// that one node has 257 edges (256 pass).
func entriesOver256() []catalog.Entry {
	var out []catalog.Entry
	for i := 0; i < 257; i++ {
		out = append(out, catalog.Entry{Name: "q" + string(rune(0x4e00+i))})
	}
	return out
}

// walk decodes with random logits through the State API alone.
func walk(t *testing.T, cat *catalog.Catalog, k int, batched bool, r *rand.Rand) (names []string, steps [][]int32, chosen []int32) {
	t.Helper()
	st, err := cat.NewState(k, batched, 0)
	if err != nil {
		t.Fatal(err)
	}
	var legal []int32
	for !st.Done() {
		if legal, err = st.Legal(legal[:0]); err != nil {
			t.Fatal(err)
		}
		logits := make([]float32, len(legal))
		for i := range logits {
			logits[i] = float32(r.IntN(4)) // many ties
		}
		best, _, err := catalog.Pick(logits)
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range logits { // ties go to the lowest token (legal is sorted)
			if v == logits[best] && i < best {
				t.Fatalf("tie not broken toward the lower token: %v picked %d", logits, best)
			}
		}
		if !slices.IsSorted(legal) {
			t.Fatalf("legal set not sorted: %v", legal)
		}
		steps = append(steps, slices.Clone(legal))
		chosen = append(chosen, legal[best])
		if err := st.Advance(legal[best]); err != nil {
			t.Fatal(err)
		}
		if len(steps) > 10000 {
			t.Fatal("walk does not end")
		}
	}
	for _, e := range st.Emitted() {
		names = append(names, cat.Entries[e].Name)
	}
	return names, steps, chosen
}

// TestProperties: over random catalogs (names that are prefixes of others
// included) and every k, a walk emits exactly k distinct names, the serial
// (counts) and batched (masks) forms give the same legal sets, and every
// legal set follows the rule.
func TestProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	alpha := "abcd_"
	for trial := 0; trial < 300; trial++ {
		n := 1 + r.IntN(12)
		seen := map[string]bool{}
		var names []string
		for len(names) < n {
			var b strings.Builder
			for l := 1 + r.IntN(5); l > 0; l-- {
				b.WriteByte(alpha[r.IntN(len(alpha))])
			}
			if s := b.String(); !seen[s] {
				seen[s] = true
				names = append(names, s)
			}
		}
		if trial%3 == 0 && len(names[0]) > 1 { // a name that is a prefix of another
			if p := names[0][:1]; !seen[p] {
				names = append(names, p)
			}
		}
		cat, err := catalog.Compile(entries(names...), charTok{}, testGrammar)
		if err != nil {
			t.Fatal(err)
		}
		for k := 1; k <= len(names); k++ {
			seed := r.Uint64()
			a, sa, ca := walk(t, cat, k, false, rand.New(rand.NewPCG(seed, 0)))
			b, sb, _ := walk(t, cat, k, true, rand.New(rand.NewPCG(seed, 0)))
			if len(a) != k || !slices.Equal(a, b) || len(sa) != len(sb) {
				t.Fatalf("catalog %q k=%d: serial %v, batched %v", names, k, a, b)
			}
			for i := range sa {
				if !slices.Equal(sa[i], sb[i]) {
					t.Fatalf("catalog %q k=%d step %d: serial legal %v, batched %v", names, k, i, sa[i], sb[i])
				}
			}
			distinct := map[string]bool{}
			for _, x := range a {
				if distinct[x] || !seen[x] && !slices.Contains(names, x) {
					t.Fatalf("catalog %q k=%d: %v repeats or invents a name", names, k, a)
				}
				distinct[x] = true
			}
			// SEP chosen exactly k−1 times, STOP once, last.
			var seps int
			for _, tk := range ca {
				if tk == testGrammar.Sep {
					seps++
				}
			}
			if seps != k-1 || ca[len(ca)-1] != testGrammar.Stop || slices.Contains(ca[:len(ca)-1], testGrammar.Stop) {
				t.Fatalf("catalog %q k=%d: chosen tokens %v", names, k, ca)
			}
		}
	}
}

func TestAdvanceErrors(t *testing.T) {
	cat, err := catalog.Compile(entries("ab", "ac"), charTok{}, testGrammar)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := cat.NewState(1, false, 7)
	legal, _ := st.Legal(nil)
	if err := st.Advance(9999); err == nil || !strings.Contains(err.Error(), "sequence 7, step 0: token 9999 is on no live edge of trie node 0") {
		t.Fatalf("error %v", err)
	}
	if err := st.Advance(legal[0]); err != nil {
		t.Fatal(err)
	}
	if _, _, err := catalog.Pick([]float32{1, float32(nanf())}); err == nil {
		t.Fatal("a NaN logit was accepted")
	}
}

func nanf() float64 { var z float64; return z / z }

func TestMaxEdgesPasses(t *testing.T) {
	es := entriesOver256()[:255] // 255 token edges + none control: fits
	es = append(es, catalog.Entry{Name: "q"})
	// "q" ends at the wide node: 255 + SEP + STOP = 257 edges.
	if _, err := catalog.Compile(es, charTok{}, testGrammar); err == nil {
		t.Fatal("a node of 257 edges (control edges included) was accepted")
	}
	if _, err := catalog.Compile(entriesOver256()[:256], charTok{}, testGrammar); err != nil {
		t.Fatalf("256 edges refused: %v", err)
	}
}

func bitsEqual(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}
