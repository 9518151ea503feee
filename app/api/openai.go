package api

// The OpenAI-compatible routes: the requests and answers of OpenAI's chat
// completions, (legacy) completions and models, so that OpenAI's clients
// work with only their base URL and API key changed (docs/api.md, "OpenAI-
// compatible API"). Their errors are in OpenAI's shape:
// {"error": {"message", "type", "param", "code"}}.

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"

	"verdict/app"
)

// OpenAI's routes (also in Routes).
const (
	RouteChat        = "POST /v1/chat/completions"
	RouteCompletions = "POST /v1/completions"
	RouteModels      = "GET /v1/models"
	RouteModel       = "GET /v1/models/{id}"
)

// OpenAIPath reports whether path is one of the OpenAI-compatible routes,
// whose errors are in OpenAI's shape (WriteErrorFor).
func OpenAIPath(path string) bool {
	switch path {
	case "/v1/chat/completions", "/v1/completions", "/v1/models":
		return true
	}
	return strings.HasPrefix(path, "/v1/models/")
}

// OpenAIErrorBody is the body of an error on the OpenAI-compatible routes.
type OpenAIErrorBody struct {
	Error OpenAIErrorInfo `json:"error"`
}

// OpenAIErrorInfo is an error as OpenAI's API gives it: the message, its
// type (invalid_request_error, authentication_error, permission_error,
// not_found_error, server_error), the request field it is about (or null)
// and its code (Verdict's codes, with invalid_api_key for a wrong token).
type OpenAIErrorInfo struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    string  `json:"code"`
}

// Types of OpenAI errors.
var openAITypes = []string{"invalid_request_error", "authentication_error", "permission_error", "not_found_error", "server_error"}

// openAIError gives an error of status and code its OpenAI form.
func openAIError(status int, code, msg, param string) OpenAIErrorBody {
	typ := "invalid_request_error"
	switch {
	case status == http.StatusUnauthorized:
		typ, code = "authentication_error", "invalid_api_key"
	case status == http.StatusForbidden:
		typ = "permission_error"
	case status == http.StatusNotFound:
		typ = "not_found_error"
	case status >= 500:
		typ = "server_error"
	}
	e := OpenAIErrorBody{OpenAIErrorInfo{Message: msg, Type: typ, Code: code}}
	if param != "" {
		e.Error.Param = &param
	}
	return e
}

// WriteErrorFor writes an error in the shape of path's route: OpenAI's on
// its routes (OpenAIPath), Verdict's elsewhere.
func WriteErrorFor(w http.ResponseWriter, path string, status int, code, msg string) {
	if OpenAIPath(path) {
		writeJSON(w, status, openAIError(status, code, msg, ""))
		return
	}
	WriteError(w, status, code, msg)
}

// badParam refuses the field param (a path such as "messages[1].content"),
// which starts the message and becomes the error's param.
func badParam(param, f string, a ...any) *apiError {
	return bad(CodeBadRequest, "%s: %s", param, fmt.Sprintf(f, a...))
}

// paramOf finds the field an error message names: its start (badParam's),
// or the quoted name of readBody's messages.
var paramOf = regexp.MustCompile(`^(?:(?:unknown )?field "([^"]+)"|([A-Za-z_][\w.\[\]]*): )`)

// failOpenAI writes err in OpenAI's shape, with its status (as fail does).
func (h *Handler) failOpenAI(w http.ResponseWriter, err error) {
	e := classify(err)
	if e.code == CodeNoModel {
		e = h.whyNoModel(e)
	}
	if e.status >= 500 && e.code != CodeBusy && e.code != CodeNoModel {
		h.log.WithError(err).Error("api request failed")
	}
	if e.code == CodeBusy {
		w.Header().Set("Retry-After", "1")
	}
	param := ""
	if m := paramOf.FindStringSubmatch(e.msg); m != nil && e.status == http.StatusBadRequest {
		param = m[1] + m[2]
	}
	writeJSON(w, e.status, openAIError(e.status, e.code, e.msg, param))
}

