// The scorer and generator services bound to the page.

package app

import (
	"encoding/json"
	"errors"

	"verdict/app/inputs"
	"verdict/engine/scorer"
	"verdict/engine/session"
)

// Scorer is the scorer service: a run of the scorer side alone, schema
// checks, presets and the prompt the model is given.
type Scorer struct{ runs *Runs }

// Start runs the scorer alone on req and returns at once.
func (s *Scorer) Start(req RunRequest) (RunStarted, error) { return s.runs.start(req, true, false) }

// Cancel stops the scorer side of run id.
func (s *Scorer) Cancel(id string) error { return s.runs.Cancel(id, SideScorer) }

// SchemaCheck is the outcome of checking a schema.
type SchemaCheck struct {
	OK        bool   `json:"ok"`
	Error     string `json:"error,omitempty"`
	Field     string `json:"field,omitempty"` // the field the error is about
	Fields    int    `json:"fields"`
	Decisions int    `json:"decisions"`
}

// Check parses and validates a schema as a run would.
func (s *Scorer) Check(schema json.RawMessage) SchemaCheck {
	sc, err := scorer.ParseSchema(schema)
	if err != nil {
		c := SchemaCheck{Error: err.Error()}
		var se *scorer.SchemaError
		if errors.As(err, &se) {
			c.Field = se.Field
		}
		return c
	}
	return SchemaCheck{OK: true, Fields: len(sc.Fields), Decisions: sc.Decisions()}
}

// Limits are the serving limits the UI shows.
type Limits struct {
	MaxFields      int `json:"max_fields"`
	MaxDecisions   int `json:"max_decisions"`
	MaxInputTokens int `json:"max_input_tokens"`
	MaxInputBytes  int `json:"max_input_bytes"`
}

// Limits returns the serving limits.
func (s *Scorer) Limits() Limits {
	return Limits{scorer.MaxFields, scorer.MaxDecisions, scorer.MaxInputTokens, MaxInputBytes}
}

// PromptPreview is the prompt the model receives for an input.
type PromptPreview struct {
	// Text is the prompt with each media run written as <image 1>, <audio>.
	Text   string `json:"text"`
	Tokens int    `json:"tokens"` // 0 when no model is loaded
	// MediaTokens are the soft tokens of the media, part of Tokens: Gemma
	// 3n's 256 per image or video frame and 188 for the audio; a Gemma 4
	// model's per image from its size and for the clip from its length.
	MediaTokens int  `json:"media_tokens"`
	Images      int  `json:"images"` // images and video frames
	Audio       bool `json:"audio"`
	MaxTokens   int  `json:"max_tokens"`
}

// Prompt returns the shared prefix the scorer (and the generator in schema
// mode) gives the model for input.
func (s *Scorer) Prompt(schema json.RawMessage, input string) (PromptPreview, error) {
	return s.PromptMedia(schema, input, nil)
}

// PromptMedia is Prompt with the media items whose ids are given: the
// prompt's media placeholders and the token count against the limit.
func (s *Scorer) PromptMedia(schema json.RawMessage, input string, mediaIDs []string) (PromptPreview, error) {
	sc, err := scorer.ParseSchema(schema)
	if err != nil {
		return PromptPreview{}, err
	}
	p := PromptPreview{MaxTokens: scorer.MaxInputTokens}
	var captions []string
	var imageTokens []int
	audioTokens := 0
	mc, done := s.runs.models.mediaCounts()
	defer done()
	if len(mediaIDs) > 0 && s.runs.media != nil {
		in, _, err := s.runs.media.input(mediaIDs)
		if err != nil {
			return PromptPreview{}, err
		}
		captions = inputs.Captions(in)
		_, _, p.Audio = in.Sound()
		imageTokens, audioTokens = mc.inputCounts(in)
	}
	p.Images = len(captions)
	p.MediaTokens = audioTokens
	for _, n := range imageTokens {
		p.MediaTokens += n
	}
	l, release, err := s.runs.models.acquire()
	if err != nil {
		img, aud := mc.image, mc.audio // no model: Gemma 3n's fixed counts
		p.Text = session.SchemaPromptText(sc, input, captions, p.Audio, img, aud)
		return p, nil
	}
	defer release()
	if mc.s == nil { // fixed counts: the chat format's
		imageTokens, audioTokens = nil, 0
	}
	if p.Text, p.Tokens, err = l.s.SchemaPromptSized(sc, input, captions, p.Audio, imageTokens, audioTokens); err != nil {
		return PromptPreview{}, err
	}
	return p, nil
}

// Presets returns the built-in schemas with sample inputs.
func (s *Scorer) Presets() []Preset { return presets() }

// Generator is the generation service: a run of the generation side alone.
type Generator struct{ runs *Runs }

// Start runs generation alone on req and returns at once.
func (g *Generator) Start(req RunRequest) (RunStarted, error) { return g.runs.start(req, false, true) }

// Cancel stops the generation side of run id.
func (g *Generator) Cancel(id string) error { return g.runs.Cancel(id, SideGenerator) }
