package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"verdict/app"
	"verdict/engine/bench"
	"verdict/engine/models"
	"verdict/engine/scorer"
	"verdict/engine/session"
)

// benchServeCmd measures serving: score-file's rate on generated support
// tickets at several concurrencies, then a mixed load of scorer and
// generation clients.
func benchServeCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("bench serve", stderr)
	model := fs.String("model", models.Builtin, "the model to serve (builtin, a synthetic preset or a folder)")
	wf := addWeightFlags(fs)
	schemaFlag := fs.String("schema", "ticket", "a built-in schema's name or a schema file")
	layout := fs.String("layout", "", "the prompt's layout in place of the schema's: input-first or fields-first")
	records := fs.Int("records", 1000, "generated support tickets scored at each concurrency")
	conc := fs.String("concurrency", "1,8,32,64", "records in flight, comma-separated")
	clients := fs.Int("clients", 50, "concurrent clients of the mixed load (0: none)")
	dur := fs.Duration("duration", 60*time.Second, "how long the mixed load runs")
	genTokens := fs.Int("gen-tokens", 32, "tokens each generation client asks for")
	threads := fs.Int("threads", 0, "kernel threads (0: one per core)")
	check := fs.Int("check", 24, "first check this many requests' results alone and all at once for the same bits (0: not)")
	asJSON := fs.Bool("json", false, "print one JSON object")
	dump := fs.String("dump-rows", "", "also write each record's token rows (its prefix, and per decision each candidate's tokens) to this JSONL file, for a peer to score the same work")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usageErr("unexpected arguments %v", fs.Args())
	}
	if *records < 1 || *records > 1_000_000 {
		return usageErr("--records must be from 1 to 1000000, got %d", *records)
	}
	if *clients < 0 || *clients > 4096 {
		return usageErr("--clients must be from 0 to 4096, got %d", *clients)
	}
	if *genTokens < 1 || *genTokens > 4096 {
		return usageErr("--gen-tokens must be from 1 to 4096, got %d", *genTokens)
	}
	if *dur <= 0 || *dur > 24*time.Hour {
		return usageErr("--duration must be positive and at most 24h, got %v", *dur)
	}
	levels, err := batchSizes("--concurrency", *conc, 4096)
	if err != nil {
		return err
	}
	raw, err := app.PresetSchema(*schemaFlag)
	if err != nil {
		if raw, err = os.ReadFile(*schemaFlag); err != nil {
			return usageErr("--schema %q is neither a built-in schema nor a readable file: %v", *schemaFlag, err)
		}
	}
	schema, err := scorer.ParseSchema(raw)
	if err != nil {
		return fmt.Errorf("--schema %s: %w", *schemaFlag, err)
	}
	if err := scorer.CheckLayout(*layout); err != nil {
		return usageErr("--%v", err)
	}
	if *layout == scorer.LayoutFieldsFirst {
		schema.Layout = scorer.LayoutFieldsFirst
	}
	session.SetThreads(*threads)
	// One session: on --device, or a replica on each of --devices, the
	// requests spread over them.
	s, err := wf.openSession(ctx, strings.TrimSpace(*model), stderr)
	if err != nil {
		return err
	}
	defer s.Close()
	if *dump != "" {
		if err := dumpRows(*dump, s, schema, bench.Tickets(*records, 1)); err != nil {
			return err
		}
	}
	if *check > 0 {
		n, merged, err := bench.CheckMix(ctx, s, schema, *check)
		if err != nil {
			return fmt.Errorf("the scheduler's check: %w", err)
		}
		fmt.Fprintf(stderr, "the scheduler's check: %d requests (scores, generations and tool choices) alone and all at once, the same bits (up to %d passes a step)\n", n, merged)
	}
	r, err := bench.Serve(ctx, s.Info().Name, s, schema, bench.ServeOptions{
		Records: *records, Concurrency: levels, Clients: *clients, Duration: *dur, GenTokens: *genTokens,
	})
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	fmt.Fprint(stdout, r)
	return nil
}

// dumpRows writes each record's scoring rows to path, a JSON object a line:
// {"prefix": [ids], "rows": [[[ids] per candidate] per decision]}.
func dumpRows(path string, s *session.Session, schema *scorer.Schema, recs []string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for i, r := range recs {
		prefix, rows, err := s.ScoreRows(schema, r)
		if err != nil {
			f.Close()
			return fmt.Errorf("--dump-rows: record %d: %w", i, err)
		}
		if err := enc.Encode(map[string]any{"prefix": prefix, "rows": rows}); err != nil {
			f.Close()
			return err
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
