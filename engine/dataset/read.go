// Package dataset scores files of inputs in bulk: it reads JSONL or CSV
// records, assigns them to shards, writes one result line per record to an
// append-only log that survives a crash, resumes a log, merges the logs of
// several shards and summarises them. It knows nothing of the model: the
// caller gives it a function that scores one text, and says what scored
// the log (its Header, checked on resume and merge).
package dataset

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Format is an input or output file format.
type Format string

// The formats.
const (
	JSONL Format = "jsonl"
	CSV   Format = "csv"
)

// MaxLine is the longest input record, in bytes: a longer one becomes an
// error line (its text could not be scored anyway: the scorer takes at most
// 8192 tokens).
const MaxLine = 1 << 20

// FormatOf returns the format named by override ("jsonl", "csv") or, when
// it is empty, by path's extension (.jsonl, .ndjson, .json; .csv).
func FormatOf(path, override string) (Format, error) {
	switch strings.ToLower(override) {
	case "jsonl", "ndjson":
		return JSONL, nil
	case "csv":
		return CSV, nil
	case "":
	default:
		return "", fmt.Errorf("format %q is not known (jsonl or csv)", override)
	}
	switch strings.ToLower(filepath.Ext(path)) {
	case ".jsonl", ".ndjson", ".json":
		return JSONL, nil
	case ".csv":
		return CSV, nil
	}
	return "", fmt.Errorf("%s: cannot tell the format from the extension (.jsonl or .csv); give --format", path)
}

// Item is one input record.
type Item struct {
	// Index is the record's position among the file's records, from 0: the
	// order results are merged in, and what shards are cut by.
	Index int
	// Line is the line the record starts on, from 1 (CSV: the header is
	// line 1).
	Line int
	// ID is the record's id, or its line number when it has none.
	ID   string
	Text string
	// Err is what is wrong with the record ("" for none): it is not scored
	// but written as an error line.
	Err string
}

// Scan calls fn on every record of r in order, stopping at fn's first
// error. Blank JSONL lines are not records. A record that cannot be read
// (bad JSON, no text, a line over MaxLine) is passed with Err set; only a
// file that cannot be read at all (a CSV without a text column, a read
// error) stops Scan with an error.
func Scan(r io.Reader, f Format, fn func(Item) error) error {
	switch f {
	case JSONL:
		return scanJSONL(r, fn)
	case CSV:
		return scanCSV(r, fn)
	}
	return fmt.Errorf("dataset: unknown format %q", f)
}

var bom = []byte("\xef\xbb\xbf")

func scanJSONL(r io.Reader, fn func(Item) error) error {
	br := bufio.NewReaderSize(r, 64<<10)
	index := 0
	for line := 1; ; line++ {
		b, long, err := readLine(br)
		if err != nil && err != io.EOF {
			return err
		}
		if line == 1 {
			b = bytes.TrimPrefix(b, bom)
		}
		if long || len(bytes.TrimSpace(b)) > 0 {
			it := Item{Index: index, Line: line, ID: strconv.Itoa(line)}
			if long {
				it.Err = fmt.Sprintf("the line is longer than the limit of %d bytes", MaxLine)
			} else {
				parseJSONL(b, &it)
			}
			if e := fn(it); e != nil {
				return e
			}
			index++
		}
		if err == io.EOF {
			return nil
		}
	}
}

// readLine reads one line without its line ending. A line over MaxLine is
// consumed and reported by long (with no bytes).
func readLine(br *bufio.Reader) (b []byte, long bool, err error) {
	var buf []byte
	n := 0
	for {
		part, err := br.ReadSlice('\n')
		n += len(part)
		if len(buf) <= MaxLine+2 {
			buf = append(buf, part...)
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if n == 0 && err == io.EOF {
			return nil, false, io.EOF
		}
		if err != nil && err != io.EOF {
			return nil, false, err
		}
		buf = bytes.TrimSuffix(bytes.TrimSuffix(buf, []byte("\n")), []byte("\r"))
		if len(buf) > MaxLine {
			return nil, true, err
		}
		return buf, false, err
	}
}

// parseJSONL fills it from one JSONL record: {"id": ..., "text": ...}.
func parseJSONL(b []byte, it *Item) {
	if !utf8.Valid(b) {
		it.Err = "the line is not valid UTF-8"
		return
	}
	var rec map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&rec); err != nil || rec == nil {
		msg := "not a JSON object"
		if err != nil {
			msg = err.Error()
		}
		it.Err = "bad JSON: " + msg
		return
	}
	if dec.More() {
		it.Err = "bad JSON: more than one value on the line"
		return
	}
	if raw, ok := rec["id"]; ok && string(raw) != "null" {
		id, err := parseID(raw)
		if err != nil {
			it.Err = err.Error()
			return
		}
		it.ID = id
	}
	raw, ok := rec["text"]
	if !ok {
		it.Err = `no "text" key`
		return
	}
	if err := json.Unmarshal(raw, &it.Text); err != nil {
		it.Err = `"text" is not a string`
		return
	}
	it.Err = checkText(it.Text)
}

// parseID accepts a string or a number (kept as written).
func parseID(raw json.RawMessage) (string, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		if strings.TrimSpace(s) == "" {
			return "", errors.New(`"id" is empty`)
		}
		return s, nil
	}
	var n json.Number
	if err := json.Unmarshal(raw, &n); err == nil {
		return n.String(), nil
	}
	return "", errors.New(`"id" is not a string or a number`)
}

func checkText(s string) string {
	if strings.TrimSpace(s) == "" {
		return "the text is empty"
	}
	return ""
}

func scanCSV(r io.Reader, fn func(Item) error) error {
	cr := newCSVReader(r)
	head, err := cr.next()
	if err == io.EOF {
		return nil
	}
	if err != nil {
		return err
	}
	if head.err != "" {
		return fmt.Errorf("the CSV header (line %d): %s", head.line, head.err)
	}
	textCol, idCol := -1, -1
	for i, h := range head.fields {
		switch strings.ToLower(strings.TrimSpace(h)) {
		case "text":
			textCol = i
		case "id":
			idCol = i
		}
	}
	if textCol < 0 {
		return fmt.Errorf("the CSV header has no \"text\" column (it has %q)", head.fields)
	}
	for index := 0; ; index++ {
		rec, err := cr.next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		it := Item{Index: index, Line: rec.line, Err: rec.err}
		switch {
		case it.Err != "":
		case textCol >= len(rec.fields):
			it.Err = fmt.Sprintf("the record has %d fields, no text column", len(rec.fields))
		case !utf8.ValidString(rec.fields[textCol]):
			it.Err = "the text is not valid UTF-8"
		default:
			it.Text = rec.fields[textCol]
			it.Err = checkText(it.Text)
		}
		it.ID = strconv.Itoa(it.Line)
		if idCol >= 0 && idCol < len(rec.fields) && strings.TrimSpace(rec.fields[idCol]) != "" {
			it.ID = rec.fields[idCol]
		}
		if e := fn(it); e != nil {
			return e
		}
	}
}
