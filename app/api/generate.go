package api

import (
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"verdict/app"
	"verdict/engine/session"
)

// GenerateRequest is the body of POST /v1/generate: a one-turn chat, given
// as prompt (and system) or as messages.
type GenerateRequest struct {
	Model  string `json:"model,omitempty"`
	Prompt string `json:"prompt,omitempty"`
	System string `json:"system,omitempty"`
	// Messages are an optional system message and one user message.
	Messages []Message `json:"messages,omitempty"`
	// MaxTokens is 1..4096 (default 96); Temperature 0..5 (default 0,
	// greedy); TopK 0..1000 (default 64, 0 off); TopP 0..1 (default 0.95);
	// Seed picks the sampling sequence (default 0).
	MaxTokens   *int     `json:"max_tokens,omitempty"`
	Temperature *float64 `json:"temperature,omitempty"`
	TopK        *int     `json:"top_k,omitempty"`
	TopP        *float64 `json:"top_p,omitempty"`
	Seed        *uint64  `json:"seed,omitempty"`
	// Stream answers server-sent events (as Accept: text/event-stream does).
	Stream bool `json:"stream,omitempty"`
}

// Message is one chat message.
type Message struct {
	Role    string `json:"role"` // system or user
	Content string `json:"content"`
}

// Finish reasons.
const (
	FinishStop   = "stop"   // a stop token (end of turn)
	FinishLength = "length" // max_tokens reached
)

// Timings are a generation's times.
type Timings struct {
	PrefillMs           float64 `json:"prefill_ms"`
	FirstTokenMs        float64 `json:"first_token_ms"`
	DecodeMs            float64 `json:"decode_ms"`
	TotalMs             float64 `json:"total_ms"`
	PrefillTokensPerSec float64 `json:"prefill_tokens_per_sec"`
	DecodeTokensPerSec  float64 `json:"decode_tokens_per_sec"`
}

// GenerateResponse is the body of a generation that does not stream.
type GenerateResponse struct {
	Model         string `json:"model"`
	RandomWeights bool   `json:"random_weights,omitempty"`
	Text          string `json:"text"`
	Done
}

// Done ends a generation: the body of the stream's last event ("done"),
// and part of GenerateResponse.
type Done struct {
	FinishReason string  `json:"finish_reason"`
	Tokens       int     `json:"tokens"` // generated, stop token included
	PromptTokens int     `json:"prompt_tokens"`
	Timings      Timings `json:"timings"`
}

// Piece is the body of a stream's "token" event: the text a token adds.
type Piece struct {
	Index int    `json:"index"`
	ID    int32  `json:"id"`
	Text  string `json:"text"`
}

func (h *Handler) generate(w http.ResponseWriter, r *http.Request) {
	var req GenerateRequest
	if e := readBody(w, r, &req); e != nil {
		h.fail(w, e)
		return
	}
	sreq, e := req.check()
	if e != nil {
		h.fail(w, e)
		return
	}
	if e := h.checkModel(req.Model); e != nil {
		h.fail(w, e)
		return
	}
	stream := req.Stream || acceptsEvents(r)
	var fl http.Flusher
	if stream {
		var ok bool
		if fl, ok = w.(http.Flusher); !ok {
			h.fail(w, &apiError{http.StatusInternalServerError, CodeEngine, "this connection cannot stream"})
			return
		}
	}
	d, ctx, err := h.svc.Runs.Direct(r.Context(), req.Model)
	if err != nil {
		h.fail(w, err)
		return
	}
	defer d.Close()
	var text strings.Builder
	started := false // the event stream's header is out
	sreq.OnPrompt = func(int) {
		if stream {
			w.Header().Set("Content-Type", "text/event-stream")
			w.Header().Set("Cache-Control", "no-store")
			w.Header().Set("X-Accel-Buffering", "no")
			w.WriteHeader(http.StatusOK)
			fl.Flush()
			started = true
		}
	}
	emit := func(index int, id int32, piece string) error {
		text.WriteString(piece)
		if !stream || piece == "" {
			return nil
		}
		if err := event(w, "token", Piece{index, id, piece}); err != nil {
			return err
		}
		fl.Flush()
		return nil
	}
	res, err := d.Session.Generate(ctx, sreq, func(t session.Token) error { return emit(t.Index, t.ID, t.Piece) })
	if r.Context().Err() != nil {
		h.log.WithFields(logrus.Fields{"route": "generate", "tokens": len(res.IDs)}).Info("generation stopped: the client went away")
		return
	}
	if err != nil {
		if !started {
			h.fail(w, err)
			return
		}
		e := classify(err)
		event(w, "error", ErrorBody{ErrorInfo{e.code, e.msg}})
		fl.Flush()
		return
	}
	if res.Tail != "" {
		emit(len(res.IDs), -1, res.Tail)
	}
	done := Done{FinishReason: FinishLength, Tokens: len(res.IDs), PromptTokens: res.PromptTokens, Timings: Timings{
		PrefillMs: ms(res.Prefill), FirstTokenMs: ms(res.FirstToken), DecodeMs: ms(res.Decode), TotalMs: ms(res.Total),
		PrefillTokensPerSec: res.PrefillTokensPerSec(), DecodeTokensPerSec: res.DecodeTokensPerSec(),
	}}
	if res.Stopped {
		done.FinishReason = FinishStop
	}
	if stream {
		event(w, "done", done)
		fl.Flush()
		return
	}
	writeJSON(w, http.StatusOK, GenerateResponse{d.Info.Name, d.Info.RandomWeights, text.String(), done})
}

// check validates the request and builds the generation's.
func (req *GenerateRequest) check() (session.Request, *apiError) {
	sr := session.Request{Kind: session.PromptChat, Input: req.Prompt, System: req.System}
	if len(req.Messages) > 0 {
		if req.Prompt != "" || req.System != "" {
			return sr, bad(CodeBadRequest, "give \"messages\" or \"prompt\" (and \"system\"), not both")
		}
		ms := req.Messages
		if ms[0].Role == "system" {
			sr.System, ms = ms[0].Content, ms[1:]
		}
		if len(ms) != 1 || ms[0].Role != "user" {
			return sr, bad(CodeBadRequest, "field \"messages\": give one user message, after an optional system message (a one-turn chat; roles are system and user)")
		}
		sr.Input = ms[0].Content
	}
	if strings.TrimSpace(sr.Input) == "" {
		return sr, bad(CodeBadRequest, "field \"prompt\" is required: the user's message (or give \"messages\")")
	}
	if n := len(sr.Input) + len(sr.System); n > app.MaxInputBytes {
		return sr, bad(CodeLimit, "the prompt is %d bytes, over the limit of %d", n, app.MaxInputBytes)
	}
	set := app.DefaultPreferences().Run
	g := &set.Generation
	g.Override(req.MaxTokens, req.Temperature, req.TopK, req.TopP, req.Seed)
	if err := set.Validate(); err != nil {
		return sr, classify(err)
	}
	sr.Sampling = g.Sampling()
	return sr, nil
}

// acceptsEvents reports whether the client asks for server-sent events.
func acceptsEvents(r *http.Request) bool {
	for _, a := range strings.Split(r.Header.Get("Accept"), ",") {
		if mt, _, err := mime.ParseMediaType(strings.TrimSpace(a)); err == nil && mt == "text/event-stream" {
			return true
		}
	}
	return false
}

// event writes one server-sent event with v as its JSON data.
func event(w http.ResponseWriter, name string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, b)
	return err
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
