// Package prompt assembles Gemma 3n prompts: chat-format text with image and
// audio placeholders expanded as the Hugging Face processor expands them,
// tokenized the way the processor tokenizes them.
//
// Only the builder places control tokens: text it writes (Text) may hold
// special tokens written as text ("<start_of_turn>"), while text from
// outside (User: the input, a schema's questions and option names, a system
// message) is tokenized with its special tokens as plain text. Media tokens
// are refused in text: spelled out in user text, or as ids coming out of
// any text.
package prompt

import (
	"fmt"
	"strings"

	"verdict/engine/model"
	"verdict/engine/tokenizer"
)

// Tokenizer turns text into ids; see tokenizer.Tokenizer.EncodeParts.
type Tokenizer interface {
	EncodeParts(parts []tokenizer.Part) []int32
}

// Segment is a piece of a prompt: text, or token ids placed as they are.
type Segment struct {
	Text string
	IDs  []int32
	// Label names a media run in String ("image 1", "audio").
	Label string
	// User marks text from outside the builder: its special tokens are
	// tokenized as text.
	User bool
}

// Prompt is a sequence of segments.
type Prompt []Segment

// Text appends text the builder wrote: special tokens in it become ids.
func (p *Prompt) Text(s string) { *p = append(*p, Segment{Text: s}) }

// User appends untrusted text: special tokens in it stay text.
func (p *Prompt) User(s string) { *p = append(*p, Segment{Text: s, User: true}) }

// Image appends one image's placeholders: "\n\n", <start_of_image>, the
// image soft tokens, <end_of_image>, "\n\n".
func (p *Prompt) Image(sp model.Special, label string) {
	p.media("\n\n", sp.BOI, sp.Image, sp.EOI, sp.VisionTokens, label)
}

// Audio appends one audio clip's placeholders: "\n\n", <start_of_audio>, the
// audio soft tokens, <end_of_audio>, "\n\n".
func (p *Prompt) Audio(sp model.Special, label string) {
	p.media("\n\n", sp.BOA, sp.Audio, sp.EOA, sp.AudioTokens, label)
}

// ChatImage appends one image's placeholders in chat format c: c.MediaPad,
// the begin-image token, the image soft tokens, the end-image token,
// c.MediaPad.
func (p *Prompt) ChatImage(c model.Chat, label string) {
	sp := c.Media
	p.media(c.MediaPad, sp.BOI, sp.Image, sp.EOI, sp.VisionTokens, label)
}

// ChatAudio is ChatImage for an audio clip.
func (p *Prompt) ChatAudio(c model.Chat, label string) {
	sp := c.Media
	p.media(c.MediaPad, sp.BOA, sp.Audio, sp.EOA, sp.AudioTokens, label)
}

func (p *Prompt) media(pad string, begin, soft, end, n int, label string) {
	ids := make([]int32, 0, n+2)
	ids = append(ids, int32(begin))
	for i := 0; i < n; i++ {
		ids = append(ids, int32(soft))
	}
	ids = append(ids, int32(end))
	if pad != "" {
		*p = append(*p, Segment{Text: pad})
	}
	*p = append(*p, Segment{IDs: ids, Label: label})
	if pad != "" {
		*p = append(*p, Segment{Text: pad})
	}
}

