package ggufwrite

import (
	"fmt"
	"strings"

	"verdict/engine/tokenizer"
)

// GemmaVocab converts Gemma's tokenizer.json to the "llama" vocabulary
// metadata convert_hf_to_gguf.py writes from Gemma's tokenizer.model and
// tokenizer_config.json, for a model vocabulary of size ids:
//
//   - an added token is CONTROL when special or when it looks special to the
//     converter (<pad>, <mask>, <unusedN>, <|…|> …), else USER_DEFINED with
//     "▁" written as a space; score −1000;
//   - a byte token <0xNN> is BYTE, score 0;
//   - any other vocabulary entry is NORMAL with score −id: SentencePiece's
//     BPE numbers pieces in the order of their scores, so this keeps the
//     order llama.cpp merges by, though not the file's values (tokenizer.json
//     does not keep them);
//   - ids past the tokenizer's are [PADid], UNUSED, score −10000.
//
// add_bos_token is true and add_eos_token false, as Gemma's
// tokenizer_config.json says.
func GemmaVocab(tok *tokenizer.Tokenizer, size int) (Vocab, error) {
	if tok.VocabSize() > size {
		return Vocab{}, fmt.Errorf("ggufwrite: the tokenizer has %d tokens, more than the model's vocabulary of %d", tok.VocabSize(), size)
	}
	v := Vocab{Tokens: make([]string, size), Scores: make([]float32, size), Types: make([]int32, size), UNK: -1}
	for id := range size {
		text := tok.TokenText(int32(id))
		switch {
		case id >= tok.VocabSize() || text == "":
			v.Tokens[id], v.Scores[id], v.Types[id] = fmt.Sprintf("[PAD%d]", id), -10000, TokenUnused
		case tok.IsAdded(int32(id)):
			v.Scores[id], v.Types[id] = -1000, TokenControl
			if !tok.IsSpecial(int32(id)) && !looksSpecial(text) {
				text, v.Types[id] = strings.ReplaceAll(text, "▁", " "), TokenUserDefined
			}
			v.Tokens[id] = text
		case isByteToken(text):
			v.Tokens[id], v.Types[id] = text, TokenByte
		case text == "<unk>":
			v.Tokens[id], v.Types[id] = text, TokenUnknown
		default:
			v.Tokens[id], v.Scores[id], v.Types[id] = text, -float32(id), TokenNormal
		}
	}
	if id, ok := tok.Lookup("<unk>"); ok && int(id) < size {
		v.UNK = int(id)
	}
	yes, no := true, false
	v.AddBOS, v.AddEOS = &yes, &no
	return v, nil
}

// looksSpecial is the converter's test for added tokens that ought to be
// control tokens though not marked special.
func looksSpecial(s string) bool {
	switch s {
	case "<pad>", "<mask>", "<2mass>", "[@BOS@]":
		return true
	}
	return strings.HasPrefix(s, "<|") && strings.HasSuffix(s, "|>") ||
		strings.HasPrefix(s, "<｜") && strings.HasSuffix(s, "｜>") ||
		strings.HasPrefix(s, "<unused") && strings.HasSuffix(s, ">")
}

func isByteToken(s string) bool {
	hex := func(c byte) bool { return '0' <= c && c <= '9' || 'A' <= c && c <= 'F' }
	return len(s) == 6 && strings.HasPrefix(s, "<0x") && s[5] == '>' && hex(s[3]) && hex(s[4])
}

// ByteVocab is a SentencePiece-style vocabulary of size ids for models
// without a tokenizer of their own (the small synthetic presets): <pad>,
// <eos> and <bos> at the config's ids (CONTROL), <unk> at the first free id
// (UNKNOWN), the 256 byte tokens <0x00>…<0xFF> (BYTE) after them as far as
// they fit, then [PADid] (UNUSED), as the converter pads. llama.cpp
// tokenizes any text with it, byte by byte.
func ByteVocab(size, pad, eos, bos int) (Vocab, error) {
	v := Vocab{Tokens: make([]string, size), Scores: make([]float32, size), Types: make([]int32, size), UNK: -1}
	for _, s := range []struct {
		id   int
		text string
	}{{pad, "<pad>"}, {eos, "<eos>"}, {bos, "<bos>"}} {
		if s.id < 0 || s.id >= size || v.Tokens[s.id] != "" {
			return Vocab{}, fmt.Errorf("ggufwrite: %s id %d: out of the vocabulary of %d or taken", s.text, s.id, size)
		}
		v.Tokens[s.id], v.Types[s.id] = s.text, TokenControl
	}
	next := 0
	free := func() int {
		for next < size && v.Tokens[next] != "" {
			next++
		}
		return next
	}
	if id := free(); id < size {
		v.Tokens[id], v.Types[id] = "<unk>", TokenUnknown // not named in the metadata, as the converter leaves it without a tokenizer_config.json
	}
	for b := 0; b < 256; b++ {
		id := free()
		if id >= size {
			break
		}
		v.Tokens[id], v.Types[id] = fmt.Sprintf("<0x%02X>", b), TokenByte
	}
	for id := free(); id < size; id = free() {
		v.Tokens[id], v.Scores[id], v.Types[id] = fmt.Sprintf("[PAD%d]", id), -10000, TokenUnused
	}
	return v, nil
}
