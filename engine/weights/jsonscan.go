package weights

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// The JSON of safetensors headers, checkpoint indexes and recipes is read
// where it lies: validated whole by json.Valid (which allocates nothing),
// then walked member by member, each key and value a slice of the input, so
// nothing is allocated that the caller has not charged to its budget first.

var errNotObject = errors.New("not a JSON object")

// maxNumber bounds the characters of a number read (a float64's shortest
// decimal takes at most 24).
const maxNumber = 64

// checkJSON validates b as one JSON value (whitespace around it allowed),
// with the syntax error encoding/json gives when it is not.
func checkJSON(b []byte) error {
	if err := checkDepth(b); err != nil {
		return err
	}
	if json.Valid(b) {
		return nil
	}
	if i := skipSpace(b, 0); i < len(b) && (b[i] == '{' || b[i] == '[') {
		if end := valueEnd(b, i); end < len(b) && json.Valid(b[:end]) {
			return errors.New("data after the JSON object")
		}
	}
	var v struct{}
	if err := json.Unmarshal(b, &v); err != nil { // fails on the syntax, before decoding
		return err
	}
	return errors.New("invalid JSON")
}

// maxJSONDepth bounds the nesting of the JSON files read here (the deepest
// real one, a safetensors header, nests 3 levels): the standard parser's
// state grows with the depth, twice for a file that fails.
const maxJSONDepth = 64

// checkDepth refuses JSON nested deeper than maxJSONDepth, in one pass
// that allocates nothing.
func checkDepth(b []byte) error {
	depth := 0
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '"':
			i = stringEnd(b, i) - 1
		case '{', '[':
			if depth++; depth > maxJSONDepth {
				return fmt.Errorf("JSON nested deeper than %d levels (at byte %d)", maxJSONDepth, i)
			}
		case '}', ']':
			depth--
		}
	}
	return nil
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// stringEnd is the index after the string that starts at b[i] (a quote).
func stringEnd(b []byte, i int) int {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return len(b)
}

