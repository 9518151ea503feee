package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"verdict/app"
	"verdict/engine/session"
)

// CompletionRequest is the body of POST /v1/completions: OpenAI's legacy
// completion of a raw prompt (no chat format; control tokens written in it,
// such as <start_of_turn>, are control tokens).
type CompletionRequest struct {
	Model  string     `json:"model"`
	Prompt PromptText `json:"prompt"`
	// MaxTokens is 0..4096 (default 16); 0 only with echo: the prompt
	// scored, nothing generated.
	MaxTokens     *int           `json:"max_tokens,omitempty"`
	Temperature   *float64       `json:"temperature,omitempty"`
	TopP          *float64       `json:"top_p,omitempty"`
	TopK          *int           `json:"top_k,omitempty"`
	Seed          *int64         `json:"seed,omitempty"`
	Stop          StopList       `json:"stop,omitempty"`
	N             *int           `json:"n,omitempty"`
	BestOf        *int           `json:"best_of,omitempty"`
	Stream        bool           `json:"stream,omitempty"`
	StreamOptions *StreamOptions `json:"stream_options,omitempty"`
	// Logprobs (0..5) gives each token its log-probability and that many
	// alternatives.
	Logprobs *int `json:"logprobs,omitempty"`
	// Echo puts the prompt before the completion, with the prompt tokens'
	// logprobs when Logprobs is set.
	Echo             bool               `json:"echo,omitempty"`
	Suffix           *string            `json:"suffix,omitempty"`
	User             string             `json:"user,omitempty"`
	FrequencyPenalty *float64           `json:"frequency_penalty,omitempty"`
	PresencePenalty  *float64           `json:"presence_penalty,omitempty"`
	LogitBias        map[string]float64 `json:"logit_bias,omitempty"`
}

// PromptText is a completion's prompt: a string, or a list of one string.
type PromptText string

// UnmarshalJSON takes a string or a list of one string.
func (p *PromptText) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		*p = PromptText(s)
		return nil
	}
	var list []string
	if err := json.Unmarshal(b, &list); err != nil {
		return badParam("prompt", "give a string (token ids are not taken)")
	}
	if len(list) != 1 {
		return badParam("prompt", "%d prompts: Verdict completes one prompt a request", len(list))
	}
	*p = PromptText(list[0])
	return nil
}

// Completion is the body of a legacy completion (and, with Object
// "text_completion" too, of each event of one that streams).
type Completion struct {
	ID                string             `json:"id"`
	Object            string             `json:"object"` // text_completion
	Created           int64              `json:"created"`
	Model             string             `json:"model"`
	SystemFingerprint string             `json:"system_fingerprint"`
	Choices           []CompletionChoice `json:"choices"`
	Usage             *Usage             `json:"usage,omitempty"`
	Verdict           *VerdictInfo       `json:"verdict,omitempty"`
}

// CompletionChoice is the one choice of a completion.
type CompletionChoice struct {
	Text         string              `json:"text"`
	Index        int                 `json:"index"`
	Logprobs     *CompletionLogprobs `json:"logprobs"`
	FinishReason *string             `json:"finish_reason"` // stop or length; null in a stream's chunks before the last
}

// CompletionLogprobs are the legacy shape of tokens' logprobs: parallel
// lists. An echoed prompt's first token has null (nothing comes before it);
// TextOffset is each token's offset in characters in the choice's text
// (the <bos> Verdict puts first takes none).
type CompletionLogprobs struct {
	Tokens        []string   `json:"tokens"`
	TokenLogprobs []*float64 `json:"token_logprobs"`
	TopLogprobs   []TopMap   `json:"top_logprobs"`
	TextOffset    []int      `json:"text_offset"`
}

// TopMap is a token's alternatives, most probable first, written as an
// object of token → logprob (null for none).
type TopMap []TopLogprob

// MarshalJSON writes the object in order.
func (m TopMap) MarshalJSON() ([]byte, error) {
	if m == nil {
		return []byte("null"), nil
	}
	var b bytes.Buffer
	b.WriteByte('{')
	for i, t := range m {
		if i > 0 {
			b.WriteByte(',')
		}
		k, err := marshalNoEscape(t.Token)
		if err != nil {
			return nil, err
		}
		v, _ := json.Marshal(t.Logprob)
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// UnmarshalJSON reads the object in order.
func (m *TopMap) UnmarshalJSON(b []byte) error {
	if string(bytes.TrimSpace(b)) == "null" {
		*m = nil
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return errors.New("top_logprobs: want an object")
	}
	*m = TopMap{}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return err
		}
		var v float64
		if err := dec.Decode(&v); err != nil {
			return err
		}
		*m = append(*m, TopLogprob{Token: k.(string), Logprob: v})
	}
	return nil
}

