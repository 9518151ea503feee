package dataset

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"fmt"
	"io"
)

// csvReader reads CSV records (RFC 4180, as encoding/csv reads them with a
// comma and strict quotes) so that one bad record cannot swallow the rest
// of the file:
//
//   - A quoted field may span lines. But a quote that is still open at the
//     end of the file, or that spans lines and then closes in the middle of
//     a field (its closing quote followed by anything but a comma or the
//     line's end), was most likely a stray one: its record is an error, and
//     reading starts again on the line after the one the quote opened on,
//     so the records after it are still read (the lines between, when the
//     quote opened on a later line than its record, belong to that record).
//   - A bare quote in an unquoted field, or a closing quote on the line it
//     opened on followed by anything but a comma or the line's end, makes
//     the record an error that ends with that line, as encoding/csv does.
//   - A record over MaxLine bytes is an error, read to its end but not
//     kept.
//
// Starting again means reading the lines after the quote a second time:
// the source is seeked back when it can be (a file, a string); one that
// cannot be ends at the unterminated quote, which its error says.
type csvReader struct {
	br    *bufio.Reader
	src   io.Reader
	seek  io.Seeker // nil when src cannot be read again
	start int64     // src's offset when reading began
	off   int64     // bytes read since start
	line  int       // the line being read, from 1
}

// newCSVReader reads r, past a byte order mark.
func newCSVReader(r io.Reader) *csvReader {
	c := &csvReader{br: bufio.NewReaderSize(r, 64<<10), src: r, line: 1}
	if s, ok := r.(io.Seeker); ok {
		if at, err := s.Seek(0, io.SeekCurrent); err == nil {
			c.seek, c.start = s, at
		}
	}
	if b, _ := c.br.Peek(len(bom)); bytes.Equal(b, bom) {
		c.br.Discard(len(bom))
		c.off = int64(len(bom))
	}
	return c
}

// csvRecord is one record: its fields (those before the error, when it
// has one) and the line it starts on.
type csvRecord struct {
	line   int
	fields []string
	err    string // what is wrong with it ("" for nothing)
	size   int    // its bytes, quotes and separators included
}

// The states of a record's bytes.
const (
	csvFieldStart = iota // at a field's first byte
	csvUnquoted          // in an unquoted field
	csvQuoted            // in a quoted field
	csvQuote             // just after a quote in a quoted field: closing or the first of ""
	csvSkip              // after an error, to the line's end
)

// next reads the next record; io.EOF after the last.
func (c *csvReader) next() (csvRecord, error) {
	var (
		rec       csvRecord
		field     []byte
		state     = csvFieldStart
		started   bool
		quoteLine int   // the line the open quote is on
		resume    int64 // the offset of the line after it (-1: not seen yet)
	)
	emit := func() {
		rec.fields = append(rec.fields, string(field))
		field = field[:0]
	}
	add := func(b byte) {
		if rec.size <= MaxLine {
			field = append(field, b)
		}
	}
	fail := func(err error) {
		if rec.err == "" {
			rec.err = "bad CSV: " + err.Error()
		}
		state = csvSkip
	}
	for {
		b, err := c.br.ReadByte()
		if err == io.EOF {
			break
		}
		if err != nil {
			return csvRecord{}, err
		}
		c.off++
		if b == '\r' {
			// \r\n is \n; a \r before the end of the file is dropped (as
			// encoding/csv does); any other \r is data.
			next, err := c.br.Peek(1)
			if err == io.EOF || err == nil && next[0] == '\n' {
				continue
			}
		}
		if !started {
			if b == '\n' { // a blank line is no record
				c.line++
				continue
			}
			started, rec.line = true, c.line
		}
		rec.size++
		switch state {
		case csvFieldStart:
			switch b {
			case '"':
				state, quoteLine, resume = csvQuoted, c.line, -1
			case ',':
				emit()
			case '\n':
				emit()
				c.line++
				return c.done(rec)
			default:
				add(b)
				state = csvUnquoted
			}
		case csvUnquoted:
			switch b {
			case ',':
				emit()
				state = csvFieldStart
			case '\n':
				emit()
				c.line++
				return c.done(rec)
			case '"':
				fail(csv.ErrBareQuote)
			default:
				add(b)
			}
		case csvQuoted:
			switch b {
			case '"':
				state = csvQuote
			case '\n':
				add(b)
				if resume < 0 {
					resume = c.off
				}
				c.line++
			default:
				add(b)
			}
		case csvQuote:
			switch b {
			case '"':
				add(b)
				state = csvQuoted
			case ',':
				emit()
				state = csvFieldStart
			case '\n':
				emit()
				c.line++
				return c.done(rec)
			default:
				if resume >= 0 && c.seek != nil {
					// A quote that spans lines and closes in the middle of a
					// field was most likely a stray one.
					rec.err = fmt.Sprintf("bad CSV: the quote opened on line %d closes on line %d in the middle of a field (a stray quote?); reading goes on at line %d", quoteLine, c.line, quoteLine+1)
					return c.restart(rec, resume, quoteLine)
				}
				fail(csv.ErrQuote)
			}
		case csvSkip:
			if b == '\n' {
				c.line++
				return c.done(rec)
			}
		}
	}
	// The end of the file.
	switch {
	case !started:
		return csvRecord{}, io.EOF
	case state == csvQuoted && resume < 0:
		rec.err = fmt.Sprintf("bad CSV: the quote opened on line %d is never closed", quoteLine)
	case state == csvQuoted && c.seek == nil:
		rec.err = fmt.Sprintf("bad CSV: the quote opened on line %d is never closed, and the lines after it cannot be read again", quoteLine)
	case state == csvQuoted:
		rec.err = fmt.Sprintf("bad CSV: the quote opened on line %d is never closed; reading goes on at line %d", quoteLine, quoteLine+1)
		return c.restart(rec, resume, quoteLine)
	case state != csvSkip:
		emit()
	}
	return c.done(rec)
}

// restart ends rec, an error, and goes back to offset resume, the start of
// the line after quoteLine.
func (c *csvReader) restart(rec csvRecord, resume int64, quoteLine int) (csvRecord, error) {
	if _, err := c.seek.Seek(c.start+resume, io.SeekStart); err != nil {
		return csvRecord{}, err
	}
	c.br.Reset(c.src)
	c.off, c.line = resume, quoteLine+1
	return c.done(rec)
}

// done checks a whole record's size.
func (c *csvReader) done(rec csvRecord) (csvRecord, error) {
	if rec.size > MaxLine {
		rec.err = fmt.Sprintf("the record is longer than the limit of %d bytes", MaxLine)
	}
	return rec, nil
}
