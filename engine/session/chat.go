package session

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode"

	"verdict/engine/generate"
	"verdict/engine/model"
	"verdict/engine/prompt"
	"verdict/engine/scorer"
)

// Logprobs are a position's log-probabilities under the model (see
// generate.Logprobs); Alt is one alternative token.
type (
	Logprobs = generate.Logprobs
	Alt      = generate.Alt
)

// MaxTopLogprobs bounds Sampling.TopLogprobs and PromptLogprobs' top.
const MaxTopLogprobs = generate.MaxTopLogprobs

// Turn is an earlier turn of a conversation (Request.History): its role,
// user or model ("assistant" is taken for model), its text, and for a user
// turn the media it holds: the next Images of the request's images (the
// images are in the order of the turns, those of no earlier turn in the
// last user turn, Input's) and, when Audio is set, the request's audio clip
// (else the clip is in Input's turn).
type Turn struct {
	Role    string
	Content string
	Images  int
	Audio   bool
}

// encodeTurns is Encode of a PromptChat request with History: the system
// message, the turns and the user's Input in Gemma's chat format, each
// turn's media before its text.
func (s *Session) encodeTurns(req Request) ([]int32, error) {
	turns := append([]Turn(nil), req.History...)
	for i := range turns {
		if turns[i].Role == "assistant" {
			turns[i].Role = "model"
		}
		want := "user"
		if i%2 == 1 {
			want = "model"
		}
		if turns[i].Role != want {
			return nil, fmt.Errorf("session: turn %d has role %q, want %s: the turns alternate user, model, ..., and the last earlier turn is the model's", i, req.History[i].Role, want)
		}
		if want == "model" && (turns[i].Images > 0 || turns[i].Audio) {
			return nil, fmt.Errorf("session: turn %d is the model's and holds media: only user turns do", i)
		}
		if turns[i].Images < 0 {
			return nil, fmt.Errorf("session: turn %d holds %d images", i, turns[i].Images)
		}
	}
	if len(turns)%2 != 0 {
		return nil, errors.New("session: the earlier turns end with a user turn: the last is the model's, before the user's input")
	}
	images, audio := 0, false
	if req.Media != nil {
		images, audio = len(req.Media.Captions), req.Media.Audio != nil
	}
	used, audioUsed := 0, false
	for i, t := range turns {
		used += t.Images
		if t.Audio {
			if audioUsed || !audio {
				return nil, fmt.Errorf("session: turn %d holds an audio clip that the request does not have (one clip at most)", i)
			}
			audioUsed = true
		}
	}
	if used > images {
		return nil, fmt.Errorf("session: the turns hold %d images, the request has %d", used, images)
	}
	last := Turn{Role: "user", Content: req.Input, Images: images - used, Audio: audio && !audioUsed}
	turns = append(turns, last)
	return s.encodeMedia(ChatTurnsPrompt(s.m.Chat(), req.Media, req.System, turns), req.Media)
}

// ChatTurnsPrompt is a conversation's prompt for generation in chat format
// ch: the system message (if any: a turn of its own, or the start of the
// first turn when the format has no system turn), then each turn with its
// media placeholders (each image after its caption, when it has one) before
// its text, which is trimmed of surrounding white space as the templates'
// Jinja trim does, and the generation prompt. The turns alternate "user"
// and "model" (written as ch's User and Assistant), the first and the last
// the user's (the session checks this); there is at least one. Only the
// chat markup gives control tokens.
func ChatTurnsPrompt(ch model.Chat, media *scorer.Media, system string, turns []Turn) prompt.Prompt {
	var pr prompt.Prompt
	img := 0
	for i, t := range turns {
		role := ch.User
		if t.Role == "model" {
			role = ch.Assistant
		}
		if i == 0 {
			pr = chatStart(ch, system)
		} else {
			pr.Text(ch.Open(role))
		}
		if media != nil {
			for j := 0; j < t.Images && img < len(media.Captions); j++ {
				if c := media.Captions[img]; c != "" {
					pr.User(c)
				}
				img++
				pr.ChatImage(ch, fmt.Sprintf("image %d", img))
			}
			if t.Audio && media.Audio != nil {
				pr.ChatAudio(ch, "audio")
			}
		}
		pr.User(strings.TrimFunc(t.Content, isPySpace))
		pr.Text(ch.Close())
	}
	pr.Text(ch.Generation())
	return pr
}

// chatStart begins a prompt in chat format ch with the system message
// (none when ""), and opens the user's turn: BOS, then the system turn and
// the user's header, or, in a format with no system turn, the user's header
// and the system message followed by a blank line, as Gemma 3n's template
// writes it. A system turn's text is trimmed, as Gemma 4's template does.
func chatStart(ch model.Chat, system string) prompt.Prompt {
	var pr prompt.Prompt
	switch {
	case system == "":
		pr.Text(ch.BOS + ch.Open(ch.User))
	case ch.System == "":
		pr.Text(ch.BOS + ch.Open(ch.User))
		pr.User(system + "\n\n")
	default:
		pr.Text(ch.BOS + ch.Open(ch.System))
		pr.User(strings.TrimFunc(system, isPySpace))
		pr.Text(ch.Close() + ch.Open(ch.User))
	}
	return pr
}

// isPySpace is Python's str.isspace, which Jinja's trim uses: Unicode white
// space and the information separators U+001C..U+001F.
func isPySpace(r rune) bool {
	return unicode.IsSpace(r) || (r >= 0x1C && r <= 0x1F)
}

// RawPrompt tokenizes text as a whole prompt: control tokens written in it
// ("<start_of_turn>") become their ids, a <bos> is put first unless the
// text starts with one, and media tokens are refused.
func (s *Session) RawPrompt(text string) ([]int32, error) {
	ids := s.tok.Encode(text)
	if len(ids) == 0 || ids[0] != s.tok.BOS() {
		ids = append([]int32{s.tok.BOS()}, ids...)
	}
	if err := prompt.CheckMediaIDs(ids, s.m.Chat().Media, s.tok); err != nil {
		return nil, err
	}
	return ids, nil
}

// PromptLogprobs builds req's prompt (Encode; text only) and scores it as a
// request of the scheduler: the prompt's ids, and for every id after the
// first its log-probability given those before it, with the top (0..20)
// most probable alternatives (generate.PromptLogprobs).
func (s *Session) PromptLogprobs(ctx context.Context, req Request, top int) ([]int32, []Logprobs, error) {
	if s.set != nil {
		return s.set.promptLogprobs(ctx, req, top)
	}
	if req.Media != nil {
		return nil, nil, errors.New("session: prompt logprobs are for text prompts")
	}
	ids, err := s.Encode(req)
	if err != nil {
		return nil, nil, err
	}
	if req.OnPrompt != nil {
		req.OnPrompt(len(ids))
	}
	rq := s.sched.Begin(ctx, priority(ctx))
	defer rq.End()
	tk, err := rq.Admit(s.m.Need(len(ids)))
	if err != nil {
		return ids, nil, fmt.Errorf("prompt logprobs: %w", err)
	}
	defer tk.Release()
	lps, err := generate.PromptLogprobs(ctx, s.runner(rq), s.m.Model, ids, top, tk)
	return ids, lps, err
}
