package tokenizer

import (
	"strings"
	"sync"
	"unicode/utf8"
)

// pieces caches, per id, the token text after the decoder's Replace steps
// and, for byte-fallback tokens, the byte. Built on first use.
type pieces struct {
	once sync.Once
	text []string
	byt  []int16 // the byte of a "<0xNN>" token, -1 otherwise, -2 for no token
}

// piece returns the decoded text of one token, or its byte (b >= 0) for a
// byte-fallback token; ok is false for an unknown id.
func (t *Tokenizer) piece(id int32) (text string, b int, ok bool) {
	p := t.pieces()
	if id < 0 || int(id) >= len(p.byt) || p.byt[id] == -2 {
		return "", -1, false
	}
	return p.text[id], int(p.byt[id]), true
}

func (t *Tokenizer) pieces() *pieces {
	p := &t.pieceCache
	p.once.Do(func() {
		p.text = make([]string, t.vocabSize)
		p.byt = make([]int16, t.vocabSize)
		for id := range p.byt {
			s, ok := t.tokenString(int32(id))
			if !ok {
				p.byt[id] = -2
				continue
			}
			for _, r := range t.decoder.replaces {
				s = strings.ReplaceAll(s, r.pattern, r.content)
			}
			p.byt[id] = -1
			if t.decoder.byteFallback {
				if b, ok := byteToken(s); ok {
					p.byt[id] = int16(b)
					s = ""
				}
			}
			p.text[id] = s
		}
	})
	return p
}

// byteToken recognises "<0xNN>" the way HF's ByteFallback decoder does (it
// parses NN with Rust's u8::from_str_radix, so either case, or "+N").
func byteToken(s string) (byte, bool) {
	if len(s) != 6 || s[:3] != "<0x" || s[5] != '>' {
		return 0, false
	}
	hi, lo := s[3], s[4]
	l, ok := hexVal(lo)
	if !ok {
		return 0, false
	}
	if hi == '+' {
		return l, true
	}
	h, ok := hexVal(hi)
	if !ok {
		return 0, false
	}
	return h<<4 | l, true
}

func hexVal(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// Decode turns ids into text like HF's decode(ids, skip_special_tokens=False):
// "▁" becomes a space, each run of byte tokens is reassembled (a run that is
// not valid UTF-8 gives one U+FFFD per byte), special tokens appear as their
// text and unknown ids are dropped.
func (t *Tokenizer) Decode(ids []int32) string {
	var sb strings.Builder
	var run []byte
	flush := func() {
		if len(run) == 0 {
			return
		}
		if utf8.Valid(run) {
			sb.Write(run)
		} else {
			for range run {
				sb.WriteRune(utf8.RuneError)
			}
		}
		run = run[:0]
	}
	for _, id := range ids {
		text, b, ok := t.piece(id)
		if !ok {
			continue
		}
		if b >= 0 {
			run = append(run, byte(b))
			continue
		}
		flush()
		sb.WriteString(text)
	}
	flush()
	return sb.String()
}

// TokenPiece returns the bytes one token contributes to decoded text: the
// vocabulary text with "▁" as a space, or for a byte-fallback token "<0xNN>"
// the single byte NN (possibly an incomplete UTF-8 sequence). For ids from
// Encode, the pieces concatenate to the encoded text. Unknown ids give "".
func (t *Tokenizer) TokenPiece(id int32) string {
	text, b, ok := t.piece(id)
	switch {
	case !ok:
		return ""
	case b >= 0:
		return string([]byte{byte(b)})
	}
	return text
}

// StreamDecoder turns generated ids into text incrementally, emitting only
// complete UTF-8: bytes of a character split over byte-fallback tokens are
// held back until the character is complete.
//
// For every sequence whose byte-token runs are valid UTF-8 (all output of
// Encode), the concatenated results of Add and Flush equal Decode of the
// whole sequence. A run with invalid bytes differs only in that its valid
// characters are kept where Decode, like HF, turns every byte of the run
// into U+FFFD.
type StreamDecoder struct {
	t       *Tokenizer
	pending []byte
	out     []byte
}

// NewStreamDecoder returns a StreamDecoder for t.
func (t *Tokenizer) NewStreamDecoder() *StreamDecoder {
	return &StreamDecoder{t: t}
}

// Add takes the next id and returns the text it completes (maybe "").
func (d *StreamDecoder) Add(id int32) string {
	text, b, ok := d.t.piece(id)
	if !ok {
		return ""
	}
	d.out = d.out[:0]
	if b >= 0 {
		d.pending = append(d.pending, byte(b))
		d.drain()
	} else {
		d.flushPending()
		d.out = append(d.out, text...)
	}
	return string(d.out)
}

// Flush ends the stream: bytes of an unfinished character come out as one
// U+FFFD each. The decoder can then be reused.
func (d *StreamDecoder) Flush() string {
	d.out = d.out[:0]
	d.flushPending()
	return string(d.out)
}

// drain moves every complete character (or invalid byte, as U+FFFD) from
// pending to out.
func (d *StreamDecoder) drain() {
	p := d.pending
	for len(p) > 0 && utf8.FullRune(p) {
		r, n := utf8.DecodeRune(p)
		if r == utf8.RuneError && n == 1 {
			d.out = utf8.AppendRune(d.out, utf8.RuneError)
		} else {
			d.out = append(d.out, p[:n]...)
		}
		p = p[n:]
	}
	d.pending = append(d.pending[:0], p...)
}

func (d *StreamDecoder) flushPending() {
	d.drain()
	for range d.pending {
		d.out = utf8.AppendRune(d.out, utf8.RuneError)
	}
	d.pending = d.pending[:0]
}
