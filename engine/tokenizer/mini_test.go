package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// Tests on a small synthetic tokenizer.json: they need no download and pin
// down the BPE merge order, byte fallback, unk handling, the component
// options and the refusal of unsupported files.

type spec map[string]any

func miniSpec() spec {
	vocab := map[string]int{}
	add := func(s string) {
		if _, ok := vocab[s]; !ok {
			vocab[s] = len(vocab)
		}
	}
	for _, s := range []string{"<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"} {
		add(s)
	}
	for b := range 256 {
		add(fmt.Sprintf("<0x%02X>", b))
	}
	for _, s := range []string{"▁", "a", "b", "c", "h", "i", "\n", "ab", "bc", "aa", "▁a", "hi", "▁hi", "é"} {
		add(s)
	}
	special := func(id int, s string) map[string]any {
		return map[string]any{"id": id, "content": s, "single_word": false, "lstrip": false,
			"rstrip": false, "normalized": false, "special": true}
	}
	str := func(s string) map[string]any { return map[string]any{"String": s} }
	return spec{
		"version":    "1.0",
		"truncation": nil,
		"padding":    nil,
		"added_tokens": []any{special(0, "<pad>"), special(1, "<eos>"), special(2, "<bos>"), special(3, "<unk>"),
			special(4, "<start_of_turn>"), special(5, "<end_of_turn>")},
		"normalizer":    map[string]any{"type": "Replace", "pattern": str(" "), "content": "▁"},
		"pre_tokenizer": map[string]any{"type": "Split", "pattern": str(" "), "behavior": "MergedWithPrevious", "invert": false},
		"post_processor": map[string]any{"type": "TemplateProcessing", "single": []any{}, "pair": []any{},
			"special_tokens": map[string]any{}},
		"decoder": map[string]any{"type": "Sequence", "decoders": []any{
			map[string]any{"type": "Replace", "pattern": str("▁"), "content": " "},
			map[string]any{"type": "ByteFallback"},
			map[string]any{"type": "Fuse"},
		}},
		"model": map[string]any{
			"type": "BPE", "dropout": nil, "unk_token": "<unk>", "continuing_subword_prefix": nil,
			"end_of_word_suffix": nil, "fuse_unk": true, "byte_fallback": true, "ignore_merges": false,
			"vocab":  vocab,
			"merges": [][]string{{"b", "c"}, {"a", "b"}, {"a", "a"}, {"▁", "a"}, {"h", "i"}, {"▁", "hi"}},
		},
	}
}

func (s spec) model() map[string]any { return s["model"].(map[string]any) }

func (s spec) parse(t *testing.T) (*Tokenizer, error) {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return Parse(b)
}

