package api

import (
	"fmt"
	"net/http"

	"verdict/app"
	"verdict/engine/models"
)

// Model is one model the app knows: the built-in one, the loaded one and
// those found on this computer.
type Model struct {
	// ID is what a request's "model" takes.
	ID   string `json:"id"`
	Name string `json:"name"`
	// Family is the decoder family, gemma3n or gemma4 (absent for the
	// loaded model until it is ready).
	Family string `json:"family,omitempty"`
	// Source is builtin, huggingface, folder, ollama or lmstudio.
	Source string `json:"source"`
	// State is the app's model state (ready, loading, error) for the model
	// it holds; absent for the others.
	State string `json:"state,omitempty"`
	// Error is why the load failed, with State "error".
	Error string `json:"error,omitempty"`
	// Loaded is true for the model requests use when they name none.
	Loaded bool   `json:"loaded"`
	Path   string `json:"path,omitempty"`
	// Format is safetensors or gguf (absent for the built-in model).
	Format    string `json:"format,omitempty"`
	SizeBytes int64  `json:"size_bytes"`
	// Quantization is the weights' type (BF16, Q4_K_M, ...), absent when
	// unknown.
	Quantization string `json:"quantization,omitempty"`
	Params       int64  `json:"params,omitempty"`
	// RandomWeights marks the built-in model: its output is noise.
	RandomWeights bool   `json:"random_weights"`
	Towers        Towers `json:"towers"`
}

// Towers say which media a model takes; null until known (the built-in
// model before it is loaded).
type Towers struct {
	Vision *bool `json:"vision"`
	Audio  *bool `json:"audio"`
}

// ModelList is the body of GET /v1/models.
type ModelList struct {
	Models []Model `json:"models"`
}

func (h *Handler) models(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, ModelList{h.known()})
}

// known lists the models: the one the app holds (ready, loading or failed)
// first, then the built-in one, then those found on this computer.
func (h *Handler) known() []Model {
	out := []Model{}
	info := h.svc.Models.Info()
	seen := map[string]bool{}
	if info.State != app.ModelNone {
		m := Model{ID: info.Spec, Name: info.Name, Family: info.Family, Source: models.SourceFolder, State: info.State,
			Error: info.Error, Loaded: info.State == app.ModelReady, Path: info.Path, SizeBytes: info.SizeBytes,
			Params: info.Params, RandomWeights: info.RandomWeights}
		if info.Builtin {
			m.Source = "builtin"
		}
		for _, in := range info.Inputs {
			if in.Note == "load a model to know" {
				continue
			}
			v := in.Supported
			switch in.Name {
			case "image":
				m.Towers.Vision = &v
			case "audio":
				m.Towers.Audio = &v
			}
		}
		out = append(out, m)
		seen[m.ID] = true
	}
	if !seen[models.Builtin] {
		out = append(out, Model{ID: models.Builtin, Name: "built-in tiny Gemma 3n (random weights)", Family: models.FamilyGemma3n,
			Source: "builtin", RandomWeights: true})
		seen[models.Builtin] = true
	}
	for _, l := range h.svc.Library.Local() {
		m := Model{ID: l.Spec, Name: l.Name, Family: l.Family, Source: l.Source, Path: l.Path, Format: l.Format,
			SizeBytes: l.SizeBytes, Quantization: l.Quant, Towers: Towers{ptr(l.Vision), ptr(l.Audio)}}
		if seen[m.ID] {
			// The loaded model found on disk too: complete its entry.
			for i := range out {
				if out[i].ID == m.ID {
					out[i].Format, out[i].Quantization, out[i].Source = m.Format, m.Quantization, m.Source
					if out[i].Family == "" {
						out[i].Family = m.Family
					}
				}
			}
			continue
		}
		seen[m.ID] = true
		out = append(out, m)
	}
	return out
}

func ptr(b bool) *bool { return &b }

// checkModel refuses a model name the app does not know (404); "" is the
// loaded model.
func (h *Handler) checkModel(name string) *apiError {
	if name == "" {
		return nil
	}
	for _, m := range h.known() {
		if m.ID == name || (m.Loaded && m.Name == name) {
			return nil
		}
	}
	return &apiError{http.StatusNotFound, CodeUnknownModel, fmt.Sprintf("model %q is not one the app knows: GET /v1/models lists them", name)}
}
