package session

import (
	"context"
	"errors"
	"slices"
	"testing"

	"verdict/engine/catalog"
)

// TestSelect: Select decodes k distinct entries as `verdict catalog` does
// (the catalog prompt, the decoder on the model alone): the same tokens and
// names; a bad catalog or k is refused before any step.
func TestSelect(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	entries := catalog.Tools()[:12]
	const request = "I was charged twice for my order and want my money back"
	for _, k := range []int{1, 4} {
		got, err := s.Select(ctx, entries, request, k)
		if err != nil {
			t.Fatal(err)
		}
		sep, _ := s.tok.Lookup("\n")
		cat, err := catalog.Compile(entries, s.tok, catalog.Grammar{Sep: sep, SepText: "\n", Stop: s.tok.EndOfTurn()})
		if err != nil {
			t.Fatal(err)
		}
		ids, err := catalog.Prompt(cat.Entries, k, request, s.m.Chat()).Encode(s.tok, s.m.Chat().Media)
		if err != nil {
			t.Fatal(err)
		}
		want, err := catalog.Decode(ctx, s.m.Model, cat, catalog.Request{Prompt: ids, K: k}, catalog.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.Names, want.Names) || !slices.Equal(got.Tokens, want.Tokens) || len(got.Names) != k || got.Prompt != len(ids) {
			t.Errorf("k=%d: %v %v, want %v %v", k, got.Names, got.Tokens, want.Names, want.Tokens)
		}
		if len(got.Catalog.Entries) != len(entries) || len(got.Catalog.Entries[0].TokenIDs) == 0 {
			t.Errorf("k=%d: the compiled catalog has %d entries", k, len(got.Catalog.Entries))
		}
	}
	var ke *catalog.KError
	if _, err := s.Select(ctx, entries, request, 13); !errors.As(err, &ke) {
		t.Errorf("k=13 of 12: %v", err)
	}
	if _, err := s.Select(ctx, []catalog.Entry{{Name: "a"}, {Name: "a"}}, request, 1); !errors.Is(err, catalog.ErrInvalid) {
		t.Errorf("a duplicate name: %v", err)
	}
	if _, err := s.Select(ctx, entries, "look at <image_soft_token>", 1); err == nil {
		t.Error("a media token in the request: no error")
	}
}
