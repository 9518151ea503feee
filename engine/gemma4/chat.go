package gemma4

import (
	"fmt"

	"verdict/engine/model"
)

// Gemma 4's chat format, as its published chat templates write it. The
// templates are not in transformers (convert_gemma4_weights.py downloads
// them from the Hub: _CHAT_TEMPLATE from gg-hf-gg/gemma-4-E4B-it,
// _CHAT_TEMPLATE_LARGE from gg-hf-gg/gemma-4-31B-it); the text read here
// is Ollama's copy of both, "Google Gemma 4 Canonical Chat Template,
// Published: 2026-07-09" (github.com/ollama/ollama at fb30760,
// model/renderers/testdata/gemma4_e2b_chat_template.jinja2 and
// gemma4_31b_chat_template.jinja2; the line numbers are the same in both):
//
//   - line 188: {{- bos_token -}} (the tokenizer's "<bos>");
//   - line 190-215: a system message, tools or thinking open a turn of its
//     own, '<|turn>system\n', the message trimmed, '<turn|>\n';
//   - line 234: every other message opens '<|turn>' + role + '\n', the
//     role "model" for "assistant"; lines 328 and 336: a user's text is
//     trimmed; line 373: the turn ends '<turn|>\n';
//   - lines 339 and 341: an image is '<|image|>', an audio clip
//     '<|audio|>', where the content puts it, with nothing around it;
//   - line 383: the generation prompt is '<|turn>model\n'; the 31B
//     template (lines 384-386) adds '<|channel>thought\n<channel|>' when
//     thinking is off (the default), the E2B one nothing.
//
// The processor (transformers 5.17, processing_gemma4.py,
// Gemma4Processor.replace_image_token and replace_audio_token) expands a
// placeholder to the begin token, the soft tokens, the end token, with no
// blank lines around them (Gemma 3n's processor writes "\n\n" on each side).

// Template is which of Gemma 4's two chat templates a checkpoint carries.
type Template int

const (
	// TemplateSmall is gemma-4-E2B-it's and gemma-4-E4B-it's: the
	// generation prompt is the model's turn header alone.
	TemplateSmall Template = iota
	// TemplateLarge is gemma-4-26B-A4B-it's and gemma-4-31B-it's: with
	// thinking off the generation prompt also closes an empty thought
	// channel.
	TemplateLarge
)

func (t Template) String() string {
	switch t {
	case TemplateSmall:
		return "E2B/E4B"
	case TemplateLarge:
		return "26B-A4B/31B"
	}
	return fmt.Sprintf("Template(%d)", int(t))
}

// Gemma 4's control tokens as its tokenizer names them
// (convert_gemma4_weights.py's extra_special_tokens, and the templates).
const (
	BOSToken       = "<bos>"
	TurnStartToken = "<|turn>"   // sot_token
	TurnEndToken   = "<turn|>"   // eot_token
	ImageToken     = "<|image|>" // image_token, the image soft token
	BOIToken       = "<|image>"  // boi_token
	EOIToken       = "<image|>"  // eoi_token
	AudioToken     = "<|audio|>" // audio_token, the audio soft token
	BOAToken       = "<|audio>"  // boa_token
	EOAToken       = "<audio|>"  // eoa_token
	// ThoughtChannel is what the large template's generation prompt adds
	// with thinking off: an empty thought channel, opened and closed.
	ThoughtChannel = "<|channel>thought\n<channel|>"
)

// Media are Gemma 4's media token ids, Gemma4Config's defaults in
// transformers 5.17 (configuration_gemma4.py: boi_token_id 255999,
// eoi_token_id 258882, image_token_id 258880, boa_token_id 256000,
// eoa_token_index 258883, audio_token_id 258881), with no soft-token
// counts: an image's count depends on its size (up to the processor's
// image_seq_length, 280) and a clip's on its length (up to 750).
var Media = model.Special{BOI: 255999, EOI: 258882, Image: 258880, BOA: 256000, EOA: 258883, Audio: 258881}

// ChatFormat is Gemma 4's chat format under template t, with the media
// tokens sp: a system turn of its own, turns "<|turn>role\n" … "<turn|>\n",
// no padding around media runs, and the generation prompt of t with
// thinking off.
func ChatFormat(t Template, sp model.Special) (model.Chat, error) {
	c := model.Chat{BOS: BOSToken, TurnStart: TurnStartToken, TurnEnd: TurnEndToken,
		User: "user", Assistant: "model", System: "system", Media: sp}
	switch t {
	case TemplateSmall:
	case TemplateLarge:
		c.Answer = ThoughtChannel
	default:
		return model.Chat{}, fmt.Errorf("gemma4: unknown chat template %d (want TemplateSmall or TemplateLarge)", int(t))
	}
	return c, nil
}

// TemplateOf says which template a checkpoint of configuration c carries.
// Inferred, not read from the checkpoint: the released models with
// per-layer inputs (E2B, E4B) carry the small template, those without
// (26B-A4B, 31B) the large one (convert_gemma4_weights.py's _VARIANTS and
// _LARGE_MODEL_VARIANTS). A checkpoint's own chat_template.jinja is what
// decides; Verdict does not read it.
func TemplateOf(c *Config) Template {
	if c.PerLayerInput > 0 {
		return TemplateSmall
	}
	return TemplateLarge
}
