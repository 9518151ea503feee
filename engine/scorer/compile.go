package scorer

import (
	"container/list"
	"fmt"
	"slices"
	"strings"
	"sync"

	"verdict/engine/model"
	"verdict/engine/prompt"
	"verdict/engine/tokenizer"
)

// Tokenizer is what the scorer needs of a tokenizer: text to ids, without
// adding BOS. Encode matches special tokens written as text, EncodePlain
// keeps them text, EncodeParts mixes the two (see package tokenizer).
type Tokenizer interface {
	Encode(text string) []int32
	EncodePlain(text string) []int32
	EncodeParts(parts []tokenizer.Part) []int32
}

// compiled is a schema compiled for one prompt: token ids only.
type compiled struct {
	prefixIDs []int32
	decisions []compiledDecision
}

// compiledDecision is one branch: the tokens shared by every candidate (the
// JSON key and any common leading value tokens) and each candidate's
// remaining tokens. Scores count the tokens from shared[scoreFrom:] on, so
// they are always log-likelihoods of complete JSON values.
type compiledDecision struct {
	decision
	shared    []int32
	scoreFrom int
	cands     [][]int32
	// terminated: candidates carry the closing brace because one value's
	// tokens were a prefix of another's (" 1" and " 10").
	terminated bool
	// fixed: the value merged with the key when tokenized in one piece; the
	// canonical tokens of the complete text are scored instead.
	fixed bool
}

// after returns the tokens of text after the prompt's tail (promptTail's),
// or false when they merge with the tail.
func after(tok Tokenizer, tail, text string) ([]int32, bool) {
	t := tok.EncodePlain(tail)
	ids := tok.EncodePlain(tail + text)
	if !slices.Equal(ids[:min(len(t), len(ids))], t) {
		return nil, false
	}
	return ids[len(t):], true
}

// compile tokenizes the prompt, written in chat format ch, and every
// decision, checking the boundaries. Answers are plain text: a field or
// option name cannot end the model's turn.
func compile(tok Tokenizer, p prompt.Prompt, ds []decision, ch model.Chat) (*compiled, error) {
	ids, err := p.Encode(tok, ch.Media)
	if err != nil {
		return nil, fmt.Errorf("scorer: %w", err)
	}
	c := &compiled{prefixIDs: ids}
	if n := len(c.prefixIDs); n > MaxInputTokens {
		return nil, &LimitError{"processed input tokens", n, MaxInputTokens}
	}
	tail := promptTail(ch)
	if !hasSuffix(c.prefixIDs, tok.EncodePlain(tail)) {
		return nil, fmt.Errorf("scorer: the prompt does not end in %q tokens", tail)
	}
	after := func(text string) ([]int32, bool) { return after(tok, tail, text) }
	for _, d := range ds {
		cd, err := compileDecision(tok, d, after)
		if err != nil {
			return nil, err
		}
		c.decisions = append(c.decisions, cd)
	}
	return c, nil
}

