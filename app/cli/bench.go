package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"verdict/engine/bench"
	"verdict/engine/models"
	"verdict/native"
)

func benchCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
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
