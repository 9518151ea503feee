package tokenizer

import (
	"bytes"
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// scanner is a minimal JSON reader over a byte slice. It exists because
// encoding/json needs about a second for the 33 MB tokenizer.json (262k vocab
// entries, 515k merges); the scanner reads those two members straight into
// the tables and hands every small member to encoding/json as a raw span.
// The input must already be valid UTF-8.
type scanner struct {
	data []byte
	pos  int
	buf  []byte // scratch for strings with escapes
}

func (s *scanner) errorf(format string, args ...any) error {
	return fmt.Errorf("json at byte %d: %s", s.pos, fmt.Sprintf(format, args...))
}

func (s *scanner) ws() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// peek returns the next non-space byte, or 0 at the end of the input.
func (s *scanner) peek() byte {
	s.ws()
	if s.pos < len(s.data) {
		return s.data[s.pos]
	}
	return 0
}

func (s *scanner) expect(c byte) error {
	if s.peek() != c {
		if s.pos >= len(s.data) {
			return s.errorf("unexpected end of input, want %q", c)
		}
		return s.errorf("found %q, want %q", s.data[s.pos], c)
	}
	s.pos++
	return nil
}

// str reads a JSON string and returns its decoded bytes. The result aliases
// the input or the scanner's scratch buffer: it is valid until the next call.
func (s *scanner) str() ([]byte, error) {
	if err := s.expect('"'); err != nil {
		return nil, err
	}
	start := s.pos
	for i := start; i < len(s.data); i++ {
		c := s.data[i]
		switch {
		case c == '"':
			s.pos = i + 1
			return s.data[start:i], nil
		case c == '\\':
			s.pos = i
			return s.escaped(start)
		case c < 0x20:
			s.pos = i
			return nil, s.errorf("control character in string")
		}
	}
	return nil, s.errorf("unterminated string")
}

// escaped finishes a string that contains escapes; s.pos is at the first '\'.
func (s *scanner) escaped(start int) ([]byte, error) {
	b := append(s.buf[:0], s.data[start:s.pos]...)
	for s.pos < len(s.data) {
		c := s.data[s.pos]
		switch {
		case c == '"':
			s.pos++
			s.buf = b
			return b, nil
		case c < 0x20:
			return nil, s.errorf("control character in string")
		case c != '\\':
			b = append(b, c)
			s.pos++
			continue
		}
		if s.pos+1 >= len(s.data) {
			break
		}
		e := s.data[s.pos+1]
		s.pos += 2
		switch e {
		case '"', '\\', '/':
			b = append(b, e)
		case 'b':
			b = append(b, '\b')
		case 'f':
			b = append(b, '\f')
		case 'n':
			b = append(b, '\n')
		case 'r':
			b = append(b, '\r')
		case 't':
			b = append(b, '\t')
		case 'u':
			r, err := s.hex4()
			if err != nil {
				return nil, err
			}
			if utf16.IsSurrogate(r) {
				// A high surrogate must be followed by an escaped low one.
				if r >= 0xDC00 || s.pos+1 >= len(s.data) || s.data[s.pos] != '\\' || s.data[s.pos+1] != 'u' {
					return nil, s.errorf("lone surrogate in \\u escape")
				}
				s.pos += 2
				r2, err := s.hex4()
				if err != nil {
					return nil, err
				}
				r = utf16.DecodeRune(r, r2)
				if r == utf8.RuneError {
					return nil, s.errorf("invalid surrogate pair in \\u escape")
				}
			}
			b = utf8.AppendRune(b, r)
		default:
			return nil, s.errorf("invalid escape \\%c", e)
		}
	}
	return nil, s.errorf("unterminated string")
}

func (s *scanner) hex4() (rune, error) {
	if s.pos+4 > len(s.data) {
		return 0, s.errorf("short \\u escape")
	}
	var r rune
	for _, c := range s.data[s.pos : s.pos+4] {
		var v byte
		switch {
		case c >= '0' && c <= '9':
			v = c - '0'
		case c >= 'a' && c <= 'f':
			v = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			v = c - 'A' + 10
		default:
			return 0, s.errorf("invalid \\u escape")
		}
		r = r<<4 | rune(v)
	}
	s.pos += 4
	return r, nil
}

// integer reads a JSON number that must be an integer.
func (s *scanner) integer() (int64, error) {
	s.ws()
	start := s.pos
	for s.pos < len(s.data) {
		c := s.data[s.pos]
		if (c < '0' || c > '9') && c != '-' {
			break
		}
		s.pos++
	}
	v, err := strconv.ParseInt(string(s.data[start:s.pos]), 10, 64)
	if err != nil {
		s.pos = start
		return 0, s.errorf("want an integer")
	}
	return v, nil
}

// object calls fn for each member; fn must consume the member's value.
func (s *scanner) object(fn func(key []byte) error) error {
	if err := s.expect('{'); err != nil {
		return err
	}
	if s.peek() == '}' {
		s.pos++
		return nil
	}
	for {
		key, err := s.str()
		if err != nil {
			return err
		}
		if err := s.expect(':'); err != nil {
			return err
		}
		if err := fn(key); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.pos++
		case '}':
			s.pos++
			return nil
		default:
			return s.errorf("want ',' or '}' in object")
		}
	}
}

// array calls fn for each element; fn must consume the element.
func (s *scanner) array(fn func() error) error {
	if err := s.expect('['); err != nil {
		return err
	}
	if s.peek() == ']' {
		s.pos++
		return nil
	}
	for {
		if err := fn(); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.pos++
		case ']':
			s.pos++
			return nil
		default:
			return s.errorf("want ',' or ']' in array")
		}
	}
}

// raw skips one value and returns its bytes, for encoding/json to decode.
func (s *scanner) raw() ([]byte, error) {
	s.ws()
	start := s.pos
	if err := s.skip(0); err != nil {
		return nil, err
	}
	return s.data[start:s.pos], nil
}

func (s *scanner) skip(depth int) error {
	if depth > 512 {
		return s.errorf("nesting too deep")
	}
	switch c := s.peek(); {
	case c == '"':
		// Find the closing quote: one not preceded by an odd run of '\'.
		i := s.pos + 1
		for {
			j := bytes.IndexByte(s.data[i:], '"')
			if j < 0 {
				return s.errorf("unterminated string")
			}
			i += j
			n := 0
			for k := i - 1; k > s.pos && s.data[k] == '\\'; k-- {
				n++
			}
			i++
			if n%2 == 0 {
				s.pos = i
				return nil
			}
		}
	case c == '{':
		return s.object(func([]byte) error { return s.skip(depth + 1) })
	case c == '[':
		return s.array(func() error { return s.skip(depth + 1) })
	case c == '-' || (c >= '0' && c <= '9'):
		for s.pos < len(s.data) && bytes.IndexByte([]byte("+-.eE0123456789"), s.data[s.pos]) >= 0 {
			s.pos++
		}
		return nil
	default:
		for _, lit := range []string{"true", "false", "null"} {
			if bytes.HasPrefix(s.data[s.pos:], []byte(lit)) {
				s.pos += len(lit)
				return nil
			}
		}
		return s.errorf("invalid value")
	}
}
