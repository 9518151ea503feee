package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"verdict/engine/bench"
	"verdict/engine/catalog"
	"verdict/engine/models"
	"verdict/engine/scorer"
	"verdict/engine/session"
)

// benchModels are the models verdict bench measures unless told otherwise:
// Gemma 3n E2B's and E4B's shapes with random weights.
const benchModels = "synthetic-e2b,synthetic-e4b"

func benchCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "scorer" {
		return benchScorerCmd(ctx, args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "catalog" {
		return benchCatalogCmd(ctx, args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "serve" {
		return benchServeCmd(ctx, args[1:], stdout, stderr)
	}
	fs := newFlags("bench", stderr)
	model := fs.String("model", benchModels, "models to measure, comma-separated: synthetic-e2b, synthetic-e4b, builtin or folders")
	wf := addWeightFlags(fs)
	prompt := fs.Int("prompt-tokens", 512, "prompt length to prefill (also the scorer's prefix)")
	decode := fs.Int("decode-tokens", 32, "tokens to decode after the prompt")
	fields := fs.Int("fields", 8, "choice fields of 4 candidates in the scorer request")
	scorerReq := fs.Bool("scorer", true, "time one scorer request")
	batchSeqs := fs.Int("batch", 8, "also decode this many sequences at once (0: not)")
	limits := fs.Bool("limits", true, "measure the machine's read bandwidth and FMA peak")
	threads := fs.Int("threads", 0, "kernel threads (0: one per core)")
	asJSON := fs.Bool("json", false, "print one JSON object")
	tf := addTowerFlags(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usageErr("unexpected arguments %v", fs.Args())
	}
	if err := tf.check(); err != nil {
		return err
	}
	if *prompt < 1 || *decode < 1 || *fields < 1 {
		return usageErr("--prompt-tokens, --decode-tokens and --fields must be positive")
	}
	if *batchSeqs < 0 || *batchSeqs > 64 {
		return usageErr("--batch must be from 0 to 64, got %d", *batchSeqs)
	}
	opt, err := wf.options()
	if err != nil {
		return err
	}
	session.SetThreads(*threads)
	progress := func(format string, a ...any) {
		if *asJSON {
			fmt.Fprintf(stderr, format+"\n", a...)
		}
	}
	rep := bench.SuiteReport{Machine: bench.ThisMachine(), Device: session.DefaultBackend().Name()}
	if opt.Backend != nil {
		rep.Device = opt.Backend.Name()
	}
	if *limits {
		progress("measuring the machine's limits")
		l := bench.MeasureLimits()
		rep.Limits = &l
	}
	ceil := rep.Limits
	if opt.Backend != nil {
		if d, ok := opt.Backend.Info(); ok {
			rep.DeviceInfo = &d
		}
		if *limits {
			progress("measuring the device's limits")
			if l, err := opt.Backend.MeasureLimits(); err == nil {
				rep.DeviceLimits = &l
				ceil = bench.DeviceCeilings(l)
			}
		}
	}
	for _, spec := range strings.Split(*model, ",") {
		if spec = strings.TrimSpace(spec); spec == "" {
			continue
		}
		progress("%s: loading (%s weights)", spec, opt.Weights)
		bench.ResetPeakMemory()
		m, err := openModel(ctx, spec, opt, stderr)
		if err != nil {
			return err
		}
		o := bench.Opened{Name: spec, M: m.Model, TokErr: m.TokErr, LoadSeconds: m.LoadTime.Seconds()}
		if m.Tok != nil {
			o.Tok = m.Tok
		}
		var cached float64
		if path, hit := m.PackedCache(); path != "" && !hit {
			// This load packed the weights: time the next one, from the
			// cache it wrote, and measure that model.
			m.Close()
			bench.ResetPeakMemory()
			if m, err = openModel(ctx, spec, opt, stderr); err != nil {
				return err
			}
			cached = m.LoadTime.Seconds()
			o.M = m.Model
		}
		progress("%s: measuring", spec)
		r, err := bench.MeasureModel(ctx, o, bench.SuiteOptions{PromptTokens: *prompt, DecodeTokens: *decode,
			Fields: *fields, Scorer: *scorerReq, BatchSeqs: *batchSeqs}, ceil)
		if cached > 0 {
			r.CacheHit, r.LoadCachedSeconds = false, cached
		}
		m.Close()
		if err != nil {
			return err
		}
		rep.Models = append(rep.Models, r)
	}
	if *tf.on {
		t, err := measureTowers(ctx, tf, opt, stderr, progress)
		if err != nil {
			return err
		}
		t.SetPeak(ceil)
		rep.Towers = t
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	fmt.Fprintln(stdout, rep)
	return nil
}

func benchScorerCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("bench scorer", stderr)
	model := fs.String("model", models.Builtin, "model folder, or builtin")
	wf := addWeightFlags(fs)
	prompt := fs.Int("prompt-tokens", 512, "length of the shared prefix")
	fields := fs.Int("fields", 8, "choice fields of 4 candidates each")
	full := fs.Int("full-passes", 0, "candidates to time with their own full forward pass (0: all)")
	sweep := fs.String("sweep", "1,2,4,8,16,32,64", "branch-batch sizes to time")
	threads := fs.Int("threads", 0, "kernel threads (0: one per core)")
	asJSON := fs.Bool("json", false, "print one JSON object")
	backends := fs.String("backends", "cached", "backends to compare with json on the same schema and input (comma-separated; empty: none)")
	if err := parse(fs, args); err != nil {
		return err
	}
	var others []string
	for _, b := range strings.Split(*backends, ",") {
		if b = strings.TrimSpace(b); b == "" {
			continue
		}
		if scorer.CheckBackend(b) != nil || b == scorer.BackendJSON {
			return usageErr("--backends: %q is not a backend to compare with json (%s)", b, strings.Join(scorer.Backends[1:], ", "))
		}
		others = append(others, b)
	}
	sizes, err := batchSizes("--sweep", *sweep, 64)
	if err != nil {
		return err
	}
	session.SetThreads(*threads)
	m, tok, err := wf.openTok(ctx, *model, stderr)
	if err != nil {
		return err
	}
	defer m.Close()
	r, err := bench.Scorer(ctx, m.Name, m.Model, tok, *prompt, *fields, *full, sizes, others...)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	fmt.Fprintln(stdout, r)
	return nil
}

func benchCatalogCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("bench catalog", stderr)
	model := fs.String("model", benchModels+","+models.Builtin, "models to measure, comma-separated")
	wf := addWeightFlags(fs)
	requests := fs.Int("requests", len(catalog.ToolRequests), "example requests of the tool catalog decoded alone per mode in the per-token section (1..8)")
	sweep := fs.Int("sweep-requests", 500, "requests of the end-to-end sweep (the example intents in turn, k = 1 + i%5)")
	batches := fs.String("batches", "1,8,32,64", "batch sizes of the end-to-end sweep")
	prefill := fs.Int("prefill-requests", 10, "the sweep's first prompts prefilled one by one against in one batch (0: not)")
	threads := fs.Int("threads", 0, "kernel threads (0: one per core)")
	asJSON := fs.Bool("json", false, "print a JSON list, one object per model")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usageErr("unexpected arguments %v", fs.Args())
	}
	if *requests < 1 || *requests > len(catalog.ToolRequests) {
		return usageErr("--requests %d: want 1..%d", *requests, len(catalog.ToolRequests))
	}
	if *sweep < 1 || *sweep > 100000 {
		return usageErr("--sweep-requests %d: want 1..100000", *sweep)
	}
	if *prefill < 0 || *prefill > *sweep {
		return usageErr("--prefill-requests %d: want 0..%d (--sweep-requests)", *prefill, *sweep)
	}
	sizes, err := batchSizes("--batches", *batches, 256)
	if err != nil {
		return err
	}
	if len(sizes) == 0 {
		return usageErr("--batches: no batch sizes")
	}
	session.SetThreads(*threads)
	opt := bench.CatalogOptions{PerToken: *requests, Sweep: *sweep, Batches: sizes, Prefill: *prefill}
	var reps []bench.CatalogReport
	for _, spec := range strings.Split(*model, ",") {
		if spec = strings.TrimSpace(spec); spec == "" {
			continue
		}
		fmt.Fprintf(stderr, "%s: loading\n", spec)
		m, tok, err := wf.openTok(ctx, spec, stderr)
		if err != nil {
			return err
		}
		r, err := func() (bench.CatalogReport, error) {
			defer m.Close()
			cat, err := catalog.Compile(catalog.Tools(), tok, Grammar(tok))
			if err != nil {
				return bench.CatalogReport{}, err
			}
			fmt.Fprintf(stderr, "%s: measuring\n", spec)
			r, err := bench.Catalog(ctx, spec, m.Model, cat, tok, opt)
			r.Device = wf.deviceName()
			return r, err
		}()
		if err != nil {
			return err
		}
		if !*asJSON {
			fmt.Fprint(stdout, r)
		}
		reps = append(reps, r)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(reps)
	}
	return nil
}

// batchSizes parses a comma-separated list of batch sizes in 1..most.
func batchSizes(flag, list string, most int) ([]int, error) {
	var sizes []int
	for _, s := range strings.Split(list, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > most {
			return nil, usageErr("%s: %q is not a batch size in 1..%d", flag, s, most)
		}
		sizes = append(sizes, n)
	}
	return sizes, nil
}
