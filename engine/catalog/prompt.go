package catalog

import (
	"fmt"
	"strings"

	"verdict/engine/prompt"
)

// Prompt builds the catalog prompt: a user turn listing the entries ("- name:
// description", or "- name" without one), asking for the k entries that best
// serve the request, then the model turn's header. Only the builder places
// control tokens: the entries and the request are user text, their special
// tokens encoded as text.
func Prompt(entries []Entry, k int, request string) prompt.Prompt {
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
	p.Text("<bos><start_of_turn>user\nTools:\n")
	p.User(list.String())
	p.Text(fmt.Sprintf("\n\nName the %d tools, one per line, that best serve this request:\n", k))
	p.User(request)
	p.Text("<end_of_turn>\n<start_of_turn>model\n")
	return p
}
