// Package prompt assembles Gemma 3n prompts: chat-format text with image and
// audio placeholders expanded as the Hugging Face processor expands them,
// tokenized the way the processor tokenizes them.
package prompt

import (
	"strings"

	"verdict/engine/gemma3n"
)

// Tokenizer turns text (special tokens written as text) into ids.
type Tokenizer interface {
	Encode(text string) []int32
}

// Segment is a piece of a prompt: text, or token ids placed as they are.
type Segment struct {
	Text string
	IDs  []int32
	// Label names a media run in String ("image 1", "audio").
	Label string
}

// Prompt is a sequence of segments.
type Prompt []Segment

// Text appends text.
func (p *Prompt) Text(s string) { *p = append(*p, Segment{Text: s}) }

// Image appends one image's placeholders: "\n\n", <start_of_image>, the
// image soft tokens, <end_of_image>, "\n\n".
func (p *Prompt) Image(sp gemma3n.Special, label string) {
	p.media(sp.BOI, sp.Image, sp.EOI, sp.VisionTokens, label)
}

// Audio appends one audio clip's placeholders: "\n\n", <start_of_audio>, the
// audio soft tokens, <end_of_audio>, "\n\n".
func (p *Prompt) Audio(sp gemma3n.Special, label string) {
	p.media(sp.BOA, sp.Audio, sp.EOA, sp.AudioTokens, label)
}

func (p *Prompt) media(begin, soft, end, n int, label string) {
	ids := make([]int32, 0, n+2)
	ids = append(ids, int32(begin))
	for i := 0; i < n; i++ {
		ids = append(ids, int32(soft))
	}
	ids = append(ids, int32(end))
	*p = append(*p, Segment{Text: "\n\n"}, Segment{IDs: ids, Label: label}, Segment{Text: "\n\n"})
}

// Encode tokenizes the prompt. Text between two runs of ids is tokenized as
// one string, as the processor's tokenizer does between special tokens.
func (p Prompt) Encode(tok Tokenizer) []int32 {
	var out []int32
	var text strings.Builder
	flush := func() {
		if text.Len() > 0 {
			out = append(out, tok.Encode(text.String())...)
			text.Reset()
		}
	}
	for _, s := range p {
		if s.IDs == nil {
			text.WriteString(s.Text)
			continue
		}
		flush()
		out = append(out, s.IDs...)
	}
	flush()
	return out
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
