package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"verdict/engine/dataset"
	"verdict/engine/safefile"
	"verdict/engine/scorer"
	"verdict/engine/session"
)

// scoreFileCmd scores every record of a JSONL or CSV file into a result
// log (see package dataset), --concurrency records at once through one
// scheduler, written in input order.
func scoreFileCmd(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	fs := newFlags("score-file", stderr)
	f := addScoreFlags(fs)
	input := fs.String("input", "", `records to score: JSONL lines {"id": ..., "text": ...} or CSV with a header naming "text" (and "id") columns (required)`)
	output := fs.String("output", "", "the result log, JSONL: one line per record, appended as each is scored (required)")
	format := fs.String("format", "", "the input's format, jsonl or csv (default: from its extension)")
	resume := fs.Bool("resume", false, "go on with an existing --output: skip the records it has, cut a torn last line")
	shardFlag := fs.String("shard", "0/1", "score only shard I of N (0 <= I < N): the records whose position modulo N is I")
	headFile := fs.String("head", "", "the decision head file of --backend head (from verdict train-head)")
	concurrency := fs.Int("concurrency", 0, "records in flight at once, their passes batched together (0: what the key/value pool holds, at most 64)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *concurrency < 0 || *concurrency > 4096 {
		return usageErr("--concurrency must be from 0 to 4096, got %d", *concurrency)
	}
	if fs.NArg() != 0 {
		return usageErr("unexpected arguments %v", fs.Args())
	}
	if *input == "" || *output == "" {
		return usageErr("--input and --output are required")
	}
	if *input == "-" {
		return usageErr("--input must be a file: it is read twice (to check the ids, then to score)")
	}
	if ext := strings.ToLower(filepath.Ext(*output)); ext == ".csv" {
		return usageErr("--output is a JSONL result log (resumable); make CSV from it with verdict merge %s --output out.csv", *output)
	}
	shard, err := dataset.ParseShard(*shardFlag)
	if err != nil {
		return usageErr("--shard: %v", err)
	}
	ff, err := dataset.FormatOf(*input, *format)
	if err != nil {
		return usageErr("%v", err)
	}
	if err := f.check(fs, false); err != nil {
		return err
	}
	opt, err := scoreOptions(fs, f, stderr)
	if err != nil {
		return err
	}
	if err := headOption(fs, *f.backend, *headFile, false, &opt); err != nil {
		return err
	}
	if sameFile(*input, *output) {
		return usageErr("--output is the input file %s (by its path or through a link): it would be written over", *input)
	}
	// The header of this run; the model's part once it is loaded.
	schema, err := f.readSchema()
	if err != nil {
		return err
	}
	head, err := dataset.NewHeader(dataset.Scoring{Schema: schema, Options: opt})
	if err != nil {
		return err
	}
	scan := dataset.ScanReader(func() (io.ReadCloser, error) {
		fh, _, err := safefile.Open(*input)
		return fh, err
	}, ff)
	// Check the input and the log before loading the model.
	_, statErr := os.Stat(*output)
	w, logged, err := dataset.Create(*output, *resume)
	if err != nil {
		return err
	}
	if h := logged.Header; h != nil {
		// All but the model's part, before it loads.
		early := head
		early.Model, early.ModelHash, early.Weights, early.Group = h.Model, h.ModelHash, h.Weights, h.Group
		if err := dataset.Compare(*h, early, *output, "this run"); err != nil {
			w.Close()
			return err
		}
	}
	defer w.Close()
	defer func() { // a run that fails before its first record leaves no new file behind
		if fi, e := os.Stat(*output); err != nil && os.IsNotExist(statErr) && e == nil && fi.Size() == 0 {
			os.Remove(*output)
		}
	}()
	plan, err := dataset.NewPlan(scan, shard, logged.Records)
	if err != nil {
		return fmt.Errorf("%s: %w", *input, err)
	}
	if plan.Todo == 0 {
		fmt.Fprintf(stdout, "%s: %d records, shard %s: nothing left to score (%d in %s)\n", *input, plan.Records, shard, plan.Done, *output)
		return nil
	}
	if err := f.checkScoring(); err != nil {
		return err
	}
	// One session: on --device, or a replica on each of --devices, the
	// records spread over them.
	sess, err := f.weights.openSession(ctx, *f.model, stderr)
	if err != nil {
		return err
	}
	defer sess.Close()
	plan.Concurrency = *concurrency
	if plan.Concurrency == 0 {
		plan.Concurrency = sessionConcurrency(sess)
	}
	id, err := sess.Identity()
	if err != nil {
		return fmt.Errorf("the model's content hash: %w", err)
	}
	head.Model, head.ModelHash, head.Weights, head.Group = id.Name, id.Hash, string(id.Weights), id.Group
	if err := w.SetHeader(head); err != nil {
		return err
	}
	info := sess.Info()
	score := func(ctx context.Context, text string) (json.RawMessage, error) {
		if err := checkInput(text, "", false); err != nil {
			return nil, err
		}
		res, err := sess.Score(session.WithPriority(ctx, session.Bulk), schema, text, opt)
		if err != nil {
			return nil, err
		}
		return json.Marshal(scored{info.Name, info.Builtin, *f.backend, res})
	}
	defer replicaSummary(stderr, sess)
	b := newBar(stderr)
	plain := plainProgress(stderr, b.on, time.Now)
	pr, err := plan.Run(ctx, scan, score, w, nil, func(p dataset.Progress) {
		b.showItems(p)
		plain(p)
	})
	b.clear()
	if cerr := w.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		if errors.Is(err, context.Canceled) {
			fmt.Fprintf(stderr, "verdict score-file: %d records scored before the stop are in %s; run again with --resume to go on\n", pr.Done, *output)
		}
		return err
	}
	fmt.Fprintf(stdout, "%s: %d records, shard %s: scored %d (%d errors) in %s, %.2f records/s; %d resumed; results in %s\n",
		*input, plan.Records, shard, pr.Done, pr.Errors, pr.Elapsed.Round(time.Millisecond), pr.Rate(), plan.Done, *output)
	return nil
}

