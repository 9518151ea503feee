package api

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	"net/http"
	"path/filepath"
	"strings"

	"verdict/app"
	"verdict/engine/scorer"
	"verdict/media"
	"verdict/media/decode"
	"verdict/media/limits"
	"verdict/media/video"
)

// ScoreRequest is the body of POST /v1/score: what `verdict score` takes.
type ScoreRequest struct {
	// Model must be the loaded model's id (or name) when set.
	Model string `json:"model,omitempty"`
	// Schema is the schema JSON of `verdict score --schema`.
	Schema json.RawMessage `json:"schema"`
	Input  Input           `json:"input"`
	// Backend is json (the default), cached or catalog.
	Backend string `json:"backend,omitempty"`
	// Normalize is none (the default), contextual or pmi.
	Normalize string `json:"normalize,omitempty"`
	// Temperature divides the log-likelihoods (default 1).
	Temperature *float64 `json:"temperature,omitempty"`
	// BranchBatch is the branch rows per batch (1..64, default 8).
	BranchBatch *int `json:"branch_batch,omitempty"`
	// Calibration is a calibration file on the server's computer (an
	// absolute path) whose fitted temperatures replace Temperature.
	Calibration   string `json:"calibration,omitempty"`
	TokenLogprobs bool   `json:"token_logprobs,omitempty"`
}

// Input is a request's text and media.
type Input struct {
	Text   string `json:"text,omitempty"`
	Images []File `json:"images,omitempty"`
	Audio  *File  `json:"audio,omitempty"`
	Video  *File  `json:"video,omitempty"`
}

// File is a media file: its bytes (standard base64) or an absolute path on
// the server's computer, one of the two.
type File struct {
	Data string `json:"data,omitempty"`
	Path string `json:"path,omitempty"`
	// Name labels data in errors (default: the field's name).
	Name string `json:"name,omitempty"`
}

// ScoreResponse is the body of a scoring: `verdict score`'s output.
type ScoreResponse struct {
	Model         string `json:"model"`
	RandomWeights bool   `json:"random_weights,omitempty"`
	Backend       string `json:"backend"`
	*scorer.Result
}

func (h *Handler) score(w http.ResponseWriter, r *http.Request) {
	var req ScoreRequest
	if e := readBody(w, r, &req); e != nil {
		h.fail(w, e)
		return
	}
	schema, opt, e := req.check()
	if e != nil {
		h.fail(w, e)
		return
	}
	if e := h.checkModel(req.Model); e != nil {
		h.fail(w, e)
		return
	}
	in, err := req.Input.media(r.Context())
	if err != nil {
		h.fail(w, err)
		return
	}
	d, ctx, err := h.svc.Runs.Direct(r.Context(), req.Model)
	if err != nil {
		h.fail(w, err)
		return
	}
	defer d.Close()
	if in != nil {
		if err := d.CanTake(in); err != nil {
			h.fail(w, bad(CodeBadMedia, "%v", err))
			return
		}
		opt.Media = func() (*scorer.Media, error) {
			p, err := d.Prepare(ctx, in)
			if err != nil {
				return nil, err
			}
			return &p.Media, nil
		}
	}
	res, err := d.Session.Score(ctx, schema, req.Input.Text, opt)
	if err != nil {
		if r.Context().Err() != nil {
			h.log.WithField("route", "score").Info("scoring stopped: the client went away")
			return
		}
		h.fail(w, err)
		return
	}
	backend := opt.Backend
	if backend == "" {
		backend = scorer.BackendJSON
	}
	writeJSON(w, http.StatusOK, ScoreResponse{d.Info.Name, d.Info.RandomWeights, backend, res})
}

// check validates the request as `verdict score` does its flags, and
// returns the schema and the scorer's options.
func (req *ScoreRequest) check() (*scorer.Schema, scorer.Options, *apiError) {
	var opt scorer.Options
	if len(bytes.TrimSpace(req.Schema)) == 0 || string(bytes.TrimSpace(req.Schema)) == "null" {
		return nil, opt, bad(CodeBadRequest, "field \"schema\" is required: the schema JSON of verdict score --schema")
	}
	schema, err := scorer.ParseSchema(req.Schema)
	if err != nil {
		return nil, opt, bad(CodeBadSchema, "field \"schema\": %v", err)
	}
	if e := req.Input.checkText(); e != nil {
		return nil, opt, e
	}
	switch req.Backend {
	case "", scorer.BackendJSON, scorer.BackendCached, scorer.BackendCatalog:
	default:
		return nil, opt, bad(CodeBadRequest, "field \"backend\": %q is not one of json, cached, catalog", req.Backend)
	}
	if scorer.CheckNormalize(req.Normalize) != nil {
		return nil, opt, bad(CodeBadRequest, "field \"normalize\": %q is not one of %s", req.Normalize, strings.Join(scorer.Normalizations, ", "))
	}
	set := app.DefaultPreferences().Run
	if req.Temperature != nil {
		set.Scorer.Temperature = *req.Temperature
	}
	if req.BranchBatch != nil {
		set.Scorer.BranchBatch = *req.BranchBatch
	}
	if err := set.Validate(); err != nil {
		return nil, opt, classify(err)
	}
	opt = scorer.Options{Backend: req.Backend, Normalize: req.Normalize, BranchBatch: set.Scorer.BranchBatch,
		Temperature: set.Scorer.Temperature, TokenLogprobs: req.TokenLogprobs}
	if req.Calibration != "" {
		if !filepath.IsAbs(req.Calibration) {
			return nil, opt, bad(CodeBadRequest, "field \"calibration\": %q is not an absolute path", req.Calibration)
		}
		c, err := scorer.LoadCalibration(req.Calibration)
		if err != nil {
			return nil, opt, bad(CodeBadRequest, "field \"calibration\": %v", err)
		}
		opt.Calibration = c
	}
	return schema, opt, nil
}

