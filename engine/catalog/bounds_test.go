package catalog_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"verdict/engine/catalog"
)

func TestCheckBounds(t *testing.T) {
	entries := func(n, desc int) []catalog.Entry {
		es := make([]catalog.Entry, n)
		for i := range es {
			es[i] = catalog.Entry{Name: fmt.Sprintf("e%d", i), Description: strings.Repeat("d", desc)}
		}
		return es
	}
	for _, c := range []struct {
		name    string
		entries []catalog.Entry
		want    string // "" for none
	}{
		{"one", entries(1, 0), ""},
		{"at the entry limit", entries(catalog.MaxEntries, 0), ""},
		{"over the entry limit", entries(catalog.MaxEntries+1, 0), "4097 entries, over the limit of 4096"},
		{"at the byte limit", []catalog.Entry{{Name: "a", Description: strings.Repeat("d", catalog.MaxBytes-1)}}, ""},
		{"over the byte limit", []catalog.Entry{{Name: "ab", Description: strings.Repeat("d", catalog.MaxBytes-1)}},
			"1048577 bytes of names and descriptions, over the limit of 1048576"},
		{"names count too", entries(2, catalog.MaxBytes/2), "bytes of names and descriptions"},
	} {
		err := catalog.CheckBounds(c.entries)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !errors.Is(err, catalog.ErrTooLarge) || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: err %v, want ErrTooLarge with %q", c.name, err, c.want)
		}
	}
}