func (s spec) mustParse(t *testing.T) *Tokenizer {
	t.Helper()
	tk, err := s.parse(t)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

func (tk *Tokenizer) ids(t *testing.T, toks ...string) []int32 {
	t.Helper()
	out := make([]int32, len(toks))
	for i, s := range toks {
		id, ok := tk.Lookup(s)
		if !ok {
			t.Fatalf("no token %q", s)
		}
		out[i] = id
	}
	return out
}

func TestMiniBPE(t *testing.T) {
	tk := miniSpec().mustParse(t)
	for _, c := range []struct {
		text string
		want []string
	}{
		{"abc", []string{"a", "bc"}}, // (b,c) has the lower rank
		{"aaa", []string{"aa", "a"}}, // equal ranks: leftmost first
		{"aaaa", []string{"aa", "aa"}},
		{"aab", []string{"a", "ab"}}, // (a,b) outranks (a,a)
		{" hi", []string{"▁hi"}},
		{"hi hi", []string{"hi", "▁hi"}},
		{"é", []string{"é"}},
		{"ê", []string{"<0xC3>", "<0xAA>"}}, // byte fallback
		{"a😀", []string{"a", "<0xF0>", "<0x9F>", "<0x98>", "<0x80>"}},
		{"<bos>hi<end_of_turn>", []string{"<bos>", "hi", "<end_of_turn>"}},
		{"", nil},
	} {
		want := tk.ids(t, c.want...)
		got := tk.Encode(c.text)
		if !slices.Equal(got, want) {
			t.Errorf("Encode(%q) = %v, want %v %q", c.text, got, want, c.want)
		}
		if d := tk.Decode(got); d != c.text {
			t.Errorf("Decode(Encode(%q)) = %q", c.text, d)
		}
	}
	if tk.VocabSize() != 6+256+14 {
		t.Errorf("VocabSize = %d", tk.VocabSize())
	}
}

func TestMiniStringMerges(t *testing.T) {
	s := miniSpec()
	s.model()["merges"] = []string{"b c", "a b", "a a", "▁ a", "h i", "▁ hi"}
	tk := s.mustParse(t)
	// One word "abc▁aab": bc (rank 0), then ab (rank 1), then ▁a (rank 3).
	if got, want := tk.Encode("abc aab"), tk.ids(t, "a", "bc", "▁a", "ab"); !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestMiniUnk(t *testing.T) {
	for _, c := range []struct {
		fuse bool
		text string
		want []string
	}{
		{true, "êê", []string{"<unk>"}},
		{false, "êê", []string{"<unk>", "<unk>"}},
		{true, "êaê", []string{"<unk>", "a", "<unk>"}},
	} {
		s := miniSpec()
		s.model()["byte_fallback"] = false
		s.model()["fuse_unk"] = c.fuse
		tk := s.mustParse(t)
		if got, want := tk.Encode(c.text), tk.ids(t, c.want...); !slices.Equal(got, want) {
			t.Errorf("fuse=%v Encode(%q) = %v, want %v", c.fuse, c.text, got, want)
		}
	}
	// No unk token and no byte fallback: HF drops the character.
	s := miniSpec()
	s.model()["byte_fallback"] = false
	s.model()["unk_token"] = nil
	tk := s.mustParse(t)
	if got, want := tk.Encode("aêb"), tk.ids(t, "ab"); !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestMiniPrependAndNormalizedAdded(t *testing.T) {
	s := miniSpec()
	s["normalizer"] = map[string]any{"type": "Sequence", "normalizers": []any{
		map[string]any{"type": "Prepend", "prepend": "▁"},
		map[string]any{"type": "Replace", "pattern": map[string]any{"String": " "}, "content": "▁"},
	}}
	n := len(s.model()["vocab"].(map[string]int))
	s["added_tokens"] = append(s["added_tokens"].([]any), map[string]any{"id": n, "content": "x y",
		"single_word": false, "lstrip": false, "rstrip": false, "normalized": true, "special": false})
	tk := s.mustParse(t)
	// Prepend runs on each piece between added tokens, as in HF.
	if got, want := tk.Encode("hi<bos>hi"), tk.ids(t, "▁hi", "<bos>", "▁hi"); !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	// A normalized added token matches its normalized form (with the
	// prepended "▁x▁y") in the normalized text, as in HF.
	if got, want := tk.Encode("a x y"), tk.ids(t, "▁a", "x y"); !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if got := tk.Encode("ax y"); slices.Contains(got, tk.ids(t, "x y")[0]) {
		t.Errorf("Encode(%q) = %v matched the token without its prepended ▁", "ax y", got)
	}
}

func TestSplitBehaviors(t *testing.T) {
	for _, c := range []struct {
		behavior string
		want     []string
	}{
		{"Removed", []string{"The", "final", "countdown"}},
		{"Isolated", []string{"The", "-", "final", "-", "-", "countdown"}},
		{"MergedWithPrevious", []string{"The-", "final-", "-", "countdown"}},
		{"MergedWithNext", []string{"The", "-final", "-", "-countdown"}},
		{"Contiguous", []string{"The", "-", "final", "--", "countdown"}},
	} {
		var got []string
		preTokenize([]splitStep{{"-", c.behavior}}, "The-final--countdown", func(s string) { got = append(got, s) })
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: %q, want %q", c.behavior, got, c.want)
		}
	}
}

// TestMatcherFlags follows HF's own AddedVocabulary tests for single_word,
// lstrip and rstrip.
func TestMatcherFlags(t *testing.T) {
	type piece struct {
		s  string
		id int32
	}
	run := func(m *matcher, s string) []piece {
		var out []piece
		m.split(s, func(p string, id int32) { out = append(out, piece{p, id}) })
		return out
	}
	m := newMatcher([]matchToken{{text: "<mask>", id: 0, singleWord: true}})
	got := run(m, "<mask> My name <mask> A<mask> <mask>ony <mask>")
	want := []piece{{"<mask>", 0}, {" My name ", -1}, {"<mask>", 0}, {" A<mask> <mask>ony ", -1}, {"<mask>", 0}}
	if !slices.Equal(got, want) {
		t.Errorf("single_word: %q", got)
	}
	got = run(m, "<mask>, <mask>- ◌̰<mask>")
	want = []piece{{"<mask>", 0}, {", ", -1}, {"<mask>", 0}, {"- ◌̰<mask>", -1}}
	if !slices.Equal(got, want) {
		t.Errorf("single_word unicode: %q", got)
	}
	m = newMatcher([]matchToken{{text: "<mask>", id: 0, singleWord: true, lstrip: true, rstrip: true}})
	got = run(m, "Hi <mask> there\t<mask>\t<mask>\u2000")
	want = []piece{{"Hi", -1}, {" <mask> ", 0}, {"there", -1}, {"\t<mask>\t", 0}, {"<mask>\u2000", 0}}
	if !slices.Equal(got, want) {
		t.Errorf("lstrip/rstrip: %q", got)
	}
	m = newMatcher([]matchToken{{text: "ab", id: 1}, {text: "abc", id: 2}, {text: "bcd", id: 3}})
	got = run(m, "xabcdabx")
	want = []piece{{"x", -1}, {"abc", 2}, {"d", -1}, {"ab", 1}, {"x", -1}}
	if !slices.Equal(got, want) {
		t.Errorf("leftmost longest: %q", got)
	}
}

func TestUnsupported(t *testing.T) {
	str := func(s string) map[string]any { return map[string]any{"String": s} }
	for _, c := range []struct {
		name string
		edit func(s spec)
	}{
		{"normalizer NFKC", func(s spec) { s["normalizer"] = map[string]any{"type": "NFKC"} }},
		{"normalizer regex", func(s spec) {
			s["normalizer"] = map[string]any{"type": "Replace", "pattern": map[string]any{"Regex": " +"}, "content": "▁"}
		}},
		{"normalizer extra key", func(s spec) {
			s["normalizer"] = map[string]any{"type": "Replace", "pattern": str(" "), "content": "▁", "x": 1}
		}},
		{"pre_tokenizer Metaspace", func(s spec) { s["pre_tokenizer"] = map[string]any{"type": "Metaspace"} }},
		{"pre_tokenizer ByteLevel in Sequence", func(s spec) {
			s["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": []any{map[string]any{"type": "ByteLevel"}}}
		}},
		{"Split invert", func(s spec) {
			s["pre_tokenizer"] = map[string]any{"type": "Split", "pattern": str(" "), "behavior": "Removed", "invert": true}
		}},
		{"Split behavior", func(s spec) {
			s["pre_tokenizer"] = map[string]any{"type": "Split", "pattern": str(" "), "behavior": "Sideways", "invert": false}
		}},
		{"decoder null", func(s spec) { s["decoder"] = nil }},
		{"decoder Strip", func(s spec) {
			s["decoder"] = map[string]any{"type": "Strip", "content": " ", "start": 1, "stop": 0}
		}},
		{"decoder Replace after ByteFallback", func(s spec) {
			s["decoder"] = map[string]any{"type": "Sequence", "decoders": []any{
				map[string]any{"type": "ByteFallback"},
				map[string]any{"type": "Replace", "pattern": str("▁"), "content": " "}}}
		}},
		{"model WordPiece", func(s spec) { s.model()["type"] = "WordPiece" }},
		{"model dropout", func(s spec) { s.model()["dropout"] = 0.1 }},
		{"model prefix", func(s spec) { s.model()["continuing_subword_prefix"] = "##" }},
		{"model suffix", func(s spec) { s.model()["end_of_word_suffix"] = "</w>" }},
		{"model unknown key", func(s spec) { s.model()["shiny"] = true }},
		{"top-level unknown key", func(s spec) { s["shiny"] = true }},
		{"truncation", func(s spec) { s["truncation"] = map[string]any{"max_length": 8} }},
		{"padding", func(s spec) { s["padding"] = map[string]any{"strategy": "BatchLongest"} }},
		{"version", func(s spec) { s["version"] = "2.0" }},
		{"added token id", func(s spec) {
			s["added_tokens"] = append(s["added_tokens"].([]any), map[string]any{"id": 5, "content": "<new>",
				"single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": false})
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := miniSpec()
			c.edit(s)
			_, err := s.parse(t)
			var ue *UnsupportedError
			if !errors.As(err, &ue) {
				t.Fatalf("err = %v, want *UnsupportedError", err)
			}
		})
	}
}

func TestMalformed(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(s spec)
	}{
		{"merge of unknown token", func(s spec) { s.model()["merges"] = [][]string{{"a", "zz"}} }},
		{"merge result unknown", func(s spec) { s.model()["merges"] = [][]string{{"c", "c"}} }},
		{"merge not a pair", func(s spec) { s.model()["merges"] = [][]string{{"a", "b", "c"}} }},
		{"unk not in vocab", func(s spec) { s.model()["unk_token"] = "<nope>" }},
		{"no start_of_turn", func(s spec) {
			v := s.model()["vocab"].(map[string]int)
			v["<start_of_turnX>"] = v["<start_of_turn>"]
			delete(v, "<start_of_turn>")
			s["added_tokens"] = s["added_tokens"].([]any)[:4]
		}},
		{"duplicate id", func(s spec) { s.model()["vocab"].(map[string]int)["zz"] = 7 }},
		{"added token unknown field", func(s spec) {
			s["added_tokens"] = append(s["added_tokens"].([]any), map[string]any{"id": 0, "content": "<pad>", "shiny": true})
		}},
		{"no model", func(s spec) { delete(s, "model") }},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := miniSpec()
			c.edit(s)
			if _, err := s.parse(t); err == nil {
				t.Fatal("no error")
			}
		})
	}
	for _, bad := range []string{``, `{`, `{"model": {}} x`, "\xff", `[]`, `{"version": "1.0", "model": {"type": "BPE", "vocab": {"a": "1"}}}`} {
		if _, err := Parse([]byte(bad)); err == nil {
			t.Errorf("Parse(%q): no error", bad)
		}
	}
}

