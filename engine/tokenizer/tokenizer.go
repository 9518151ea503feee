// Package tokenizer is a pure-Go implementation of the Gemma 3 / Gemma 3n
// tokenizer that reproduces Hugging Face `tokenizers` exactly.
//
// It loads a Hugging Face tokenizer.json and implements precisely the
// components that Gemma's file uses: a BPE model with byte fallback and
// rank-ordered merges, a Replace (" " → "▁") normalizer, a Split
// pre-tokenizer, added tokens matched before everything else (leftmost
// longest, with the single_word/lstrip/rstrip/normalized flags) and a
// Replace/ByteFallback/Fuse decoder. A file that needs anything else is
// refused with an *UnsupportedError rather than tokenized differently.
//
// Encode never adds special tokens (HF's add_special_tokens=false); the
// post-processor of the file is therefore not used. EncodeChat renders the
// Gemma chat template, whose text already begins with "<bos>". Encode turns
// special tokens written in the text into their ids; EncodePlain (HF's
// split_special_tokens=True) keeps them text, for text from users, and
// EncodeParts mixes the two in one pass for prompts that hold both.
//
// The published Gemma 3 tokenizer.json and Gemma 3n's agree on all text ids
// (below 262144) but not on the multimodal placeholders: in this file
// <end_of_image> is 256000 and <image_soft_token> 262144, while Gemma 3n uses
// 262144/262145 for those and 256000/262272/262273 for the audio ones. Take
// multimodal ids from the model config, not from Lookup.
//
// A Tokenizer is immutable after Load and safe for concurrent use.
package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"verdict/engine/safefile"
)

// Tokenizer encodes text to token ids and decodes ids back to text.
type Tokenizer struct {
	model      bpeModel
	normalizer []normStep
	pretok     []splitStep
	decoder    decoderChain

	rawAdded  *matcher // added tokens with normalized=false, matched on the input
	normAdded *matcher // added tokens with normalized=true, matched on normalized text

	addedByText map[string]int32
	addedByID   map[int32]addedToken
	vocabSize   int

	bos, eos, pad, sot, eot int32

	pieceCache pieces
}

// UnsupportedError reports a tokenizer.json feature this package does not
// implement, so that a file is never silently tokenized differently from
// Hugging Face.
type UnsupportedError struct {
	Component string // e.g. "normalizer", "model", "added_tokens"
	Detail    string
}

func (e *UnsupportedError) Error() string {
	return fmt.Sprintf("tokenizer.json: unsupported %s: %s", e.Component, e.Detail)
}

func unsupported(component, format string, args ...any) error {
	return &UnsupportedError{Component: component, Detail: fmt.Sprintf(format, args...)}
}

// MaxFileBytes bounds a tokenizer.json (Gemma's is 33 MB).
const MaxFileBytes = 256 << 20

// Load reads and parses a Hugging Face tokenizer.json.
func Load(path string) (*Tokenizer, error) {
	data, err := safefile.ReadFile(path, MaxFileBytes)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	t, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: load %s: %w", path, err)
	}
	return t, nil
}