// checkText refuses an empty input without media and one over
// app.MaxInputBytes. (JSON decoding has already replaced invalid UTF-8.)
func (in *Input) checkText() *apiError {
	if strings.TrimSpace(in.Text) == "" && len(in.Images) == 0 && in.Audio == nil && in.Video == nil {
		return bad(CodeBadRequest, "field \"input\": the input is empty: give \"text\", or media (\"images\", \"audio\", \"video\")")
	}
	if len(in.Text) > app.MaxInputBytes {
		return bad(CodeLimit, "field \"input.text\": %d bytes, over the limit of %d", len(in.Text), app.MaxInputBytes)
	}
	if len(in.Images) > limits.MaxImages {
		return bad(CodeBadMedia, "field \"input.images\": %d images, over the limit of %d", len(in.Images), limits.MaxImages)
	}
	return nil
}

// media decodes the input's media (nil without any), each error naming its
// field.
func (in *Input) media(ctx context.Context) (*media.Input, error) {
	if len(in.Images) == 0 && in.Audio == nil && in.Video == nil {
		return nil, nil
	}
	out := &media.Input{}
	for i, f := range in.Images {
		field := fmt.Sprintf("input.images[%d]", i)
		name, e := f.check(field)
		if e != nil {
			return nil, e
		}
		var img image.Image
		var err error
		if f.Path != "" {
			img, _, err = decode.ImageFile(f.Path)
		} else {
			var data []byte
			if data, e = f.bytes(field); e != nil {
				return nil, e
			}
			img, _, err = decode.DecodeImage(name, data)
		}
		if err == nil {
			err = out.AddImage(name, img)
		}
		if err != nil {
			return nil, bad(CodeBadMedia, "field %q: %v", field, err)
		}
	}
	if f := in.Audio; f != nil {
		name, e := f.check("input.audio")
		if e != nil {
			return nil, e
		}
		var snd *decode.Sound
		var err error
		if f.Path != "" {
			snd, err = decode.AudioFile(f.Path, limits.MaxAudio)
		} else {
			var data []byte
			if data, e = f.bytes("input.audio"); e != nil {
				return nil, e
			}
			snd, err = decode.DecodeAudio(name, data, limits.MaxAudio)
		}
		if err == nil {
			err = out.SetAudio(name, snd.Clip)
		}
		if err != nil {
			return nil, bad(CodeBadMedia, "field \"input.audio\": %v", err)
		}
	}
	if f := in.Video; f != nil {
		if len(f.Data) > 0 || f.Path == "" {
			return nil, bad(CodeBadRequest, "field \"input.video\": give the video's \"path\" (ffmpeg reads it from the server's disk); \"data\" is not taken for video")
		}
		if _, e := f.check("input.video"); e != nil {
			return nil, e
		}
		rd, err := video.NewReader()
		if err != nil {
			return nil, &apiError{http.StatusNotImplemented, CodeBadMedia, err.Error()}
		}
		v, err := rd.Load(ctx, f.Path, video.Options{})
		if err == nil {
			err = out.SetVideo(v)
		}
		if err != nil {
			return nil, bad(CodeBadMedia, "field \"input.video\": %v", err)
		}
	}
	if err := out.Validate(); err != nil {
		return nil, bad(CodeBadMedia, "field \"input\": %v", err)
	}
	return out, nil
}

// bytes decodes the file's data.
func (f *File) bytes(field string) ([]byte, *apiError) {
	b, err := base64.StdEncoding.DecodeString(f.Data)
	if err != nil {
		return nil, bad(CodeBadRequest, "field \"%s.data\": not standard base64: %v", field, err)
	}
	return b, nil
}

// check refuses a file with both or neither of data and path, or a
// relative path; it returns the name that labels it.
func (f *File) check(field string) (string, *apiError) {
	switch {
	case len(f.Data) > 0 && f.Path != "":
		return "", bad(CodeBadRequest, "field %q: give \"data\" or \"path\", not both", field)
	case len(f.Data) == 0 && f.Path == "":
		return "", bad(CodeBadRequest, "field %q: give \"data\" (base64) or \"path\"", field)
	case f.Path != "" && !filepath.IsAbs(f.Path):
		return "", bad(CodeBadRequest, "field %q: path %q is not absolute", field, f.Path)
	}
	if f.Path != "" {
		return f.Path, nil
	}
	if f.Name != "" {
		return f.Name, nil
	}
	return field, nil
}