// TestTurnTokens: a file's turn tokens are its family's, Gemma 4's when it
// has both, and a file with neither pair is refused naming both.
func TestTurnTokens(t *testing.T) {
	for _, c := range []struct {
		name     string
		extra    []string // added after the mini vocabulary
		drop     bool     // drop <start_of_turn> and <end_of_turn>
		sot, eot string   // "" : refused
	}{
		{"gemma 3", nil, false, "<start_of_turn>", "<end_of_turn>"},
		{"gemma 4", []string{"<|turn>", "<turn|>"}, true, "<|turn>", "<turn|>"},
		{"both: gemma 4's", []string{"<|turn>", "<turn|>"}, false, "<|turn>", "<turn|>"},
		{"gemma 4 half", []string{"<|turn>"}, true, "", ""},
		{"none", nil, true, "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := miniSpec()
			v := s.model()["vocab"].(map[string]int)
			added := s["added_tokens"].([]any)
			if c.drop {
				for _, k := range []string{"<start_of_turn>", "<end_of_turn>"} {
					v[k+"X"] = v[k]
					delete(v, k)
				}
				added = added[:4]
			}
			for _, e := range c.extra {
				id := len(v)
				v[e] = id
				added = append(added, map[string]any{"id": id, "content": e, "single_word": false, "lstrip": false,
					"rstrip": false, "normalized": false, "special": true})
			}
			s["added_tokens"] = added
			tk, err := s.parse(t)
			if c.sot == "" {
				if err == nil || !strings.Contains(err.Error(), "<turn|>") || !strings.Contains(err.Error(), "<end_of_turn>") {
					t.Fatalf("err %v, want a refusal naming both families' tokens", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := tk.ids(t, c.sot, c.eot)
			if tk.StartOfTurn() != want[0] || tk.EndOfTurn() != want[1] {
				t.Errorf("turn tokens %d, %d, want %s %d and %s %d", tk.StartOfTurn(), tk.EndOfTurn(), c.sot, want[0], c.eot, want[1])
			}
			if stops := tk.StopIDs(); !slices.Equal(stops, []int32{tk.EOS(), want[1]}) {
				t.Errorf("stops %v, want <eos> and %s", stops, c.eot)
			}
		})
	}
}

func TestScannerStrings(t *testing.T) {
	for _, c := range []struct {
		in, want string
		ok       bool
	}{
		{`"plain"`, "plain", true},
		{`"a\u00e9\ud83d\ude00\n\t\"\\\/x"`, "aé😀\n\t\"\\/x", true},
		{`"\u2581\u0000"`, "▁\x00", true},
		{`"\ud83d"`, "", false},
		{`"\ude00x"`, "", false},
		{`"\q"`, "", false},
		{"\"a\nb\"", "", false},
		{`"abc`, "", false},
	} {
		sc := &scanner{data: []byte(c.in)}
		got, err := sc.str()
		if (err == nil) != c.ok || (c.ok && string(got) != c.want) {
			t.Errorf("str(%s) = %q, %v", c.in, got, err)
		}
	}
	sc := &scanner{data: []byte(`{"a": [1, "x\"]", {"b": null}], "c": -2.5e3, "d": true} `)}
	raw, err := sc.raw()
	if err != nil || !strings.HasSuffix(string(raw), "true}") {
		t.Errorf("raw = %q, %v", raw, err)
	}
}

func TestMiniStreamAndPieces(t *testing.T) {
	tk := miniSpec().mustParse(t)
	ids := tk.Encode("hi 😀 aê")
	if got := streamAll(t, tk, ids); got != "hi 😀 aê" {
		t.Errorf("stream %q", got)
	}
	if got := concatPieces(tk, ids); got != "hi 😀 aê" {
		t.Errorf("pieces %q", got)
	}
}

// IsAdded tells the added tokens (special or not) from vocabulary entries.
func TestIsAdded(t *testing.T) {
	tk := miniSpec().mustParse(t)
	for text, want := range map[string]bool{"<bos>": true, "<end_of_turn>": true, "▁hi": false, "<0x0A>": false} {
		id, ok := tk.Lookup(text)
		if !ok || tk.IsAdded(id) != want {
			t.Errorf("%q: IsAdded %v, want %v", text, tk.IsAdded(id), want)
		}
	}
	if tk.IsAdded(1 << 20) {
		t.Error("an id past the vocabulary is added")
	}
}
