package api

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"verdict/app"
	"verdict/engine/catalog"
	"verdict/engine/scorer"
	"verdict/engine/session"
	"verdict/media"
	"verdict/media/decode"
	"verdict/media/limits"
)

// ChatRequest is the body of POST /v1/chat/completions: OpenAI's chat
// completion request, with Verdict's options in "verdict".
type ChatRequest struct {
	Model    string        `json:"model"`
	Messages []ChatMessage `json:"messages"`
	// MaxTokens and MaxCompletionTokens (its newer name) are 1..4096
	// (default 1024).
	MaxTokens           *int     `json:"max_tokens,omitempty"`
	MaxCompletionTokens *int     `json:"max_completion_tokens,omitempty"`
	Temperature         *float64 `json:"temperature,omitempty"` // 0..5, default 1; 0 is greedy
	TopP                *float64 `json:"top_p,omitempty"`       // 0..1, default 0.95
	// TopK is an extension (as vLLM's): 0..1000, default 64, 0 off.
	TopK *int `json:"top_k,omitempty"`
	// Seed picks the sampling sequence; without it, a random one.
	Seed          *int64         `json:"seed,omitempty"`
	Stop          StopList       `json:"stop,omitempty"`
	N             *int           `json:"n,omitempty"`
	Stream        bool           `json:"stream,omitempty"`
	StreamOptions *StreamOptions `json:"stream_options,omitempty"`
	// Logprobs gives each token its log-probability, and TopLogprobs
	// (0..20) alternatives.
	Logprobs    *bool `json:"logprobs,omitempty"`
	TopLogprobs *int  `json:"top_logprobs,omitempty"`
	// ResponseFormat "json_schema" answers through the scorer.
	ResponseFormat *ResponseFormat `json:"response_format,omitempty"`
	// Tools are chosen by the catalog decoder with verdict.select_tools.
	Tools      []Tool          `json:"tools,omitempty"`
	ToolChoice json.RawMessage `json:"tool_choice,omitempty"`
	Verdict    *ChatOptions    `json:"verdict,omitempty"`
	// Taken and not used.
	ParallelToolCalls *bool           `json:"parallel_tool_calls,omitempty"`
	User              string          `json:"user,omitempty"`
	Store             *bool           `json:"store,omitempty"`
	Metadata          json.RawMessage `json:"metadata,omitempty"`
	ServiceTier       string          `json:"service_tier,omitempty"`
	// Refused unless 0 or empty.
	FrequencyPenalty *float64           `json:"frequency_penalty,omitempty"`
	PresencePenalty  *float64           `json:"presence_penalty,omitempty"`
	LogitBias        map[string]float64 `json:"logit_bias,omitempty"`
}

// ChatOptions are Verdict's own options of a chat request.
type ChatOptions struct {
	// SelectTools has the catalog decoder choose this many distinct tools
	// of "tools" (1..len(tools)).
	SelectTools int `json:"select_tools,omitempty"`
	// Temperature divides the scorer's log-likelihoods (json_schema and
	// tool choice; default 1).
	Temperature *float64 `json:"temperature,omitempty"`
	// Normalize is the scorer's correction: none (default), contextual or
	// pmi.
	Normalize string `json:"normalize,omitempty"`
}

// StreamOptions are a stream's options.
type StreamOptions struct {
	// IncludeUsage sends a last chunk with the usage and no choices.
	IncludeUsage bool `json:"include_usage,omitempty"`
}

// ChatMessage is one message of a chat request.
type ChatMessage struct {
	// Role is system (or developer), user or assistant.
	Role    string         `json:"role"`
	Content MessageContent `json:"content"`
	Name    string         `json:"name,omitempty"`
	// ToolCalls and ToolCallID are refused: Verdict does not run tools.
	ToolCalls  json.RawMessage `json:"tool_calls,omitempty"`
	ToolCallID string          `json:"tool_call_id,omitempty"`
	Refusal    *string         `json:"refusal,omitempty"`
}

// MessageContent is a message's content: a string, or a list of parts
// (text, image_url with a data URL, input_audio).
type MessageContent struct {
	Text  string
	Parts []ContentPart
	// Null is true for null (an assistant's message with tool calls).
	Null bool
}

