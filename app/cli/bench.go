package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"verdict/engine/bench"
	"verdict/engine/models"
	"verdict/native"
)

func benchCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "scorer" {
		return benchScorerCmd(ctx, args[1:], stdout, stderr)
	}
	fs := newFlags("bench", stderr)
	model := fs.String("model", models.Builtin, "model folder, or builtin")
	prompt := fs.Int("prompt-tokens", 512, "prompt length to prefill")
	decode := fs.Int("decode-tokens", 32, "tokens to decode after the prompt")
	threads := fs.Int("threads", 0, "kernel threads (0: one per core)")
	asJSON := fs.Bool("json", false, "print one JSON object")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usageErr("unexpected arguments %v", fs.Args())
	}
	native.SetThreads(*threads)
	m, err := models.Open(*model)
	if err != nil {
		return err
	}
	defer m.Close()
	r, err := bench.Run(ctx, m.Name, m.Model, *prompt, *decode)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	fmt.Fprintf(stdout, "load %.2fs\n%s\n", m.LoadTime.Seconds(), r)
	return nil
}

func benchScorerCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("bench scorer", stderr)
	model := fs.String("model", models.Builtin, "model folder, or builtin")
	prompt := fs.Int("prompt-tokens", 512, "length of the shared prefix")
	fields := fs.Int("fields", 8, "choice fields of 4 candidates each")
	full := fs.Int("full-passes", 0, "candidates to time with their own full forward pass (0: all)")
	sweep := fs.String("sweep", "1,2,4,8,16,32,64", "branch-batch sizes to time")
	threads := fs.Int("threads", 0, "kernel threads (0: one per core)")
	asJSON := fs.Bool("json", false, "print one JSON object")
	if err := parse(fs, args); err != nil {
		return err
	}
	var sizes []int
	for _, s := range strings.Split(*sweep, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 64 {
			return usageErr("--sweep: %q is not a batch size in 1..64", s)
		}
		sizes = append(sizes, n)
	}
	native.SetThreads(*threads)
	m, err := models.Open(*model)
	if err != nil {
		return err
	}
	defer m.Close()
	tok, err := m.Tokenizer()
	if err != nil {
		return err
	}
	r, err := bench.Scorer(ctx, m.Name, m.Model, tok, *prompt, *fields, *full, sizes)
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
