package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"time"
	"unicode/utf8"

	"verdict/engine/catalog"
	"verdict/engine/models"
	"verdict/engine/prompt"
	"verdict/engine/session"
	"verdict/engine/tokenizer"
)

func catalogCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("catalog", stderr)
	model := fs.String("model", models.Builtin, "model folder, or builtin")
	wf := weightFlags{weights: fs.String("weights", string(models.DefaultWeights), weightsHelp), group: new(int),
		device: addDeviceFlag(fs), devices: fs.String("devices", "", devicesHelp), fs: fs}
	catFile := fs.String("catalog", "", `catalog file: a JSON list of {"name", "description"} (or --from-mcp)`)
	fromMCP := fs.String("from-mcp", "", "take the catalog from an MCP server's tools (name and description): run this command line (split as a shell would, with simple quoting) as a server over stdio and list its tools, instead of --catalog")
	k := fs.Int("k", 0, "the number of distinct entries to emit")
	text := fs.String("text", "", "the request")
	promptFile := fs.String("prompt-file", "", "read the request (or, with --raw, the whole prompt) from this file")
	raw := fs.Bool("raw", false, "the text is the complete prompt, special tokens written as text (<bos><start_of_turn>…)")
	checkDense := fs.Bool("check-dense", false, "compute the dense output head too at every step and cross-check it")
	asJSON := fs.Bool("json", false, "print the names, tokens, steps and timing as JSON")
	batch := fs.String("batch", "", `decode many requests: a JSON-lines file of {"text", "k"}`)
	gates := fs.Int("gates", -1, "with --batch: run the decoder's gates over the requests with this many shuffled batches (every way of decoding a request gives its result alone, bit for bit); exit 1 when one fails")
	maxBatch := fs.Int("max-batch", 0, "with --batch: the most requests decoded at once (0: the decoder's default, 32)")
	loop := fs.String("loop", "", "with --batch: decode the requests (up to 64) as one loop of steps on the backend: device (one recorded loop, where the backend records them) or host (the same steps issued from the host)")
	fixture := fs.String("fixture", "", "check the decoder on --device against a reference decode file (testdata/catalog-tiny.json: the built-in model's, f32 weights), and the CPU decoder's names against the device's; exit 1 when a check fails")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *fixture != "" {
		return catalogFixtureCmd(ctx, fs, *fixture, *model, wf, *asJSON, stdout, stderr)
	}
	if *gates >= 0 && *batch == "" {
		return usageErr("--gates needs --batch (the requests to check)")
	}
	if *gates > 100000 {
		return usageErr("--gates %d: at most 100000 shuffled batches", *gates)
	}
	if fs.NArg() != 0 && *fromMCP != "" {
		return usageErr("unexpected arguments %v (quote --from-mcp's command line as one argument: --from-mcp 'verdict mcp')", fs.Args())
	}
	if fs.NArg() != 0 {
		return usageErr("unexpected arguments %v", fs.Args())
	}
	if *catFile == "" && *fromMCP == "" {
		return usageErr("--catalog is required (or --from-mcp)")
	}
	if *catFile != "" && *fromMCP != "" {
		return usageErr("give one of --catalog and --from-mcp, not both")
	}
	// A job is a request; in --batch, one whose line cannot be decoded has
	// err set and becomes an error line of the output.
	type job struct {
		line int
		text string
		k    int
		err  string
	}
	var jobs []job
	if *batch != "" {
		if *text != "" || *promptFile != "" || *k != 0 {
			return usageErr("--batch takes its texts and k from the file: no --text, --prompt-file or --k")
		}
		data, err := readInput(*batch)
		if err != nil {
			return err
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(nil, maxInputFile)
		for line := 1; sc.Scan(); line++ {
			if len(bytes.TrimSpace(sc.Bytes())) == 0 {
				continue
			}
			jobs = append(jobs, job{line: line})
			j := &jobs[len(jobs)-1]
			var in struct {
				Text *string `json:"text"`
				K    *int    `json:"k"`
			}
			dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
			dec.DisallowUnknownFields()
			switch err := dec.Decode(&in); {
			case err != nil:
				j.err = "bad JSON: " + err.Error()
			case in.Text == nil || in.K == nil:
				j.err = `want {"text": …, "k": …}`
			default:
				j.text, j.k = *in.Text, *in.K
				if err := checkText(j.text); err != nil {
					j.err = err.Error()
				}
			}
		}
		if err := sc.Err(); err != nil {
			return fmt.Errorf("%s: %w", *batch, err)
		}
		if len(jobs) == 0 {
			return fmt.Errorf("%s holds no requests", *batch)
		}
	} else {
		if (*text == "") == (*promptFile == "") {
			return usageErr("give exactly one of --text and --prompt-file")
		}
		if *k <= 0 {
			return usageErr("--k must be at least 1, got %d", *k)
		}
		t := *text
		if *promptFile != "" {
			data, err := readInput(*promptFile)
			if err != nil {
				return err
			}
			t = string(data)
		}
		if err := checkText(t); err != nil {
			return usageErr("%v", err)
		}
		jobs = []job{{text: t, k: *k}}
	}
	entries, catName, err := catalogEntries(ctx, *catFile, *fromMCP, stderr)
	if err != nil {
		return err
	}
	m, tok, err := wf.openTok(ctx, *model, stderr)
	if err != nil {
		return err
	}
	defer m.Close()
	if m.Builtin {
		fmt.Fprintf(stderr, "model: %s — its choices are noise\n", m.Name)
	}
	cat, err := catalog.Compile(entries, tok, Grammar(tok))
	if err != nil {
		return fmt.Errorf("%s: %w", catName, err)
	}
	// The requests that can be decoded; in --batch the others are error
	// lines (a single request's error is the command's).
	var reqs []catalog.Request
	var of []int // of[i]: the job of reqs[i]
	bad := 0
	for i := range jobs {
		j := &jobs[i]
		if j.err == "" {
			r, err := catalogRequest(tok, m, cat, j.text, j.k, *raw)
			if err == nil {
				err = catalog.CheckRequest(m.Model, cat, i+1, r)
			}
			if err != nil && *batch == "" {
				return err
			}
			if err != nil {
				j.err = err.Error()
			} else {
				reqs, of = append(reqs, r), append(of, i)
			}
		}
		if j.err != "" {
			bad++
			if *gates >= 0 {
				return fmt.Errorf("%s line %d: %s (the gates take only requests that can be decoded)", *batch, j.line, j.err)
			}
		}
	}
	// errorLines writes the error lines not yet written of the jobs before
	// job n, which has a result (n = len(jobs): the rest).
	next := 0
	errorLines := func(n int) error {
		for ; next < n; next++ {
			if j := jobs[next]; j.err != "" {
				if err := writeJSONLine(stdout, map[string]any{"request": next + 1, "line": j.line, "error": j.err}); err != nil {
					return err
				}
			}
		}
		next++ // job n itself has a result
		return nil
	}
	if bad > 0 {
		fmt.Fprintf(stderr, "verdict catalog: %d of the %d requests of %s cannot be decoded: they are error lines {\"request\", \"line\", \"error\"}\n", bad, len(jobs), *batch)
	}
	if len(reqs) == 0 {
		if err := errorLines(len(jobs)); err != nil {
			return err
		}
		return fmt.Errorf("%s: none of its %d requests can be decoded", *batch, len(jobs))
	}
	if *gates >= 0 {
		// A second grammar for the switching gate: every other entry.
		var half []catalog.Entry
		for i := 0; i < len(entries); i += 2 {
			half = append(half, entries[i])
		}
		other, err := catalog.Compile(half, tok, Grammar(tok))
		if err != nil {
			return fmt.Errorf("%s: half of it: %w", catName, err)
		}
		return catalogGates(ctx, m, cat, other, reqs, *gates, *asJSON, stdout)
	}
	if *maxBatch < 0 || (*maxBatch > 0 && (*batch == "" || *loop != "" || *gates >= 0)) {
		return usageErr("--max-batch %d: want a positive count, with --batch and without --loop or --gates", *maxBatch)
	}
	opt := catalog.Options{CheckDense: *checkDense, MaxBatch: *maxBatch}
	if *batch == "" {
		res, err := catalog.Decode(ctx, m.Model, cat, reqs[0], opt)
		if err != nil {
			return err
		}
		if *checkDense {
			fmt.Fprintf(stderr, "dense head cross-check: %d steps, same winners, largest relative logit gap %.2g (tolerance %g)\n",
				len(res.Steps), res.DenseMaxRel, catalog.DenseTolerance)
		}
		if *asJSON {
			return writeJSON(stdout, catalogJSON(res, tok))
		}
		for _, n := range res.Names {
			fmt.Fprintln(stdout, n)
		}
		tm := catalogTiming(res)
		fmt.Fprintf(stderr, "prompt %d tokens, prefill %.0f ms, %d tokens at %.2f ms a token (head %.3f ms a token over %d legal rows at most)\n",
			res.Prompt, tm.PrefillMS, tm.Tokens, tm.MSPerToken, tm.HeadMSPerToken, maxLegal(res))
		return nil
	}
	var results []catalog.Result
	var stats catalog.Stats
	switch *loop {
	case "":
		if results, stats, err = catalog.DecodeBatch(ctx, m.Model, cat, reqs, opt); err != nil {
			return err
		}
	case "device", "host":
		mode := catalog.DeviceLoop
		if *loop == "host" {
			mode = catalog.HostLoop
		}
		var ls catalog.LoopStats
		if results, ls, err = catalog.DecodeLoop(ctx, m.Model, cat, reqs, mode); err != nil {
			return err
		}
		how := "a backend loop"
		if !ls.Device {
			how = "steps issued from the host"
		}
		fmt.Fprintf(stderr, "loop: %d requests, %d steps as %s: prefill %.1f ms, decode %.1f ms (%.3f ms a step), %.1f ms in all\n",
			len(results), ls.Steps, how, ls.Prefill.Seconds()*1000, ls.Decode.Seconds()*1000, ls.Decode.Seconds()*1000/float64(ls.Steps+1), ls.Total.Seconds()*1000)
		stats.Total = ls.Total
	default:
		return usageErr("--loop %q: want device or host", *loop)
	}
	for i, res := range results {
		if err := errorLines(of[i]); err != nil {
			return err
		}
		if *asJSON {
			out := catalogJSON(res, tok)
			out.Request = of[i] + 1
			if err := writeJSONLine(stdout, out); err != nil {
				return err
			}
			continue
		}
		if err := writeJSONLine(stdout, map[string]any{"request": of[i] + 1, "names": res.Names}); err != nil {
			return err
		}
	}
	if err := errorLines(len(jobs)); err != nil {
		return err
	}
	if *loop != "" {
		return nil
	}
	tokens := 0
	for _, res := range results {
		tokens += len(res.Tokens)
	}
	fmt.Fprintf(stderr, "%d requests in %.2f s (%.1f requests/s), a shared prompt prefix of %d tokens, %d batched steps over %d rows, %d chosen tokens (%d of them fed ahead in forced runs), the sparse head reading at most %d rows a step\n",
		len(results), stats.Total.Seconds(), float64(len(results))/stats.Total.Seconds(), stats.SharedPrefix, stats.Steps, stats.Rows, tokens, stats.Forced, stats.MaxRows)
	return nil
}

