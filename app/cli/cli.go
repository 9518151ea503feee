// Package cli is Verdict's headless command line: verify a reference fixture,
// generate text, run benchmarks. Every command works without a display.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"

	"verdict/app/inputs"
	"verdict/engine/models"
	"verdict/engine/safefile"
)

// Command is one subcommand.
type Command struct {
	Name    string
	Summary string
	Run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// Commands lists the subcommands in the order usage shows them.
func Commands() []Command {
	return []Command{
		{"verify-fixture", "check the engine against a reference fixture (folder or .tar.gz)", verifyFixture},
		{"verify-gguf", "compare GGUF files' logits with the checkpoint they were converted from", verifyGGUFCmd},
		{"score", "score a schema of decisions on an input: full distributions as JSON", scoreCmd},
		{"score-file", "score every record of a JSONL or CSV file into a resumable result log (--shard I/N)", scoreFileCmd},
		{"merge", "merge the result logs of shards in input order (JSONL or CSV)", mergeCmd},
		{"calibrate", "fit scoring temperatures on labelled examples", calibrateCmd},
		{"train-head", "train a decision head (--backend head) on labelled examples", trainHeadCmd},
		{"generate", "generate text from a prompt, streamed", generateCmd},
		{"pull", "download a model from Hugging Face into the Hub cache (resumable, checked)", pullCmd},
		{"catalog", "emit exactly k distinct entries of a catalog for a request (trie-constrained decoding)", catalogCmd},
		{"bench", "measure prefill and decode speed", benchCmd},
		{"window", "open the desktop window (what verdict does with no command)", windowCmd},
		{"serve", "serve the app's user interface to a browser on localhost", serveCmd},
		{"mcp", "serve score, select_tools and generate as MCP tools over stdio (Model Context Protocol)", mcpCmd},
	}
}

// ErrUsage marks a command-line mistake (exit status 2).
var ErrUsage = errors.New("usage")

// Main runs the subcommand named by args[0] and returns the exit status.
func Main(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range Commands() {
		if c.Name == args[0] {
			ctx, cancel := context.WithCancel(context.Background())
			sig := make(chan os.Signal, 2)
			signal.Notify(sig, os.Interrupt)
			done := make(chan struct{})
			go interrupts(sig, done, cancel, stderr, os.Exit)
			err := c.Run(ctx, args[1:], stdout, stderr)
			signal.Stop(sig)
			close(done)
			interrupted := ctx.Err() != nil
			cancel()
			switch {
			case err == nil:
				return 0
			case interrupted && errors.Is(err, context.Canceled):
				fmt.Fprintf(stderr, "verdict %s: stopped\n", c.Name)
				return 130
			case errors.Is(err, flag.ErrHelp):
				return 0
			case errors.Is(err, ErrUsage):
				fmt.Fprintf(stderr, "verdict %s: %v\n", c.Name, err)
				return 2
			case errors.Is(err, errChecksFailed):
				return 1
			default:
				fmt.Fprintf(stderr, "verdict %s: %v\n", c.Name, err)
				return 1
			}
		}
	}
	fmt.Fprintf(stderr, "verdict: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "Usage: verdict <command> [flags]\n\nCommands:")
	for _, c := range Commands() {
		fmt.Fprintf(w, "  %-16s %s\n", c.Name, c.Summary)
	}
	fmt.Fprintln(w, "\nRun 'verdict <command> -h' for a command's flags.")
}

// maxInputFile bounds the files the commands read: schemas, inputs,
// examples, catalogs, prompts, batches.
const maxInputFile = 64 << 20

// readInput reads a regular file of at most maxInputFile bytes, or standard
// input for "-". Devices, FIFOs and sockets are refused by name.
func readInput(path string) ([]byte, error) {
	if path == "-" {
		return safefile.ReadAll(os.Stdin, "standard input", maxInputFile)
	}
	return safefile.ReadFile(path, maxInputFile)
}

// newFlags returns a flag set that reports errors instead of exiting.
func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("verdict "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", ErrUsage, err)
	}
	return nil
}

func usageErr(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrUsage, fmt.Sprintf(format, a...))
}

// mediaFlags are the media inputs of score and generate.
type mediaFlags struct {
	images       stringList
	audio, video *string
}

func addMediaFlags(fs *flag.FlagSet) *mediaFlags {
	m := &mediaFlags{}
	fs.Var(&m.images, "image", "an image file (PNG, JPEG, GIF, WebP, BMP); repeat for more, at most 8")
	m.audio = fs.String("audio", "", "an audio file (WAV, MP3, FLAC, OGG), at most 30 s")
	m.video = fs.String("video", "", "a video file (through ffmpeg): 1 frame per second, at most 32, and its soundtrack")
	return m
}

func (m *mediaFlags) any() bool { return len(m.images) > 0 || *m.audio != "" || *m.video != "" }

// prepare decodes the media files and runs the model's towers on them,
// stopped by ctx, with a progress bar on stderr when it is a terminal.
func (m *mediaFlags) prepare(ctx context.Context, mdl *models.Model, stderr io.Writer) (*inputs.Prepared, error) {
	in, err := inputs.Files(ctx, m.images, *m.audio, *m.video)
	if err != nil {
		return nil, err
	}
	b := newBar(stderr)
	defer b.clear()
	return inputs.PrepareContext(ctx, mdl, in, towerProgress(b))
}

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }
