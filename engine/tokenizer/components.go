package tokenizer

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// component is one normalizer, pre-tokenizer or decoder object, kept as raw
// members so that each type can refuse keys it does not know.
type component map[string]json.RawMessage

func parseComponent(what string, raw []byte) (component, string, error) {
	var c component
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, "", fmt.Errorf("%s: %w", what, err)
	}
	var typ string
	if err := json.Unmarshal(orNull(c["type"]), &typ); err != nil || typ == "" {
		return nil, "", unsupported(what, "missing or invalid type in %s", raw)
	}
	return c, typ, nil
}

// only checks that c has no keys outside allowed (besides "type").
func (c component) only(what, typ string, allowed ...string) error {
	for k := range c {
		if k != "type" && !slices.Contains(allowed, k) {
			return unsupported(what, "%s with key %q", typ, k)
		}
	}
	return nil
}

func (c component) field(what, key string, dst any) error {
	raw, ok := c[key]
	if !ok {
		return unsupported(what, "missing %q", key)
	}
	if err := json.Unmarshal(raw, dst); err != nil {
		return fmt.Errorf("%s.%s: %w", what, key, err)
	}
	return nil
}

// stringPattern reads {"String": "..."}; regex patterns are not supported.
func (c component) stringPattern(what, typ string) (string, error) {
	var p map[string]string
	if err := c.field(what, "pattern", &p); err != nil {
		return "", err
	}
	s, ok := p["String"]
	if len(p) != 1 || !ok {
		return "", unsupported(what, "%s pattern %s (only {\"String\": ...})", typ, c["pattern"])
	}
	if s == "" {
		return "", unsupported(what, "%s with an empty pattern", typ)
	}
	return s, nil
}

// normStep is one normalizer: Replace (pattern → content) or Prepend.
type normStep struct {
	pattern, content string // Replace
	prepend          string // Prepend, when pattern == ""
}

func applyNormalizer(steps []normStep, s string) string {
	for _, st := range steps {
		if st.pattern != "" {
			s = strings.ReplaceAll(s, st.pattern, st.content)
		} else if s != "" {
			s = st.prepend + s
		}
	}
	return s
}

// parseSequence reads a Sequence component: its list under key, each entry
// parsed by parse, their steps concatenated in order.
func parseSequence[T any](c component, what, typ, key string, parse func([]byte) ([]T, error)) ([]T, error) {
	if err := c.only(what, typ, key); err != nil {
		return nil, err
	}
	var subs []json.RawMessage
	if err := c.field(what, key, &subs); err != nil {
		return nil, err
	}
	var steps []T
	for _, sub := range subs {
		if isNull(sub) {
			return nil, unsupported(what, "null inside Sequence")
		}
		s, err := parse(sub)
		if err != nil {
			return nil, err
		}
		steps = append(steps, s...)
	}
	return steps, nil
}

func parseNormalizer(raw []byte) ([]normStep, error) {
	const what = "normalizer"
	if isNull(raw) {
		return nil, nil
	}
	c, typ, err := parseComponent(what, raw)
	if err != nil {
		return nil, err
	}
	switch typ {
	case "Sequence":
		return parseSequence(c, what, typ, "normalizers", parseNormalizer)
	case "Replace":
		if err := c.only(what, typ, "pattern", "content"); err != nil {
			return nil, err
		}
		var st normStep
		if st.pattern, err = c.stringPattern(what, typ); err != nil {
			return nil, err
		}
		if err := c.field(what, "content", &st.content); err != nil {
			return nil, err
		}
		return []normStep{st}, nil
	case "Prepend":
		if err := c.only(what, typ, "prepend"); err != nil {
			return nil, err
		}
		var st normStep
		if err := c.field(what, "prepend", &st.prepend); err != nil {
			return nil, err
		}
		return []normStep{st}, nil
	}
	return nil, unsupported(what, "type %q", typ)
}

// splitStep is HF's Split pre-tokenizer with a literal pattern.
type splitStep struct {
	pattern  string
	behavior string
}

func parsePreTokenizer(raw []byte) ([]splitStep, error) {
	const what = "pre_tokenizer"
	if isNull(raw) {
		return nil, nil
	}
	c, typ, err := parseComponent(what, raw)
	if err != nil {
		return nil, err
	}
	switch typ {
	case "Sequence":
		return parseSequence(c, what, typ, "pretokenizers", parsePreTokenizer)
	case "Split":
		if err := c.only(what, typ, "pattern", "behavior", "invert"); err != nil {
			return nil, err
		}
		var st splitStep
		if st.pattern, err = c.stringPattern(what, typ); err != nil {
			return nil, err
		}
		if err := c.field(what, "behavior", &st.behavior); err != nil {
			return nil, err
		}
		switch st.behavior {
		case "Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous":
		default:
			return nil, unsupported(what, "Split behavior %q", st.behavior)
		}
		var invert bool
		if _, ok := c["invert"]; ok {
			if err := c.field(what, "invert", &invert); err != nil {
				return nil, err
			}
		}
		if invert {
			return nil, unsupported(what, "Split with invert=true")
		}
		return []splitStep{st}, nil
	}
	return nil, unsupported(what, "type %q", typ)
}

