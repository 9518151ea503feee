package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"verdict/app"
	"verdict/app/inputs"
	"verdict/engine/catalog"
	"verdict/engine/prompt"
	"verdict/engine/scorer"
	"verdict/engine/session"
	"verdict/media"
)

// Tool names.
const (
	ToolScore    = "score"
	ToolSelect   = "select_tools"
	ToolGenerate = "generate"
)

type tools struct{ src Source }

// take lends the model for one call, its errors worded for a tool result.
func (t *tools) take(ctx context.Context) (Model, context.Context, func(), error) {
	m, cctx, release, err := t.src(ctx)
	if err != nil {
		return Model{}, nil, nil, callError(err)
	}
	return m, cctx, release, nil
}

// callError words an engine or app error for a tool result.
func callError(err error) error {
	var nf *session.NeverFitsError
	switch {
	case errors.Is(err, session.ErrQueueFull):
		return errors.New("the model's queue is full: retry in a moment")
	case errors.As(err, &nf):
		return fmt.Errorf("the request is too large for the model's key/value pool: %v", nf)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("the call was stopped (cancelled by the client, the server shutting down or the model replaced): %w", err)
	}
	return err
}

// ---- score

func scoreTool() *mcp.Tool {
	return &mcp.Tool{
		Name:  ToolScore,
		Title: "Score a schema of decisions",
		Description: "Answers a Verdict schema of decisions about an input text (and images or audio) with calibrated " +
			"probabilities: one shared prompt, every allowed value of every field scored by its likelihood, so each field " +
			"gets its winner and full distribution. Returns the JSON of `verdict score`: \"answer\" (the schema's JSON " +
			"answer), \"fields\" (per field its winner, distributions, confidence), \"timings\".",
		InputSchema:  json.RawMessage(scoreInputSchema),
		OutputSchema: json.RawMessage(scoreOutputSchema),
		Annotations:  &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: ptr(false)},
	}
}

const scoreInputSchema = `{
  "type": "object",
  "additionalProperties": false,
  "required": ["schema"],
  "properties": {
    "schema": {
      "type": "object",
      "description": "The Verdict schema (the JSON of a verdict score --schema file): {\"instructions\"?: string, \"input_label\"?: string, \"fields\": [{\"name\", \"question\", \"type\": \"choice\" (\"options\": {name: description}) | \"independent\" (\"labels\": {name: description}) | \"bool\" | \"score\" (\"levels\": {\"1\": description, ...}) | \"catalog\" (\"entries\": {name: description}, \"k\")}]}. Example: {\"fields\": [{\"name\": \"urgent\", \"question\": \"Is this urgent?\", \"type\": \"bool\"}, {\"name\": \"team\", \"question\": \"Which team?\", \"type\": \"choice\", \"options\": {\"billing\": \"payments\", \"tech\": \"bugs\"}}]}"
    },
    "text": {"type": "string", "description": "The input text to decide about (at most 1 MiB). Required unless images or audio are given."},
    "images": {
      "type": "array", "maxItems": 8,
      "items": {"type": "string"},
      "description": "Images (PNG, JPEG, GIF, WebP, BMP), each as base64 or a data: URL (data:image/png;base64,...). At most 8."
    },
    "audio": {"type": "string", "description": "One audio clip (WAV, MP3, FLAC, Ogg Vorbis; at most 30 s) as base64 or a data: URL."},
    "backend": {"type": "string", "enum": ["json", "cached", "catalog"], "default": "json", "description": "json: candidate likelihoods of complete JSON values; cached: single-token answer codes; catalog: choice fields decoded through their option tries."},
    "normalize": {"type": "string", "enum": ["none", "contextual", "pmi"], "default": "none", "description": "Correct the distributions: none, contextual (divide by the prior on content-free inputs) or pmi."},
    "temperature": {"type": "number", "exclusiveMinimum": 0, "maximum": 100, "default": 1, "description": "Divides the log-likelihoods before the softmax."}
  }
}`

const scoreOutputSchema = `{
  "type": "object",
  "required": ["model", "backend", "answer", "fields"],
  "properties": {
    "model": {"type": "string", "description": "The model that scored."},
    "random_weights": {"type": "boolean", "description": "True for a model with random weights (the built-in one): its numbers are noise."},
    "backend": {"type": "string"},
    "answer": {"type": "object", "description": "The schema's JSON answer: each field's winner (catalog fields: their names)."},
    "fields": {"type": "array", "items": {"type": "object"}, "description": "Per field: winner, p_true, labels or expected_level by type; confidence, allowed_token_mass, decisions with every candidate's probability and log-likelihood; catalog fields their names, steps and path_probability."},
    "probability_source": {"type": "string"},
    "prompt_tokens": {"type": "integer"},
    "timings": {"type": "object"}
  }
}`