// scored is a record's result: what verdict score prints.
type scored struct {
	Model        string `json:"model"`
	RandomWeight bool   `json:"random_weights,omitempty"`
	Backend      string `json:"backend"`
	*scorer.Result
}

// scoreOptions are the scorer options the flags of score and score-file
// give; a calibration's fitted temperatures replace --temperature (stderr
// says so).
func scoreOptions(fs *flag.FlagSet, f scoreFlags, stderr io.Writer) (scorer.Options, error) {
	opt := scorer.Options{BranchBatch: *f.batch, Backend: *f.backend, Normalize: *f.normalize}
	if isSet(fs, "temperature") {
		opt.Temperature = *f.temperature // else the scorer's default, 1
	}
	if *f.calibration != "" {
		c, err := scorer.LoadCalibration(*f.calibration)
		if err != nil {
			return opt, err
		}
		opt.Calibration = c
		if opt.Temperature != 0 {
			fmt.Fprintf(stderr, "note: the fitted temperatures of %s replace --temperature %g\n", *f.calibration, opt.Temperature)
		}
	}
	return opt, nil
}

// readSchema reads and parses --schema, with --layout's layout when given.
func (f scoreFlags) readSchema() (*scorer.Schema, error) {
	if *f.schema == "" {
		return nil, usageErr("--schema is required")
	}
	layout := ""
	if f.layout != nil {
		layout = *f.layout
	}
	if err := scorer.CheckLayout(layout); err != nil {
		return nil, usageErr("--%v", err)
	}
	b, err := readInput(*f.schema)
	if err != nil {
		return nil, err
	}
	s, err := scorer.ParseSchema(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", *f.schema, err)
	}
	switch layout {
	case scorer.LayoutFieldsFirst:
		s.Layout = scorer.LayoutFieldsFirst
	case scorer.LayoutInputFirst:
		s.Layout = ""
	}
	return s, nil
}

// sameFile reports whether paths a and b name one file: by the same path,
// or through a symbolic or hard link (the same device and inode).
func sameFile(a, b string) bool {
	if abs(a) == abs(b) {
		return true
	}
	fa, errA := os.Stat(a)
	fb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(fa, fb)
}

func abs(p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		return p
	}
	return a
}

