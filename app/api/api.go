// Package api is the programmatic JSON API that `verdict serve` offers to
// scripts and other programs under /v1 (docs/openapi.json describes it):
//
//	POST /v1/verdict/score     score an input against a schema (the result
//	                           JSON of `verdict score`)
//	POST /v1/verdict/generate  generate text: one JSON, or server-sent events
//	                           with "stream": true or Accept: text/event-stream
//	GET  /v1/verdict/models    the models the app knows
//
// and OpenAI's routes (openai.go): POST /v1/chat/completions, POST
// /v1/completions, GET /v1/models and GET /v1/models/{id}. /v1/score and
// /v1/generate are the first two's earlier paths (Aliases).
//
// Every error of Verdict's routes is {"error": {"code": CODE, "message":
// TEXT}} with its HTTP status; OpenAI's routes give OpenAI's shape. app/server mounts the handler behind its access checks (host,
// origin, token); the handler itself refuses requests a browser marks as
// another site's, POST bodies that are not application/json, and bodies
// over MaxBody.
package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"verdict/app"
)

// MaxBody bounds a request body (images travel in it, base64-encoded).
const MaxBody = 32 << 20

// Prefix is the path prefix of the API's routes.
const Prefix = "/v1/"

// Routes are the API's routes, "METHOD PATH" (docs/openapi.json lists the
// same, and Aliases as deprecated).
var Routes = []string{"POST /v1/verdict/score", "POST /v1/verdict/generate", "GET /v1/verdict/models",
	RouteChat, RouteCompletions, RouteModels, RouteModel}

// Aliases are earlier paths of routes, still served: alias → route.
var Aliases = map[string]string{"POST /v1/score": "POST /v1/verdict/score", "POST /v1/generate": "POST /v1/verdict/generate"}

// Error codes.
const (
	CodeBadRequest     = "invalid_request" // a field is missing, unknown or out of range
	CodeBadJSON        = "invalid_json"    // the body is not JSON of the expected shape
	CodeBadSchema      = "invalid_schema"  // the schema does not parse
	CodeBadMedia       = "invalid_media"   // an image, audio or video cannot be read or is over a limit
	CodeLimit          = "limit_exceeded"  // the input is over a limit (bytes, tokens)
	CodeTooLarge       = "body_too_large"  // the body is over MaxBody
	CodeContentType    = "unsupported_media_type"
	CodeNotFound       = "not_found"           // no such route
	CodeMethod         = "method_not_allowed"  // the route takes another method
	CodeUnknownModel   = "model_not_found"     // the model named is not one the app knows
	CodeModelNotLoaded = "model_not_loaded"    // the model named is known but another is loaded
	CodeNoModel        = "no_model"            // no model is loaded (or it is loading)
	CodeBusy           = "busy"                // a run holds the model: retry later
	CodeCancelled      = "cancelled"           // the request was stopped (shutdown, model replaced)
	CodeEngine         = "engine_error"        // the engine failed
	CodeForbidden      = "forbidden"           // another site's page
	CodeUnauthorized   = "unauthorized"        // no or wrong access token
	CodeMisdirected    = "misdirected_request" // a Host header this server does not serve
)

// Codes are every error code (docs/openapi.json lists the same).
var Codes = []string{CodeBadRequest, CodeBadJSON, CodeBadSchema, CodeBadMedia, CodeLimit, CodeTooLarge,
	CodeContentType, CodeNotFound, CodeMethod, CodeUnknownModel, CodeModelNotLoaded, CodeNoModel, CodeBusy,
	CodeCancelled, CodeEngine, CodeForbidden, CodeUnauthorized, CodeMisdirected}

// ErrorBody is the body of every error response.
type ErrorBody struct {
	Error ErrorInfo `json:"error"`
}

// ErrorInfo is an error's code and message.
type ErrorInfo struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// WriteError writes an error response.
func WriteError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, ErrorBody{ErrorInfo{code, msg}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
}

// apiError is an error with its status and code.
type apiError struct {
	status int
	code   string
	msg    string
}

func (e *apiError) Error() string { return e.msg }

func bad(code, f string, a ...any) *apiError {
	return &apiError{http.StatusBadRequest, code, fmt.Sprintf(f, a...)}
}

// Handler serves the API.
type Handler struct {
	svc *app.Services
	log *logrus.Logger
	mux *http.ServeMux
	// started is the models' "created" time on the OpenAI routes.
	started time.Time
}

// New serves svc's models, scorer and generator.
func New(svc *app.Services, log *logrus.Logger) *Handler {
	h := &Handler{svc: svc, log: log, mux: http.NewServeMux(), started: time.Now()}
	handlers := map[string]http.HandlerFunc{"POST /v1/verdict/score": h.score, "POST /v1/verdict/generate": h.generate,
		"GET /v1/verdict/models": h.models, RouteChat: h.chat, RouteCompletions: h.completions,
		RouteModels: h.listModels, RouteModel: h.getModel}
	for _, rt := range Routes {
		h.mux.HandleFunc(strings.Replace(rt, "{id}", "{id...}", 1), handlers[rt])
	}
	for alias, rt := range Aliases {
		h.mux.HandleFunc(alias, handlers[rt])
	}
	return h
}