// UnmarshalJSON takes a string, a list of parts or null.
func (c *MessageContent) UnmarshalJSON(b []byte) error {
	if string(bytes.TrimSpace(b)) == "null" {
		*c = MessageContent{Null: true}
		return nil
	}
	if json.Unmarshal(b, &c.Text) == nil {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c.Parts); err != nil {
		if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return bad(CodeBadRequest, "content: unknown field %s in a part", f)
		}
		return bad(CodeBadRequest, "content: give a string or a list of parts ({\"type\": \"text\", \"text\": ...}, {\"type\": \"image_url\", \"image_url\": {\"url\": \"data:...\"}}, {\"type\": \"input_audio\", ...}): %v", err)
	}
	return nil
}

// MarshalJSON writes the string or the parts.
func (c MessageContent) MarshalJSON() ([]byte, error) {
	switch {
	case c.Null:
		return []byte("null"), nil
	case c.Parts != nil:
		return json.Marshal(c.Parts)
	}
	return json.Marshal(c.Text)
}

// ContentPart is one part of a message's content.
type ContentPart struct {
	Type       string      `json:"type"` // text, image_url or input_audio
	Text       string      `json:"text,omitempty"`
	ImageURL   *ImageURL   `json:"image_url,omitempty"`
	InputAudio *InputAudio `json:"input_audio,omitempty"`
}

// ImageURL is an image part's image: a data URL (data:image/png;base64,...).
type ImageURL struct {
	URL    string `json:"url"`
	Detail string `json:"detail,omitempty"` // taken and not used
}

// InputAudio is an audio part's clip: base64 data and its format (wav,
// mp3, ...).
type InputAudio struct {
	Data   string `json:"data"`
	Format string `json:"format"`
}

// ResponseFormat is a chat request's response_format.
type ResponseFormat struct {
	Type       string      `json:"type"` // text, json_schema or json_object
	JSONSchema *JSONSchema `json:"json_schema,omitempty"`
}

// JSONSchema is a json_schema response format.
type JSONSchema struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Schema      json.RawMessage `json:"schema"`
	Strict      *bool           `json:"strict,omitempty"`
}

// Tool is one function tool of a chat request.
type Tool struct {
	Type     string       `json:"type"` // function
	Function ToolFunction `json:"function"`
}

// ToolFunction is a tool's function: its name and description (the
// catalog's entry) and parameters (taken, not used).
type ToolFunction struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
	Strict      *bool           `json:"strict,omitempty"`
}

// ChatCompletion is the body of a chat completion that does not stream.
type ChatCompletion struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"` // chat.completion
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	SystemFingerprint string       `json:"system_fingerprint"`
	Choices           []ChatChoice `json:"choices"`
	Usage             *Usage       `json:"usage"`
	// Verdict holds what OpenAI's shape has no place for: the scorer's
	// result (json_schema, tool choice) or the generation's timings.
	Verdict *VerdictInfo `json:"verdict"`
}

// ChatChoice is the one choice of a chat completion.
type ChatChoice struct {
	Index        int            `json:"index"`
	Message      AssistantReply `json:"message"`
	Logprobs     *ChatLogprobs  `json:"logprobs"`
	FinishReason string         `json:"finish_reason"` // stop, length or tool_calls
}

// AssistantReply is the model's message.
type AssistantReply struct {
	Role      string     `json:"role"` // assistant
	Content   *string    `json:"content"`
	Refusal   *string    `json:"refusal"`
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
}

// ToolCall is one tool the catalog decoder chose, with arguments "{}".
type ToolCall struct {
	// Index is the call's place in a stream's delta.
	Index    *int             `json:"index,omitempty"`
	ID       string           `json:"id"`
	Type     string           `json:"type"` // function
	Function ToolCallFunction `json:"function"`
}

// ToolCallFunction is a tool call's function.
type ToolCallFunction struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// ChatLogprobs are a choice's tokens with their log-probabilities.
type ChatLogprobs struct {
	Content []TokenLogprob `json:"content"`
	Refusal []TokenLogprob `json:"refusal"`
}

// TokenLogprob is one generated token: its text and bytes (a token may
// hold part of a character), its log-probability, and the most probable
// alternatives at its position.
type TokenLogprob struct {
	Token       string       `json:"token"`
	Logprob     float64      `json:"logprob"`
	Bytes       []int        `json:"bytes"`
	TopLogprobs []TopLogprob `json:"top_logprobs"`
}