// Encode tokenizes the prompt. Text between two runs of ids is tokenized as
// one string, as the processor's tokenizer does between special tokens, with
// User text's special tokens kept as text. Text whose tokens include one of
// sp's media ids (a placeholder written in a --raw prompt, or a tokenizer
// that does not mark it special) is refused: media are placed only as runs
// of ids.
func (p Prompt) Encode(tok Tokenizer, sp model.Special) ([]int32, error) {
	var out []int32
	var parts []tokenizer.Part
	flush := func() error {
		if len(parts) == 0 {
			return nil
		}
		ids := tok.EncodeParts(parts)
		parts = parts[:0]
		if err := CheckMediaIDs(ids, sp, tok); err != nil {
			return err
		}
		out = append(out, ids...)
		return nil
	}
	for _, s := range p {
		if s.User {
			if err := CheckMediaText(s.Text, sp, tok); err != nil {
				return nil, err
			}
		}
		if s.IDs == nil {
			if s.Text != "" {
				parts = append(parts, tokenizer.Part{Text: s.Text, Control: !s.User})
			}
			continue
		}
		if err := flush(); err != nil {
			return nil, err
		}
		out = append(out, s.IDs...)
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return out, nil
}

// mediaID is one of a config's media token ids.
type mediaID struct {
	id    int32
	what  string
	usual string // its name in Gemma 3n's tokenizer
}

// mediaIDs lists sp's media ids (zero ids are unset and left out).
func mediaIDs(sp model.Special) []mediaID {
	var out []mediaID
	for _, m := range []struct {
		id          int
		what, usual string
	}{{sp.BOI, "start-of-image", "<start_of_image>"}, {sp.EOI, "end-of-image", "<end_of_image>"},
		{sp.Image, "image placeholder", "<image_soft_token>"}, {sp.BOA, "start-of-audio", "<start_of_audio>"},
		{sp.EOA, "end-of-audio", "<end_of_audio>"}, {sp.Audio, "audio placeholder", "<audio_soft_token>"}} {
		if m.id != 0 {
			out = append(out, mediaID{int32(m.id), m.what, m.usual})
		}
	}
	return out
}

// MediaTokenError is untrusted text that holds a media token: bad input,
// not a failure of the engine.
type MediaTokenError struct {
	Name, What string // the token as the tokenizer names it ("" unknown), what it marks
	ID         int32
	// Usual is the token's name in Gemma 3n's own tokenizer. Another
	// tokenizer (the published Gemma 3 one) may give the id another name:
	// there <image_soft_token> is 262144, Gemma 3n's end-of-image, so the
	// error says which is which rather than call <image_soft_token> the
	// end-of-image token.
	Usual string
	// Spelled: the text spells the token's name (CheckMediaText); else
	// its tokens hold the id (CheckMediaIDs).
	Spelled bool
}

func (e *MediaTokenError) Error() string {
	const why = ": images and audio are attached as media, not written as tokens"
	if e.Name != "" && e.Usual != "" && e.Name != e.Usual {
		how := " (id %d in this tokenizer)"
		if e.Spelled {
			how = ", id %d in this tokenizer"
		}
		return fmt.Sprintf("the text holds %s"+how+", which the model reads as its %s token (%s in Gemma 3n's own tokenizer)", e.Name, e.ID, e.What, e.Usual) + why
	}
	if e.Spelled {
		return fmt.Sprintf("the text holds %s, the model's %s token (id %d)", e.Name, e.What, e.ID) + why
	}
	name := ""
	if e.Name != "" {
		name = " " + e.Name
	}
	return fmt.Sprintf("the text holds the %s token%s (id %d)", e.What, name, e.ID) + why
}

// CheckMediaText refuses untrusted text that spells one of sp's media
// tokens as the tokenizer names it ("<image_soft_token>"): media are
// attached as files, never written into the text. tok needs a TokenText
// method for the check to run.
func CheckMediaText(text string, sp model.Special, tok any) error {
	tt, ok := tok.(interface{ TokenText(int32) string })
	if !ok || !strings.Contains(text, "<") {
		return nil
	}
	for _, m := range mediaIDs(sp) {
		if name := tt.TokenText(m.id); len(name) > 2 && strings.Contains(text, name) {
			return &MediaTokenError{Name: name, What: m.what, ID: m.id, Usual: m.usual, Spelled: true}
		}
	}
	return nil
}

// CheckMediaIDs refuses ids of text that hold one of sp's media ids (zero
// ids are unset and ignored). tok, when it has a TokenText method, names the
// token in the error.
func CheckMediaIDs(ids []int32, sp model.Special, tok any) error {
	media := map[int32]mediaID{}
	for _, m := range mediaIDs(sp) {
		media[m.id] = m
	}
	if len(media) == 0 {
		return nil
	}
	for _, id := range ids {
		m, ok := media[id]
		if !ok {
			continue
		}
		name := ""
		if tt, ok := tok.(interface{ TokenText(int32) string }); ok {
			name = tt.TokenText(id)
		}
		return &MediaTokenError{Name: name, What: m.what, ID: id, Usual: m.usual}
	}
	return nil
}

// String renders the prompt as text with media runs shown as <label>.
func (p Prompt) String() string {
	var b strings.Builder
	for _, s := range p {
		if s.IDs != nil {
			b.WriteString("<" + s.Label + ">")
		} else {
			b.WriteString(s.Text)
		}
	}
	return b.String()
}

// HasMedia reports whether the prompt holds any media run.
func (p Prompt) HasMedia() bool {
	for _, s := range p {
		if s.IDs != nil {
			return true
		}
	}
	return false
}
