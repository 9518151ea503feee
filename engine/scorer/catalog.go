package scorer

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"time"

	"verdict/engine/catalog"
	"verdict/engine/model"
)

// Backends of the scorer.
const (
	BackendJSON    = "json"    // candidate likelihood of complete JSON values
	BackendCatalog = "catalog" // choice fields decoded through a trie as 1-of-n catalogs
)

// TokenProb is one legal token of a catalog step with its probability.
type TokenProb struct {
	ID   int32   `json:"id"`
	Text string  `json:"text,omitempty"`
	P    float64 `json:"p"`
}

// CatalogStep is one step of a trie-constrained decode: the distribution
// over its legal tokens (most probable first) and the token chosen.
type CatalogStep struct {
	Node   int32       `json:"node"`
	Chosen int32       `json:"chosen"`
	Legal  int         `json:"legal"`
	Tokens []TokenProb `json:"tokens"`
}

// CatalogTiming is a trie decode's time per token: all of it, and the
// output head's part, sparse and (when cross-checked) dense.
type CatalogTiming struct {
	Tokens              int     `json:"tokens"`
	PrefillMs           float64 `json:"prefill_ms"`
	MsPerToken          float64 `json:"ms_per_token"`
	HeadMsPerToken      float64 `json:"sparse_head_ms_per_token"`
	DenseHeadMsPerToken float64 `json:"dense_head_ms_per_token,omitempty"`
	MaxLegal            int     `json:"max_legal"`
	DenseMaxRelGap      float64 `json:"dense_max_relative_gap,omitempty"`
}

const catalogSource = "catalog: trie-constrained greedy decoding; each step's distribution is the softmax over its legal tokens"

// decodedField is a field answered by the trie decoder: a Catalog field, or
// under the catalog backend a Choice field as a catalog of its options, k 1.
type decodedField struct {
	field int
	cat   *catalog.Catalog
	k     int
	key   []int32 // the field's key tokens after the prompt
}

// stopper gives a tokenizer's end-of-turn id.
type stopper interface{ EndOfTurn() int32 }

// texter gives a token's text.
type texter interface{ Decode(ids []int32) string }

// decodedFields compiles the fields s answers by decoding.
func (sc *Scorer) decodedFields(s *Schema, backend string, after func(string) ([]int32, bool)) ([]decodedField, error) {
	sep := sc.tok.Encode("\n")
	st, ok := sc.tok.(stopper)
	if len(sep) != 1 || !ok {
		return nil, fmt.Errorf("scorer: the tokenizer has no single-token line break and end of turn for catalog decoding")
	}
	g := catalog.Grammar{Sep: sep[0], SepText: "\n", Stop: st.EndOfTurn()}
	var out []decodedField
	for i, f := range s.Fields {
		k := f.K
		switch {
		case f.Kind == Catalog:
		case f.Kind == Choice && backend == BackendCatalog:
			k = 1
		default:
			continue
		}
		entries := make([]catalog.Entry, len(f.Options))
		for j, o := range f.Options {
			entries[j] = catalog.Entry{Name: o.Name, Description: o.Description}
		}
		cat, err := catalog.Compile(entries, sc.tok, g)
		if err != nil {
			return nil, &SchemaError{Field: f.Name, Msg: err.Error()}
		}
		key, ok := after("{" + jsonString(f.Name) + ":")
		if !ok {
			return nil, &SchemaError{Field: f.Name, Msg: "its key merges with the prompt's end when tokenized"}
		}
		out = append(out, decodedField{field: i, cat: cat, k: k, key: key})
	}
	return out, nil
}

// decode answers the decoded fields in one batch, each from its own fork of
// the prefix cache (bit-identical to decoding each alone).
func (sc *Scorer) decode(ctx context.Context, s *Schema, fs []decodedField, prefix model.Cache, res *Result, opt Options, onField func(*FieldResult)) error {
	reqs := make([]catalog.Request, len(fs))
	for i, df := range fs {
		reqs[i] = catalog.Request{Prompt: df.key, K: df.k, Cache: prefix.Clone(), Catalog: df.cat}
	}
	copt := catalog.Options{CheckDense: opt.CatalogCheckDense, Runner: opt.Runner}
	names := make([][]string, len(fs))
	copt.OnStep = func(req int, st catalog.Step) error {
		df := fs[req]
		if st.Entry >= 0 {
			names[req] = append(names[req], df.cat.Entries[st.Entry].Name)
		}
		if opt.OnCatalogStep != nil {
			opt.OnCatalogStep(s.Fields[df.field].Name, slices.Clone(names[req]), sc.catalogStep(st))
		}
		return nil
	}
	copt.OnDone = func(req int, r catalog.Result) {
		df := fs[req]
		res.Fields[df.field] = sc.catalogResult(s.Fields[df.field], df, r)
		if onField != nil {
			onField(&res.Fields[df.field])
		}
	}
	if _, _, err := catalog.DecodeBatch(ctx, sc.m, nil, reqs, copt); err != nil {
		return fmt.Errorf("scorer: catalog fields: %w", err)
	}
	return nil
}

