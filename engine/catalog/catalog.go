// Package catalog is the catalog decoder: it emits exactly k distinct
// entries of a catalog (tool names, say) for a request, with the grammar
// enforced inside the decode step. The catalog is compiled into a trie over
// the model's token ids (compressed sparse rows); each step's legal tokens
// are the current node's live edges, and a sparse output head computes the
// logits of those tokens only.
//
// The output language is name SEP name SEP … name STOP: SEP only while
// another entry is owed, STOP only when none is, no entry twice.
package catalog

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// MaxEdges is the most edges (control edges included) a trie node may have:
// the sparse head's per-step buffer is sized by it.
const MaxEdges = 256

// Entry is one catalog entry.
type Entry struct {
	Name        string  `json:"name"`
	Description string  `json:"description,omitempty"`
	TokenIDs    []int32 `json:"token_ids,omitempty"` // the name's tokens; verified when given
}

// Tokenizer encodes plain text: special tokens written in it stay text.
type Tokenizer interface {
	EncodePlain(text string) []int32
}

// Grammar names the control tokens of the output language.
type Grammar struct {
	Sep     int32  // another entry follows
	SepText string // the separator's text, e.g. "\n"
	Stop    int32  // the list is complete
}

// Sentinel children of the control edges.
const (
	ChildSep  int32 = -1
	ChildStop int32 = -2
)

// Catalog is a compiled catalog: its entries with their tokens and the trie
// over them in compressed sparse rows. It is read-only once compiled and
// may serve any number of decodes at once.
type Catalog struct {
	Entries []Entry
	Grammar Grammar

	// Node n's edges are First[n] ≤ e < First[n+1], sorted by token.
	First []int32
	Token []int32 // per edge: its token
	Child []int32 // per edge: the child node, or ChildSep / ChildStop
	// Ends[n] is the entry whose name ends at node n, or -1.
	Ends []int32
	// Count[e] is the number of entries below token edge e (0 for control
	// edges): the serial form's initial live counts.
	Count []int32
	// Mask[e*Words:(e+1)*Words] is the bitmask of the entries below edge e:
	// the batched form's read-only no-repeat state.
	Mask  []uint64
	Words int

	path   [][]int32 // per entry: the token edges from the root to its end
	answer []int     // per k: the most answer tokens (MaxAnswer)
}

// Nodes reports the number of trie nodes (the root included).
func (c *Catalog) Nodes() int { return len(c.First) - 1 }

// ErrInvalid marks a catalog that cannot be compiled.
var ErrInvalid = errors.New("invalid catalog")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// Compile tokenizes the entries' names with tok and builds the trie. It
// refuses an empty catalog, empty names (or only white space), duplicate
// names, names whose tokens
// hold a control token, a separator that merges with the names around it
// (tokens(name + SEP + name) must be tokens(name), SEP, tokens(name)),
// given token ids that differ from the tokenizer's, and a node with more
// than MaxEdges edges.
func Compile(entries []Entry, tok Tokenizer, g Grammar) (*Catalog, error) {
	if len(entries) == 0 {
		return nil, invalid("the catalog has no entries")
	}
	if g.Sep == g.Stop {
		return nil, invalid("separator and stop are the same token %d", g.Sep)
	}
	if sep := tok.EncodePlain(g.SepText); !slices.Equal(sep, []int32{g.Sep}) {
		return nil, invalid("the separator %q encodes as %v, not [%d]", g.SepText, sep, g.Sep)
	}
	c := &Catalog{Entries: make([]Entry, len(entries)), Grammar: g}
	seen := make(map[string]int, len(entries))
	for i, e := range entries {
		switch {
		case e.Name == "":
			return nil, invalid("entry %d has an empty name", i)
		case strings.TrimSpace(e.Name) == "":
			return nil, invalid("entry %d has an empty name: %q is only white space", i, e.Name)
		}
		if j, dup := seen[e.Name]; dup {
			return nil, invalid("entries %d and %d have the same name %q", j, i, e.Name)
		}
		seen[e.Name] = i
		ids := tok.EncodePlain(e.Name)
		if e.TokenIDs != nil && !slices.Equal(e.TokenIDs, ids) {
			return nil, invalid("entry %q: token_ids %v, but the tokenizer gives %v", e.Name, e.TokenIDs, ids)
		}
		for _, id := range ids {
			if id == g.Sep || id == g.Stop {
				return nil, invalid("entry %q holds the control token %d", e.Name, id)
			}
		}
		both := tok.EncodePlain(e.Name + g.SepText + e.Name)
		want := append(append(append(make([]int32, 0, 2*len(ids)+1), ids...), g.Sep), ids...)
		if !slices.Equal(both, want) {
			return nil, invalid("entry %q: the separator %q merges with it (%v, not %v)", e.Name, g.SepText, both, want)
		}
		c.Entries[i] = Entry{Name: e.Name, Description: e.Description, TokenIDs: ids}
	}
	if err := c.build(); err != nil {
		return nil, err
	}
	return c, nil
}

