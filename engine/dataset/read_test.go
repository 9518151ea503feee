package dataset

import (
	"fmt"
	"io"
	"strings"
	"testing"
)

func scanAll(t *testing.T, f Format, in string) []Item {
	t.Helper()
	var out []Item
	if err := Scan(strings.NewReader(in), f, func(it Item) error { out = append(out, it); return nil }); err != nil {
		t.Fatalf("Scan: %v", err)
	}
	return out
}

func TestScanJSONL(t *testing.T) {
	long := `{"text": "` + strings.Repeat("a", MaxLine) + `"}`
	cases := []struct {
		name, in string
		want     []Item
	}{
		{"ids and line numbers", "{\"id\": \"a\", \"text\": \"one\"}\n{\"text\": \"two\"}\n{\"id\": 17, \"text\": \"three\"}\n",
			[]Item{{0, 1, "a", "one", ""}, {1, 2, "2", "two", ""}, {2, 3, "17", "three", ""}}},
		{"blank lines are not records, CRLF and BOM", "\xef\xbb\xbf{\"text\": \"x\"}\r\n\r\n  \n{\"text\": \"y\"}",
			[]Item{{0, 1, "1", "x", ""}, {1, 4, "4", "y", ""}}},
		{"bad JSON", "{\"text\": \"x\"\n", []Item{{0, 1, "1", "", "bad JSON: unexpected EOF"}}},
		{"not an object", "[1, 2]\n", []Item{{0, 1, "1", "", "bad JSON: json: cannot unmarshal array into Go value of type map[string]json.RawMessage"}}},
		{"two values", "{\"text\": \"x\"} {}\n", []Item{{0, 1, "1", "", "bad JSON: more than one value on the line"}}},
		{"no text", "{\"id\": \"a\"}\n", []Item{{0, 1, "a", "", `no "text" key`}}},
		{"empty text", "{\"id\": \"a\", \"text\": \"  \"}\n", []Item{{0, 1, "a", "  ", "the text is empty"}}},
		{"text not a string", "{\"text\": 3}\n", []Item{{0, 1, "1", "", `"text" is not a string`}}},
		{"bad id", "{\"id\": true, \"text\": \"x\"}\n{\"id\": \"\", \"text\": \"x\"}\n",
			[]Item{{0, 1, "1", "", `"id" is not a string or a number`}, {1, 2, "2", "", `"id" is empty`}}},
		{"null id is no id", "{\"id\": null, \"text\": \"x\"}\n", []Item{{0, 1, "1", "x", ""}}},
		{"invalid UTF-8", "{\"text\": \"\xff\"}\n", []Item{{0, 1, "1", "", "the line is not valid UTF-8"}}},
		{"too long, and the next line still read", long + "\n{\"text\": \"after\"}\n",
			[]Item{{0, 1, "1", "", fmt.Sprintf("the line is longer than the limit of %d bytes", MaxLine)}, {1, 2, "2", "after", ""}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := scanAll(t, JSONL, c.in)
			if fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Errorf("got  %+v\nwant %+v", got, c.want)
			}
		})
	}
}