type scoreInput struct {
	Schema      json.RawMessage `json:"schema"`
	Text        string          `json:"text,omitempty"`
	Images      []string        `json:"images,omitempty"`
	Audio       string          `json:"audio,omitempty"`
	Backend     string          `json:"backend,omitempty"`
	Normalize   string          `json:"normalize,omitempty"`
	Temperature *float64        `json:"temperature,omitempty"`
}

// ScoreOutput is score's result: `verdict score`'s JSON.
type ScoreOutput struct {
	Model         string `json:"model"`
	RandomWeights bool   `json:"random_weights,omitempty"`
	Backend       string `json:"backend"`
	*scorer.Result
}

func (t *tools) score(ctx context.Context, _ *mcp.CallToolRequest, in scoreInput) (*mcp.CallToolResult, *ScoreOutput, error) {
	schema, err := scorer.ParseSchema(in.Schema)
	if err != nil {
		if strings.HasPrefix(err.Error(), "schema") {
			return nil, nil, fmt.Errorf("argument %v", err) // argument schema: field "a": ...
		}
		return nil, nil, fmt.Errorf("argument schema: %v", err)
	}
	if strings.TrimSpace(in.Text) == "" && len(in.Images) == 0 && in.Audio == "" {
		return nil, nil, errors.New("the input is empty: give \"text\", or media (\"images\", \"audio\")")
	}
	if len(in.Text) > app.MaxInputBytes {
		return nil, nil, fmt.Errorf("argument \"text\": %d bytes, over the limit of %d", len(in.Text), app.MaxInputBytes)
	}
	set := app.DefaultPreferences().Run
	if in.Temperature != nil {
		set.Scorer.Temperature = *in.Temperature
	}
	set.Scorer.Backend, set.Scorer.Normalize = in.Backend, in.Normalize
	if in.Backend == scorer.BackendHead {
		return nil, nil, errors.New("argument \"backend\": head needs a trained head file: use json, cached or catalog")
	}
	if err := set.Validate(); err != nil {
		return nil, nil, settingError(err)
	}
	opt := scorer.Options{Backend: in.Backend, Normalize: in.Normalize, BranchBatch: set.Scorer.BranchBatch, Temperature: set.Scorer.Temperature}
	md, err := decodeMedia(in.Images, in.Audio)
	if err != nil {
		return nil, nil, err
	}
	m, ctx, release, err := t.take(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer release()
	if md != nil {
		if err := canTake(m, md); err != nil {
			return nil, nil, err
		}
		opt.Media = func() (*scorer.Media, error) {
			p, err := m.prepare(ctx, md)
			if err != nil {
				return nil, err
			}
			return &p.Media, nil
		}
	}
	res, err := m.Session.Score(ctx, schema, in.Text, opt)
	if err != nil {
		return nil, nil, callError(err)
	}
	backend := opt.Backend
	if backend == "" {
		backend = scorer.BackendJSON
	}
	return nil, &ScoreOutput{Model: m.Name, RandomWeights: m.RandomWeights, Backend: backend, Result: res}, nil
}

// settingError names the argument an app.SettingsError is about
// (scorer.temperature → "temperature").
func settingError(err error) error {
	var st *app.SettingsError
	if errors.As(err, &st) {
		return fmt.Errorf("argument %q: %s", st.Setting[strings.IndexByte(st.Setting, '.')+1:], st.Msg)
	}
	return err
}

func (m Model) prepare(ctx context.Context, in *media.Input) (*inputs.Prepared, error) {
	if m.Prepare != nil {
		return m.Prepare(ctx, in)
	}
	return inputs.PrepareContext(ctx, m.Session, in, nil)
}

// canTake checks that the model has the towers in's media need.
func canTake(m Model, in *media.Input) error {
	info := m.Session.Info()
	_, _, sound := in.Sound()
	switch {
	case len(in.Images) > 0 && !info.Vision:
		return fmt.Errorf("%s has no vision tower: it cannot take images", m.Name)
	case sound && !info.Audio:
		return fmt.Errorf("%s has no audio tower: it cannot take audio", m.Name)
	}
	return nil
}

// ---- select_tools

func selectTool() *mcp.Tool {
	return &mcp.Tool{
		Name:  ToolSelect,
		Title: "Select k tools from a catalog",
		Description: "Picks exactly k distinct entries of a catalog (tools, say) that best serve a request, in one " +
			"constrained decode: the model can only emit names of the catalog, each at most once. Returns the names in " +
			"order with each pick's probability and distribution over the entries, and every decode step's distribution " +
			"over its legal tokens.",
		InputSchema: json.RawMessage(selectInputSchema),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: ptr(false)},
	}
}

