package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"unicode/utf8"

	"verdict/engine/models"
	"verdict/engine/report"
	"verdict/engine/scorer"
)

// scoreFlags are the flags score and calibrate share.
type scoreFlags struct {
	weights                                        weightFlags
	model, schema, backend, calibration, normalize *string
	layout                                         *string
	batch                                          *int
	temperature                                    *float64
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
		backend:     fs.String("backend", "json", "scoring backend: json (candidate likelihoods), cached (single-token answer codes, one output vector per question), catalog (choice fields decoded through their option tries) or head (a trained decision head, --head)"),
		normalize:   fs.String("normalize", "none", "correct the distributions: none, contextual (divide by the prior on content-free inputs) or pmi (divide by each value's likelihood under a neutral premise)"),
		calibration: fs.String("calibration", "", "apply the fitted temperatures of this calibration file"),
		batch:       fs.Int("branch-batch", 0, "branch rows per batch (1..64; 0: 8 on the CPU, 64 on a GPU)"),
		temperature: fs.Float64("temperature", 1, "temperature for normalising likelihoods"),
		layout:      fs.String("layout", "", "the prompt's layout, in place of the schema's: input-first (the default: instructions, input, questions) or fields-first (the questions before the input, so a dataset's records share every token before their input)"),
	}
}

// check refuses flag values the scorer would otherwise replace silently:
// --temperature must be positive (0 is not "greedy" here), --branch-batch
// within 1..64. calibrate fits temperatures, so it takes no --temperature
// and no --calibration.
func (f scoreFlags) check(fs *flag.FlagSet, calibrating bool) error {
	if calibrating {
		if *f.backend == scorer.BackendCatalog {
			return usageErr("--backend catalog does not apply to calibrate: it fits the temperatures of candidate likelihoods (json or cached)")
		}
		for _, name := range []string{"temperature", "calibration", "normalize"} {
			if isSet(fs, name) {
				return usageErr("--%s does not apply to calibrate: it fits the temperatures", name)
			}
		}
	}
	if t := *f.temperature; !(t > 0) || math.IsInf(t, 0) {
		return usageErr("--temperature must be positive, got %v (scores are divided by it)", t)
	}
	if b := *f.batch; b < 0 || b > 64 {
		return usageErr("--branch-batch must be from 1 to 64 (0: the device's default), got %d", b)
	}
	return nil
}

// isSet reports whether the flag was given on the command line.
func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// checkInput refuses an empty or non-UTF-8 input, as the app does.
func checkInput(input, source string, media bool) error {
	if strings.TrimSpace(input) == "" && !media {
		return fmt.Errorf("%sthe input is empty: give some text, or media (--image, --audio, --video)", source)
	}
	if !utf8.ValidString(input) {
		return fmt.Errorf("%sthe input is not valid UTF-8 text", source)
	}
	return nil
}

// checkWritable makes sure path can be written before a long computation
// whose result goes there; it leaves no file behind that was not there.
func checkWritable(path string) error {
	_, statErr := os.Stat(path)
	fh, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("--out %s is not writable: %w", path, err)
	}
	fh.Close()
	if os.IsNotExist(statErr) {
		os.Remove(path)
	}
	return nil
}

// open loads the model, tokenizer and schema the flags name.
func (f scoreFlags) open(ctx context.Context, stderr io.Writer) (*models.Model, *scorer.Scorer, *scorer.Schema, error) {
	if *f.schema == "" {
		return nil, nil, nil, usageErr("--schema is required")
	}
	if scorer.CheckBackend(*f.backend) != nil || *f.backend == "" {
		return nil, nil, nil, usageErr("backend %q is not available (available: %s)", *f.backend, strings.Join(scorer.Backends, ", "))
	}
	if scorer.CheckNormalize(*f.normalize) != nil {
		return nil, nil, nil, usageErr("--normalize %q is not one of %s", *f.normalize, strings.Join(scorer.Normalizations, ", "))
	}
	s, err := f.readSchema()
	if err != nil {
		return nil, nil, nil, err
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
	headFile := fs.String("head", "", "the decision head file of --backend head (from verdict train-head)")
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
	if err := f.check(fs, false); err != nil {
		return err
	}
	input, source := *text, ""
	if *textFile != "" {
		b, err := readInput(*textFile)
		if err != nil {
			return err
		}
		input, source = string(b), *textFile+": "
	}
	if err := checkInput(input, source, mf.any()); err != nil {
		return err
	}
	opt, err := scoreOptions(fs, f, stderr)
	if err != nil {
		return err
	}
	if err := headOption(fs, *f.backend, *headFile, mf.any(), &opt); err != nil {
		return err
	}
	opt.TokenLogprobs, opt.OnPrefill = *logprobs, prefillProgress(newBar(stderr))
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
	reportPath := fs.String("report", "", "also write an HTML report here: per field accuracy, log-loss, Brier score, calibration error and reliability diagrams, before and after")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *examples == "" {
		return usageErr("--examples is required")
	}
	if err := f.check(fs, true); err != nil {
		return err
	}
	if err := checkWritable(*out); err != nil {
		return err
	}
	if *reportPath != "" {
		if err := checkWritable(*reportPath); err != nil {
			return fmt.Errorf("--report: %w", err)
		}
	}
	data, err := readInput(*examples)
	if err != nil {
		return err
	}
	ex, err := scorer.ReadExamples(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("%s: %w", *examples, err)
	}
	m, sc, s, err := f.open(ctx, stderr)
	if err != nil {
		return err
	}
	defer m.Close()
	c, rep, err := sc.CalibrateReport(ctx, s, ex, scorer.Options{BranchBatch: *f.batch, Backend: *f.backend})
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
	if *reportPath != "" {
		if err := writeReport(*reportPath, report.Page{Title: "Calibration report", Schema: *f.schema, Examples: *examples, Model: m.Name}, rep); err != nil {
			return err
		}
		for _, q := range append([]scorer.FieldQuality{rep.Overall}, rep.Fields...) {
			fmt.Fprintf(stdout, "  %-24s accuracy %.3f, log-loss %.3f -> %.3f, Brier %.3f -> %.3f, ECE %.3f -> %.3f\n", q.Field,
				q.Before.Accuracy, q.Before.LogLoss, q.After.LogLoss, q.Before.Brier, q.After.Brier, q.Before.ECE, q.After.ECE)
		}
		fmt.Fprintf(stdout, "report %s\n", *reportPath)
	}
	return nil
}

// writeReport writes a calibration report's HTML page to path.
func writeReport(path string, p report.Page, rep *scorer.CalibrationReport) error {
	var b bytes.Buffer
	if err := report.WriteHTML(&b, p, rep); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}