// TopLogprob is one alternative token.
type TopLogprob struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

// VerdictInfo is a response's "verdict" field.
type VerdictInfo struct {
	// Score is the scorer's result (json_schema): every field's
	// distribution, confidences and timings (/v1/verdict/score's answer).
	Score *ScoreResponse `json:"score,omitempty"`
	// Selection is the catalog decoder's (tools): each step's
	// distribution over its legal tokens.
	Selection *ToolSelection `json:"selection,omitempty"`
	// Generation is an ordinary generation's: its timings and the seed
	// that repeats it.
	Generation *GenerationInfo `json:"generation,omitempty"`
}

// GenerationInfo describes a generation.
type GenerationInfo struct {
	RandomWeights bool    `json:"random_weights,omitempty"`
	Seed          uint64  `json:"seed"`
	Timings       Timings `json:"timings"`
}

// ChatChunk is one server-sent event of a chat completion that streams.
type ChatChunk struct {
	ID                string        `json:"id"`
	Object            string        `json:"object"` // chat.completion.chunk
	Created           int64         `json:"created"`
	Model             string        `json:"model"`
	SystemFingerprint string        `json:"system_fingerprint"`
	Choices           []ChunkChoice `json:"choices"`
	// Usage is in the last chunk (with no choices) when
	// stream_options.include_usage is set.
	Usage *Usage `json:"usage,omitempty"`
	// Verdict is in the chunk with the finish reason.
	Verdict *VerdictInfo `json:"verdict,omitempty"`
}

// ChunkChoice is a chunk's part of the choice.
type ChunkChoice struct {
	Index        int           `json:"index"`
	Delta        ChunkDelta    `json:"delta"`
	Logprobs     *ChatLogprobs `json:"logprobs"`
	FinishReason *string       `json:"finish_reason"`
}

// ChunkDelta is what a chunk adds to the message.
type ChunkDelta struct {
	Role      string     `json:"role,omitempty"`
	Content   *string    `json:"content,omitempty"`
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
}

// fingerprint is the system_fingerprint of every response.
const fingerprint = "verdict"

// chatInput is a chat request's conversation, read from its messages.
type chatInput struct {
	system  string
	history []session.Turn
	user    string       // the last user message's text
	texts   []string     // every user message's text (the scorer's input)
	media   *media.Input // the user messages' images and audio, in order
	turns   int          // user and assistant turns
}