const selectInputSchema = `{
  "type": "object",
  "additionalProperties": false,
  "required": ["catalog", "request", "k"],
  "properties": {
    "catalog": {
      "type": "array", "minItems": 1, "maxItems": 4096,
      "description": "The entries to choose from: {\"name\", \"description\"} objects with distinct names (other keys, such as an MCP tool's inputSchema, are ignored).",
      "items": {
        "type": "object",
        "required": ["name"],
        "properties": {
          "name": {"type": "string", "minLength": 1},
          "description": {"type": "string"}
        }
      }
    },
    "request": {"type": "string", "minLength": 1, "description": "What the entries are for: the user's request."},
    "k": {"type": "integer", "minimum": 1, "description": "How many distinct entries to pick (at most the catalog's size)."}
  }
}`

type selectInput struct {
	Catalog []catalog.Entry `json:"catalog"`
	Request string          `json:"request"`
	K       int             `json:"k"`
}

// SelectOutput is select_tools' result.
type SelectOutput struct {
	Model         string `json:"model" jsonschema:"the model that decoded"`
	RandomWeights bool   `json:"random_weights,omitempty" jsonschema:"true for a model with random weights: its choices are noise"`
	// Names are the k distinct entries in the order decoded.
	Names []string `json:"names" jsonschema:"the k distinct entry names, in the order decoded"`
	Picks []Pick   `json:"picks" jsonschema:"each pick with its probability and its distribution over the entries"`
	// PathProbability is the product of every chosen token's probability.
	PathProbability float64      `json:"path_probability" jsonschema:"the probability of the whole answer: the product of the picks' probabilities"`
	Steps           []SelectStep `json:"steps" jsonschema:"every decode step: the legal tokens with their probabilities, most probable first"`
	PromptTokens    int          `json:"prompt_tokens"`
	Timings         SelectTiming `json:"timings"`
}

// Pick is one entry of the answer.
type Pick struct {
	Name string `json:"name"`
	// Probability is the decode's probability of this name here, given the
	// picks before it: the product of its tokens' probabilities, the
	// separator (or the end) after it included.
	Probability float64 `json:"probability" jsonschema:"the probability of this name at this place given the picks before it"`
	// Distribution partitions the pick's probability mass over the entries
	// still open: each token the decode did not take leads to the entries
	// below it (one group when they share it), with its probability.
	Distribution []Alternative `json:"distribution" jsonschema:"the entries this pick could have been, with their probabilities (entries that share the token the decode left form one group), most probable first"`
}

// Alternative is a group of entries with its probability.
type Alternative struct {
	Names       []string `json:"names"`
	Probability float64  `json:"probability"`
}

// SelectStep is one decode step.
type SelectStep struct {
	Pick   int                `json:"pick" jsonschema:"the pick (0-based) the step belongs to"`
	Chosen string             `json:"chosen" jsonschema:"the chosen token's text"`
	Tokens []scorer.TokenProb `json:"tokens" jsonschema:"the legal tokens with their probabilities, most probable first"`
}

// SelectTiming is a decode's time.
type SelectTiming struct {
	PrefillMs  float64 `json:"prefill_ms"`
	DecodeMs   float64 `json:"decode_ms"`
	Tokens     int     `json:"tokens"`
	MsPerToken float64 `json:"ms_per_token"`
}

