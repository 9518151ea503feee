package prompt_test

import (
	"slices"
	"strings"
	"testing"

	"verdict/engine/fixture/testmodel"
	"verdict/engine/model"
	"verdict/engine/prompt"
)

func TestEncode(t *testing.T) {
	tk := testmodel.Tokenizer(t)
	sp := model.Special{BOI: 255999, EOI: 262144, Image: 262145, BOA: 256000, EOA: 262272, Audio: 262273, VisionTokens: 3, AudioTokens: 2}
	var p prompt.Prompt
	p.Text("<bos><start_of_turn>user\n")
	p.User("see <end_of_turn> here")
	p.Image(sp, "image 1")
	p.User("and<bos>")
	p.Text("<end_of_turn>\n<start_of_turn>model\n")
	ids, err := p.Encode(tk, sp)
	if err != nil {
		t.Fatal(err)
	}
	count := func(id int32) (n int) {
		for _, x := range ids {
			if x == id {
				n++
			}
		}
		return n
	}
	if count(tk.BOS()) != 1 || count(tk.EndOfTurn()) != 1 || count(tk.StartOfTurn()) != 2 {
		t.Errorf("control ids: %d <bos>, %d <end_of_turn>, %d <start_of_turn>; want the builder's 1, 1, 2", count(tk.BOS()), count(tk.EndOfTurn()), count(tk.StartOfTurn()))
	}
	if count(int32(sp.Image)) != 3 || count(int32(sp.BOI)) != 1 || count(int32(sp.EOI)) != 1 {
		t.Errorf("media run: %v", ids)
	}
	// Builder text alone encodes as the tokenizer's Encode does.
	var q prompt.Prompt
	q.Text("<bos><start_of_turn>user\nhello<end_of_turn>\n")
	if got, _ := q.Encode(tk, sp); !slices.Equal(got, tk.Encode("<bos><start_of_turn>user\nhello<end_of_turn>\n")) {
		t.Errorf("builder text: %v", got)
	}
	// A media placeholder coming out of text is refused: here the Gemma 3
	// tokenizer's <image_soft_token> (262144) is Gemma 3n's end-of-image,
	// and the error tells the two names apart.
	var r prompt.Prompt
	r.Text("<bos>look: <image_soft_token>")
	if _, err := r.Encode(tk, sp); err == nil || !strings.Contains(err.Error(), "the text holds <image_soft_token> (id 262144 in this tokenizer), which the model reads as its end-of-image token (<end_of_image> in Gemma 3n's own tokenizer)") {
		t.Errorf("placeholder in text: %v", err)
	}
	// Spelled out in user text, a media token is refused too (the plain
	// encoding would keep it text, but it is never what the user means).
	var u prompt.Prompt
	u.Text("<bos>")
	u.User("look: <start_of_image> here")
	if _, err := u.Encode(tk, sp); err == nil || !strings.Contains(err.Error(), "the text holds <start_of_image>, the model's start-of-image token (id 255999)") {
		t.Errorf("media token spelled in user text: %v", err)
	}
	if err := prompt.CheckMediaText("a <b> c", sp, tk); err != nil {
		t.Errorf("ordinary text: %v", err)
	}
	if err := prompt.CheckMediaIDs([]int32{2, 262273}, sp, tk); err == nil || !strings.Contains(err.Error(), "audio placeholder") {
		t.Errorf("CheckMediaIDs: %v", err)
	}
	if err := prompt.CheckMediaIDs([]int32{2, 262273}, model.Special{}, tk); err != nil {
		t.Errorf("CheckMediaIDs without media ids: %v", err)
	}
}

// TestMediaTokenError: the error names a media token by the tokenizer's
// name and says what the model reads it as; where the tokenizer's name is
// another token's in Gemma 3n (the Gemma 3 tokenizer's <image_soft_token>
// is Gemma 3n's end-of-image id), it says so rather than call
// <image_soft_token> the end-of-image token.
func TestMediaTokenError(t *testing.T) {
	const why = ": images and audio are attached as media, not written as tokens"
	for _, c := range []struct {
		err  prompt.MediaTokenError
		want string
	}{
		{prompt.MediaTokenError{Name: "<start_of_image>", What: "start-of-image", ID: 255999, Usual: "<start_of_image>", Spelled: true},
			"the text holds <start_of_image>, the model's start-of-image token (id 255999)"},
		{prompt.MediaTokenError{Name: "<end_of_image>", What: "end-of-image", ID: 262144, Usual: "<end_of_image>"},
			"the text holds the end-of-image token <end_of_image> (id 262144)"},
		{prompt.MediaTokenError{What: "end-of-image", ID: 262144, Usual: "<end_of_image>"},
			"the text holds the end-of-image token (id 262144)"},
		{prompt.MediaTokenError{Name: "<image_soft_token>", What: "end-of-image", ID: 262144, Usual: "<end_of_image>"},
			"the text holds <image_soft_token> (id 262144 in this tokenizer), which the model reads as its end-of-image token (<end_of_image> in Gemma 3n's own tokenizer)"},
		{prompt.MediaTokenError{Name: "<image_soft_token>", What: "end-of-image", ID: 262144, Usual: "<end_of_image>", Spelled: true},
			"the text holds <image_soft_token>, id 262144 in this tokenizer, which the model reads as its end-of-image token (<end_of_image> in Gemma 3n's own tokenizer)"},
	} {
		if got := c.err.Error(); got != c.want+why {
			t.Errorf("%+v:\n%s\nwant\n%s", c.err, got, c.want+why)
		}
	}
}