// readMessages reads the messages: system (or developer) messages first,
// then user and assistant turns in alternation (consecutive messages of a
// role joined), ending with the user's.
func readMessages(msgs []ChatMessage) (*chatInput, error) {
	if len(msgs) == 0 {
		return nil, badParam("messages", "give at least one user message")
	}
	in := &chatInput{}
	var systems []string
	type turn struct {
		role   string
		texts  []string
		images int
		audio  bool
	}
	var turns []turn
	for i, m := range msgs {
		p := fmt.Sprintf("messages[%d]", i)
		role := m.Role
		switch role {
		case "system", "developer":
			if len(turns) > 0 {
				return nil, badParam(p+".role", "a %s message after the conversation began: Gemma's chat format has one system message, at the start", role)
			}
		case "user", "assistant":
		case "tool", "function":
			return nil, badParam(p+".role", "%q: Verdict does not run tools or read their results (it chooses tools with verdict.select_tools)", role)
		case "":
			return nil, badParam(p+".role", "required: system, user or assistant")
		default:
			return nil, badParam(p+".role", "%q is not one of system, developer, user, assistant", role)
		}
		if len(m.ToolCalls) > 0 && string(m.ToolCalls) != "null" && string(m.ToolCalls) != "[]" {
			return nil, badParam(p+".tool_calls", "Verdict does not read earlier tool calls")
		}
		if m.ToolCallID != "" {
			return nil, badParam(p+".tool_call_id", "Verdict does not read tool results")
		}
		var texts []string
		images, audio := 0, false
		if m.Content.Null {
			return nil, badParam(p+".content", "null: give the message's text")
		}
		if m.Content.Parts == nil {
			texts = append(texts, m.Content.Text)
		}
		for j, part := range m.Content.Parts {
			pp := fmt.Sprintf("%s.content[%d]", p, j)
			switch part.Type {
			case "text":
				texts = append(texts, part.Text)
			case "image_url", "input_audio":
				if role != "user" {
					return nil, badParam(pp+".type", "%s in a %s message: only user messages hold media", part.Type, role)
				}
				if in.media == nil {
					in.media = &media.Input{}
				}
				if part.Type == "image_url" {
					if err := addImage(in.media, part.ImageURL, pp+".image_url"); err != nil {
						return nil, err
					}
					images++
					continue
				}
				if in.media.Audio != nil {
					return nil, badParam(pp, "a second audio clip: a request takes one")
				}
				if err := setAudio(in.media, part.InputAudio, pp+".input_audio"); err != nil {
					return nil, err
				}
				audio = true
			case "":
				return nil, badParam(pp+".type", "required: text, image_url or input_audio")
			default:
				return nil, badParam(pp+".type", "%q is not one of text, image_url, input_audio", part.Type)
			}
		}
		text := strings.Join(texts, "\n\n")
		if role == "system" || role == "developer" {
			systems = append(systems, text)
			continue
		}
		if n := len(turns); n > 0 && turns[n-1].role == role {
			t := &turns[n-1]
			t.texts, t.images, t.audio = append(t.texts, text), t.images+images, t.audio || audio
			continue
		}
		if len(turns) == 0 && role == "assistant" {
			return nil, badParam(p+".role", "the conversation starts with the assistant: the first turn is the user's")
		}
		turns = append(turns, turn{role, []string{text}, images, audio})
	}
	if len(turns) == 0 || turns[len(turns)-1].role != "user" {
		return nil, badParam("messages", "the last message must be the user's (Verdict does not continue an assistant's message)")
	}
	in.system = strings.Join(systems, "\n\n")
	in.turns = len(turns)
	for i, t := range turns {
		text := strings.Join(t.texts, "\n\n")
		if t.role == "user" {
			in.texts = append(in.texts, text)
		}
		if i == len(turns)-1 {
			in.user = text
			break
		}
		in.history = append(in.history, session.Turn{Role: t.role, Content: text, Images: t.images, Audio: t.audio})
	}
	if in.media != nil {
		if err := in.media.Validate(); err != nil {
			return nil, bad(CodeBadMedia, "messages: %v", err)
		}
	}
	n := len(in.system)
	for _, t := range in.texts {
		n += len(t)
	}
	for _, t := range in.history {
		if t.Role != "user" {
			n += len(t.Content)
		}
	}
	if n > app.MaxInputBytes {
		return nil, bad(CodeLimit, "messages: %d bytes of text, over the limit of %d", n, app.MaxInputBytes)
	}
	return in, nil
}

// addImage decodes an image part's data URL into in.
func addImage(in *media.Input, u *ImageURL, param string) error {
	if u == nil || u.URL == "" {
		return badParam(param+".url", "required: the image as a data URL (data:image/png;base64,...)")
	}
	if len(in.Images) >= limits.MaxImages {
		return &apiError{http.StatusBadRequest, CodeBadMedia, fmt.Sprintf("%s: more than %d images", param, limits.MaxImages)}
	}
	rest, ok := strings.CutPrefix(u.URL, "data:")
	if !ok {
		return badParam(param+".url", "Verdict does not fetch URLs: send the image as a data URL (data:image/png;base64,...)")
	}
	meta, data, ok := strings.Cut(rest, ",")
	if !ok || !strings.HasSuffix(meta, ";base64") {
		return badParam(param+".url", "a data URL of base64 data (data:image/png;base64,...)")
	}
	b, err := base64.StdEncoding.DecodeString(data)
	if err != nil {
		return badParam(param+".url", "not standard base64: %v", err)
	}
	img, _, err := decode.DecodeImage(param, b)
	if err == nil {
		err = in.AddImage(param, img)
	}
	if err != nil {
		return &apiError{http.StatusBadRequest, CodeBadMedia, fmt.Sprintf("%s: %v", param, err)}
	}
	return nil
}

