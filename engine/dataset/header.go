package dataset

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"

	"verdict/engine/scorer"
)

// LogFormat is the result log format this version writes and reads: the
// header's "verdict_result_log".
const LogFormat = 1

// Header is a result log's first line: what scored its records. Logs whose
// headers differ in any field hold results that are not comparable, so a
// resume or a merge refuses them (*MismatchError).
type Header struct {
	Format  int    `json:"verdict_result_log"`
	Version string `json:"version"` // the verdict build (Version)
	Model   string `json:"model"`   // its name
	// ModelHash is the model's content hash (models.Model.ContentHash).
	ModelHash string `json:"model_hash"`
	Weights   string `json:"weights"` // q4 or f32
	Group     int    `json:"group"`   // the q4 group size (0 for f32)
	Backend   string `json:"backend"`
	// SchemaHash and Calibration hash what was parsed (Hash), not the
	// files' bytes: their formatting does not count. Calibration is "" without one.
	SchemaHash  string  `json:"schema_hash"`
	Layout      string  `json:"layout"` // the prompt's (scorer.LayoutInputFirst, ...)
	Temperature float64 `json:"temperature"`
	Calibration string  `json:"calibration"`
	Normalize   string  `json:"normalize"`
	// Head hashes the decision head of --backend head (its parameters as
	// JSON), "" without one.
	Head string `json:"head,omitempty"`
}

// Scoring is what NewHeader describes: the model, the schema and the
// scorer's options.
type Scoring struct {
	Model, ModelHash string
	Weights          string
	Group            int
	Schema           *scorer.Schema
	Options          scorer.Options
}

// NewHeader is the header of a log scored as s describes, the scorer's
// defaults written out (backend json, temperature 1, normalize none).
func NewHeader(s Scoring) (Header, error) {
	h := Header{Format: LogFormat, Version: Version(), Model: s.Model, ModelHash: s.ModelHash, Weights: s.Weights, Group: s.Group,
		Backend: s.Options.Backend, Temperature: s.Options.Temperature, Normalize: s.Options.Normalize}
	if h.Backend == "" {
		h.Backend = scorer.BackendJSON
	}
	if h.Temperature == 0 {
		h.Temperature = 1
	}
	if h.Normalize == "" {
		h.Normalize = scorer.NormalizeNone
	}
	h.Layout = scorer.LayoutInputFirst
	if s.Schema.FieldsFirst() {
		h.Layout = scorer.LayoutFieldsFirst
	}
	var err error
	if h.SchemaHash, err = Hash(s.Schema); err != nil {
		return Header{}, err
	}
	if s.Options.Head != nil {
		if h.Head, err = Hash(s.Options.Head); err != nil {
			return Header{}, err
		}
	}
	if c := s.Options.Calibration; c != nil {
		// The fitted temperatures, not what the fit saw.
		if h.Calibration, err = Hash(struct {
			Global float64
			Fields map[string]float64
		}{c.Global, c.Fields}); err != nil {
			return Header{}, err
		}
	}
	return h, nil
}

// Hash is "sha256:" and the hex SHA-256 of v as JSON (map keys sorted).
func Hash(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:]), nil
}

// Version names this verdict build: its VCS revision (+dirty for a build
// of a modified tree), else its module version, else "devel".
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	rev, dirty := "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	switch {
	case rev != "" && dirty:
		return rev + "+dirty"
	case rev != "":
		return rev
	case bi.Main.Version != "" && bi.Main.Version != "(devel)":
		return bi.Main.Version
	}
	return "devel"
}

// fields lists the header's fields that must agree, with what messages
// call them (the flag that sets them, where there is one), their values
// and how messages show them. The model's name is not compared (the same
// checkpoint may sit in folders of other names): its content hash is.
func (h Header) fields() []struct{ key, what, value, show string } {
	temp := strconv.FormatFloat(h.Temperature, 'g', -1, 64)
	return []struct{ key, what, value, show string }{
		{"verdict_result_log", "log format", strconv.Itoa(h.Format), strconv.Itoa(h.Format)},
		{"version", "verdict version", h.Version, h.Version},
		{"model_hash", "--model", h.ModelHash, fmt.Sprintf("%s (content %s)", h.Model, h.ModelHash)},
		{"weights", "--weights", h.Weights, h.Weights},
		{"group", "--group", strconv.Itoa(h.Group), strconv.Itoa(h.Group)},
		{"backend", "--backend", h.Backend, h.Backend},
		{"layout", "--layout", h.Layout, h.Layout},
		{"schema_hash", "--schema", h.SchemaHash, "of hash " + h.SchemaHash},
		{"temperature", "--temperature", temp, temp},
		{"calibration", "--calibration", h.Calibration, orNone(h.Calibration)},
		{"normalize", "--normalize", h.Normalize, h.Normalize},
		{"head", "--head", h.Head, orNone(h.Head)},
	}
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// MismatchError reports two headers that differ: records scored one way
// and the other cannot be mixed in one log.
type MismatchError struct {
	// A and B name the two (a log's path, "this run").
	A, B string
	// Field is the first header field that differs ("temperature"), What
	// what messages call it ("--temperature"), ValueA and ValueB its values
	// as messages show them.
	Field, What    string
	ValueA, ValueB string
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("%s was scored with %s %s, %s with %s %s: records scored differently cannot be mixed",
		e.A, e.What, e.ValueA, e.B, e.What, e.ValueB)
}

// Compare returns a *MismatchError naming the first field in which a
// (called nameA) and b (nameB) differ, nil when they are the same.
func Compare(a, b Header, nameA, nameB string) error {
	fa, fb := a.fields(), b.fields()
	for i := range fa {
		if fa[i].value != fb[i].value {
			return &MismatchError{A: nameA, B: nameB, Field: fa[i].key, What: fa[i].what, ValueA: fa[i].show, ValueB: fb[i].show}
		}
	}
	return nil
}

// NoHeaderError reports a log with records but no header line: written by
// a verdict from before logs had one, it does not say what scored it.
type NoHeaderError struct{ Path string }

func (e *NoHeaderError) Error() string {
	return fmt.Sprintf("%s has no header line: it was written by an older verdict, which did not record what scored its records, so they cannot be checked against others; score it again with this version into a new file (or finish it with the version that wrote it)", e.Path)
}

// ErrNoHeader is what a Writer returns for a record written before its
// header was set.
var ErrNoHeader = errors.New("dataset: the log's header is not set")

// headerKey starts every header line (Format is its first field).
var headerKey = []byte(`{"verdict_result_log"`)

// parseHeader reads a header line; ok is false for a line that is not one.
func parseHeader(b []byte, name string) (h Header, ok bool, err error) {
	if !bytes.HasPrefix(bytes.TrimSpace(b), headerKey) {
		return Header{}, false, nil
	}
	var v struct {
		Format int `json:"verdict_result_log"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return Header{}, true, fmt.Errorf("%s: line 1 is not a header: %v", name, err)
	}
	if v.Format != LogFormat {
		return Header{}, true, fmt.Errorf("%s: result log format %d; this verdict reads format %d (a newer verdict wrote it: use that version)", name, v.Format, LogFormat)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&h); err != nil {
		return Header{}, true, fmt.Errorf("%s: line 1 is not a header: %v", name, err)
	}
	return h, true, nil
}

// encodeLine is v as one JSON line, HTML characters as they are.
func encodeLine(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