// maxCompletionLogprobs bounds a legacy completion's logprobs.
const maxCompletionLogprobs = 5

// completionMaxTokens is max_tokens' default on /v1/completions (OpenAI's).
const completionMaxTokens = 16

func (h *Handler) completions(w http.ResponseWriter, r *http.Request) {
	var req CompletionRequest
	if e := readBody(w, r, &req); e != nil {
		h.failOpenAI(w, e)
		return
	}
	if err := req.check(); err != nil {
		h.failOpenAI(w, err)
		return
	}
	maxTokens := req.MaxTokens
	if maxTokens != nil && *maxTokens == 0 {
		maxTokens = nil // echo only: the settings are checked with the default
	}
	g, err := samplingParams{maxTokens: maxTokens, temperature: req.Temperature, topP: req.TopP, topK: req.TopK,
		seed: req.Seed, n: req.N, freq: req.FrequencyPenalty, pres: req.PresencePenalty, logitBias: req.LogitBias}.check(completionMaxTokens)
	if err != nil {
		h.failOpenAI(w, err)
		return
	}
	generate := req.MaxTokens == nil || *req.MaxTokens > 0
	if e := h.checkModel(req.Model); e != nil {
		h.failOpenAI(w, e)
		return
	}
	sreq := session.Request{Kind: session.PromptRaw, Input: string(req.Prompt),
		Sampling: g.Sampling()}
	top := 0
	if req.Logprobs != nil {
		top = *req.Logprobs
		sreq.Sampling.Logprobs, sreq.Sampling.TopLogprobs = true, top
	}
	d, ctx, err := h.svc.Runs.Direct(r.Context(), req.Model)
	if err != nil {
		h.failOpenAI(w, err)
		return
	}
	defer d.Close()
	tok := d.Session.Tokenizer()
	c := Completion{ID: newID("cmpl-"), Object: "text_completion", Created: time.Now().Unix(), Model: modelName(req.Model, d), SystemFingerprint: fingerprint}
	var st *sseWriter
	if req.Stream {
		if st = newSSE(w); st == nil {
			h.failOpenAI(w, &apiError{http.StatusInternalServerError, CodeEngine, "this connection cannot stream"})
			return
		}
	}
	var lp *CompletionLogprobs
	if req.Logprobs != nil {
		lp = &CompletionLogprobs{Tokens: []string{}, TokenLogprobs: []*float64{}, TopLogprobs: []TopMap{}, TextOffset: []int{}}
	}
	chars := 0 // the choice's text so far, in characters
	var text strings.Builder
	// add appends tokens (with their logprobs) and their text to the choice,
	// and returns the logprobs they add.
	add := func(piece string, toks []genToken, bos int32, echoFirst bool) *CompletionLogprobs {
		text.WriteString(piece)
		if lp == nil {
			chars += utf8.RuneCountInString(piece)
			return nil
		}
		part := &CompletionLogprobs{}
		for i, t := range toks {
			s, _ := tokenText(tok, t.id)
			part.Tokens = append(part.Tokens, s)
			part.TextOffset = append(part.TextOffset, chars)
			if echoFirst && i == 0 {
				part.TokenLogprobs, part.TopLogprobs = append(part.TokenLogprobs, nil), append(part.TopLogprobs, nil)
				if t.id == bos && !strings.HasPrefix(string(req.Prompt), s) {
					continue // the <bos> Verdict put first takes no characters
				}
			} else if t.logprobs != nil {
				v := t.logprobs.Logprob
				top := TopMap{}
				for _, a := range t.logprobs.Top {
					ts, tb := tokenText(tok, a.ID)
					top = append(top, TopLogprob{ts, a.Logprob, tb})
				}
				part.TokenLogprobs, part.TopLogprobs = append(part.TokenLogprobs, &v), append(part.TopLogprobs, top)
			}
			chars += utf8.RuneCountInString(s)
		}
		lp.Tokens = append(lp.Tokens, part.Tokens...)
		lp.TokenLogprobs = append(lp.TokenLogprobs, part.TokenLogprobs...)
		lp.TopLogprobs = append(lp.TopLogprobs, part.TopLogprobs...)
		lp.TextOffset = append(lp.TextOffset, part.TextOffset...)
		return part
	}
	send := func(piece string, part *CompletionLogprobs) error {
		if st == nil || (piece == "" && part == nil) {
			return nil
		}
		c.Choices = []CompletionChoice{{Text: piece, Logprobs: part}}
		return st.send(c)
	}
	promptTokens := 0
	if req.Echo {
		// The prompt first: scored when logprobs are asked.
		var toks []genToken
		if lp != nil {
			ids, lps, err := d.Session.PromptLogprobs(ctx, session.Request{Kind: session.PromptRaw, Input: string(req.Prompt)}, top)
			if err != nil {
				h.failOpenAI(w, err)
				return
			}
			promptTokens = len(ids)
			for i, id := range ids {
				t := genToken{id: id}
				if i > 0 {
					t.logprobs = &lps[i-1]
				}
				toks = append(toks, t)
			}
		}
		part := add(string(req.Prompt), toks, tok.BOS(), true)
		if err := send(string(req.Prompt), part); err != nil {
			return
		}
	}
	finish := FinishLength
	var out genOutput
	if generate {
		out, err = h.runGeneration(ctx, d, sreq, req.Stop, func(piece string, toks []genToken) error {
			return send(piece, add(piece, toks, -1, false))
		})
		if r.Context().Err() != nil {
			h.log.WithFields(map[string]any{"route": "completions", "tokens": out.tokens}).Info("generation stopped: the client went away")
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
		finish, promptTokens = out.finish, out.promptTokens
	} else if promptTokens == 0 {
		ids, err := d.Session.Encode(session.Request{Kind: session.PromptRaw, Input: string(req.Prompt)})
		if err != nil {
			h.failOpenAI(w, err)
			return
		}
		promptTokens = len(ids)
	}
	u := usage(promptTokens, out.tokens)
	var info *VerdictInfo
	if generate {
		info = &VerdictInfo{Generation: &GenerationInfo{RandomWeights: d.Info.RandomWeights, Seed: g.Seed, Timings: out.timings}}
	}
	if st != nil {
		c.Choices = []CompletionChoice{{FinishReason: &finish}}
		c.Verdict = info
		st.send(c)
		if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
			c.Choices, c.Usage, c.Verdict = []CompletionChoice{}, u, nil
			st.send(c)
		}
		st.done()
		return
	}
	c.Object, c.Usage, c.Verdict = "text_completion", u, info
	c.Choices = []CompletionChoice{{Text: text.String(), Logprobs: lp, FinishReason: &finish}}
	writeJSON(w, http.StatusOK, c)
}