// showItems draws a run's progress: records done of total, records per
// second and the time left.
func (b *bar) showItems(p dataset.Progress) {
	if b == nil || !b.on {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	if now.Sub(b.drawn) < 100*time.Millisecond && p.Done < p.Total {
		return
	}
	b.drawn, b.active = now, true
	fmt.Fprintf(b.w, "\r%s\x1b[K", itemsLine(p))
}

// itemsLine is "scoring [####....] 42% 420 of 1000 records · 3 errors ·
// 12.5/s · 34 s, about 47 s left".
func itemsLine(p dataset.Progress) string {
	line := barLine("scoring", int64(p.Done), int64(p.Total), "records", p.Elapsed)
	extra := fmt.Sprintf(" · %.1f/s · ", p.Rate())
	if p.Errors > 0 {
		extra = fmt.Sprintf(" · %d errors%s", p.Errors, extra)
	}
	return strings.Replace(line, " · ", extra, 1)
}

// plainProgress writes a progress line every 30 s when stderr is not a
// terminal (a pod's log, a file): a long run still says how far it is.
func plainProgress(w io.Writer, terminal bool, now func() time.Time) func(dataset.Progress) {
	last := now()
	return func(p dataset.Progress) {
		if terminal || now().Sub(last) < 30*time.Second {
			return
		}
		last = now()
		fmt.Fprintln(w, itemsLine(p))
	}
}

// DefaultConcurrency is score-file's records in flight for a key/value
// pool of positions positions: one per 2,048 (a record's prompt and
// branches with room to spare; admission makes the rest wait), 1 to 64.
func DefaultConcurrency(positions int) int {
	return min(max(positions/2048, 1), 64)
}

// mergeCmd joins the result logs of several shards into one, in input
// order, as JSONL (under their header) or CSV; logs scored differently
// (their headers differ) are refused.
func mergeCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("merge", stderr)
	output := fs.String("output", "", "the merged file: JSONL, or CSV when it ends in .csv (required)")
	format := fs.String("format", "", "the output's format, jsonl or csv (default: from its extension, JSONL unless .csv)")
	input := fs.String("input", "", "the input file the logs were scored from: check that every record is there")
	inputFormat := fs.String("input-format", "", "the --input's format, jsonl or csv (default: from its extension)")
	logs, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if *output == "" || len(logs) == 0 {
		return usageErr("give the result logs and --output (verdict merge out-*.jsonl --output all.jsonl)")
	}
	of := dataset.JSONL
	if *format != "" || strings.EqualFold(filepath.Ext(*output), ".csv") {
		if of, err = dataset.FormatOf(*output, *format); err != nil {
			return usageErr("%v", err)
		}
	}
	var srcs []dataset.Source
	for _, p := range logs {
		if sameFile(p, *output) {
			return usageErr("--output %s is one of the logs (by its path or through a link)", *output)
		}
		fh, _, err := safefile.Open(p)
		if err != nil {
			return err
		}
		log, _, err := dataset.ReadLog(fh, p, false)
		fh.Close()
		if err != nil {
			return err
		}
		srcs = append(srcs, dataset.Source{Name: p, Log: log})
	}
	head, recs, err := dataset.Merge(srcs)
	if err != nil {
		return err
	}
	note := ""
	if *input != "" {
		ff, err := dataset.FormatOf(*input, *inputFormat)
		if err != nil {
			return usageErr("%v", err)
		}
		plan, err := dataset.NewPlan(dataset.ScanReader(func() (io.ReadCloser, error) {
			fh, _, err := safefile.Open(*input)
			return fh, err
		}, ff), dataset.All, recs)
		if err != nil {
			return fmt.Errorf("%s: %w", *input, err)
		}
		if plan.Todo > 0 {
			miss := dataset.Missing(recs, plan.Records)
			return fmt.Errorf("%d of the %d records of %s are in no log (the first is record %d, counting from 0): a shard is missing or unfinished", plan.Todo, plan.Records, *input, miss[0])
		}
		note = ", every record of " + *input
	} else if len(recs) > 0 {
		if miss := dataset.Missing(recs, recs[len(recs)-1].Index+1); len(miss) > 0 {
			fmt.Fprintf(stderr, "note: %d records before the last are in no log (the first is record %d, counting from 0): is a shard missing or unfinished?\n", len(miss), miss[0])
		}
	}
	if err := writeAtomic(*output, func(w io.Writer) error {
		if of == dataset.CSV {
			return dataset.WriteCSV(w, recs)
		}
		return dataset.WriteJSONL(w, head, recs)
	}); err != nil {
		return err
	}
	sum := dataset.Summarize(recs)
	fmt.Fprintf(stdout, "merged %d records (%d errors) from %d logs%s into %s\n", sum.Records, sum.Errors, len(logs), note, *output)
	return nil
}

// parseInterleaved parses flags given before, between or after the
// positional arguments, which it returns.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := parse(fs, args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos, args = append(pos, args[0]), args[1:]
	}
}

// writeAtomic writes path through a temporary file renamed over it, so a
// failed write leaves any old file as it was.
func writeAtomic(path string, write func(io.Writer) error) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := write(tmp); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	os.Chmod(tmp.Name(), 0o644)
	return os.Rename(tmp.Name(), path)
}