// setAudio decodes an input_audio part into in.
func setAudio(in *media.Input, a *InputAudio, param string) error {
	if a == nil || a.Data == "" {
		return badParam(param+".data", "required: the clip's base64")
	}
	b, err := base64.StdEncoding.DecodeString(a.Data)
	if err != nil {
		return badParam(param+".data", "not standard base64: %v", err)
	}
	name := param
	if a.Format != "" {
		name += "." + a.Format // the decoder takes the format from the name
	}
	snd, err := decode.DecodeAudio(name, b, limits.MaxAudio)
	if err == nil {
		err = in.SetAudio(param, snd.Clip)
	}
	if err != nil {
		return &apiError{http.StatusBadRequest, CodeBadMedia, fmt.Sprintf("%s: %v", param, err)}
	}
	return nil
}

func (h *Handler) chat(w http.ResponseWriter, r *http.Request) {
	var req ChatRequest
	if e := readBody(w, r, &req); e != nil {
		h.failOpenAI(w, e)
		return
	}
	in, err := readMessages(req.Messages)
	if err != nil {
		h.failOpenAI(w, err)
		return
	}
	mode, err := req.mode()
	if err != nil {
		h.failOpenAI(w, err)
		return
	}
	if e := h.checkModel(req.Model); e != nil {
		h.failOpenAI(w, e)
		return
	}
	switch mode {
	case modeSchema:
		h.chatScore(w, r, &req, in)
	case modeTools:
		h.chatTools(w, r, &req, in)
	default:
		h.chatGenerate(w, r, &req, in)
	}
}

// How a chat request is answered.
const (
	modeGenerate = "generate" // ordinary generation
	modeSchema   = "schema"   // response_format json_schema: the scorer
	modeTools    = "tools"    // verdict.select_tools: the catalog decoder
)

// mode checks the request's options and says how it is answered.
func (req *ChatRequest) mode() (string, error) {
	if req.Stream && req.StreamOptions == nil {
		req.StreamOptions = &StreamOptions{}
	} else if !req.Stream && req.StreamOptions != nil {
		return "", badParam("stream_options", "only with \"stream\": true")
	}
	if err := checkStops(req.Stop); err != nil {
		return "", err
	}
	logprobs := req.Logprobs != nil && *req.Logprobs
	if req.TopLogprobs != nil {
		if !logprobs {
			return "", badParam("top_logprobs", "only with \"logprobs\": true")
		}
		if *req.TopLogprobs < 0 || *req.TopLogprobs > session.MaxTopLogprobs {
			return "", badParam("top_logprobs", "%d is outside 0..%d", *req.TopLogprobs, session.MaxTopLogprobs)
		}
	}
	if req.MaxTokens != nil && req.MaxCompletionTokens != nil {
		return "", badParam("max_completion_tokens", "give max_tokens or max_completion_tokens, not both")
	}
	if req.N != nil && *req.N != 1 {
		return "", badParam("n", "%d choices asked: Verdict answers one choice a request (n = 1); send n requests, each with its own seed", *req.N)
	}
	mode := modeGenerate
	if f := req.ResponseFormat; f != nil {
		switch f.Type {
		case "text":
			if f.JSONSchema != nil {
				return "", badParam("response_format.json_schema", "only with type json_schema")
			}
		case "json_schema":
			if f.JSONSchema == nil || len(f.JSONSchema.Schema) == 0 {
				return "", badParam("response_format.json_schema.schema", "required: the JSON Schema of the answer")
			}
			mode = modeSchema
		case "json_object":
			return "", badParam("response_format.type", "json_object asks for free-form JSON, which Verdict does not constrain: give a json_schema whose properties Verdict can score (enums, booleans, integer ranges, arrays of an enum), or leave response_format out")
		case "":
			return "", badParam("response_format.type", "required: text or json_schema")
		default:
			return "", badParam("response_format.type", "%q is not one of text, json_schema, json_object", f.Type)
		}
	}
	k := 0
	if req.Verdict != nil {
		k = req.Verdict.SelectTools
		if req.Verdict.Normalize != "" && scorer.CheckNormalize(req.Verdict.Normalize) != nil {
			return "", badParam("verdict.normalize", "%q is not one of %s", req.Verdict.Normalize, strings.Join(scorer.Normalizations, ", "))
		}
		if t := req.Verdict.Temperature; t != nil && !(*t > 0 && *t <= 100) {
			return "", badParam("verdict.temperature", "%v: the scorer's temperature must be above 0 (default 1)", *t)
		}
	}
	switch {
	case len(req.Tools) == 0 && k != 0:
		return "", badParam("verdict.select_tools", "give the tools to choose from in \"tools\"")
	case len(req.Tools) > 0 && k == 0:
		return "", badParam("tools", "Verdict does not generate tool calls with arguments: set \"verdict\": {\"select_tools\": K} to have the catalog decoder choose K distinct tools (their arguments {}), or leave tools out")
	case len(req.Tools) > 0:
		if mode == modeSchema {
			return "", badParam("response_format", "tools with verdict.select_tools answer with tool calls: leave response_format out")
		}
		if k < 1 || k > len(req.Tools) {
			return "", badParam("verdict.select_tools", "%d, but there are %d tools (1..%d)", k, len(req.Tools), len(req.Tools))
		}
		if err := catalog.CheckBounds(req.toolEntries()); err != nil {
			return "", bad(CodeLimit, "tools: %v", err)
		}
		seen := map[string]bool{}
		for i, t := range req.Tools {
			p := fmt.Sprintf("tools[%d]", i)
			if t.Type != "function" {
				return "", badParam(p+".type", "%q: only function tools", t.Type)
			}
			if strings.TrimSpace(t.Function.Name) == "" {
				return "", badParam(p+".function.name", "required")
			}
			if seen[t.Function.Name] {
				return "", badParam(p+".function.name", "%q is named twice", t.Function.Name)
			}
			seen[t.Function.Name] = true
		}
		switch c := strings.TrimSpace(string(req.ToolChoice)); c {
		case "", "null", `"auto"`, `"required"`:
		case `"none"`:
			return "", badParam("tool_choice", "\"none\" with verdict.select_tools: leave tools out to generate text")
		default:
			return "", badParam("tool_choice", "%s: with verdict.select_tools, tool_choice is auto or required (the decoder chooses)", c)
		}
		mode = modeTools
	case len(req.ToolChoice) > 0 && string(req.ToolChoice) != "null":
		return "", badParam("tool_choice", "only with tools")
	}
	if mode != modeGenerate && logprobs {
		return "", badParam("logprobs", "the answer is the scorer's, not generated: its distributions are in the response's \"verdict\" field")
	}
	return mode, nil
}

