package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"verdict/app/mcpserver"
	"verdict/engine/models"
	"verdict/engine/session"
)

// mcpStdin is what `verdict mcp` reads its messages from (tests replace it).
var mcpStdin io.Reader = os.Stdin

// mcpCmd is `verdict mcp`: the MCP server of Verdict's tools over stdio.
// The model opens in the background while the client connects; tool calls
// wait for it. It ends when the client closes standard input.
func mcpCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("mcp", stderr)
	model := fs.String("model", models.Builtin, "model folder (or GGUF file), or builtin")
	wf := addWeightFlags(fs)
	fs.Usage = func() { mcpUsage(fs) }
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usageErr("unexpected arguments %v", fs.Args())
	}
	opt, err := wf.options()
	if err != nil {
		return err
	}
	spec := *model
	load := mcpserver.Load(func(ctx context.Context) (*session.Session, error) {
		m, err := openModel(ctx, spec, opt, stderr)
		if err != nil {
			if ctx.Err() == nil {
				fmt.Fprintf(stderr, "verdict mcp: the model did not load: %v\n", err)
			}
			return nil, err
		}
		s, err := session.New(m)
		if err != nil {
			m.Close()
			fmt.Fprintf(stderr, "verdict mcp: the model did not load: %v\n", err)
			return nil, err
		}
		if m.Builtin {
			fmt.Fprintf(stderr, "verdict mcp: model: %s — its answers are noise\n", m.Name)
		}
		return s, nil
	})
	defer load.Close()
	err = mcpserver.New(load.Source()).Run(ctx, mcpserver.Stdio(mcpStdin, stdout))
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return err
}

// mcpUsage is mcp's help: what it serves and how a client starts it.
func mcpUsage(fs *flag.FlagSet) {
	fmt.Fprint(fs.Output(), `Usage: verdict mcp [flags]

Serves Verdict's tools to an MCP (Model Context Protocol) client over stdio:
the client starts this command and exchanges JSON-RPC messages on its
standard input and output (the log goes to standard error).
  score         a Verdict schema, a text and optional images or audio:
                the scorer's result (verdict score's JSON)
  select_tools  a catalog of {name, description}, a request and k: exactly
                k distinct names with their probabilities
  generate      a prompt (and system message): the text and its timings
The model loads in the background; tool calls wait for it. verdict serve
serves the same tools over HTTP at /mcp. See docs/api.md.

Flags:
`)
	fs.PrintDefaults()
}
