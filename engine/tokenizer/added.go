package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// matchToken is an added token as the matcher sees it.
type matchToken struct {
	text                       string
	id                         int32
	singleWord, lstrip, rstrip bool
	special                    bool
}

// matcher finds added tokens in text the way HF's AddedVocabulary does with
// its leftmost-longest Aho-Corasick automaton: at the leftmost position
// where any token matches, the longest one wins, and the search resumes
// after it. A byte trie is enough here: tokens are short, and the first-byte
// table skips almost every position of ordinary text.
type matcher struct {
	first [256]bool
	nodes []trieNode
	toks  []matchToken
}

type trieNode struct {
	edges []trieEdge
	tok   int32 // index into toks, or -1
}

type trieEdge struct {
	b  byte
	to int32
}

func newMatcher(toks []matchToken) *matcher {
	m := &matcher{toks: toks, nodes: []trieNode{{tok: -1}}}
	for i, t := range toks {
		m.first[t.text[0]] = true
		n := int32(0)
		for j := 0; j < len(t.text); j++ {
			n = m.child(n, t.text[j], true)
		}
		m.nodes[n].tok = int32(i)
	}
	return m
}

func (m *matcher) child(n int32, b byte, create bool) int32 {
	edges := m.nodes[n].edges
	for _, e := range edges {
		if e.b == b {
			return e.to
		}
	}
	if !create {
		return -1
	}
	to := int32(len(m.nodes))
	m.nodes = append(m.nodes, trieNode{tok: -1})
	m.nodes[n].edges = append(m.nodes[n].edges, trieEdge{b, to})
	return to
}

// longest returns the index of the longest token that starts at s[i:], or -1.
func (m *matcher) longest(s string, i int) int32 {
	best := int32(-1)
	n := int32(0)
	for j := i; j < len(s); j++ {
		if n = m.child(n, s[j], false); n < 0 {
			break
		}
		if t := m.nodes[n].tok; t >= 0 {
			best = t
		}
	}
	return best
}

// split cuts s into pieces: added tokens (id >= 0) and the text between
// them (id -1), in order, following HF's find_matches including the
// single_word, lstrip and rstrip rules.
func (m *matcher) split(s string, emit func(piece string, id int32)) {
	m.splitSkip(s, nil, func(piece string, _ int, id int32) { emit(piece, id) })
}

// splitSkip is split with special tokens filtered: a special token matched
// at [start, stop) is left as text when skip says so, and the search
// resumes at the offset skip returns (HF's encode_special_tokens resumes
// after the match). emit also gets each piece's offset in s.
func (m *matcher) splitSkip(s string, skip func(start, stop int) (resume int, skipped bool), emit func(piece string, at int, id int32)) {
	if len(m.toks) == 0 {
		if s != "" {
			emit(s, 0, -1)
		}
		return
	}
	done := 0 // end of the last emitted piece
	for i := 0; i < len(s); {
		if !m.first[s[i]] {
			i++
			continue
		}
		ti := m.longest(s, i)
		if ti < 0 {
			i++
			continue
		}
		t := &m.toks[ti]
		start, stop := i, i+len(t.text)
		i = stop // the automaton resumes after the raw match
		if t.special && skip != nil {
			if resume, skipped := skip(start, stop); skipped {
				i = resume
				continue
			}
		}
		if t.singleWord && (endsWithWord(s[:start]) || startsWithWord(s[stop:])) {
			continue
		}
		if start < done {
			// Only possible after an rstrip token swallowed whitespace that
			// begins this match; HF would emit overlapping pieces here.
			continue
		}
		if t.lstrip {
			start = max(done, start-spaceSuffixLen(s[:start]))
		}
		if t.rstrip {
			stop += spacePrefixLen(s[stop:])
		}
		if done < start {
			emit(s[done:start], done, -1)
		}
		emit(s[start:stop], start, t.id)
		done = stop
	}
	if done < len(s) {
		emit(s[done:], done, -1)
	}
}

// isWordChar is regex \w in Rust's Unicode mode: Alphabetic, marks,
// decimal digits, connector punctuation and join controls.
func isWordChar(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsMark(r) || unicode.Is(unicode.Nd, r) ||
		unicode.Is(unicode.Nl, r) || unicode.Is(unicode.Pc, r) ||
		unicode.Is(unicode.Other_Alphabetic, r) || unicode.Is(unicode.Join_Control, r)
}

func endsWithWord(s string) bool {
	r, n := utf8.DecodeLastRuneInString(s)
	return n > 0 && isWordChar(r)
}

func startsWithWord(s string) bool {
	r, n := utf8.DecodeRuneInString(s)
	return n > 0 && isWordChar(r)
}

// spaceSuffixLen is the byte length of the white space (regex \s) ending s.
func spaceSuffixLen(s string) int {
	n := 0
	for len(s) > n {
		r, size := utf8.DecodeLastRuneInString(s[:len(s)-n])
		if !unicode.IsSpace(r) {
			break
		}
		n += size
	}
	return n
}

// spacePrefixLen is the byte length of the white space starting s.
func spacePrefixLen(s string) int {
	n := 0
	for n < len(s) {
		r, size := utf8.DecodeRuneInString(s[n:])
		if !unicode.IsSpace(r) {
			break
		}
		n += size
	}
	return n
}
