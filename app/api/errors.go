package api

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"verdict/app"
	"verdict/engine/prompt"
	"verdict/engine/scorer"
	"verdict/engine/session"
)

// classify gives an error its status and code.
func classify(err error) *apiError {
	var ae *apiError
	var mm *app.ModelMismatchError
	var se *scorer.SchemaError
	var le *scorer.LimitError
	var st *app.SettingsError
	var mt *prompt.MediaTokenError
	var nf *session.NeverFitsError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &mm):
		return &apiError{http.StatusConflict, CodeModelNotLoaded, err.Error()}
	case errors.Is(err, app.ErrBusy):
		return &apiError{http.StatusServiceUnavailable, CodeBusy, "a run holds the model (the page's or another program's): retry when it has finished"}
	case errors.Is(err, session.ErrQueueFull):
		return &apiError{http.StatusServiceUnavailable, CodeBusy, "the model's queue is full: retry in a moment"}
	case errors.As(err, &nf):
		return &apiError{http.StatusRequestEntityTooLarge, CodeLimit, "the request is too large for the model's key/value pool: " + nf.Error()}
	case errors.Is(err, app.ErrNoModel), errors.Is(err, app.ErrLoading):
		return &apiError{http.StatusServiceUnavailable, CodeNoModel, err.Error()}
	case errors.As(err, &se):
		return &apiError{http.StatusBadRequest, CodeBadSchema, err.Error()}
	case errors.As(err, &mt):
		return bad(CodeBadRequest, "%v", err)
	case errors.As(err, &le):
		return &apiError{http.StatusBadRequest, CodeLimit, err.Error()}
	case errors.Is(err, session.ErrTooLong):
		return &apiError{http.StatusBadRequest, CodeLimit, err.Error()}
	case errors.As(err, &st):
		// The settings' names (generation.max_tokens) become the body's.
		name := st.Setting[strings.IndexByte(st.Setting, '.')+1:]
		return bad(CodeBadRequest, "field %q: %s", name, st.Msg)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return &apiError{http.StatusServiceUnavailable, CodeCancelled, "the request was stopped: the server is shutting down or the model was replaced"}
	}
	return &apiError{http.StatusInternalServerError, CodeEngine, err.Error()}
}
