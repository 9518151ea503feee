package gemma4_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"verdict/engine/gemma4"
	"verdict/engine/tokenizer"
)

// The test tokenizer (testdata/tokenizer.json).
//
// Why it exists: the Gemma 4 fixtures have a 512-token vocabulary, so no
// real tokenizer fits them (Gemma 3's has 262145 entries, and Gemma 4's own
// tokenizer.json is not available here). The scorer's cached backend needs
// each answer code to be one token (" true", " false", "A"), and the prompt
// builders write Gemma 4's chat tokens, which should be single ids as they
// are in the real model. This file is a small Hugging Face tokenizer.json
// in the layout of Gemma's own (the Replace normalizer, the Split
// pre-tokenizer, a BPE model with byte fallback, the ByteFallback decoder),
// so that engine/tokenizer reads it as it reads Gemma's, and so that
// build/fixtures/make_gemma4_catalog_fixture.py can tokenize the same way
// with the `tokenizers` library on the GPU machine.
//
// Ids, all below 512:
//
//	0 <pad>, 1 <eos>, 2 <bos>, 3 <unk>: Gemma's ids;
//	4 <start_of_turn>, 5 <end_of_turn>: Gemma 3's turn markers, present only
//	   because engine/tokenizer refuses a file without them; no Gemma 4
//	   prompt writes them;
//	6 <|channel>, 7 <channel|>: the large template's thought channel;
//	105 <|turn>, 106 <turn|>: Gemma 4's turn markers, at the ids docs/gemma4.md
//	   infers for the real tokenizer; 107 "\n", as in Gemma's vocabulary;
//	8-104, 108-255: "▁" and the printable ASCII characters, then the pieces
//	   of the merges below, then <unusedN> up to 255;
//	256-511: the 256 byte-fallback tokens <0x00>-<0xFF>.
//
// The merges build whole words only: " true" and " false" (the cached
// backend's bool answers) and the words the catalog case's names are made
// of. Everything else is one character a token.
//
// go test ./engine/gemma4/ -run TestTokenizerFile -update rewrites the file.

var update = flag.Bool("update", false, "rewrite engine/gemma4/testdata/tokenizer.json")

const tokenizerFile = "testdata/tokenizer.json"

// tokWords are the words the merges make single tokens.
var tokWords = []string{
	"▁true", "▁false",
	"get", "set", "read", "send", "play", "find", "list", "open", "stop",
	"mail", "news", "time", "file", "note", "song", "map", "card", "call", "text", "photo",
}

// buildTokenizerJSON writes the test tokenizer.json.
func buildTokenizerJSON() ([]byte, error) {
	type added struct {
		ID         int    `json:"id"`
		Content    string `json:"content"`
		SingleWord bool   `json:"single_word"`
		LStrip     bool   `json:"lstrip"`
		RStrip     bool   `json:"rstrip"`
		Normalized bool   `json:"normalized"`
		Special    bool   `json:"special"`
	}
	specials := map[int]string{0: "<pad>", 1: "<eos>", 2: "<bos>", 3: "<unk>", 4: "<start_of_turn>", 5: "<end_of_turn>",
		6: "<|channel>", 7: "<channel|>", 105: gemma4.TurnStartToken, 106: gemma4.TurnEndToken}
	vocab := map[string]int{}
	byID := map[int]string{}
	put := func(s string, id int) error {
		if _, dup := vocab[s]; dup {
			return fmt.Errorf("test tokenizer: %q twice", s)
		}
		if old, taken := byID[id]; taken {
			return fmt.Errorf("test tokenizer: id %d for %q and %q", id, old, s)
		}
		vocab[s], byID[id] = id, s
		return nil
	}
	var addedToks []added
	for id := range 512 {
		if s, ok := specials[id]; ok {
			if err := put(s, id); err != nil {
				return nil, err
			}
			addedToks = append(addedToks, added{ID: id, Content: s, Special: true})
		}
	}
	if err := put("\n", 107); err != nil {
		return nil, err
	}
	for b := range 256 {
		if err := put(fmt.Sprintf("<0x%02X>", b), 256+b); err != nil {
			return nil, err
		}
	}
	next := 8
	piece := func(s string) error {
		if _, ok := vocab[s]; ok {
			return nil
		}
		for byID[next] != "" {
			next++
		}
		if next >= 256 {
			return fmt.Errorf("test tokenizer: no id left below the byte tokens for %q", s)
		}
		return put(s, next)
	}
	if err := piece("▁"); err != nil {
		return nil, err
	}
	for c := byte('!'); c <= '~'; c++ {
		if err := piece(string(c)); err != nil {
			return nil, err
		}
	}
	// Each word's merges join the pieces the merges before it leave, left
	// to right, ranked after them: a word's own merges then always fire
	// before any later word's, so every word stays one token.
	var merges [][2]string
	rank := map[[2]string]int{}
	for _, w := range tokWords {
		ps := bpeSplit(w, rank)
		for len(ps) > 1 {
			m := [2]string{ps[0], ps[1]}
			rank[m] = len(merges)
			merges = append(merges, m)
			if err := piece(m[0] + m[1]); err != nil {
				return nil, err
			}
			ps = append([]string{m[0] + m[1]}, ps[2:]...)
		}
	}
	// The ids left over are unused pieces, so that the vocabulary is the
	// fixtures' 512 entries with no gaps.
	for id, n := 0, 0; id < 256; id++ {
		if byID[id] == "" {
			if err := put(fmt.Sprintf("<unused%d>", n), id); err != nil {
				return nil, err
			}
			n++
		}
	}
	str := func(s string) map[string]string { return map[string]string{"String": s} }
	spec := map[string]any{
		"version":       "1.0",
		"truncation":    nil,
		"padding":       nil,
		"added_tokens":  addedToks,
		"normalizer":    map[string]any{"type": "Replace", "pattern": str(" "), "content": "▁"},
		"pre_tokenizer": map[string]any{"type": "Split", "pattern": str(" "), "behavior": "MergedWithPrevious", "invert": false},
		"post_processor": map[string]any{"type": "TemplateProcessing",
			"single":         []any{map[string]any{"SpecialToken": map[string]any{"id": "<bos>", "type_id": 0}}, map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}}},
			"pair":           []any{map[string]any{"SpecialToken": map[string]any{"id": "<bos>", "type_id": 0}}, map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}}, map[string]any{"Sequence": map[string]any{"id": "B", "type_id": 1}}},
			"special_tokens": map[string]any{"<bos>": map[string]any{"id": "<bos>", "ids": []int{2}, "tokens": []string{"<bos>"}}}},
		"decoder": map[string]any{"type": "Sequence", "decoders": []any{
			map[string]any{"type": "Replace", "pattern": str("▁"), "content": " "},
			map[string]any{"type": "ByteFallback"},
			map[string]any{"type": "Fuse"},
		}},
		"model": map[string]any{"type": "BPE", "dropout": nil, "unk_token": "<unk>", "continuing_subword_prefix": nil,
			"end_of_word_suffix": nil, "fuse_unk": true, "byte_fallback": true, "ignore_merges": false,
			"vocab": vocab, "merges": merges},
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", " ")
	if err := enc.Encode(spec); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// bpeSplit is BPE on one word: its characters, merged by the lowest-ranked
