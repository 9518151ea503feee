package catalog_test

import (
	"testing"

	"verdict/engine/catalog"
	"verdict/engine/gemma3n"
	"verdict/engine/model"
)

// gemmaChat is Gemma 3n's chat format, the one the recorded prompts were
// built in (media tokens left out: the catalog prompt holds none).
var gemmaChat = gemma3n.ChatFormat(model.Special{})

// TestPromptChatFormat: the catalog prompt's markup is the chat format's.
// Gemma 3n's gives the text the catalog has always written; another format
// (other markers, text after the model's turn header) writes its own, and
// the entries and the request stay user text in either.
func TestPromptChatFormat(t *testing.T) {
	entries := []catalog.Entry{{Name: "get_weather", Description: "Weather"}, {Name: "set_timer"}}
	other := model.Chat{BOS: "<s>", TurnStart: "[", TurnEnd: "]", User: "asker", Assistant: "answerer",
		System: "rules", Answer: "<think></think>"}
	for _, tc := range []struct {
		name string
		chat model.Chat
		want string
	}{
		{"gemma 3n", gemmaChat, "<bos><start_of_turn>user\nTools:\n- get_weather: Weather\n- set_timer\n\n" +
			"Name the 2 tools, one per line, that best serve this request:\nrain?<end_of_turn>\n<start_of_turn>model\n"},
		{"another format", other, "<s>[asker\nTools:\n- get_weather: Weather\n- set_timer\n\n" +
			"Name the 2 tools, one per line, that best serve this request:\nrain?]\n[answerer\n<think></think>"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := catalog.Prompt(entries, 2, "rain?", tc.chat)
			if got := p.String(); got != tc.want {
				t.Errorf("prompt\n got %q\nwant %q", got, tc.want)
			}
			for _, s := range p {
				if s.User && s.Text != "- get_weather: Weather\n- set_timer" && s.Text != "rain?" {
					t.Errorf("user segment %q is not the entries or the request", s.Text)
				}
			}
		})
	}
}