// Grammar is the catalog output language over the Gemma tokenizer: entries
// separated by the "\n" token, ended by <end_of_turn>.
func Grammar(tok *tokenizer.Tokenizer) catalog.Grammar {
	sep, _ := tok.Lookup("\n")
	return catalog.Grammar{Sep: sep, SepText: "\n", Stop: tok.EndOfTurn()}
}

// catalogRequest is the request of text for k entries of cat (see
// catalogPrompt), k checked.
func catalogRequest(tok *tokenizer.Tokenizer, m *models.Model, cat *catalog.Catalog, text string, k int, raw bool) (catalog.Request, error) {
	if err := cat.CheckK(k); err != nil {
		return catalog.Request{}, err
	}
	ids, err := catalogPrompt(tok, m, cat, text, k, raw)
	return catalog.Request{Prompt: ids, K: k}, err
}

// catalogPrompt builds a request's prompt ids: the catalog prompt around
// the request, or with raw the text as the whole prompt (special tokens
// written as text become ids; media tokens are refused either way).
func catalogPrompt(tok *tokenizer.Tokenizer, m *models.Model, cat *catalog.Catalog, text string, k int, raw bool) ([]int32, error) {
	if !raw {
		return catalog.Prompt(cat.Entries, k, text, m.Chat()).Encode(tok, m.Chat().Media)
	}
	ids := tok.Encode(text)
	return ids, prompt.CheckMediaIDs(ids, m.Chat().Media, tok)
}