// ServeHTTP refuses requests another site's page makes (browsers mark them
// with Sec-Fetch-Site) and routes the others; unknown routes and methods get
// JSON errors.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "cross-site", "same-site":
		WriteErrorFor(w, r.URL.Path, http.StatusForbidden, CodeForbidden, "the API is for programs: requests from another site's page are refused")
		return
	}
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if _, pattern := h.mux.Handler(r); pattern == "" {
		allowed := h.allowed(r.URL.Path)
		if len(allowed) == 0 {
			WriteErrorFor(w, r.URL.Path, http.StatusNotFound, CodeNotFound, fmt.Sprintf("no route %s: the API serves %s", r.URL.Path, strings.Join(Routes, ", ")))
			return
		}
		w.Header().Set("Allow", strings.Join(allowed, ", "))
		WriteErrorFor(w, r.URL.Path, http.StatusMethodNotAllowed, CodeMethod, fmt.Sprintf("%s takes %s, not %s", r.URL.Path, strings.Join(allowed, ", "), r.Method))
		return
	}
	h.mux.ServeHTTP(w, r)
}

// allowed lists the methods of the routes at path.
func (h *Handler) allowed(path string) []string {
	var out []string
	for _, rt := range append(slices.Collect(maps.Keys(Aliases)), Routes...) {
		m, p, _ := strings.Cut(rt, " ")
		if p == path || strings.HasSuffix(p, "/{id}") && strings.HasPrefix(path, strings.TrimSuffix(p, "{id}")) {
			out = append(out, m)
		}
	}
	return out
}

// readBody reads a JSON body into v: application/json only, at most MaxBody
// bytes (refused from its Content-Length before reading), no unknown
// fields, nothing after the value.
func readBody(w http.ResponseWriter, r *http.Request, v any) *apiError {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/json" {
		return &apiError{http.StatusUnsupportedMediaType, CodeContentType, fmt.Sprintf("send the body as application/json (Content-Type: application/json), not %q", r.Header.Get("Content-Type"))}
	}
	if r.ContentLength > MaxBody {
		return tooLarge()
	}
	body := http.MaxBytesReader(w, r.Body, MaxBody)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return tooLarge()
		}
		return bad(CodeBadJSON, "the body must hold one JSON object, with nothing after it")
	}
	return nil
}

func tooLarge() *apiError {
	return &apiError{http.StatusRequestEntityTooLarge, CodeTooLarge, fmt.Sprintf("the body is over the limit of %d MiB: send smaller or fewer images (or pass them by path)", MaxBody>>20)}
}

// jsonError names the field a decoding error is about.
func jsonError(err error) *apiError {
	var mbe *http.MaxBytesError
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	var ae *apiError
	switch {
	case errors.As(err, &mbe):
		return tooLarge()
	case errors.As(err, &ae): // a field's own UnmarshalJSON refused it
		return ae
	case errors.As(err, &te):
		if te.Field == "" {
			return bad(CodeBadJSON, "the body must be a JSON object, not %s", te.Value)
		}
		return bad(CodeBadRequest, "field %q: %s is not %s", te.Field, te.Value, jsonType(te.Type.String()))
	case errors.As(err, &se):
		return bad(CodeBadJSON, "the body is not valid JSON: %v (at byte %d)", err, se.Offset)
	case errors.Is(err, io.EOF):
		return bad(CodeBadJSON, "the body is empty: send a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return bad(CodeBadJSON, "the body ends in the middle of its JSON")
	}
	if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return bad(CodeBadRequest, "unknown field %s", f)
	}
	return bad(CodeBadJSON, "the body does not decode: %v", err)
}

// jsonType names a Go type as JSON does.
func jsonType(t string) string {
	switch {
	case strings.HasPrefix(t, "int"), strings.HasPrefix(t, "uint"):
		return "an integer of that range"
	case strings.HasPrefix(t, "float"):
		return "a number"
	case t == "string":
		return "a string"
	case t == "bool":
		return "true or false"
	case strings.HasPrefix(t, "[]"):
		return "an array"
	}
	return "an object"
}

// whyNoModel adds to a no_model error why the last load failed, when it
// did: the model's spec and the load's error.
func (h *Handler) whyNoModel(e *apiError) *apiError {
	info := h.svc.Models.Info()
	if info.State != app.ModelError || info.Error == "" {
		return e
	}
	return &apiError{e.status, e.code, fmt.Sprintf("%s (the load of %s failed: %s)", e.msg, info.Spec, info.Error)}
}

// fail writes err: an *apiError as it is, the app's and the engine's
// errors with their status.
func (h *Handler) fail(w http.ResponseWriter, err error) {
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
	WriteError(w, e.status, e.code, e.msg)
}
