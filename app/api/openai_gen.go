package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"verdict/app"
	"verdict/engine/session"
)

// genToken is a generated token: its id, the text it adds and its
// log-probabilities (nil unless asked).
type genToken struct {
	id       int32
	piece    string
	logprobs *session.Logprobs
}

// genOutput is a finished generation.
type genOutput struct {
	text         string // without the stop sequence and what followed it
	finish       string // stop or length
	tokens       int    // generated, stop token included
	promptTokens int
	timings      Timings
}

// errStopSequence ends a generation at a stop sequence.
var errStopSequence = errors.New("a stop sequence was generated")

// runGeneration runs sreq on d and calls emit with the text as it becomes
// final, a whole number of tokens at a time. With stop sequences, text that
// could begin one is held back until it cannot; the generation ends at the
// first stop sequence, which is not part of the text (the tokens it
// overlaps are emitted with the text before it).
func (h *Handler) runGeneration(ctx context.Context, d *app.Direct, sreq session.Request, stops []string, emit func(text string, toks []genToken) error) (genOutput, error) {
	var out genOutput
	var text strings.Builder
	var pending []genToken
	pendText := ""
	// release emits the first n pending tokens with the first m bytes of
	// their text.
	release := func(n, m int) error {
		if n == 0 && m == 0 {
			return nil
		}
		t := pendText[:m]
		text.WriteString(t)
		toks := pending[:n:n]
		pending, pendText = pending[n:], pendText[m:]
		return emit(t, toks)
	}
	flush := func(final bool) error {
		at := -1
		for _, s := range stops {
			if i := strings.Index(pendText, s); i >= 0 && (at < 0 || i < at) {
				at = i
			}
		}
		if at >= 0 {
			n, start := 0, 0
			for n < len(pending) && start < at {
				start += len(pending[n].piece)
				n++
			}
			pendText = pendText[:at]
			if err := release(n, at); err != nil {
				return err
			}
			return errStopSequence
		}
		if final {
			return release(len(pending), len(pendText))
		}
		hold := 0 // the longest end of the text that begins a stop sequence
		for _, s := range stops {
			for l := min(len(s)-1, len(pendText)); l > hold; l-- {
				if strings.HasSuffix(pendText, s[:l]) {
					hold = l
					break
				}
			}
		}
		n, end := 0, 0
		for n < len(pending) && end+len(pending[n].piece) <= len(pendText)-hold {
			end += len(pending[n].piece)
			n++
		}
		return release(n, end)
	}
	res, err := d.Session.Generate(ctx, sreq, func(t session.Token) error {
		if t.Stop {
			return nil
		}
		pending = append(pending, genToken{t.ID, t.Piece, t.Logprobs})
		pendText += t.Piece
		return flush(false)
	})
	out.tokens, out.promptTokens = len(res.IDs), res.PromptTokens
	stopped := errors.Is(err, errStopSequence)
	if err != nil && !stopped {
		return out, err
	}
	if !stopped {
		pendText += res.Tail
		if err := flush(true); errors.Is(err, errStopSequence) {
			stopped = true
		} else if err != nil {
			return out, err
		}
	}
	out.text, out.finish = text.String(), FinishLength
	if stopped || res.Stopped {
		out.finish = FinishStop
	}
	out.timings = Timings{PrefillMs: ms(res.Prefill), FirstTokenMs: ms(res.FirstToken), DecodeMs: ms(res.Decode), TotalMs: ms(res.Total),
		PrefillTokensPerSec: res.PrefillTokensPerSec(), DecodeTokensPerSec: res.DecodeTokensPerSec()}
	return out, nil
}

// sseWriter writes server-sent events in OpenAI's form: "data: JSON" lines,
// then "data: [DONE]".
type sseWriter struct {
	w       http.ResponseWriter
	fl      http.Flusher
	started bool
}

// newSSE is nil when the connection cannot stream.
func newSSE(w http.ResponseWriter) *sseWriter {
	fl, ok := w.(http.Flusher)
	if !ok {
		return nil
	}
	return &sseWriter{w: w, fl: fl}
}

// start sends the header, once.
func (s *sseWriter) start() {
	if s.started {
		return
	}
	s.started = true
	s.w.Header().Set("Content-Type", "text/event-stream")
	s.w.Header().Set("Cache-Control", "no-store")
	s.w.Header().Set("X-Accel-Buffering", "no")
	s.w.WriteHeader(http.StatusOK)
	s.fl.Flush()
}

// send writes v as one event.
func (s *sseWriter) send(v any) error {
	s.start()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	if _, err := fmt.Fprintf(s.w, "data: %s\n\n", bytes.TrimSpace(b.Bytes())); err != nil {
		return err
	}
	s.fl.Flush()
	return nil
}

// done ends the stream.
func (s *sseWriter) done() {
	fmt.Fprint(s.w, "data: [DONE]\n\n")
	s.fl.Flush()
}

// fail ends a stream that has begun with an error event, as OpenAI's
// clients read one.
func (s *sseWriter) fail(err error) {
	e := classify(err)
	s.send(openAIError(e.status, e.code, e.msg, ""))
}
