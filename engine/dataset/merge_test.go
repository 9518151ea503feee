package dataset

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func res(answer string) json.RawMessage {
	return json.RawMessage(`{"answer":` + answer + `,"timings":{"total_ms":3}}`)
}

// src is a log of recs under testHeader.
func src(name string, recs ...Record) Source { return Source{name, Log{&testHeader, recs}} }

func TestMerge(t *testing.T) {
	a := Record{ID: "a", Index: 0, Line: 1, Result: res(`{"x": "yes"}`)}
	b := Record{ID: "b", Index: 1, Line: 2, Error: "the text is empty"}
	c := Record{ID: "c", Index: 2, Line: 4, Result: res(`{"x": "no"}`), ElapsedMS: 9}
	cOther := c
	cOther.Result, cOther.ElapsedMS = json.RawMessage(`{"answer":{"x":"no"},"timings":{"total_ms":7}}`), 2
	cases := []struct {
		name string
		srcs []Source
		want string // ids in order, or the error
	}{
		{"in input order", []Source{src("s1", c, a), src("s0", b)}, "[a b c]"},
		{"the same outcome twice is kept once", []Source{src("s1", c, a), src("s0", b, cOther)}, "[a b c]"},
		{"two answers", []Source{src("s1", a), src("s2", Record{ID: "a", Index: 0, Line: 1, Result: res(`{"x": "no"}`)})}, `answers {"x": "yes"} and {"x": "no"}`},
		{"answer and error", []Source{src("s1", a), src("s2", Record{ID: "a", Index: 0, Line: 1, Error: "e"})}, `errors "" and "e"`},
		{"one id at two indexes", []Source{src("s1", a), src("s2", Record{ID: "a", Index: 5, Line: 6, Error: "e"})}, "one id at two indexes (0 and 5)"},
		{"two ids at one index", []Source{src("s1", a), src("s2", Record{ID: "z", Index: 0, Line: 1, Error: "e"})}, "two ids at index 0"},
	}
	for _, c := range cases {
		_, got, err := Merge(c.srcs)
		var s string
		if err != nil {
			var ce *ConflictError
			if !errors.As(err, &ce) {
				t.Errorf("%s: %v is not a ConflictError", c.name, err)
			}
			s = err.Error()
		} else {
			var ids []string
			for _, r := range got {
				ids = append(ids, r.ID)
			}
			s = fmt.Sprint(ids)
		}
		if !strings.Contains(s, c.want) {
			t.Errorf("%s: %s, want %s", c.name, s, c.want)
		}
	}
	if m := Missing([]Record{a, c}, 4); fmt.Sprint(m) != "[1 3]" {
		t.Errorf("Missing = %v, want [1 3]", m)
	}
}

// TestMergeHeaders: logs merge under their common header; a log scored
// differently, or with records and no header, is refused.
func TestMergeHeaders(t *testing.T) {
	a := Record{ID: "a", Index: 0, Line: 1, Error: "e"}
	b := Record{ID: "b", Index: 1, Line: 2, Error: "e"}
	hot := testHeader
	hot.Temperature = 2
	cases := []struct {
		name string
		srcs []Source
		want string // the error, "" for none
	}{
		{"the same header", []Source{src("s0", a), src("s1", b)}, ""},
		{"an empty log has none", []Source{src("s0", a), {Name: "empty"}}, ""},
		{"another temperature", []Source{src("s0", a), {"s1", Log{&hot, []Record{b}}}}, "s0 was scored with --temperature 1, s1 with --temperature 2"},
		{"a header alone still counts", []Source{src("s0", a), {"s1", Log{Header: &hot}}}, "--temperature 1, s1 with --temperature 2"},
		{"an older log", []Source{src("s0", a), {"old", Log{Records: []Record{b}}}}, "old has no header line"},
	}
	for _, c := range cases {
		h, recs, err := Merge(c.srcs)
		if (err == nil) != (c.want == "") || err != nil && !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
		if err == nil && (h == nil || *h != testHeader || len(recs) != len(c.srcs[0].Records)+len(c.srcs[1].Records)) {
			t.Errorf("%s: header %v, %d records", c.name, h, len(recs))
		}
	}
	if h, _, err := Merge([]Source{{Name: "empty"}}); h != nil || err != nil {
		t.Errorf("empty logs alone: %v, %v", h, err)
	}
}

func TestSummarizeAndCSV(t *testing.T) {
	recs := []Record{
		{ID: "1", Line: 1, Result: res(`{"tone": "calm", "urgent": false, "issues": {"late": true, "broken": false}, "tools": ["a", "b"]}`), ElapsedMS: 1.5},
		{ID: "2", Line: 2, Result: res(`{"tone": "angry", "urgent": true, "issues": {"late": true, "broken": true}, "tools": ["b"]}`)},
		{ID: "3", Line: 3, Error: "bad JSON: x"},
		{ID: "4", Line: 4, Result: res(`{"tone": "calm", "urgent": false, "issues": {"late": false, "broken": false}, "tools": []}`)},
	}
	s := Summarize(recs)
	got, _ := json.Marshal(s)
	want := `{"records":4,"errors":1,"fields":[` +
		`{"field":"tone","values":[{"value":"calm","count":2},{"value":"angry","count":1}]},` +
		`{"field":"urgent","values":[{"value":"false","count":2},{"value":"true","count":1}]},` +
		`{"field":"issues.late","values":[{"value":"true","count":2},{"value":"false","count":1}]},` +
		`{"field":"issues.broken","values":[{"value":"false","count":2},{"value":"true","count":1}]},` +
		`{"field":"tools","values":[{"value":"b","count":2},{"value":"a","count":1}]}]}`
	if string(got) != want {
		t.Errorf("Summarize:\n%s\nwant\n%s", got, want)
	}
	var b bytes.Buffer
	if err := WriteCSV(&b, recs); err != nil {
		t.Fatal(err)
	}
	wantCSV := "id,line,error,elapsed_ms,tone,urgent,issues.late,issues.broken,tools\n" +
		"1,1,,1.5,calm,false,true,false,\"[\"\"a\"\",\"\"b\"\"]\"\n" +
		"2,2,,0,angry,true,true,true,\"[\"\"b\"\"]\"\n" +
		"3,3,bad JSON: x,0,,,,,\n" +
		"4,4,,0,calm,false,false,false,[]\n"
	if b.String() != wantCSV {
		t.Errorf("WriteCSV:\n%s\nwant\n%s", b.String(), wantCSV)
	}
}