type addedToken struct {
	ID         int32  `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

// Parse builds a Tokenizer from the bytes of a tokenizer.json.
func Parse(data []byte) (*Tokenizer, error) {
	if !utf8.Valid(data) {
		return nil, errors.New("tokenizer.json is not valid UTF-8")
	}
	sc := &scanner{data: data}
	raws := map[string][]byte{}
	haveModel := false
	t := &Tokenizer{}
	err := sc.object(func(key []byte) error {
		switch k := string(key); k {
		case "model":
			haveModel = true
			return parseModel(sc, &t.model)
		case "version", "truncation", "padding", "added_tokens", "normalizer",
			"pre_tokenizer", "post_processor", "decoder":
			v, err := sc.raw()
			raws[k] = v
			return err
		default:
			return unsupported("top-level key", "%q", k)
		}
	})
	if err != nil {
		return nil, err
	}
	if sc.peek() != 0 {
		return nil, sc.errorf("trailing data after the top-level object")
	}
	if !haveModel {
		return nil, errors.New("tokenizer.json has no model")
	}

	var version string
	if err := json.Unmarshal(orNull(raws["version"]), &version); err != nil || version != "1.0" {
		return nil, unsupported("version", "%s (want \"1.0\")", raws["version"])
	}
	for _, k := range []string{"truncation", "padding"} {
		if !isNull(raws[k]) {
			return nil, unsupported(k, "%s (Encode never truncates or pads)", raws[k])
		}
	}
	if t.normalizer, err = parseNormalizer(orNull(raws["normalizer"])); err != nil {
		return nil, err
	}
	if t.pretok, err = parsePreTokenizer(orNull(raws["pre_tokenizer"])); err != nil {
		return nil, err
	}
	if t.decoder, err = parseDecoder(orNull(raws["decoder"])); err != nil {
		return nil, err
	}
	// post_processor only runs with add_special_tokens=true, which Encode
	// never does; it is accepted and ignored.
	if err := t.setupAdded(orNull(raws["added_tokens"])); err != nil {
		return nil, err
	}
	for _, sp := range []struct {
		dst  *int32
		text string
	}{{&t.bos, "<bos>"}, {&t.eos, "<eos>"}, {&t.pad, "<pad>"}} {
		id, ok := t.Lookup(sp.text)
		if !ok {
			return nil, fmt.Errorf("not a Gemma tokenizer: no %s token", sp.text)
		}
		*sp.dst = id
	}
	if err := t.setupTurns(); err != nil {
		return nil, err
	}
	return t, nil
}

// turnTokens are the tokens that open and close a chat turn, by family:
// Gemma 4's first (a file with both is Gemma 4's: Gemma 3's vocabulary has
// no "<|turn>"), then Gemma 3's and 3n's.
var turnTokens = [][2]string{{"<|turn>", "<turn|>"}, {"<start_of_turn>", "<end_of_turn>"}}

// setupTurns finds the turn tokens of the file's family.
func (t *Tokenizer) setupTurns() error {
	for _, p := range turnTokens {
		sot, ok1 := t.Lookup(p[0])
		eot, ok2 := t.Lookup(p[1])
		if ok1 && ok2 {
			t.sot, t.eot = sot, eot
			return nil
		}
	}
	return fmt.Errorf("not a Gemma tokenizer: no turn tokens (neither Gemma 3's %s and %s nor Gemma 4's %s and %s)",
		turnTokens[1][0], turnTokens[1][1], turnTokens[0][0], turnTokens[0][1])
}

func orNull(b []byte) []byte {
	if b == nil {
		return []byte("null")
	}
	return b
}

func isNull(b []byte) bool { return b == nil || string(b) == "null" }

// setupAdded registers the added tokens the way HF's AddedVocabulary does.
func (t *Tokenizer) setupAdded(raw []byte) error {
	var list []addedToken
	if !isNull(raw) {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&list); err != nil {
			return fmt.Errorf("added_tokens: %w", err)
		}
	}
	t.addedByText = make(map[string]int32, len(list))
	t.addedByID = make(map[int32]addedToken, len(list))
	var rawToks, normToks []matchToken
	maxID := t.model.maxID
	maxAdded := int32(-1)
	for _, a := range list {
		if a.Content == "" {
			continue // HF ignores empty added tokens
		}
		if _, dup := t.addedByText[a.Content]; dup {
			return unsupported("added_tokens", "%q is listed twice", a.Content)
		}
		// HF does not trust the listed id: a token already in the vocabulary
		// keeps its vocabulary id, a new one gets the next free id. A file
		// whose ids differ from that would be tokenized differently.
		want, inVocab := t.model.vocab.get(a.Content)
		if !inVocab {
			want = int32(t.model.vocab.len())
			if maxAdded >= 0 && (maxAdded >= want || want == 0) {
				want = maxAdded + 1
			}
		}
		if !inVocab {
			if other, taken := t.model.token(want); taken {
				return unsupported("added_tokens", "%q would get id %d, which the vocabulary gives to %q", a.Content, want, other)
			}
		}
		if a.ID != want {
			return unsupported("added_tokens", "%q is listed with id %d but Hugging Face would give it %d", a.Content, a.ID, want)
		}
		if old, dup := t.addedByID[a.ID]; dup {
			return unsupported("added_tokens", "id %d is used by %q and %q", a.ID, old.Content, a.Content)
		}
		maxAdded = max(maxAdded, a.ID)
		t.addedByText[a.Content] = a.ID
		t.addedByID[a.ID] = a
		maxID = max(maxID, a.ID)
		mt := matchToken{id: a.ID, singleWord: a.SingleWord, lstrip: a.LStrip, rstrip: a.RStrip, special: a.Special}
		if a.Normalized {
			// Normalized tokens match their normalized form in normalized text.
			mt.text = applyNormalizer(t.normalizer, a.Content)
			if mt.text == "" {
				continue
			}
			normToks = append(normToks, mt)
		} else {
			mt.text = a.Content
			rawToks = append(rawToks, mt)
		}
	}
	t.rawAdded = newMatcher(rawToks)
	t.normAdded = newMatcher(normToks)
	t.vocabSize = int(maxID) + 1
	return nil
}

// VocabSize is one more than the largest token id (the model vocabulary
// plus added tokens): every valid id is below it.
func (t *Tokenizer) VocabSize() int { return t.vocabSize }

// Lookup returns the id of a token given its exact text (e.g. "<bos>",
// "▁space", "<0x0A>"), preferring added tokens like HF's token_to_id.
func (t *Tokenizer) Lookup(text string) (int32, bool) {
	if id, ok := t.addedByText[text]; ok {
		return id, true
	}
	id, ok := t.model.vocab.get(text)
	return id, ok
}

// TokenText returns the text of a token as stored in the vocabulary (with
// "▁" for spaces and "<0xNN>" for byte tokens), or "" for an unknown id.
func (t *Tokenizer) TokenText(id int32) string {
	s, _ := t.tokenString(id)
	return s
}

func (t *Tokenizer) tokenString(id int32) (string, bool) {
	if a, ok := t.addedByID[id]; ok {
		return a.Content, true
	}
	return t.model.token(id)
}

// IsSpecial reports whether id is an added token marked special (such as
// <bos>, <eos>, <start_of_turn>); HF skips these when asked to.
func (t *Tokenizer) IsSpecial(id int32) bool {
	a, ok := t.addedByID[id]
	return ok && a.Special
}

// IsAdded reports whether id is one of tokenizer.json's added tokens
// (special or not), rather than an entry of the model's vocabulary only.
func (t *Tokenizer) IsAdded(id int32) bool {
	_, ok := t.addedByID[id]
	return ok
}

// BOS is the id of "<bos>".
func (t *Tokenizer) BOS() int32 { return t.bos }

// EOS is the id of "<eos>".
func (t *Tokenizer) EOS() int32 { return t.eos }

// PAD is the id of "<pad>".
func (t *Tokenizer) PAD() int32 { return t.pad }

// StartOfTurn is the id of the token that opens a chat turn:
// "<start_of_turn>" (Gemma 3, 3n) or "<|turn>" (Gemma 4).
func (t *Tokenizer) StartOfTurn() int32 { return t.sot }

// EndOfTurn is the id of the token that closes a chat turn:
// "<end_of_turn>" (Gemma 3, 3n) or "<turn|>" (Gemma 4).
func (t *Tokenizer) EndOfTurn() int32 { return t.eot }

// StopIDs are the ids that end a generated model turn: <eos> and
// EndOfTurn's.
func (t *Tokenizer) StopIDs() []int32 { return []int32{t.eos, t.eot} }

// Encode tokenizes text like HF's encode(text, add_special_tokens=False).
// Added tokens written in the text (e.g. "<start_of_turn>") become their
// ids. Bytes that are not valid UTF-8 are encoded as byte tokens. Use it
// only for text a prompt builder wrote; untrusted text goes through
// EncodePlain or a plain Part of EncodeParts.
func (t *Tokenizer) Encode(text string) []int32 {
	return t.EncodeParts([]Part{{Text: text, Control: true}})
}

// EncodePlain tokenizes untrusted text like HF's encode(text,
// add_special_tokens=False) with split_special_tokens=True: special tokens
// written in the text ("<end_of_turn>", "<bos>", ...) stay text and are
// tokenized as such; other added tokens (whitespace runs, "<unused0>") still
// match, as in HF.
func (t *Tokenizer) EncodePlain(text string) []int32 {
	return t.EncodeParts([]Part{{Text: text}})
}

// Part is a piece of text for EncodeParts. In Control text, special tokens
// written as text become their ids (the prompt builder's "<bos>",
// "<start_of_turn>", ...); in other text they stay text.
type Part struct {
	Text    string
	Control bool
}

// EncodeParts tokenizes the concatenation of parts in one pass, so that the
// ids are those of the whole text (merges may cross a part boundary), except
// that a special token matches only where it lies wholly inside one Control
// part.
func (t *Tokenizer) EncodeParts(parts []Part) []int32 {
	var b strings.Builder
	var control [][2]int // [begin, end) of each Control part
	allControl := true
	for _, p := range parts {
		if p.Control {
			control = append(control, [2]int{b.Len(), b.Len() + len(p.Text)})
		} else if p.Text != "" {
			allControl = false
		}
		b.WriteString(p.Text)
	}
	text := b.String()
	// inControl reports whether [start, stop) lies in one Control part.
	inControl := func(start, stop int) bool {
		for _, r := range control {
			if start >= r[0] && stop <= r[1] {
				return true
			}
		}
		return false
	}
	var skip func(start, stop int) (int, bool)
	if !allControl {
		skip = func(start, stop int) (int, bool) {
			if inControl(start, stop) {
				return 0, false
			}
			// Resume after the match, or where a Control part begins
			// inside it, so the builder's own tokens still match.
			for _, r := range control {
				if r[0] > start && r[0] < stop {
					return r[0], true
				}
			}
			return stop, true
		}
	}
	out := make([]int32, 0, len(text)/4+4)
	t.rawAdded.splitSkip(text, skip, func(piece string, at int, id int32) {
		if id >= 0 {
			out = append(out, id)
			return
		}
		norm := applyNormalizer(t.normalizer, piece)
		// Offsets do not survive normalization: a normalized special token
		// matches only in a piece wholly inside one Control part.
		var normSkip func(int, int) (int, bool)
		if skip != nil && !inControl(at, at+len(piece)) {
			normSkip = func(_, stop int) (int, bool) { return stop, true }
		}
		t.normAdded.splitSkip(norm, normSkip, func(p string, _ int, id int32) {
			if id >= 0 {
				out = append(out, id)
				return
			}
			preTokenize(t.pretok, p, func(word string) {
				out = t.model.encodeWord(word, out)
			})
		})
	})
	return out
}
