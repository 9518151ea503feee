package head

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"strings"

	"verdict/engine/model"
	"verdict/engine/scorer"
)

// Head is a trained decision head. A candidate c of a decision with answer
// state q scores
//
//	s(c) = (A·z(q) + U) · (B·e(c)) + Alpha · ll(c)
//
// where z standardises q with the training set's mean and deviation, e(c)
// is the candidate's unit-RMS mean token embedding and ll(c) the json
// backend's log-likelihood: a rank-Rank bilinear form between the answer
// position and the candidate, a learned candidate prior and the prompt's
// own evidence.
type Head struct {
	Meta     Meta
	MuQ, SdQ []float64 // [Dq]
	A        []float64 // [Rank, Dq]
	B        []float64 // [Rank, Dc]
	U        []float64 // [Rank]
	Alpha    float64
	// Fingerprint holds the model's embedding rows of fingerprintIDs: a
	// head only runs on the weights it was trained over.
	Fingerprint []float32 // [len(fingerprintIDs), Dc]
}

// Meta says what a head was trained for and how well it did.
type Meta struct {
	// ModelConfig is the hash of the model's configuration, ModelName what
	// it was called when training.
	ModelConfig string `json:"model_config"`
	ModelName   string `json:"model_name"`
	// Weights and Group are the weight format the features came from
	// (q4 and f32 hidden states differ enough to move a head's answers).
	Weights string `json:"weights"`
	Group   int    `json:"group"`
	// Schema is the hash of the schema, Fields its field names.
	Schema string   `json:"schema"`
	Fields []string `json:"fields"`
	Dq     int      `json:"dq"`
	Dc     int      `json:"dc"`
	Rank   int      `json:"rank"`
	// Training set sizes and the held-out figures of the report.
	TrainExamples int     `json:"train_examples"`
	HeldExamples  int     `json:"held_examples"`
	HeldAccuracy  float64 `json:"held_accuracy"`
	JSONAccuracy  float64 `json:"json_accuracy"`
}

// Format names the file format in a head's metadata.
const Format = "verdict-decision-head/1"

// ModelHash identifies a model's configuration.
func ModelHash(m model.Model) string {
	h := sha256.Sum256([]byte(m.ConfigText()))
	return hex.EncodeToString(h[:8])
}

// SchemaHash identifies a schema: its instructions, labels, questions,
// fields and options (everything the prompt and the candidates are built from).
func SchemaHash(s *scorer.Schema) string {
	b, _ := json.Marshal(s)
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:8])
}

// fingerprintIDs returns the tokens whose embedding rows fingerprint a
// model's weights.
func fingerprintIDs(vocab int) []int32 {
	return []int32{int32(vocab / 5), int32(2 * vocab / 5), int32(3 * vocab / 5), int32(4 * vocab / 5)}
}

func fingerprint(m model.Model) ([]float32, error) {
	return m.Embed(fingerprintIDs(m.Config().Vocab))
}

// minFingerprintCosine is the least cosine between a head's fingerprint rows
// and the model's: q4 and f32 weights of one checkpoint agree far closer,
// unrelated weights are near 0.
const minFingerprintCosine = 0.95

// Check refuses a model or a schema the head was not trained for.
func (h *Head) Check(sc *scorer.Scorer, s *scorer.Schema) error {
	m := sc.Model()
	if got := ModelHash(m); got != h.Meta.ModelConfig {
		return fmt.Errorf("head: trained for another model (%s, configuration %s); this model's configuration is %s: train a head for it with verdict train-head",
			h.Meta.ModelName, h.Meta.ModelConfig, got)
	}
	if w, g := string(m.Weights()), m.Group(); w != h.Meta.Weights || g != h.Meta.Group {
		return fmt.Errorf("head: trained over %s weights, this model runs %s: score with the weights it was trained over (--weights %s%s), or train a head for these",
			weightsText(h.Meta.Weights, h.Meta.Group), weightsText(w, g), h.Meta.Weights, map[bool]string{true: fmt.Sprintf(" --group %d", h.Meta.Group)}[h.Meta.Group != 0])
	}
	fp, err := fingerprint(m)
	if err != nil {
		return err
	}
	D := m.Config().Hidden
	if len(h.Fingerprint) != len(fp) {
		return fmt.Errorf("head: fingerprint of %d values, the model has %d", len(h.Fingerprint), len(fp))
	}
	for r := 0; r < len(fp)/D; r++ {
		if c := cosine(h.Fingerprint[r*D:(r+1)*D], fp[r*D:(r+1)*D]); !(c >= minFingerprintCosine) {
			return fmt.Errorf("head: trained for another model's weights (%s: same configuration, different token embeddings, cosine %.2f): train a head for this model with verdict train-head",
				h.Meta.ModelName, c)
		}
	}
	if got := SchemaHash(s); got != h.Meta.Schema {
		var names []string
		for _, f := range s.Fields {
			names = append(names, f.Name)
		}
		return fmt.Errorf("head: trained for another schema (fields %s; hash %s), not this one (fields %s; hash %s): a head learns one schema's questions and options, train one for this schema with verdict train-head",
			strings.Join(h.Meta.Fields, ", "), h.Meta.Schema, strings.Join(names, ", "), got)
	}
	return nil
}