// maxTokens is max_completion_tokens or max_tokens.
func (req *ChatRequest) maxTokens() *int {
	if req.MaxCompletionTokens != nil {
		return req.MaxCompletionTokens
	}
	return req.MaxTokens
}

// openAIMaxTokens is max_tokens' default on the chat route.
const openAIMaxTokens = 1024

func (h *Handler) chatGenerate(w http.ResponseWriter, r *http.Request, req *ChatRequest, in *chatInput) {
	g, err := samplingParams{maxTokens: req.maxTokens(), temperature: req.Temperature, topP: req.TopP, topK: req.TopK,
		seed: req.Seed, freq: req.FrequencyPenalty, pres: req.PresencePenalty, logitBias: req.LogitBias}.check(openAIMaxTokens)
	if err != nil {
		if e := classify(err); req.MaxCompletionTokens != nil {
			// The setting is named as the request named it.
			err = &apiError{e.status, e.code, strings.Replace(e.msg, `"max_tokens"`, `"max_completion_tokens"`, 1)}
		}
		h.failOpenAI(w, err)
		return
	}
	if strings.TrimSpace(in.user) == "" && in.media == nil {
		h.failOpenAI(w, badParam("messages", "the last user message is empty"))
		return
	}
	sreq := session.Request{Kind: session.PromptChat, Input: in.user, System: in.system, History: in.history,
		Sampling: g.Sampling()}
	if req.Logprobs != nil && *req.Logprobs {
		sreq.Sampling.Logprobs = true
		if req.TopLogprobs != nil {
			sreq.Sampling.TopLogprobs = *req.TopLogprobs
		}
	}
	d, ctx, err := h.svc.Runs.Direct(r.Context(), req.Model)
	if err != nil {
		h.failOpenAI(w, err)
		return
	}
	defer d.Close()
	if in.media != nil {
		if err := d.CanTake(in.media); err != nil {
			h.failOpenAI(w, bad(CodeBadMedia, "messages: %v", err))
			return
		}
		p, err := d.Prepare(ctx, in.media)
		if err != nil {
			h.failOpenAI(w, err)
			return
		}
		sreq.Media = &p.Media
	}
	c := ChatChunk{ID: newID("chatcmpl-"), Object: "chat.completion.chunk", Created: time.Now().Unix(), Model: modelName(req.Model, d), SystemFingerprint: fingerprint}
	var st *sseWriter
	if req.Stream {
		if st = newSSE(w); st == nil {
			h.failOpenAI(w, &apiError{http.StatusInternalServerError, CodeEngine, "this connection cannot stream"})
			return
		}
		sreq.OnPrompt = func(int) {
			st.start()
			role := ChunkChoice{Delta: ChunkDelta{Role: "assistant", Content: ptrTo("")}}
			c.Choices = []ChunkChoice{role}
			st.send(c)
		}
	}
	tok := d.Session.Tokenizer()
	var lps []TokenLogprob
	out, err := h.runGeneration(ctx, d, sreq, req.Stop, func(text string, toks []genToken) error {
		var l *ChatLogprobs
		if sreq.Sampling.Logprobs {
			l = &ChatLogprobs{Content: chatLogprobs(tok, toks), Refusal: nil}
			lps = append(lps, l.Content...)
		}
		if st == nil || (text == "" && l == nil) {
			return nil
		}
		c.Choices = []ChunkChoice{{Delta: ChunkDelta{Content: &text}, Logprobs: l}}
		return st.send(c)
	})
	if r.Context().Err() != nil {
		h.log.WithFields(map[string]any{"route": "chat/completions", "tokens": out.tokens}).Info("generation stopped: the client went away")
		return
	}
	if err != nil {
		if st != nil && st.started {
			st.fail(err)
			return
		}
		h.failOpenAI(w, err)
		return
	}
	info := &VerdictInfo{Generation: &GenerationInfo{RandomWeights: d.Info.RandomWeights, Seed: g.Seed, Timings: out.timings}}
	u := usage(out.promptTokens, out.tokens)
	if st != nil {
		c.Choices = []ChunkChoice{{Delta: ChunkDelta{}, FinishReason: &out.finish}}
		c.Verdict = info
		st.send(c)
		c.Verdict = nil
		if req.StreamOptions.IncludeUsage {
			c.Choices, c.Usage = []ChunkChoice{}, u
			st.send(c)
		}
		st.done()
		return
	}
	resp := ChatCompletion{ID: c.ID, Object: "chat.completion", Created: c.Created, Model: c.Model, SystemFingerprint: fingerprint,
		Choices: []ChatChoice{{Message: AssistantReply{Role: "assistant", Content: &out.text}, FinishReason: out.finish}},
		Usage:   u, Verdict: info}
	if sreq.Sampling.Logprobs {
		if lps == nil {
			lps = []TokenLogprob{}
		}
		resp.Choices[0].Logprobs = &ChatLogprobs{Content: lps}
	}
	writeJSON(w, http.StatusOK, resp)
}

