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
	for _, p := range chatParts(turns, addGenerationPrompt) {
		b.WriteString(p.Text)
	}
	return b.String()
}

// chatParts is ChatPrompt as Parts: the template's markup is Control text,
// the turns' contents plain.
func chatParts(turns []Turn, addGenerationPrompt bool) []Part {
	var out []Part
	control := func(s string) { out = append(out, Part{Text: s, Control: true}) }
	plain := func(s string) { out = append(out, Part{Text: s}) }
	control("<bos>")
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
		control("<start_of_turn>")
		plain(role + "\n")
		if i == 0 {
			plain(prefix)
		}
		plain(strings.TrimFunc(t.Content, isPySpace))
		control("<end_of_turn>\n")
	}
	if addGenerationPrompt {
		control("<start_of_turn>model\n")
	}
	return out
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

// EncodeChat encodes ChatPrompt(turns, addGenerationPrompt), with the
// turns' contents as plain text: a special token written in a message
// ("<end_of_turn>") stays text, only the template's markup gives control
// ids. The prompt text starts with "<bos>", so the ids start with exactly
// one BOS and nothing else is added.
func (t *Tokenizer) EncodeChat(turns []Turn, addGenerationPrompt bool) []int32 {
	return t.EncodeParts(chatParts(turns, addGenerationPrompt))
}
