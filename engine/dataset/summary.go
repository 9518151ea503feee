package dataset

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"io"
	"sort"
	"strconv"
)

// Answer values are flattened into columns: a top-level field is its name,
// a label of an object field (Independent) is "field.label"; a list
// (Catalog) counts each of its entries.

// ValueCount is how many records gave one value.
type ValueCount struct {
	Value string `json:"value"`
	Count int    `json:"count"`
}

// FieldCount is the answers to one column, most frequent first.
type FieldCount struct {
	Field  string       `json:"field"`
	Values []ValueCount `json:"values"`
}

// Summary counts a set of records.
type Summary struct {
	Records int          `json:"records"`
	Errors  int          `json:"errors"`
	Fields  []FieldCount `json:"fields"`
}

// column is one flattened answer value.
type column struct {
	name   string
	values []string // one, or a list's entries
	text   string   // the value as one CSV cell
}

// columns flattens an answer object in its order.
func columns(answer json.RawMessage) []column {
	var out []column
	dec := json.NewDecoder(bytes.NewReader(answer))
	dec.UseNumber()
	var walk func(prefix string) bool
	walk = func(prefix string) bool {
		if t, err := dec.Token(); err != nil || t != json.Delim('{') {
			return false
		}
		for dec.More() {
			t, err := dec.Token()
			if err != nil {
				return false
			}
			name := prefix + t.(string)
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				return false
			}
			raw = bytes.TrimSpace(raw)
			switch {
			case len(raw) > 0 && raw[0] == '{':
				sub := columns(raw)
				for _, c := range sub {
					c.name = name + "." + c.name
					out = append(out, c)
				}
			case len(raw) > 0 && raw[0] == '[':
				var list []any
				json.Unmarshal(raw, &list)
				c := column{name: name, values: []string{}}
				for _, v := range list {
					c.values = append(c.values, scalar(v))
				}
				b, _ := json.Marshal(c.values)
				c.text = string(b)
				out = append(out, c)
			default:
				var v any
				json.Unmarshal(raw, &v)
				s := scalar(v)
				out = append(out, column{name: name, values: []string{s}, text: s})
			}
		}
		_, err := dec.Token()
		return err == nil
	}
	walk("")
	return out
}

func scalar(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case nil:
		return "null"
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// Counter counts records as they come (the zero value is ready).
type Counter struct {
	records, errors int
	order           []string
	counts          map[string]map[string]int
}

// Add counts one record.
func (c *Counter) Add(r Record) {
	c.records++
	if r.Error != "" {
		c.errors++
		return
	}
	if c.counts == nil {
		c.counts = map[string]map[string]int{}
	}
	for _, col := range columns(r.Answer()) {
		m, ok := c.counts[col.name]
		if !ok {
			m = map[string]int{}
			c.counts[col.name] = m
			c.order = append(c.order, col.name)
		}
		for _, v := range col.values {
			m[v]++
		}
	}
}

// Summary is the counts so far.
func (c *Counter) Summary() Summary {
	s := Summary{Records: c.records, Errors: c.errors, Fields: []FieldCount{}}
	for _, name := range c.order {
		fc := FieldCount{Field: name}
		for v, n := range c.counts[name] {
			fc.Values = append(fc.Values, ValueCount{v, n})
		}
		sort.Slice(fc.Values, func(a, b int) bool {
			x, y := fc.Values[a], fc.Values[b]
			return x.Count > y.Count || x.Count == y.Count && x.Value < y.Value
		})
		s.Fields = append(s.Fields, fc)
	}
	return s
}

// Summarize counts the records' errors and, per answer column, how often
// each value was given.
func Summarize(recs []Record) Summary {
	var c Counter
	for _, r := range recs {
		c.Add(r)
	}
	return c.Summary()
}

// WriteCSV writes the records as CSV: id, line, error, elapsed_ms, then one
// column per answer value (a list as a JSON array).
func WriteCSV(w io.Writer, recs []Record) error {
	var names []string
	seen := map[string]bool{}
	rows := make([]map[string]string, len(recs))
	for i, r := range recs {
		rows[i] = map[string]string{}
		for _, c := range columns(r.Answer()) {
			if !seen[c.name] {
				seen[c.name] = true
				names = append(names, c.name)
			}
			rows[i][c.name] = c.text
		}
	}
	cw := csv.NewWriter(w)
	cw.Write(append([]string{"id", "line", "error", "elapsed_ms"}, names...))
	for i, r := range recs {
		row := []string{r.ID, strconv.Itoa(r.Line), r.Error, strconv.FormatFloat(r.ElapsedMS, 'f', -1, 64)}
		for _, n := range names {
			row = append(row, rows[i][n])
		}
		cw.Write(row)
	}
	cw.Flush()
	return cw.Error()
}

// WriteJSONL writes the records as a result log, under h (none when nil).
func WriteJSONL(w io.Writer, h *Header, recs []Record) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	if h != nil {
		if err := enc.Encode(h); err != nil {
			return err
		}
	}
	for _, r := range recs {
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return nil
}