func (t *tools) selectTools(ctx context.Context, _ *mcp.CallToolRequest, in selectInput) (*mcp.CallToolResult, *SelectOutput, error) {
	entries, err := checkCatalog(in.Catalog)
	if err != nil {
		return nil, nil, err
	}
	switch {
	case strings.TrimSpace(in.Request) == "":
		return nil, nil, errors.New("argument \"request\": the request is empty")
	case len(in.Request) > app.MaxInputBytes:
		return nil, nil, fmt.Errorf("argument \"request\": %d bytes, over the limit of %d", len(in.Request), app.MaxInputBytes)
	case in.K < 1 || in.K > len(entries):
		return nil, nil, fmt.Errorf("argument \"k\": %v", &catalog.KError{K: in.K, N: len(entries)})
	}
	m, ctx, release, err := t.take(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer release()
	sel, err := m.Session.Select(ctx, entries, in.Request, in.K)
	if err != nil {
		var ke *catalog.KError
		var mt *prompt.MediaTokenError
		switch {
		case errors.Is(err, catalog.ErrInvalid):
			return nil, nil, fmt.Errorf("argument \"catalog\": %v", err)
		case errors.As(err, &ke):
			return nil, nil, fmt.Errorf("argument \"k\": %v", err)
		case errors.As(err, &mt):
			return nil, nil, fmt.Errorf("argument \"request\" or \"catalog\": %v", err)
		}
		return nil, nil, callError(err)
	}
	out := selection(m, sel)
	return nil, out, nil
}

// checkCatalog bounds the catalog (catalog.CheckBounds) and copies its names and descriptions
// (token ids are the tokenizer's, never the caller's).
func checkCatalog(in []catalog.Entry) ([]catalog.Entry, error) {
	if len(in) == 0 {
		return nil, errors.New("argument \"catalog\": the catalog has no entries")
	}
	if err := catalog.CheckBounds(in); err != nil {
		return nil, fmt.Errorf("argument \"catalog\": %v", err)
	}
	out := make([]catalog.Entry, len(in))
	for i, e := range in {
		out[i] = catalog.Entry{Name: e.Name, Description: e.Description}
	}
	return out, nil
}

// selection is the output of a decode: the picks, each with its
// probability and distribution, and the steps.
func selection(m Model, sel session.Selection) *SelectOutput {
	cat, r := sel.Catalog, sel.Result
	tok := m.Session.Tokenizer()
	out := &SelectOutput{Model: m.Name, RandomWeights: m.RandomWeights, Names: r.Names, Picks: []Pick{}, Steps: []SelectStep{},
		PathProbability: 1, PromptTokens: r.Prompt}
	if out.Names == nil {
		out.Names = []string{}
	}
	taken := make([]bool, len(cat.Entries)) // entries of earlier picks
	var cur []int32                         // the current pick's name tokens so far
	prefix := 1.0                           // the current pick's probability so far
	var alts []Alternative
	for _, st := range r.Steps {
		p := st.Probs()
		chosen := slices.Index(st.Legal, st.Chosen)
		pick := len(out.Picks)
		ss := SelectStep{Pick: pick, Chosen: tok.Decode([]int32{st.Chosen}), Tokens: make([]scorer.TokenProb, len(st.Legal))}
		for j, id := range st.Legal {
			ss.Tokens[j] = scorer.TokenProb{ID: id, Text: tok.Decode([]int32{id}), P: p[j]}
			if j == chosen {
				continue
			}
			// The entries this token leads to: a control token ends the
			// name spelled so far; a name token continues the names that
			// start with cur and it.
			var names []string
			for e, en := range cat.Entries {
				if taken[e] {
					continue
				}
				ids := en.TokenIDs
				control := id == cat.Grammar.Sep || id == cat.Grammar.Stop
				if control && slices.Equal(ids, cur) || !control && len(ids) > len(cur) && slices.Equal(ids[:len(cur)], cur) && ids[len(cur)] == id {
					names = append(names, en.Name)
				}
			}
			if len(names) > 0 {
				alts = append(alts, Alternative{Names: names, Probability: prefix * p[j]})
			}
		}
		sort.SliceStable(ss.Tokens, func(a, b int) bool { return ss.Tokens[a].P > ss.Tokens[b].P })
		out.Steps = append(out.Steps, ss)
		if chosen >= 0 {
			prefix *= p[chosen]
		}
		if st.Entry < 0 {
			cur = append(cur, st.Chosen)
			continue
		}
		// The step ended a name: the pick is complete.
		name := cat.Entries[st.Entry].Name
		alts = append(alts, Alternative{Names: []string{name}, Probability: prefix})
		sort.SliceStable(alts, func(a, b int) bool { return alts[a].Probability > alts[b].Probability })
		out.Picks = append(out.Picks, Pick{Name: name, Probability: prefix, Distribution: alts})
		out.PathProbability *= prefix
		taken[st.Entry] = true
		cur, prefix, alts = nil, 1, nil
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	out.Timings = SelectTiming{PrefillMs: ms(r.Prefill), DecodeMs: ms(r.Decode), Tokens: len(r.Tokens)}
	if n := len(r.Tokens) - 1; n > 0 {
		out.Timings.MsPerToken = math.Round(ms(r.Decode)/float64(n)*1000) / 1000
	}
	return out
}

// ---- generate

func generateTool() *mcp.Tool {
	return &mcp.Tool{
		Name:  ToolGenerate,
		Title: "Generate text",
		Description: "Generates text with the local model from a one-turn chat (a prompt and an optional system message). " +
			"Returns the text, why it ended (stop: the model ended its turn; length: max_tokens reached), the token counts and the timings.",
		InputSchema: json.RawMessage(generateInputSchema),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: ptr(false)},
	}
}

const generateInputSchema = `{
  "type": "object",
  "additionalProperties": false,
  "required": ["prompt"],
  "properties": {
    "prompt": {"type": "string", "minLength": 1, "description": "The user's message."},
    "system": {"type": "string", "description": "An optional system message."},
    "max_tokens": {"type": "integer", "minimum": 1, "maximum": 4096, "default": 96, "description": "The most tokens to generate."},
    "temperature": {"type": "number", "minimum": 0, "maximum": 5, "default": 0, "description": "Sampling temperature; 0 is greedy."},
    "top_k": {"type": "integer", "minimum": 0, "maximum": 1000, "default": 64, "description": "Sample among the k most probable tokens (0: off)."},
    "top_p": {"type": "number", "minimum": 0, "maximum": 1, "default": 0.95, "description": "Nucleus sampling mass."},
    "seed": {"type": "integer", "minimum": 0, "default": 0, "description": "Picks the sampling sequence: the same seed gives the same text."}
  }
}`

type generateInput struct {
	Prompt      string   `json:"prompt"`
	System      string   `json:"system,omitempty"`
	MaxTokens   *int     `json:"max_tokens,omitempty"`
	Temperature *float64 `json:"temperature,omitempty"`
	TopK        *int     `json:"top_k,omitempty"`
	TopP        *float64 `json:"top_p,omitempty"`
	Seed        *uint64  `json:"seed,omitempty"`
}

// GenerateOutput is generate's result.
type GenerateOutput struct {
	Model         string         `json:"model"`
	RandomWeights bool           `json:"random_weights,omitempty"`
	Text          string         `json:"text" jsonschema:"the generated text"`
	FinishReason  string         `json:"finish_reason" jsonschema:"stop (the model ended its turn) or length (max_tokens reached)"`
	Tokens        int            `json:"tokens" jsonschema:"tokens generated, the stop token included"`
	PromptTokens  int            `json:"prompt_tokens"`
	Timings       GenerateTiming `json:"timings"`
}

// GenerateTiming is a generation's times.
type GenerateTiming struct {
	PrefillMs           float64 `json:"prefill_ms"`
	FirstTokenMs        float64 `json:"first_token_ms"`
	DecodeMs            float64 `json:"decode_ms"`
	TotalMs             float64 `json:"total_ms"`
	PrefillTokensPerSec float64 `json:"prefill_tokens_per_sec"`
	DecodeTokensPerSec  float64 `json:"decode_tokens_per_sec"`
}

func (t *tools) generate(ctx context.Context, _ *mcp.CallToolRequest, in generateInput) (*mcp.CallToolResult, *GenerateOutput, error) {
	if strings.TrimSpace(in.Prompt) == "" {
		return nil, nil, errors.New("argument \"prompt\": the prompt is empty")
	}
	if n := len(in.Prompt) + len(in.System); n > app.MaxInputBytes {
		return nil, nil, fmt.Errorf("the prompt and system message are %d bytes, over the limit of %d", n, app.MaxInputBytes)
	}
	set := app.DefaultPreferences().Run
	g := &set.Generation
	g.Override(in.MaxTokens, in.Temperature, in.TopK, in.TopP, in.Seed)
	if err := set.Validate(); err != nil {
		return nil, nil, settingError(err)
	}
	m, ctx, release, err := t.take(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer release()
	req := session.Request{Kind: session.PromptChat, Input: in.Prompt, System: in.System,
		Sampling: g.Sampling()}
	var text strings.Builder
	res, err := m.Session.Generate(ctx, req, func(tk session.Token) error {
		text.WriteString(tk.Piece)
		return nil
	})
	if err != nil {
		var mt *prompt.MediaTokenError
		var le *scorer.LimitError
		if errors.As(err, &mt) || errors.As(err, &le) {
			return nil, nil, fmt.Errorf("argument \"prompt\": %v", err)
		}
		return nil, nil, callError(err)
	}
	text.WriteString(res.Tail)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	out := &GenerateOutput{Model: m.Name, RandomWeights: m.RandomWeights, Text: text.String(), FinishReason: "length",
		Tokens: len(res.IDs), PromptTokens: res.PromptTokens, Timings: GenerateTiming{
			PrefillMs: ms(res.Prefill), FirstTokenMs: ms(res.FirstToken), DecodeMs: ms(res.Decode), TotalMs: ms(res.Total),
			PrefillTokensPerSec: res.PrefillTokensPerSec(), DecodeTokensPerSec: res.DecodeTokensPerSec()}}
	if res.Stopped {
		out.FinishReason = "stop"
	}
	return nil, out, nil
}

func ptr[T any](v T) *T { return &v }
