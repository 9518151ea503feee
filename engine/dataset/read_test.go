package dataset

import (
	"fmt"
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