// preTokenize applies the Split steps in order, each to every piece left by
// the previous one, and calls emit for each final non-empty piece.
func preTokenize(steps []splitStep, s string, emit func(string)) {
	if len(steps) == 0 {
		if s != "" {
			emit(s)
		}
		return
	}
	st, rest := steps[0], steps[1:]
	if !strings.Contains(s, st.pattern) {
		preTokenize(rest, s, emit)
		return
	}
	for _, p := range st.split(s) {
		preTokenize(rest, p, emit)
	}
}

// split follows HF's SplitDelimiterBehavior on the list of alternating
// non-match/match pieces (every occurrence of the pattern is its own match).
func (st splitStep) split(s string) []string {
	type piece struct {
		start, end int
		match      bool
	}
	var ps []piece
	for i := 0; i < len(s); {
		j := strings.Index(s[i:], st.pattern)
		if j < 0 {
			ps = append(ps, piece{i, len(s), false})
			break
		}
		if j > 0 {
			ps = append(ps, piece{i, i + j, false})
		}
		e := i + j + len(st.pattern)
		ps = append(ps, piece{i + j, e, true})
		i = e
	}
	var out []piece
	switch st.behavior {
	case "Removed":
		for _, p := range ps {
			if !p.match {
				out = append(out, p)
			}
		}
	case "Isolated":
		out = ps
	case "MergedWithPrevious":
		prev := false
		for _, p := range ps {
			if p.match && !prev && len(out) > 0 {
				out[len(out)-1].end = p.end
			} else {
				out = append(out, p)
			}
			prev = p.match
		}
	case "MergedWithNext":
		prev := false
		for i := len(ps) - 1; i >= 0; i-- {
			p := ps[i]
			if p.match && !prev && len(out) > 0 {
				out[len(out)-1].start = p.start
			} else {
				out = append(out, p)
			}
			prev = p.match
		}
		slices.Reverse(out)
	case "Contiguous":
		prev := false
		for _, p := range ps {
			if p.match == prev && len(out) > 0 {
				out[len(out)-1].end = p.end
			} else {
				out = append(out, p)
			}
			prev = p.match
		}
	}
	res := make([]string, 0, len(out))
	for _, p := range out {
		if p.end > p.start {
			res = append(res, s[p.start:p.end])
		}
	}
	return res
}

// decoderChain is a decoder Sequence of Replace steps, then optionally
// ByteFallback, then optionally Fuse. (Replace after ByteFallback would make
// per-token streaming inexact, and is refused.)
type decoderChain struct {
	replaces     []normStep // pattern → content, per token
	byteFallback bool
	fuse         bool // a trailing Fuse: the same as the final concatenation
}

func parseDecoder(raw []byte) (decoderChain, error) {
	const what = "decoder"
	var d decoderChain
	if isNull(raw) {
		// HF would join the tokens with spaces.
		return d, unsupported(what, "null (no decoder)")
	}
	c, typ, err := parseComponent(what, raw)
	if err != nil {
		return d, err
	}
	var steps []json.RawMessage
	if typ == "Sequence" {
		if err := c.only(what, typ, "decoders"); err != nil {
			return d, err
		}
		if err := c.field(what, "decoders", &steps); err != nil {
			return d, err
		}
	} else {
		steps = []json.RawMessage{raw}
	}
	for _, sraw := range steps {
		sc, styp, err := parseComponent(what, sraw)
		if err != nil {
			return d, err
		}
		if d.fuse {
			return d, unsupported(what, "%s after Fuse", styp)
		}
		switch styp {
		case "Replace":
			if err := sc.only(what, styp, "pattern", "content"); err != nil {
				return d, err
			}
			if d.byteFallback {
				return d, unsupported(what, "Replace after ByteFallback")
			}
			var st normStep
			if st.pattern, err = sc.stringPattern(what, styp); err != nil {
				return d, err
			}
			if err := sc.field(what, "content", &st.content); err != nil {
				return d, err
			}
			d.replaces = append(d.replaces, st)
		case "ByteFallback":
			if err := sc.only(what, styp); err != nil {
				return d, err
			}
			if d.byteFallback {
				return d, unsupported(what, "ByteFallback twice")
			}
			d.byteFallback = true
		case "Fuse":
			if err := sc.only(what, styp); err != nil {
				return d, err
			}
			d.fuse = true
		default:
			return d, unsupported(what, "type %q", styp)
		}
	}
	return d, nil
}