// build lays the trie out: nodes numbered in creation order (entries
// inserted in catalog order), edges sorted by token, then the CSR arrays.
func (c *Catalog) build() error {
	type edge struct{ tok, child int32 }
	edges := [][]edge{nil}
	ends := []int32{-1}
	via := [][2]int{{0, 0}} // per node: an entry through it and the node's depth
	for i, e := range c.Entries {
		cur := int32(0)
		for d, t := range e.TokenIDs {
			next := int32(-1)
			for _, x := range edges[cur] {
				if x.tok == t {
					next = x.child
				}
			}
			if next < 0 {
				next = int32(len(edges))
				edges = append(edges, nil)
				ends = append(ends, -1)
				via = append(via, [2]int{i, d + 1})
				edges[cur] = append(edges[cur], edge{t, next})
			}
			cur = next
		}
		ends[cur] = int32(i)
	}
	c.Ends = ends
	c.First = make([]int32, len(edges)+1)
	for n := range edges {
		if ends[n] >= 0 {
			edges[n] = append(edges[n], edge{c.Grammar.Sep, ChildSep}, edge{c.Grammar.Stop, ChildStop})
		}
		if len(edges[n]) > MaxEdges {
			return invalid("trie node %d (the first %d tokens of %q) has %d edges, more than %d",
				n, via[n][1], c.Entries[via[n][0]].Name, len(edges[n]), MaxEdges)
		}
		slices.SortFunc(edges[n], func(a, b edge) int { return int(a.tok) - int(b.tok) })
		c.First[n+1] = c.First[n] + int32(len(edges[n]))
		for _, x := range edges[n] {
			c.Token, c.Child = append(c.Token, x.tok), append(c.Child, x.child)
		}
	}
	E := len(c.Token)
	c.Words = (len(c.Entries) + 63) / 64
	c.Count = make([]int32, E)
	c.Mask = make([]uint64, E*c.Words)
	c.path = make([][]int32, len(c.Entries))
	c.answer = answerBounds(c.Entries)
	for i, e := range c.Entries {
		cur := int32(0)
		for _, t := range e.TokenIDs {
			x := c.edge(cur, t)
			c.Count[x]++
			c.Mask[int(x)*c.Words+i/64] |= 1 << (i % 64)
			c.path[i] = append(c.path[i], x)
			cur = c.Child[x]
		}
	}
	return nil
}

// edge returns node n's edge with token t, or -1.
func (c *Catalog) edge(n, t int32) int32 {
	lo, hi := c.First[n], c.First[n+1]
	for lo < hi {
		mid := (lo + hi) / 2
		switch {
		case c.Token[mid] == t:
			return mid
		case c.Token[mid] < t:
			lo = mid + 1
		default:
			hi = mid
		}
	}
	return -1
}
