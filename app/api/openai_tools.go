package api

import (
	"errors"
	"net/http"
	"sort"
	"strings"

	"verdict/engine/catalog"
	"verdict/engine/prompt"
	"verdict/engine/scorer"
)

// ToolSelection is the catalog decoder's choice of tools (a response's
// verdict.selection): the names in order, each step's distribution over
// its legal tokens, and the decode's probability and time.
type ToolSelection struct {
	Names []string        `json:"names"`
	Steps []SelectionStep `json:"steps"`
	// PathProbability is the product of the chosen tokens' probabilities.
	PathProbability float64          `json:"path_probability"`
	PromptTokens    int              `json:"prompt_tokens"`
	RandomWeights   bool             `json:"random_weights,omitempty"`
	Timings         SelectionTimings `json:"timings"`
}

// SelectionStep is one step of the decode: the pick (0-based) it belongs
// to, the chosen token's text, and the legal tokens with their
// probabilities, most probable first.
type SelectionStep struct {
	Pick   int                `json:"pick"`
	Chosen string             `json:"chosen"`
	Tokens []scorer.TokenProb `json:"tokens"`
}

// SelectionTimings are a decode's times.
type SelectionTimings struct {
	PrefillMs  float64 `json:"prefill_ms"`
	DecodeMs   float64 `json:"decode_ms"`
	Tokens     int     `json:"tokens"`
	MsPerToken float64 `json:"ms_per_token"`
}

// toolEntries is the request's tools as catalog entries: their names and
// descriptions.
func (req *ChatRequest) toolEntries() []catalog.Entry {
	entries := make([]catalog.Entry, len(req.Tools))
	for i, t := range req.Tools {
		entries[i] = catalog.Entry{Name: t.Function.Name, Description: t.Function.Description}
	}
	return entries
}

// chatTools answers a request with tools and verdict.select_tools: the
// catalog decoder names exactly k distinct tools, as `verdict catalog`
// does (the tools listed in a user turn with the request: the system
// message, then the user's text), and they are the message's tool calls.
func (h *Handler) chatTools(w http.ResponseWriter, r *http.Request, req *ChatRequest, in *chatInput) {
	if in.turns > 1 {
		h.failOpenAI(w, badParam("messages", "the catalog decoder reads one user message (after system messages), not a conversation"))
		return
	}
	if in.media != nil {
		h.failOpenAI(w, badParam("messages", "the catalog decoder reads text: leave the images and audio out"))
		return
	}
	request := strings.TrimSpace(in.user)
	if request == "" {
		h.failOpenAI(w, badParam("messages", "the user message is empty"))
		return
	}
	if in.system != "" {
		request = strings.TrimSpace(in.system) + "\n\n" + request
	}
	entries := req.toolEntries()
	d, ctx, err := h.svc.Runs.Direct(r.Context(), req.Model)
	if err != nil {
		h.failOpenAI(w, err)
		return
	}
	defer d.Close()
	k := req.Verdict.SelectTools
	sel, err := d.Session.Select(ctx, entries, request, k)
	if err != nil {
		var ke *catalog.KError
		var mt *prompt.MediaTokenError
		switch {
		case r.Context().Err() != nil:
			h.log.WithField("route", "chat/completions").Info("tool choice stopped: the client went away")
			return
		case errors.Is(err, catalog.ErrInvalid):
			err = badParam("tools", "%v", err)
		case errors.As(err, &ke):
			err = badParam("verdict.select_tools", "%v", err)
		case errors.As(err, &mt):
			err = badParam("messages", "%v", err)
		}
		h.failOpenAI(w, err)
		return
	}
	res, tok := sel.Result, d.Session.Tokenizer()
	out := &ToolSelection{Names: res.Names, Steps: []SelectionStep{}, PathProbability: 1, PromptTokens: res.Prompt,
		RandomWeights: d.Info.RandomWeights}
	pick := 0
	for _, st := range res.Steps {
		p := st.Probs()
		ss := SelectionStep{Pick: pick, Chosen: tok.Decode([]int32{st.Chosen}), Tokens: make([]scorer.TokenProb, len(st.Legal))}
		for j, id := range st.Legal {
			ss.Tokens[j] = scorer.TokenProb{ID: id, Text: tok.Decode([]int32{id}), P: p[j]}
			if id == st.Chosen {
				out.PathProbability *= p[j]
			}
		}
		sort.SliceStable(ss.Tokens, func(a, b int) bool { return ss.Tokens[a].P > ss.Tokens[b].P })
		out.Steps = append(out.Steps, ss)
		if st.Entry >= 0 {
			pick++
		}
	}
	out.Timings = SelectionTimings{PrefillMs: ms(res.Prefill), DecodeMs: ms(res.Decode), Tokens: len(res.Tokens)}
	if n := len(res.Tokens); n > 0 {
		out.Timings.MsPerToken = (ms(res.Prefill) + ms(res.Decode)) / float64(n)
	}
	reply := AssistantReply{Role: "assistant"}
	for i, name := range res.Names {
		reply.ToolCalls = append(reply.ToolCalls, ToolCall{Index: ptrTo(i), ID: newID("call_"), Type: "function",
			Function: ToolCallFunction{Name: name, Arguments: "{}"}})
	}
	h.reply(w, req, modelName(req.Model, d), reply, "tool_calls", usage(res.Prompt, len(res.Tokens)), &VerdictInfo{Selection: out})
}