// checkText refuses an empty or non-UTF-8 request.
func checkText(s string) error {
	switch {
	case len(bytes.TrimSpace([]byte(s))) == 0:
		return fmt.Errorf("the request is empty")
	case !utf8.ValidString(s):
		return fmt.Errorf("the request is not valid UTF-8 text")
	}
	return nil
}

type catalogStepJSON struct {
	Node   int32    `json:"node"`
	Legal  []int32  `json:"legal"`
	Chosen int32    `json:"chosen"`
	Margin *float64 `json:"margin"`
}

type catalogTimingJSON struct {
	PromptTokens   int     `json:"prompt_tokens"`
	PrefillMS      float64 `json:"prefill_ms"`
	DecodeMS       float64 `json:"decode_ms"`
	Tokens         int     `json:"tokens"`
	MSPerToken     float64 `json:"ms_per_token"`
	HeadMSPerToken float64 `json:"head_ms_per_token"`
	DenseCheckMS   float64 `json:"dense_check_ms,omitempty"`
}

type catalogOut struct {
	Request int               `json:"request,omitempty"`
	Names   []string          `json:"names"`
	Tokens  []int32           `json:"tokens"`
	Text    string            `json:"text"`
	Steps   []catalogStepJSON `json:"steps"`
	Timing  catalogTimingJSON `json:"timing"`
}

