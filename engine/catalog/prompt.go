package catalog

import (
	"fmt"
	"strings"
)

// Turns are the chat-format control tokens the prompt builder places.
type Turns struct {
	BOS, StartOfTurn, EndOfTurn int32
}

// Prompt builds the catalog prompt: a user turn listing the entries ("- name:
// description", or "- name" without one), asking for the k entries that best
// serve the request, then the model turn's header. Only the builder places
// control tokens; the entries and the request are encoded as plain text by
// tok.
func Prompt(tok Tokenizer, t Turns, entries []Entry, k int, request string) []int32 {
	var b strings.Builder
	b.WriteString("user\nTools:\n")
	for i, e := range entries {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString("- " + e.Name)
		if e.Description != "" {
			b.WriteString(": " + e.Description)
		}
	}
	fmt.Fprintf(&b, "\n\nName the %d tools, one per line, that best serve this request:\n", k)
	b.WriteString(request)
	ids := []int32{t.BOS, t.StartOfTurn}
	ids = append(ids, tok.Encode(b.String())...)
	ids = append(ids, t.EndOfTurn)
	ids = append(ids, tok.Encode("\n")...)
	ids = append(ids, t.StartOfTurn)
	return append(ids, tok.Encode("model\n")...)
}