// modelName is the model a response names: the request's, else the
// loaded one's id.
func modelName(asked string, d *app.Direct) string {
	if asked != "" {
		return asked
	}
	return d.Info.Spec
}

func ptrTo[T any](v T) *T { return &v }

// chatLogprobs are tokens' logprobs in the chat shape.
func chatLogprobs(tok pieceTokenizer, toks []genToken) []TokenLogprob {
	out := make([]TokenLogprob, 0, len(toks))
	for _, t := range toks {
		if t.logprobs == nil {
			continue
		}
		text, b := tokenText(tok, t.id)
		e := TokenLogprob{Token: text, Logprob: t.logprobs.Logprob, Bytes: b, TopLogprobs: []TopLogprob{}}
		for _, a := range t.logprobs.Top {
			text, b := tokenText(tok, a.ID)
			e.TopLogprobs = append(e.TopLogprobs, TopLogprob{text, a.Logprob, b})
		}
		out = append(out, e)
	}
	return out
}

// pieceTokenizer gives a token's bytes.
type pieceTokenizer interface{ TokenPiece(id int32) string }

// tokenText is a token's text and its bytes (a byte-fallback token's text
// is its one byte, which may be part of a character).
func tokenText(tok pieceTokenizer, id int32) (string, []int) {
	p := tok.TokenPiece(id)
	b := make([]int, len(p))
	for i := 0; i < len(p); i++ {
		b[i] = int(p[i])
	}
	return p, b
}