func catalogJSON(res catalog.Result, tok *tokenizer.Tokenizer) catalogOut {
	out := catalogOut{Names: res.Names, Tokens: res.Tokens, Text: tok.Decode(res.Tokens), Timing: catalogTiming(res)}
	for _, s := range res.Steps {
		out.Steps = append(out.Steps, catalogStepJSON{s.Node, s.Legal, s.Chosen, s.Margin})
	}
	return out
}

func catalogTiming(res catalog.Result) catalogTimingJSON {
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	t := catalogTimingJSON{PromptTokens: res.Prompt, PrefillMS: ms(res.Prefill), DecodeMS: ms(res.Decode),
		Tokens: len(res.Tokens), DenseCheckMS: ms(res.Dense)}
	if n := len(res.Tokens); n > 0 {
		t.HeadMSPerToken = ms(res.Head) / float64(n)
	}
	if n := len(res.Tokens) - 1; n > 0 {
		t.MSPerToken = ms(res.Decode) / float64(n)
	}
	return t
}

func maxLegal(res catalog.Result) int {
	n := 0
	for _, s := range res.Steps {
		n = max(n, len(s.Legal))
	}
	return n
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func writeJSONLine(w io.Writer, v any) error { return json.NewEncoder(w).Encode(v) }

// catalogGates runs the decoder's gates and prints each one's count; an
// error (exit 1) when a gate fails.
func catalogGates(ctx context.Context, m *models.Model, cat, other *catalog.Catalog, reqs []catalog.Request, shuffles int,
	asJSON bool, stdout io.Writer) error {
	gs, err := catalog.Gates(ctx, m.Model, cat, reqs, shuffles, 1)
	if err != nil {
		return err
	}
	sw, err := catalog.SwitchGate(ctx, m.Model, cat, other, reqs)
	if err != nil {
		return err
	}
	gs = append(gs, sw)
	return printGates("catalog gates", gs, asJSON, stdout)
}

// catalogFixtureCmd is verdict catalog --fixture: the reference decode
// file's checks on the device's model (f32 weights), with a CPU copy of
// the model for the CPU = device gate.
func catalogFixtureCmd(ctx context.Context, fs *flag.FlagSet, path, model string, wf weightFlags, asJSON bool, stdout, stderr io.Writer) error {
	var bad []string
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "fixture", "model", "device", "json", "weights":
		default:
			bad = append(bad, "--"+f.Name)
		}
	})
	if len(bad) > 0 || fs.NArg() != 0 {
		return usageErr("--fixture takes only --model, --device, --weights f32 and --json, not %v", append(bad, fs.Args()...))
	}
	weightsSet := false
	fs.Visit(func(f *flag.Flag) { weightsSet = weightsSet || f.Name == "weights" })
	if weightsSet && *wf.weights != string(session.WeightsF32) {
		return usageErr("--fixture records f32 decodes: --weights %s cannot match them", *wf.weights)
	}
	*wf.weights = string(session.WeightsF32)
	data, err := readInput(path)
	if err != nil {
		return err
	}
	f, err := catalog.ParseFixture(data)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	m, tok, err := wf.openTok(ctx, model, stderr)
	if err != nil {
		return err
	}
	defer m.Close()
	cpu := m.Model
	if *wf.device != "cpu" {
		c, err := openModel(ctx, model, models.Options{Weights: session.WeightsF32}, stderr)
		if err != nil {
			return fmt.Errorf("the CPU copy: %w", err)
		}
		defer c.Close()
		cpu = c.Model
	}
	gs, err := catalog.CheckFixture(ctx, f, tok, m.Model, cpu)
	if err != nil {
		return err
	}
	return printGates("catalog fixture", gs, asJSON, stdout)
}

// printGates prints each gate's count (a JSON line each with asJSON); an
// error (exit 1) when a case failed.
func printGates(what string, gs []catalog.Gate, asJSON bool, stdout io.Writer) error {
	failed, width := 0, 44
	for _, g := range gs {
		width = max(width, len(g.Name))
	}
	for _, g := range gs {
		failed += g.Failed
		if asJSON {
			if err := writeJSONLine(stdout, map[string]any{"gate": g.Name, "passed": g.Passed, "failed": g.Failed,
				"first_failure": g.First}); err != nil {
				return err
			}
			continue
		}
		line := fmt.Sprintf("%-*s %6d passed %6d failed", width, g.Name, g.Passed, g.Failed)
		if g.First != "" {
			line += "  first: " + g.First
		}
		fmt.Fprintln(stdout, line)
	}
	if failed > 0 {
		return fmt.Errorf("%s: %d cases failed", what, failed)
	}
	return nil
}