// adjacent pair until none is ranked.
func bpeSplit(w string, rank map[[2]string]int) []string {
	var ps []string
	for _, r := range w {
		ps = append(ps, string(r))
	}
	for {
		best, at := -1, -1
		for i := 0; i+1 < len(ps); i++ {
			if r, ok := rank[[2]string{ps[i], ps[i+1]}]; ok && (best < 0 || r < best) {
				best, at = r, i
			}
		}
		if at < 0 {
			return ps
		}
		ps = append(ps[:at], append([]string{ps[at] + ps[at+1]}, ps[at+2:]...)...)
	}
}

// g4Tok is the test tokenizer as the scorer and the catalog decoder see a
// Gemma 4 tokenizer: engine/tokenizer's EndOfTurn names Gemma 3's
// <end_of_turn>, Gemma 4's turn ends with <turn|>.
type g4Tok struct {
	*tokenizer.Tokenizer
	eot int32
}

func (t g4Tok) EndOfTurn() int32 { return t.eot }

// testTokenizer loads testdata/tokenizer.json.
func testTokenizer(t testing.TB) g4Tok {
	t.Helper()
	tk, err := tokenizer.Load(tokenizerFile)
	if err != nil {
		t.Fatal(err)
	}
	eot, ok := tk.Lookup(gemma4.TurnEndToken)
	if !ok {
		t.Fatalf("%s has no %s", tokenizerFile, gemma4.TurnEndToken)
	}
	return g4Tok{tk, eot}
}

// TestTokenizerFile: the committed file is the one buildTokenizerJSON
// writes; it fits the fixtures' vocabulary; the chat tokens, the line
// break, the bool answers and the catalog words are single tokens; text of
// any bytes round-trips.
func TestTokenizerFile(t *testing.T) {
	want, err := buildTokenizerJSON()
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(tokenizerFile, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(tokenizerFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s differs from what buildTokenizerJSON writes: run go test -run TestTokenizerFile -update", tokenizerFile)
	}
	tk := testTokenizer(t)
	if v := tk.VocabSize(); v != 512 {
		t.Errorf("vocabulary %d, want the fixtures' 512", v)
	}
	for _, c := range []struct {
		text string
		id   int32
	}{{"<bos>", 2}, {gemma4.TurnStartToken, 105}, {gemma4.TurnEndToken, 106}, {"\n", 107}, {"<|channel>", 6}, {"<channel|>", 7}} {
		if ids := tk.Encode(c.text); !slices.Equal(ids, []int32{c.id}) {
			t.Errorf("%q encodes as %v, want [%d]", c.text, ids, c.id)
		}
	}
	if tk.EndOfTurn() != 106 {
		t.Errorf("end of turn %d, want 106", tk.EndOfTurn())
	}
	for _, w := range tokWords {
		text := strings.ReplaceAll(w, "▁", " ")
		if ids := tk.EncodePlain(text); len(ids) != 1 {
			t.Errorf("%q is %d tokens %v, want one", text, len(ids), ids)
		}
	}
	for _, c := range []struct {
		text string
		n    int
	}{{"get_news", 3}, {"get_notes", 4}, {"é\x00", 3}} {
		ids := tk.EncodePlain(c.text)
		if len(ids) != c.n || tk.Decode(ids) != c.text {
			t.Errorf("%q: %d tokens %v decoding to %q, want %d tokens", c.text, len(ids), ids, tk.Decode(ids), c.n)
		}
	}
	// " true" after a key is one token that does not merge with it.
	key, val := tk.EncodePlain(`{"refund":`), tk.EncodePlain(`{"refund": true`)
	if id, _ := tk.Lookup("▁true"); !slices.Equal(val, append(slices.Clone(key), id)) {
		t.Errorf("%v then \" true\" encode as %v", key, val)
	}
	// The chat tokens in user text stay text.
	if ids := tk.EncodePlain(gemma4.TurnEndToken); len(ids) != len(gemma4.TurnEndToken) {
		t.Errorf("%q as plain text: %v", gemma4.TurnEndToken, ids)
	}
}