// catalogResult turns a decode into the field's result. For a Choice field
// the distribution partitions the decode's probability: the winner's is the
// product of its steps' probabilities, and each subtree the decode left
// holds the probability of its first token there (times the steps before
// it); options alone in such a subtree get it, options sharing one are one
// candidate named by all of them ("a | b").
func (sc *Scorer) catalogResult(f Field, df decodedField, r catalog.Result) FieldResult {
	fr := FieldResult{Name: f.Name, Type: f.Kind, Names: r.Names, Decisions: []Decision{}}
	path := 1.0
	entropy, states := 0.0, 0
	ms := func(d time.Duration, n int) float64 { return d.Seconds() * 1000 / float64(max(n, 1)) }
	tm := &CatalogTiming{Tokens: len(r.Tokens), PrefillMs: ms(r.Prefill, 1), MsPerToken: ms(r.Decode, len(r.Tokens)-1),
		HeadMsPerToken: ms(r.Head, len(r.Tokens)), DenseHeadMsPerToken: ms(r.Dense, len(r.Tokens)), DenseMaxRelGap: r.DenseMaxRel}
	fr.CatalogTiming = tm
	for _, st := range r.Steps {
		p := st.Probs()
		tm.MaxLegal = max(tm.MaxLegal, len(st.Legal))
		path *= p[slices.Index(st.Legal, st.Chosen)]
		fr.Steps = append(fr.Steps, sc.catalogStep(st))
		if len(p) > 1 {
			h := 0.0
			for _, q := range p {
				if q > 0 {
					h -= q * math.Log(q)
				}
			}
			entropy += h / math.Log(float64(len(p)))
			states++
		}
	}
	fr.PathProbability = &path
	fr.Confidence = 1
	if states > 0 {
		fr.Confidence = 1 - entropy/float64(states)
	}
	fr.AllowedTokenMass = 1 // each step's distribution is over its legal tokens
	if f.Kind == Choice && len(r.Names) == 1 {
		fr.Winner = r.Names[0]
		fr.Decisions = []Decision{choiceDistribution(f, df.cat, r)}
		fr.Confidence = fr.Decisions[0].Confidence
	}
	return fr
}

// catalogStep is a decode step with its distribution, most probable first.
func (sc *Scorer) catalogStep(st catalog.Step) CatalogStep {
	tx, _ := sc.tok.(texter)
	p := st.Probs()
	cs := CatalogStep{Node: st.Node, Chosen: st.Chosen, Legal: len(st.Legal)}
	for j, id := range st.Legal {
		tp := TokenProb{ID: id, P: p[j]}
		if tx != nil {
			tp.Text = tx.Decode([]int32{id})
		}
		cs.Tokens = append(cs.Tokens, tp)
	}
	sort.SliceStable(cs.Tokens, func(a, b int) bool { return cs.Tokens[a].P > cs.Tokens[b].P })
	return cs
}

// choiceDistribution partitions a 1-of-n decode's probability over the
// options (see catalogResult).
func choiceDistribution(f Field, cat *catalog.Catalog, r catalog.Result) Decision {
	d := Decision{Name: f.Name, Temperature: 1}
	prefix := 1.0
	var cands []Candidate
	for si, st := range r.Steps {
		p := st.Probs()
		for j, id := range st.Legal {
			if id == st.Chosen {
				continue
			}
			var names []string // the options below this token at this step
			for _, e := range cat.Entries {
				if len(e.TokenIDs) > si && slices.Equal(e.TokenIDs[:si], r.Tokens[:si]) && e.TokenIDs[si] == id {
					names = append(names, e.Name)
				}
			}
			if len(names) > 0 {
				cands = append(cands, Candidate{Value: joinNames(names), Probability: prefix * p[j]})
			}
		}
		prefix *= p[slices.Index(st.Legal, st.Chosen)]
	}
	cands = append(cands, Candidate{Value: r.Names[0], Probability: prefix})
	sort.SliceStable(cands, func(a, b int) bool { return cands[a].Probability > cands[b].Probability })
	for i := range cands {
		cands[i].LogLikelihood = math.Log(cands[i].Probability)
	}
	d.Candidates = cands
	h := 0.0
	for _, c := range cands {
		if c.Probability > 0 {
			h -= c.Probability * math.Log(c.Probability)
		}
	}
	d.Confidence = 1
	if len(f.Options) > 1 {
		d.Confidence = 1 - h/math.Log(float64(len(f.Options)))
	}
	d.AllowedTokenMass = 1
	d.Boundary = "catalog"
	return d
}

func joinNames(names []string) string {
	out := names[0]
	for _, n := range names[1:] {
		out += " | " + n
	}
	return out
}