func TestScanCSV(t *testing.T) {
	cases := []struct {
		name, in string
		want     []Item
	}{
		{"id and text columns", "ID,Text,other\na,\"one, quoted\",x\n,\"two\nlines\",y\nc,three\n",
			[]Item{{0, 2, "a", "one, quoted", ""}, {1, 3, "3", "two\nlines", ""}, {2, 5, "c", "three", ""}}},
		{"no id column", "\xef\xbb\xbftext\nx\n\"\"\n", []Item{{0, 2, "2", "x", ""}, {1, 3, "3", "", "the text is empty"}}},
		{"a bad quote is the record's error", "id,text\na,x \"y\" z\nb,fine\n",
			[]Item{{0, 2, "a", "", "bad CSV: bare \" in non-quoted-field"}, {1, 3, "b", "fine", ""}}},
		{"a stray quote closed lines later is its record's error, and the records after it are read",
			"id,text\na,fine\nb,\"oops\nc,after\nd,\"two\nlines\"\n",
			[]Item{{0, 2, "a", "fine", ""}, {1, 3, "b", "", "bad CSV: the quote opened on line 3 closes on line 5 in the middle of a field (a stray quote?); reading goes on at line 4"},
				{2, 4, "c", "after", ""}, {3, 5, "d", "two\nlines", ""}}},
		{"a bare quote in the first field", "id,text\nx\"y,z\nb,fine\n",
			[]Item{{0, 2, "2", "", "bad CSV: bare \" in non-quoted-field"}, {1, 3, "b", "fine", ""}}},
		{"a quote never closed", "id,text\na,\"x\nb,y\n",
			[]Item{{0, 2, "a", "", "bad CSV: the quote opened on line 2 is never closed; reading goes on at line 3"}, {1, 3, "b", "y", ""}}},
		{"a quote opened on the last line", "id,text\na,y\nb,\"x",
			[]Item{{0, 2, "a", "y", ""}, {1, 3, "b", "", "bad CSV: the quote opened on line 3 is never closed"}}},
		{"a quote opened on a later line than its record", "id,text,note\na,\"one\ntwo\",\"n\nb,fine,z\n",
			[]Item{{0, 2, "a", "", "bad CSV: the quote opened on line 3 is never closed; reading goes on at line 4"}, {1, 4, "b", "fine", ""}}},
		{"CRLF line endings, in a quoted field too", "id,text\r\na,\"x\r\ny\"\r\n\r\nb,\"z\"\"\"\r\n",
			[]Item{{0, 2, "a", "x\ny", ""}, {1, 5, "b", "z\"", ""}}},
		{"a trailing comma is an empty field", "text,id\nx,\n", []Item{{0, 2, "2", "x", ""}}},
		{"a record over the limit, unquoted", "id,text\na," + strings.Repeat("x", MaxLine) + "\nb,y\n",
			[]Item{{0, 2, "a", "", fmt.Sprintf("the record is longer than the limit of %d bytes", MaxLine)}, {1, 3, "b", "y", ""}}},
		{"a record over the limit, in a quoted field of many lines", "id,text\na,\"" + strings.Repeat("x\n", MaxLine/2) + "\"\nb,y\n",
			[]Item{{0, 2, "a", "", fmt.Sprintf("the record is longer than the limit of %d bytes", MaxLine)}, {1, 3 + MaxLine/2, "b", "y", ""}}},
		{"header only", "text,id\n", nil},
		{"missing field", "id,text\na\n", []Item{{0, 2, "a", "", "the record has 1 fields, no text column"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := scanAll(t, CSV, c.in)
			if fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Errorf("got  %+v\nwant %+v", got, c.want)
			}
		})
	}
	// A source that cannot be read again ends at a quote never closed; one
	// read from part way in goes back to the right place.
	var got []Item
	collect := func(it Item) error { got = append(got, it); return nil }
	if err := Scan(struct{ io.Reader }{strings.NewReader("id,text\na,\"x\nb,y\n")}, CSV, collect); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprint([]Item{{0, 2, "a", "", "bad CSV: the quote opened on line 2 is never closed, and the lines after it cannot be read again"}}); fmt.Sprint(got) != want {
		t.Errorf("a source that cannot seek: %+v, want %s", got, want)
	}
	r := strings.NewReader("skipped\nid,text\na,\"x\nb,y\n")
	r.Seek(8, io.SeekStart)
	got = nil
	if err := Scan(r, CSV, collect); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprint([]Item{{0, 2, "a", "", "bad CSV: the quote opened on line 2 is never closed; reading goes on at line 3"}, {1, 3, "b", "y", ""}}); fmt.Sprint(got) != want {
		t.Errorf("a source read from part way in: %+v, want %s", got, want)
	}
	if err := Scan(strings.NewReader("id,\"te\"xt\"\n"), CSV, collect); err == nil || !strings.Contains(err.Error(), "the CSV header (line 1): bad CSV: extraneous") {
		t.Errorf("a bad header: %v", err)
	}
	err := Scan(strings.NewReader("id,body\n1,x\n"), CSV, func(Item) error { return nil })
	if err == nil || !strings.Contains(err.Error(), `no "text" column`) {
		t.Errorf("a CSV without a text column: %v", err)
	}
}

func TestFormatOf(t *testing.T) {
	cases := []struct{ path, override, want, err string }{
		{"a.jsonl", "", "jsonl", ""}, {"a.CSV", "", "csv", ""}, {"a.txt", "csv", "csv", ""},
		{"a.txt", "", "", "cannot tell the format"}, {"a.csv", "xml", "", `format "xml" is not known`},
	}
	for _, c := range cases {
		f, err := FormatOf(c.path, c.override)
		if string(f) != c.want || (err == nil) != (c.err == "") || err != nil && !strings.Contains(err.Error(), c.err) {
			t.Errorf("FormatOf(%q, %q) = %q, %v; want %q, %q", c.path, c.override, f, err, c.want, c.err)
		}
	}
}
