package scorer

import (
	"testing"

	"verdict/engine/gemma3n"
	"verdict/engine/model"
)

// TestPromptTail: the text the scorer's answers follow is what the chat
// format's generation prompt writes after its last control token.
func TestPromptTail(t *testing.T) {
	tags := model.Chat{BOS: "<bos>", TurnStart: "<|turn>", TurnEnd: "<turn|>", User: "user", Assistant: "model"}
	thought := tags
	thought.Answer = "<|channel>thought\n<channel|>"
	open := tags
	open.Answer = "Answer: "
	for _, tc := range []struct {
		name string
		chat model.Chat
		want string
	}{
		{"gemma 3n", gemma3n.ChatFormat(model.Special{}), "model\n"},
		{"turn tags", tags, "model\n"},
		{"closed thought channel", thought, ""},
		{"text after the header", open, "model\nAnswer: "},
	} {
		if got := promptTail(tc.chat); got != tc.want {
			t.Errorf("%s: tail %q, want %q", tc.name, got, tc.want)
		}
	}
}