// check refuses what a completion does not take.
func (req *CompletionRequest) check() error {
	if req.Stream && req.StreamOptions == nil {
		req.StreamOptions = &StreamOptions{}
	} else if !req.Stream && req.StreamOptions != nil {
		return badParam("stream_options", "only with \"stream\": true")
	}
	if req.Prompt == "" {
		return badParam("prompt", "required: the text to complete")
	}
	if len(req.Prompt) > app.MaxInputBytes {
		return bad(CodeLimit, "prompt: %d bytes, over the limit of %d", len(req.Prompt), app.MaxInputBytes)
	}
	if err := checkStops(req.Stop); err != nil {
		return err
	}
	if req.Logprobs != nil && (*req.Logprobs < 0 || *req.Logprobs > maxCompletionLogprobs) {
		return badParam("logprobs", "%d is outside 0..%d", *req.Logprobs, maxCompletionLogprobs)
	}
	if req.BestOf != nil && *req.BestOf != 1 {
		return badParam("best_of", "%d: Verdict generates one completion a request (best_of = 1)", *req.BestOf)
	}
	if req.Suffix != nil && *req.Suffix != "" {
		return badParam("suffix", "not supported: Verdict completes after the prompt only")
	}
	if req.MaxTokens != nil && *req.MaxTokens == 0 && !req.Echo {
		return badParam("max_tokens", "0 generates nothing: with \"echo\": true (and logprobs) it scores the prompt")
	}
	if req.MaxTokens != nil && *req.MaxTokens < 0 {
		return badParam("max_tokens", "%d is below 0", *req.MaxTokens)
	}
	return nil
}