func weightsText(w string, group int) string {
	if group != 0 {
		return fmt.Sprintf("%s (group %d)", w, group)
	}
	return w
}

func cosine(a, b []float32) float64 {
	var ab, aa, bb float64
	for i := range a {
		ab += float64(a[i]) * float64(b[i])
		aa += float64(a[i]) * float64(a[i])
		bb += float64(b[i]) * float64(b[i])
	}
	return ab / math.Sqrt(aa*bb)
}

// Scores returns the head's score of every candidate of d.
func (h *Head) Scores(d Decision) []float64 {
	a, _ := h.query(d.Q)
	out := make([]float64, len(d.C))
	for c := range d.C {
		b := h.candidate(d.C[c])
		for k := range b {
			out[c] += (a[k] + h.U[k]) * b[k]
		}
		out[c] += h.Alpha * d.LL[c]
	}
	return out
}

// query returns A·z(q) and z(q).
func (h *Head) query(q []float32) (a, z []float64) {
	r, D := h.Meta.Rank, h.Meta.Dq
	z = make([]float64, D)
	for k := range z {
		z[k] = (float64(q[k]) - h.MuQ[k]) / h.SdQ[k]
	}
	a = make([]float64, r)
	for i := range a {
		a[i] = dot(h.A[i*D:(i+1)*D], z)
	}
	return a, z
}

// candidate returns B·e(c).
func (h *Head) candidate(c []float32) []float64 {
	r, D := h.Meta.Rank, h.Meta.Dc
	b := make([]float64, r)
	for i := range b {
		row := h.B[i*D : (i+1)*D]
		for k, v := range c {
			b[i] += row[k] * float64(v)
		}
	}
	return b
}

func dot(a, b []float64) float64 {
	var s float64
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

// Rescore is the head backend's step after the json result: the features
// of every decision and the head's scores of its candidates.
func (h *Head) Rescore(ctx context.Context, sc *scorer.Scorer, s *scorer.Schema, input string, res *scorer.Result) (map[string][]float64, string, error) {
	ds, err := Features(ctx, sc, s, input, res)
	if err != nil {
		return nil, "", err
	}
	out := make(map[string][]float64, len(ds))
	for _, d := range ds {
		if len(d.Q) != h.Meta.Dq || len(d.C) > 0 && len(d.C[0]) != h.Meta.Dc {
			return nil, "", fmt.Errorf("head: features of %d and %d values, the head takes %d and %d", len(d.Q), len(d.C[0]), h.Meta.Dq, h.Meta.Dc)
		}
		out[d.Name] = h.Scores(d)
	}
	return out, h.Source(), nil
}

// Source is the probability source of the head's results.
func (h *Head) Source() string {
	return fmt.Sprintf("decision head: scores trained on %d labelled examples over the model's hidden state at each answer position and the candidates' token embeddings, "+
		"with a residual on the json log-likelihood (log_likelihood), normalised over the allowed values; held-out accuracy %.3f on %d examples (json backend %.3f)",
		h.Meta.TrainExamples, h.Meta.HeldAccuracy, h.Meta.HeldExamples, h.Meta.JSONAccuracy)
}

var _ scorer.DecisionHead = (*Head)(nil)