// valueEnd is the index after the value that starts at b[i].
func valueEnd(b []byte, i int) int {
	switch b[i] {
	case '"':
		return stringEnd(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				j = stringEnd(b, j) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
		return len(b)
	}
	j := i
	for j < len(b) {
		switch b[j] {
		case ',', '}', ']', ' ', '\t', '\r', '\n':
			return j
		}
		j++
	}
	return j
}

// jsonMembers calls fn with each member of the object b (valid JSON) in
// order: the key still quoted, and the value.
func jsonMembers(b []byte, fn func(key, value []byte) error) error {
	return jsonItems(b, '{', fn)
}

// jsonElements calls fn with each element of the array b (valid JSON).
func jsonElements(b []byte, fn func(value []byte) error) error {
	return jsonItems(b, '[', func(_, v []byte) error { return fn(v) })
}

// jsonCount is the number of members of the object, or elements of the
// array, b (valid JSON).
func jsonCount(b []byte, open byte) (int, error) {
	n := 0
	err := jsonItems(b, open, func(_, _ []byte) error { n++; return nil })
	return n, err
}

func jsonItems(b []byte, open byte, fn func(key, value []byte) error) error {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != open {
		if open == '[' {
			return errors.New("not a JSON array")
		}
		return errNotObject
	}
	// b is valid JSON: every index below is inside it, but is checked all
	// the same rather than trusted.
	i = skipSpace(b, i+1)
	for i < len(b) && b[i] != '}' && b[i] != ']' {
		var key []byte
		if open == '{' {
			end := stringEnd(b, i)
			key = b[i:end]
			i = skipSpace(b, end)
			if i >= len(b) || b[i] != ':' {
				return errors.New("bad JSON object")
			}
			i = skipSpace(b, i+1)
			if i >= len(b) {
				return errors.New("bad JSON object")
			}
		}
		end := valueEnd(b, i)
		if err := fn(key, b[i:end]); err != nil {
			return err
		}
		i = skipSpace(b, end)
		if i < len(b) && b[i] == ',' {
			i = skipSpace(b, i+1)
		}
	}
	return nil
}

// jsonString unquotes the JSON string b of at most max bytes as encoded;
// what names it in errors.
func jsonString(b []byte, max int, what string) (string, error) {
	if len(b) < 2 || b[0] != '"' {
		return "", fmt.Errorf("%s %s is not a string", what, excerpt(b))
	}
	if len(b)-2 > max {
		return "", fmt.Errorf("%s of %d bytes, over the limit of %d", what, len(b)-2, max)
	}
	if bytes.IndexByte(b, '\\') < 0 {
		return string(b[1 : len(b)-1]), nil
	}
	s, err := unescape(b)
	if err != nil {
		return "", fmt.Errorf("%s %s: %w", what, excerpt(b), err)
	}
	return s, nil
}

// unescape decodes the JSON string b (its quotes included, already
// validated) in one allocation of at most len(b) − 2 bytes, what its
// callers charge for it (json.Unmarshal allocated several times that:
// about 97 KB for a 9 KB name). Bytes other than escapes are copied as they
// are, as jsonString's path without escapes does; a lone surrogate becomes
// U+FFFD, as in encoding/json.
func unescape(b []byte) (string, error) {
	var sb strings.Builder
	sb.Grow(len(b) - 2)
	end := len(b) - 1
	for i := 1; i < end; i++ {
		if b[i] != '\\' {
			sb.WriteByte(b[i])
			continue
		}
		if i++; i >= end {
			return "", errors.New("a cut escape")
		}
		switch c := b[i]; c {
		case '"', '\\', '/':
			sb.WriteByte(c)
		case 'b':
			sb.WriteByte('\b')
		case 'f':
			sb.WriteByte('\f')
		case 'n':
			sb.WriteByte('\n')
		case 'r':
			sb.WriteByte('\r')
		case 't':
			sb.WriteByte('\t')
		case 'u':
			r, ok := hex4(b, i+1, end)
			if !ok {
				return "", errors.New("a bad \\u escape")
			}
			i += 4
			if utf16.IsSurrogate(r) {
				r2, ok2 := rune(0), false
				if i+2 < end && b[i+1] == '\\' && b[i+2] == 'u' {
					r2, ok2 = hex4(b, i+3, end)
				}
				if d := utf16.DecodeRune(r, r2); ok2 && d != utf8.RuneError {
					r = d
					i += 6
				} else {
					r = utf8.RuneError
				}
			}
			sb.WriteRune(r)
		default:
			return "", fmt.Errorf("an unknown escape \\%c", c)
		}
	}
	return sb.String(), nil
}

// hex4: the rune of the four hex digits b[i:i+4], before end.
func hex4(b []byte, i, end int) (rune, bool) {
	if i+4 > end {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case '0' <= c && c <= '9':
			r = r<<4 | rune(c-'0')
		case 'a' <= c && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case 'A' <= c && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// jsonInts reads the array of integers b, of at most max elements; what
// names it in errors.
func jsonInts[T int | int64](b []byte, max int, what string) ([]T, error) {
	n, err := jsonCount(b, '[')
	if err != nil {
		return nil, fmt.Errorf("%s %s is not an array of integers", what, excerpt(b))
	}
	if n > max {
		return nil, fmt.Errorf("%s %s has %d elements, more than %d", what, excerpt(b), n, max)
	}
	out := make([]T, 0, n)
	err = jsonElements(b, func(v []byte) error {
		if len(v) > maxNumber {
			return fmt.Errorf("%s element %s is not a 64-bit integer", what, excerpt(v))
		}
		x, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil {
			return fmt.Errorf("%s element %s is not a 64-bit integer", what, excerpt(v))
		}
		if int64(T(x)) != x {
			return fmt.Errorf("%s element %s is out of range", what, excerpt(v))
		}
		out = append(out, T(x))
		return nil
	})
	return out, err
}

// jsonNumber reads the number b.
func jsonNumber(b []byte, what string) (float64, error) {
	if len(b) > maxNumber {
		return 0, fmt.Errorf("%s %s is not a number of at most %d characters", what, excerpt(b), maxNumber)
	}
	x, err := strconv.ParseFloat(string(b), 64)
	if err != nil {
		return 0, fmt.Errorf("%s %s is not a number", what, excerpt(b))
	}
	return x, nil
}

// excerpt is b for an error message, cut to its first 40 bytes.
func excerpt(b []byte) string {
	if len(b) > 40 {
		return fmt.Sprintf("%s... (%d bytes)", b[:40], len(b))
	}
	return string(b)
}

// CheckJSONFields refuses a JSON object (a model's config.json) whose named
// members take more than their limit in bytes of JSON, before anything
// decodes them: such lists are sized by the model (per layer at most), and
// a hostile file's could make encoding/json allocate tens of times the
// file's size. It allocates nothing; what is not a valid JSON object is
// left for the decoder to report.
func CheckJSONFields(obj []byte, limits map[string]int) error {
	if !json.Valid(obj) {
		return nil
	}
	err := jsonMembers(obj, func(key, val []byte) error {
		if len(key) < 2 {
			return nil
		}
		if limit, ok := limits[string(key[1:len(key)-1])]; ok && len(val) > limit {
			return fmt.Errorf("%s is %d bytes of JSON, over the limit of %d", key[1:len(key)-1], len(val), limit)
		}
		return nil
	})
	if errors.Is(err, errNotObject) {
		return nil
	}
	return err
}
