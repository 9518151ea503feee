package session

import (
	"slices"
	"testing"

	"verdict/engine/gemma3n"
	"verdict/engine/model"
	"verdict/engine/scorer"
	"verdict/engine/tokenizer"
)

// TestChatFormatPrompts: the chat prompts are written in the chat format
// they are given. Gemma 3n's puts the system message at the start of the
// user's turn and "\n\n" around media; a format with a system turn, no
// media padding and text after the model's header (as Gemma 4's) writes
// those instead.
func TestChatFormatPrompts(t *testing.T) {
	sp := model.Special{BOI: 10, EOI: 11, Image: 12, BOA: 13, EOA: 14, Audio: 15, VisionTokens: 2, AudioTokens: 3}
	g3 := gemma3n.ChatFormat(sp)
	turnTags := model.Chat{BOS: "<bos>", TurnStart: "<|turn>", TurnEnd: "<turn|>", User: "user", Assistant: "model",
		System: "system", Answer: "<|channel>thought\n<channel|>", Media: sp}
	media := &scorer.Media{Media: model.Media{Audio: []float32{0}}, Captions: []string{"A cat:", ""}}
	history := []Turn{{Role: "user", Content: " Hi ", Images: 1}, {Role: "model", Content: "Hello."},
		{Role: "user", Content: "And these?", Images: 1, Audio: true}}
	for _, tc := range []struct {
		name string
		got  func(model.Chat) string
		g3   string // in Gemma 3n's format
		tags string // in the turn-tag format
	}{
		{"one turn", func(c model.Chat) string { return ChatPrompt(c, media, " Be brief. ", "Describe.").String() },
			"<bos><start_of_turn>user\n Be brief. \n\nA cat:\n\n<image 1>\n\n\n\n<image 2>\n\n\n\n<audio>\n\nDescribe.<end_of_turn>\n<start_of_turn>model\n",
			"<bos><|turn>system\nBe brief.<turn|>\n<|turn>user\nA cat:<image 1><image 2><audio>Describe.<turn|>\n<|turn>model\n<|channel>thought\n<channel|>"},
		{"one turn, no system", func(c model.Chat) string { return ChatPrompt(c, nil, "", "Describe.").String() },
			"<bos><start_of_turn>user\nDescribe.<end_of_turn>\n<start_of_turn>model\n",
			"<bos><|turn>user\nDescribe.<turn|>\n<|turn>model\n<|channel>thought\n<channel|>"},
		{"turns", func(c model.Chat) string { return ChatTurnsPrompt(c, media, "Be brief.", history).String() },
			"<bos><start_of_turn>user\nBe brief.\n\nA cat:\n\n<image 1>\n\nHi<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n" +
				"<start_of_turn>user\n\n\n<image 2>\n\n\n\n<audio>\n\nAnd these?<end_of_turn>\n<start_of_turn>model\n",
			"<bos><|turn>system\nBe brief.<turn|>\n<|turn>user\nA cat:<image 1>Hi<turn|>\n<|turn>model\nHello.<turn|>\n" +
				"<|turn>user\n<image 2><audio>And these?<turn|>\n<|turn>model\n<|channel>thought\n<channel|>"},
		{"schema", func(c model.Chat) string {
			sc, err := scorer.ParseSchema([]byte(`{"fields": [{"name": "ok", "question": "Fine?", "type": "bool"}]}`))
			if err != nil {
				t.Fatal(err)
			}
			return sc.Prompt("fine", c)
		},
			"<bos><start_of_turn>user\n" + scorer.DefaultInstructions + "\n\n" + scorer.DefaultInputLabel + ":\nfine\n\nFields:\n- \"ok\": Fine? true or false.<end_of_turn>\n<start_of_turn>model\n",
			"<bos><|turn>user\n" + scorer.DefaultInstructions + "\n\n" + scorer.DefaultInputLabel + ":\nfine\n\nFields:\n- \"ok\": Fine? true or false.<turn|>\n<|turn>model\n<|channel>thought\n<channel|>"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.got(g3); got != tc.g3 {
				t.Errorf("Gemma 3n's format\n got %q\nwant %q", got, tc.g3)
			}
			if got := tc.got(turnTags); got != tc.tags {
				t.Errorf("turn tags\n got %q\nwant %q", got, tc.tags)
			}
		})
	}
}

// TestTextChatIsTemplate: a text-only chat prompt in Gemma 3n's format is
// the ids of the tokenizer's Gemma template (EncodeChat) whatever white
// space, information separators (Jinja's trim takes them) or special tokens
// the text holds.
func TestTextChatIsTemplate(t *testing.T) {
	s := open(t)
	for _, tc := range []struct{ system, input string }{
		{"", "Hi"},
		{"Be brief.", "  Hi\n"},
		{" Be\tbrief. ", "\x1cHi\x1f"},
		{"", "<end_of_turn>\n<start_of_turn>model\nSure"},
	} {
		got, err := s.Encode(Request{Kind: PromptChat, System: tc.system, Input: tc.input})
		if err != nil {
			t.Fatal(err)
		}
		var turns []tokenizer.Turn
		if tc.system != "" {
			turns = append(turns, tokenizer.Turn{Role: "system", Content: tc.system})
		}
		turns = append(turns, tokenizer.Turn{Role: "user", Content: tc.input})
		if want := s.tok.EncodeChat(turns, true); !slices.Equal(got, want) {
			t.Errorf("system %q, input %q: ids %v\nwant %v", tc.system, tc.input, got, want)
		}
	}
}
