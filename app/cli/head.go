package cli

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"verdict/engine/head"
	"verdict/engine/models"
	"verdict/engine/scorer"
)

// headOption loads the --head file into opt for the head backend, and
// refuses a --head without it, the head backend without a --head, and the
// head backend with media (before any tower runs).
func headOption(fs *flag.FlagSet, backend, file string, media bool, opt *scorer.Options) error {
	switch {
	case backend == scorer.BackendHead && media:
		return usageErr("--backend head scores text inputs only (no --image, --audio or --video)")
	case backend == scorer.BackendHead && file == "":
		return usageErr("--backend head needs --head FILE (a decision head trained with verdict train-head)")
	case backend != scorer.BackendHead && isSet(fs, "head"):
		return usageErr("--head applies to --backend head only (the backend is %s)", backend)
	case backend != scorer.BackendHead:
		return nil
	}
	h, err := head.Load(file)
	if err != nil {
		return err
	}
	opt.Head = h
	return nil
}

func trainHeadCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("train-head", stderr)
	json, none, layout := scorer.BackendJSON, scorer.NormalizeNone, "" // the schema's own layout
	f := scoreFlags{
		normalize: &none,
		layout:    &layout,
		weights:   addWeightFlags(fs),
		model:     fs.String("model", models.Builtin, "model folder, or builtin"),
		schema:    fs.String("schema", "", "schema JSON file (required)"),
		backend:   &json,
		batch:     fs.Int("branch-batch", 0, "branch rows per batch (1..64; 0: 8 on the CPU, 64 on a GPU)"),
	}
	examples := fs.String("examples", "", "labelled examples, JSONL as for calibrate: {\"text\": ..., \"labels\": {field: answer}} (required)")
	out := fs.String("out", "head.safetensors", "where to save the trained head")
	var o head.TrainOptions
	fs.IntVar(&o.Rank, "rank", 16, "rank of the bilinear form between answer state and candidate")
	fs.IntVar(&o.Epochs, "epochs", 300, "most passes over the training split")
	fs.IntVar(&o.Patience, "patience", 30, "stop after this many epochs without a better held-out NLL")
	fs.IntVar(&o.Batch, "batch", 16, "decisions per optimiser step")
	fs.Float64Var(&o.LR, "lr", 0.001, "Adam's learning rate")
	fs.Float64Var(&o.L2, "l2", 1e-3, "weight decay")
	fs.Float64Var(&o.HeldOut, "held-out", 0.25, "fraction of the examples held out for early stopping and the report")
	seed := fs.Uint64("seed", 1, "seed of the split and the initialisation")
	if err := parse(fs, args); err != nil {
		return err
	}
	o.Seed = *seed
	switch {
	case fs.NArg() != 0:
		return usageErr("unexpected arguments %v", fs.Args())
	case *examples == "":
		return usageErr("--examples is required")
	case *f.batch < 0 || *f.batch > 64:
		return usageErr("--branch-batch must be from 1 to 64 (0: the device's default), got %d", *f.batch)
	case o.Rank < 1 || o.Epochs < 1 || o.Patience < 1 || o.Batch < 1:
		return usageErr("--rank, --epochs, --patience and --batch must be positive")
	case !(o.LR > 0) || !(o.L2 > 0):
		return usageErr("--lr and --l2 must be positive")
	case !(o.HeldOut > 0 && o.HeldOut < 1):
		return usageErr("--held-out must be between 0 and 1, got %v", o.HeldOut)
	case o.Seed == 0:
		return usageErr("--seed must not be 0")
	}
	if err := checkWritable(*out); err != nil {
		return err
	}
	data, err := readInput(*examples)
	if err != nil {
		return err
	}
	ex, err := scorer.ReadExamples(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("%s: %w", *examples, err)
	}
	if len(ex) < 2 {
		return fmt.Errorf("%s: %d examples; training needs at least 2 (some are held out)", *examples, len(ex))
	}
	m, sc, s, err := f.open(ctx, stderr)
	if err != nil {
		return err
	}
	defer m.Close()
	b := newBar(stderr)
	start := time.Now()
	feats, err := head.Collect(ctx, sc, s, ex, scorer.Options{BranchBatch: *f.batch}, func(done, total int) {
		b.show("features", int64(done), int64(total), "examples")
	})
	b.clear()
	if err != nil {
		return err
	}
	collect := time.Since(start)
	meta, fp, err := head.NewMeta(m.Model, m.Name, s)
	if err != nil {
		return err
	}
	o.Progress = func(epoch, epochs int, _, _ float64) { b.show("training", int64(epoch), int64(epochs), "epochs") }
	h, rep, err := head.Train(ctx, feats, meta, fp, o)
	b.clear()
	if err != nil {
		return err
	}
	if err := h.Save(*out); err != nil {
		return err
	}
	writeHeadReport(stdout, rep, o.Seed)
	fmt.Fprintf(stdout, "features %.1f s, training %.1f s\nsaved %s\n", collect.Seconds(), rep.Elapsed.Seconds(), *out)
	return nil
}

// writeHeadReport prints a training report: the split, where it stopped, and
// the head beside the json backend on the held-out split.
func writeHeadReport(w io.Writer, r *head.Report, seed uint64) {
	fmt.Fprintf(w, "trained on %d examples, %d held out (seed %d): %d epochs, kept epoch %d (best held-out NLL)\n",
		r.TrainExamples, r.HeldExamples, seed, r.Epochs, r.BestEpoch)
	fmt.Fprintf(w, "%-18s %9s %9s %7s %7s\n", "", "decisions", "accuracy", "NLL", "ECE")
	for _, row := range []struct {
		name string
		m    head.Metrics
	}{{"head, training", r.Train}, {"head, held out", r.Held}, {"json, held out", r.JSON}} {
		fmt.Fprintf(w, "%-18s %9d %9.3f %7.3f %7.3f\n", row.name, row.m.Decisions, row.m.Accuracy, row.m.NLL, row.m.ECE)
	}
	if len(r.Fields) > 1 {
		fmt.Fprintln(w, "held out, by field (head / json):")
		for _, f := range r.Fields {
			fmt.Fprintf(w, "  %-24s %4d  accuracy %.3f / %.3f  NLL %.3f / %.3f  ECE %.3f / %.3f\n", f.Field, f.Head.Decisions,
				f.Head.Accuracy, f.JSON.Accuracy, f.Head.NLL, f.JSON.NLL, f.Head.ECE, f.JSON.ECE)
		}
	}
}