func compileDecision(tok Tokenizer, d decision, after func(string) ([]int32, bool)) (compiledDecision, error) {
	bad := func(format string, a ...any) error {
		return &SchemaError{Field: d.name, Msg: fmt.Sprintf(format, a...)}
	}
	key, ok := after(d.key)
	if !ok || !slices.Equal(key, tok.EncodePlain(d.key)) {
		return compiledDecision{}, bad("its JSON key %s merges with the end of the prompt when tokenized", d.key)
	}
	cd := compiledDecision{decision: d}
	for attempt := 0; attempt < 2; attempt++ {
		texts := d.texts
		if cd.terminated {
			texts = make([]string, len(d.texts))
			for i, t := range d.texts {
				texts[i] = t + "}"
			}
		}
		joints := make([][]int32, len(texts))
		cd.fixed = false
		for i, t := range texts {
			j, ok := after(d.key + t)
			if !ok {
				return cd, bad("value %s merges with the end of the prompt", strings.TrimSpace(t))
			}
			if !slices.Equal(j, append(slices.Clone(key), tok.EncodePlain(t)...)) {
				cd.fixed = true // boundary merge: score the canonical tokens
			}
			joints[i] = j
		}
		// Score from the first token where any candidate leaves the key.
		cd.scoreFrom = len(key)
		for _, j := range joints {
			cd.scoreFrom = min(cd.scoreFrom, commonPrefix(j, key))
		}
		if cd.scoreFrom == 0 {
			return cd, bad("its values merge with the first token of its JSON key")
		}
		lcp := len(joints[0])
		for _, j := range joints[1:] {
			lcp = min(lcp, commonPrefix(j, joints[0]))
		}
		cd.shared = joints[0][:lcp]
		cd.cands = make([][]int32, len(joints))
		prefixOfOther := false
		seen := map[string]bool{}
		for i, j := range joints {
			cd.cands[i] = j[lcp:]
			if len(cd.cands[i]) == 0 {
				prefixOfOther = true
			}
			k := fmt.Sprint(j)
			if seen[k] {
				return cd, bad("two values tokenize identically (%s)", strings.TrimSpace(texts[i]))
			}
			seen[k] = true
		}
		for a := range joints {
			for b := range joints {
				if a != b && hasPrefix(joints[b], joints[a]) {
					prefixOfOther = true
				}
			}
		}
		if !prefixOfOther {
			return cd, nil
		}
		if cd.terminated {
			return cd, bad("one value's tokens are a prefix of another's even with the closing brace")
		}
		cd.terminated = true
	}
	return cd, nil
}

func commonPrefix(a, b []int32) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

func hasPrefix(a, p []int32) bool { return len(a) >= len(p) && slices.Equal(a[:len(p)], p) }
func hasSuffix(a, s []int32) bool { return len(a) >= len(s) && slices.Equal(a[len(a)-len(s):], s) }

// schemaCache is an LRU of compiled schemas keyed by the complete prompt and
// the candidate definitions. It holds token ids only.
type schemaCache struct {
	mu    sync.Mutex
	max   int
	order *list.List // of *cacheEntry, most recent first
	byKey map[string]*list.Element
}

type cacheEntry struct {
	key string
	c   *compiled
}

func newSchemaCache(max int) *schemaCache {
	return &schemaCache{max: max, order: list.New(), byKey: map[string]*list.Element{}}
}

// cacheKey identifies a compiled prompt: every segment's kind (builder
// text, user text or ids) and content, then the decisions, so that user
// text can never reuse the ids of the same text written by the builder or
// of a media run.
func cacheKey(p prompt.Prompt, ds []decision) string {
	var b strings.Builder
	for _, s := range p {
		switch {
		case s.IDs != nil:
			fmt.Fprintf(&b, "\x03%v", s.IDs)
		case s.User:
			b.WriteString("\x04" + s.Text)
		default:
			b.WriteString("\x05" + s.Text)
		}
	}
	for _, d := range ds {
		fmt.Fprintf(&b, "\x00%s\x01%s", d.key, strings.Join(d.texts, "\x02"))
	}
	return b.String()
}

func (sc *schemaCache) get(key string) (*compiled, bool) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if e, ok := sc.byKey[key]; ok {
		sc.order.MoveToFront(e)
		return e.Value.(*cacheEntry).c, true
	}
	return nil, false
}

func (sc *schemaCache) put(key string, c *compiled) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if e, ok := sc.byKey[key]; ok {
		sc.order.MoveToFront(e)
		e.Value.(*cacheEntry).c = c
		return
	}
	sc.byKey[key] = sc.order.PushFront(&cacheEntry{key, c})
	for sc.order.Len() > sc.max {
		last := sc.order.Back()
		sc.order.Remove(last)
		delete(sc.byKey, last.Value.(*cacheEntry).key)
	}
}

func (sc *schemaCache) len() int {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return sc.order.Len()
}
