package tokenizer

import (
	"fmt"
	"strings"
	"unicode"
)

// Turn is one message of a conversation. Role is "system", "user",
// "assistant" (written as "model") or "model".
type Turn struct {
	Role    string
	Content string
}

// ChatPrompt renders turns with Gemma's chat template (the one Gemma 3n's
// processor uses):
//
//	<bos><start_of_turn>user\n{content}<end_of_turn>\n<start_of_turn>model\n{content}<end_of_turn>\n...
//
// Contents are trimmed of surrounding white space (Jinja's trim). A leading
// system turn is not rendered as a turn: its content, untrimmed, followed by
// "\n\n", starts the first remaining turn; with no other turn it is dropped,
// as in the template. addGenerationPrompt appends "<start_of_turn>model\n".
// Roles are not checked here; see ValidateTurns.
func ChatPrompt(turns []Turn, addGenerationPrompt bool) string {
	var b strings.Builder
	b.WriteString("<bos>")
	prefix := ""
	if len(turns) > 0 && turns[0].Role == "system" {
		prefix = turns[0].Content + "\n\n"
		turns = turns[1:]
	}
	for i, t := range turns {
		role := t.Role
		if role == "assistant" {
			role = "model"
		}
		b.WriteString("<start_of_turn>")
		b.WriteString(role)
		b.WriteString("\n")
		if i == 0 {
			b.WriteString(prefix)
		}
		b.WriteString(strings.TrimFunc(t.Content, isPySpace))
		b.WriteString("<end_of_turn>\n")
	}
	if addGenerationPrompt {
		b.WriteString("<start_of_turn>model\n")
	}
	return b.String()
}

// isPySpace is Python's str.isspace, which Jinja's trim uses: Unicode white
// space plus the information separators U+001C..U+001F.
func isPySpace(r rune) bool {
	return unicode.IsSpace(r) || (r >= 0x1C && r <= 0x1F)
}

// ValidateTurns makes the check that Gemma's template makes (it raises
// "Conversation roles must alternate user/assistant/user/assistant/..."):
// after an optional leading system turn, turns at even positions must be
// "user" and turns at odd positions must not be.
func ValidateTurns(turns []Turn) error {
	if len(turns) > 0 && turns[0].Role == "system" {
		turns = turns[1:]
	}
	for i, t := range turns {
		if (t.Role == "user") != (i%2 == 0) {
			return fmt.Errorf("chat turn %d has role %q: roles must alternate user/model", i, t.Role)
		}
	}
	return nil
}

// EncodeChat encodes ChatPrompt(turns, addGenerationPrompt). The prompt
// text starts with "<bos>", so the ids start with exactly one BOS and
// nothing else is added.
func (t *Tokenizer) EncodeChat(turns []Turn, addGenerationPrompt bool) []int32 {
	return t.Encode(ChatPrompt(turns, addGenerationPrompt))
}