// newID is a response's id: prefix and 24 random hex digits.
func newID(prefix string) string {
	var b [12]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// OpenAIModel is one entry of GET /v1/models.
type OpenAIModel struct {
	ID      string `json:"id"`
	Object  string `json:"object"` // "model"
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// OpenAIModelList is the body of GET /v1/models.
type OpenAIModelList struct {
	Object string        `json:"object"` // "list"
	Data   []OpenAIModel `json:"data"`
}

// openAIModels lists the models the app knows (GET /v1/verdict/models's),
// the loaded one first; requests name the loaded one.
func (h *Handler) openAIModels() []OpenAIModel {
	out := []OpenAIModel{}
	for _, m := range h.known() {
		out = append(out, OpenAIModel{ID: m.ID, Object: "model", Created: h.started.Unix(), OwnedBy: "verdict"})
	}
	return out
}

func (h *Handler) listModels(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, OpenAIModelList{Object: "list", Data: h.openAIModels()})
}

func (h *Handler) getModel(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	for _, m := range h.openAIModels() {
		if m.ID == id {
			writeJSON(w, http.StatusOK, m)
			return
		}
	}
	h.failOpenAI(w, h.checkModel(id))
}

// Usage counts a request's tokens.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

func usage(prompt, completion int) *Usage {
	return &Usage{prompt, completion, prompt + completion}
}

// StopList is a request's stop sequences: a string or a list of up to 4.
type StopList []string

// UnmarshalJSON takes a string, a list of strings or null.
func (s *StopList) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*s = StopList{one}
		return nil
	}
	var list []string
	if err := json.Unmarshal(b, &list); err != nil {
		return badParam("stop", "give a string or a list of strings")
	}
	*s = list
	return nil
}

// checkStops refuses more than 4 stop sequences or an empty one.
func checkStops(s StopList) error {
	if len(s) > 4 {
		return badParam("stop", "%d stop sequences, at most 4", len(s))
	}
	for i, x := range s {
		if x == "" {
			return badParam(fmt.Sprintf("stop[%d]", i), "an empty stop sequence")
		}
	}
	return nil
}

// samplingParams are the sampling fields chat and legacy completions share.
type samplingParams struct {
	maxTokens   *int
	temperature *float64
	topP        *float64
	topK        *int
	seed        *int64
	n           *int
	freq, pres  *float64
	logitBias   map[string]float64
}

// Defaults of the OpenAI routes' sampling: Gemma's recommended settings.
const (
	openAITemperature = 1.0
	openAITopK        = 64
	openAITopP        = 0.95
)

// check validates the parameters into a generation's settings; maxTokens is
// the default of max_tokens.
func (p samplingParams) check(maxTokens int) (app.GenerationSettings, error) {
	set := app.DefaultPreferences().Run
	g := &set.Generation
	g.MaxTokens, g.Temperature, g.TopK, g.TopP = maxTokens, openAITemperature, openAITopK, openAITopP
	if p.n != nil && *p.n != 1 {
		return *g, badParam("n", "%d choices asked: Verdict answers one choice a request (n = 1); send n requests, each with its own seed", *p.n)
	}
	if p.freq != nil && *p.freq != 0 {
		return *g, badParam("frequency_penalty", "not supported (only 0)")
	}
	if p.pres != nil && *p.pres != 0 {
		return *g, badParam("presence_penalty", "not supported (only 0)")
	}
	if len(p.logitBias) > 0 {
		return *g, badParam("logit_bias", "not supported")
	}
	g.Override(p.maxTokens, p.temperature, p.topK, p.topP, nil)
	if p.seed != nil {
		g.Seed = uint64(*p.seed)
	} else {
		var b [8]byte
		rand.Read(b[:])
		for _, x := range b {
			g.Seed = g.Seed<<8 | uint64(x)
		}
	}
	if err := set.Validate(); err != nil {
		return *g, err
	}
	return *g, nil
}
