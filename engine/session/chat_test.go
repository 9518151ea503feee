package session

import (
	"context"
	"math"
	"slices"
	"strings"
	"testing"

	"verdict/engine/scorer"
	"verdict/engine/tokenizer"
)

// TestEncodeHistory: a conversation's prompt is Gemma's chat template over
// its turns (text only), a turn's media go before its text, and turns out of
// order or media in the wrong place are refused.
func TestEncodeHistory(t *testing.T) {
	s := open(t)
	sp := s.m.Chat().Media
	turns := []tokenizer.Turn{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Hi"},
		{Role: "model", Content: "Hello."}, {Role: "user", Content: " And now? "}}
	got, err := s.Encode(Request{Kind: PromptChat, System: "Be brief.", Input: " And now? ",
		History: []Turn{{Role: "user", Content: "Hi"}, {Role: "assistant", Content: "Hello."}}})
	if err != nil {
		t.Fatal(err)
	}
	if want := s.tok.EncodeChat(turns, true); !slices.Equal(got, want) {
		t.Errorf("ids %v\nwant %v", got, want)
	}
	// One turn with media: the prompt ChatPrompt builds.
	media := &scorer.Media{Captions: []string{"", ""}}
	one, err := ChatTurnsPrompt(s.m.Chat(), media, "Be brief.", []Turn{{Role: "user", Content: "Describe.", Images: 2}}).Encode(s.tok, sp)
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := ChatPrompt(s.m.Chat(), media, "Be brief.", "Describe.").Encode(s.tok, sp); !slices.Equal(one, want) {
		t.Errorf("one turn: ids %v\nwant %v", one, want)
	}
	// The first image in the first turn, the second in the last.
	two, err := s.Encode(Request{Kind: PromptChat, Input: "And this?", Media: media,
		History: []Turn{{Role: "user", Content: "What is it?", Images: 1}, {Role: "model", Content: "A cat."}}})
	if err != nil {
		t.Fatal(err)
	}
	text := s.tok.Decode(two)
	if strings.Count(text, s.tok.TokenText(int32(sp.BOI))) != 2 || strings.Index(text, "What is it?") > strings.Index(text, "A cat.") ||
		!strings.HasSuffix(text, "And this?<end_of_turn>\n<start_of_turn>model\n") {
		t.Errorf("two turns with media decode to %.300q", text)
	}
	if first := strings.Index(text, s.tok.TokenText(int32(sp.EOI))); first > strings.Index(text, "What is it?") {
		t.Errorf("the first image is not before the first turn's text: %.300q", text)
	}
	for _, tc := range []struct {
		name string
		req  Request
		want string
	}{
		{"model first", Request{Kind: PromptChat, Input: "x", History: []Turn{{Role: "model", Content: "a"}, {Role: "user", Content: "b"}}}, `turn 0 has role "model"`},
		{"ends with user", Request{Kind: PromptChat, Input: "x", History: []Turn{{Role: "user", Content: "a"}}}, "end with a user turn"},
		{"too many images", Request{Kind: PromptChat, Input: "x", Media: media, History: []Turn{{Role: "user", Content: "a", Images: 3}, {Role: "model", Content: "b"}}}, "hold 3 images, the request has 2"},
		{"model media", Request{Kind: PromptChat, Input: "x", Media: media, History: []Turn{{Role: "user", Content: "a"}, {Role: "model", Content: "b", Images: 1}}}, "only user turns"},
		{"audio without a clip", Request{Kind: PromptChat, Input: "x", Media: media, History: []Turn{{Role: "user", Content: "a", Audio: true}, {Role: "model", Content: "b"}}}, "audio clip that the request does not have"},
	} {
		if _, err := s.Encode(tc.req); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one saying %q", tc.name, err, tc.want)
		}
	}
}

// TestRawPrompt: the text is the prompt, control tokens as written, one
// <bos> first.
func TestRawPrompt(t *testing.T) {
	s := open(t)
	a, err := s.Encode(Request{Kind: PromptRaw, Input: "<start_of_turn>user\nHi"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Encode(Request{Kind: PromptRaw, Input: "<bos><start_of_turn>user\nHi"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a, b) || a[0] != s.tok.BOS() || a[1] != s.tok.StartOfTurn() {
		t.Errorf("raw prompts %v and %v", a, b)
	}
	if _, err := s.Encode(Request{Kind: PromptRaw, Input: "x", Media: &scorer.Media{}}); err == nil {
		t.Error("a raw prompt took media")
	}
}

// TestGenerateLogprobs: logprobs change no token, and a generated token's
// log-probability is its position's in PromptLogprobs over the prompt and
// the tokens before it.
func TestGenerateLogprobs(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	for _, sm := range []Sampling{{MaxTokens: 6}, {MaxTokens: 6, Temperature: 1, TopK: 50, TopP: 0.9, Seed: 3}} {
		req := Request{Kind: PromptRaw, Input: "The weather today is", Sampling: sm}
		plain, err := s.Generate(ctx, req, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Sampling.Logprobs, req.Sampling.TopLogprobs = true, 3
		var lps []Logprobs
		res, err := s.Generate(ctx, req, func(tk Token) error {
			lps = append(lps, *tk.Logprobs)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(res.IDs, plain.IDs) || len(lps) != len(res.IDs) {
			t.Fatalf("with logprobs %v (%d), without %v", res.IDs, len(lps), plain.IDs)
		}
		prompt, err := s.Encode(req)
		if err != nil {
			t.Fatal(err)
		}
		text := s.tok.Decode(append(prompt[1:], res.IDs...))
		ids, ref, err := s.PromptLogprobs(ctx, Request{Kind: PromptRaw, Input: text}, 3)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(ids, append(prompt, res.IDs...)) {
			t.Skipf("the text does not tokenize back to the same ids: %v", ids)
		}
		for i, l := range lps {
			r := ref[len(prompt)-1+i]
			if math.Abs(l.Logprob-r.Logprob) > 1e-4 || len(l.Top) != 3 || l.Top[0].ID != r.Top[0].ID {
				t.Errorf("token %d: %+v, in the prompt %+v", i, l, r)
			}
		}
	}
}
