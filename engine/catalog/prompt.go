package catalog

import (
	"fmt"
	"strings"

	"verdict/engine/model"
	"verdict/engine/prompt"
)

// Prompt builds the catalog prompt in chat format c: a user turn listing the
// entries ("- name: description", or "- name" without one), asking for the
// k entries that best serve the request, then the generation prompt. Only
// the builder places control tokens: the entries and the request are user
// text, their special tokens encoded as text.
func Prompt(entries []Entry, k int, request string, c model.Chat) prompt.Prompt {
	var list strings.Builder
	for i, e := range entries {
		if i > 0 {
			list.WriteByte('\n')
		}
		list.WriteString("- " + e.Name)
		if e.Description != "" {
			list.WriteString(": " + e.Description)
		}
	}
	var p prompt.Prompt
	p.Text(c.BOS + c.Open(c.User) + "Tools:\n")
	p.User(list.String())
	p.Text(fmt.Sprintf("\n\nName the %d tools, one per line, that best serve this request:\n", k))
	p.User(request)
	p.Text(c.Close() + c.Generation())
	return p
}
