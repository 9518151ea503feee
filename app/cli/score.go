package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"verdict/engine/models"
	"verdict/engine/scorer"
)

// scoreFlags are the flags score and calibrate share.
type scoreFlags struct {
	weights                             weightFlags
	model, schema, backend, calibration *string
	batch                               *int
	temperature                         *float64
}

func addScoreFlags(fs interface {
	String(string, string, string) *string
	Int(string, int, string) *int
	Float64(string, float64, string) *float64
}) scoreFlags {
	return scoreFlags{
		weights:     addWeightFlags(fs),
		model:       fs.String("model", models.Builtin, "model folder, or builtin"),
		schema:      fs.String("schema", "", "schema JSON file (required)"),
		backend:     fs.String("backend", "json", "scoring backend: json"),
		calibration: fs.String("calibration", "", "apply the fitted temperatures of this calibration file"),
		batch:       fs.Int("branch-batch", scorer.DefaultBranchBatch, "branch rows per batch (1..64)"),
		temperature: fs.Float64("temperature", 1, "temperature for normalising likelihoods"),
	}
}

// open loads the model, tokenizer and schema the flags name.
func (f scoreFlags) open(ctx context.Context, stderr io.Writer) (*models.Model, *scorer.Scorer, *scorer.Schema, error) {
	if *f.schema == "" {
		return nil, nil, nil, usageErr("--schema is required")
	}
	if *f.backend != "json" {
		return nil, nil, nil, usageErr("backend %q is not available (available: json)", *f.backend)
	}
	b, err := os.ReadFile(*f.schema)
	if err != nil {
		return nil, nil, nil, err
	}
	s, err := scorer.ParseSchema(b)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%s: %w", *f.schema, err)
	}
	m, err := f.weights.open(ctx, *f.model, stderr)
	if err != nil {
		return nil, nil, nil, err
	}
	tok, err := m.Tokenizer()
	if err != nil {
		m.Close()
		return nil, nil, nil, err
	}
	return m, scorer.New(m.Model, tok), s, nil
}

func scoreCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("score", stderr)
	f := addScoreFlags(fs)
	text := fs.String("text", "", "the input text")
	textFile := fs.String("text-file", "", "read the input text from this file")
	logprobs := fs.Bool("token-logprobs", false, "include every scored token's log-probability")
	mf := addMediaFlags(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usageErr("unexpected arguments %v", fs.Args())
	}
	if *text != "" && *textFile != "" || *text == "" && *textFile == "" && !mf.any() {
		return usageErr("give exactly one of --text and --text-file, or media (--image, --audio, --video)")
	}
	input := *text
	if *textFile != "" {
		b, err := os.ReadFile(*textFile)
		if err != nil {
			return err
		}
		input = string(b)
	}
	opt := scorer.Options{BranchBatch: *f.batch, Temperature: *f.temperature, TokenLogprobs: *logprobs,
		OnPrefill: prefillProgress(newBar(stderr))}
	if *f.calibration != "" {
		c, err := scorer.LoadCalibration(*f.calibration)
		if err != nil {
			return err
		}
		opt.Calibration = c
	}
	m, sc, s, err := f.open(ctx, stderr)
	if err != nil {
		return err
	}
	defer m.Close()
	if mf.any() {
		opt.Media = func() (*scorer.Media, error) {
			p, err := mf.prepare(ctx, m, stderr)
			if err != nil {
				return nil, err
			}
			return &p.Media, nil
		}
	}
	res, err := sc.Score(ctx, s, input, opt)
	if err != nil {
		return err
	}
	out := struct {
		Model        string `json:"model"`
		RandomWeight bool   `json:"random_weights,omitempty"`
		Backend      string `json:"backend"`
		*scorer.Result
	}{m.Name, m.Builtin, *f.backend, res}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(out)
}

func calibrateCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("calibrate", stderr)
	f := addScoreFlags(fs)
	examples := fs.String("examples", "", "labelled examples, JSONL: {\"text\": ..., \"labels\": {field: answer}} (required)")
	out := fs.String("out", "calibration.json", "where to save the fitted temperatures")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *examples == "" {
		return usageErr("--examples is required")
	}
	r, err := os.Open(*examples)
	if err != nil {
		return err
	}
	ex, err := scorer.ReadExamples(r)
	r.Close()
	if err != nil {
		return fmt.Errorf("%s: %w", *examples, err)
	}
	m, sc, s, err := f.open(ctx, stderr)
	if err != nil {
		return err
	}
	defer m.Close()
	c, err := sc.Calibrate(ctx, s, ex, scorer.Options{BranchBatch: *f.batch})
	if err != nil {
		return err
	}
	c.Source = *examples
	if err := c.Save(*out); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "fitted on %d examples (%d decisions): global temperature %.4g\n", c.Examples, c.Decisions, c.Global)
	for _, n := range c.FieldNames() {
		fmt.Fprintf(stdout, "  %-24s %.4g\n", n, c.Fields[n])
	}
	fmt.Fprintf(stdout, "saved %s\n", *out)
	return nil
}
