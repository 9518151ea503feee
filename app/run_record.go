// What a run reports: its record, the updates it streams and their parts.

package app

import (
	"encoding/json"

	"verdict/engine/scorer"
)

// RunRequest is one input and schema for a run.
type RunRequest struct {
	Input string `json:"input"`
	// Schema is the schema in the scorer's JSON format (see scorer.ParseSchema).
	Schema     json.RawMessage `json:"schema,omitempty"`
	SchemaName string          `json:"schema_name,omitempty"`
	// Files describe the attached files (their text is already in Input).
	Files []InputFile `json:"files,omitempty"`
	// Media are the ids of the media items (Media.Items) the run takes, in
	// the order the prompt gives them: images, then a video's frames, then
	// the audio.
	Media []string `json:"media,omitempty"`
	// Settings override the saved settings for this run.
	Settings *RunSettings `json:"settings,omitempty"`
}

// RunStarted is what Start returns at once.
type RunStarted struct {
	ID            string `json:"id"`
	StartedMs     int64  `json:"started_ms"` // Unix milliseconds
	Scorer        bool   `json:"scorer"`
	Generator     bool   `json:"generator"`
	Concurrent    bool   `json:"concurrent"`
	Model         string `json:"model"`
	RandomWeights bool   `json:"random_weights"`
}

// FieldRef names a field of a run's schema, in schema order.
type FieldRef struct {
	Name string      `json:"name"`
	Type scorer.Kind `json:"type"`
}

// RunAnnounce is the run:started event: every page showing the app can follow
// a run, whoever started it.
type RunAnnounce struct {
	Run    RunStarted `json:"run"`
	Fields []FieldRef `json:"fields"`
}

// SideTiming is one side's timing breakdown. StartMs is measured from the
// run's start; FirstTokenMs, FirstDecisionMs and TotalMs from the side's
// start; the others are durations.
type SideTiming struct {
	StartMs     float64 `json:"start_ms"`
	InputPrepMs float64 `json:"input_preparation_ms"`
	PrefillMs   float64 `json:"prefill_ms"`
	// PrefillTPS is the prefill's speed over the tokens it computed:
	// PromptTokens less PrefixReused.
	PrefillTPS   float64 `json:"prefill_tokens_per_second"`
	PromptTokens int     `json:"prompt_tokens"`
	// PrefixReused counts the prompt's leading tokens taken from an earlier
	// request's prefix instead of computed (the scorer's json backend).
	PrefixReused    int       `json:"prefix_reused_tokens,omitempty"`
	FirstTokenMs    float64   `json:"first_token_ms,omitempty"`
	FirstDecisionMs float64   `json:"first_decision_ms,omitempty"`
	BatchesMs       []float64 `json:"branch_batches_ms,omitempty"`
	DecodeMs        float64   `json:"decode_ms,omitempty"`
	DecodeTPS       float64   `json:"decode_tokens_per_second,omitempty"`
	OutputTokens    int       `json:"output_tokens,omitempty"`
	TotalMs         float64   `json:"total_ms"`

	// PrefillDone of PrefillLayers decoder layers have run on the prompt
	// (live progress of a long prefill).
	PrefillDone   int `json:"prefill_done,omitempty"`
	PrefillLayers int `json:"prefill_layers,omitempty"`
}

// ScorerSide is the scorer's part of a run.
type ScorerSide struct {
	Status string `json:"status"`
	Error  string `json:"error,omitempty"`
	// Fields are the finished fields: in finishing order while running, in
	// schema order once done.
	Fields            []scorer.FieldResult     `json:"fields"`
	FieldsTotal       int                      `json:"fields_total"`
	Answer            json.RawMessage          `json:"answer,omitempty"`
	RawAnswer         json.RawMessage          `json:"raw_answer,omitempty"` // before a normalisation
	ProbabilitySource string                   `json:"probability_source,omitempty"`
	Calibration       scorer.CalibrationStatus `json:"calibration"`
	Note              string                   `json:"note,omitempty"`
	Decisions         int                      `json:"decisions,omitempty"`
	BranchRows        int                      `json:"branch_rows,omitempty"`
	BranchBatch       int                      `json:"branch_batch,omitempty"`
	CachedSchema      bool                     `json:"cached_schema"`
	Timing            SideTiming               `json:"timing"`
}

// GeneratorSide is the generation's part of a run.
type GeneratorSide struct {
	Status  string     `json:"status"`
	Error   string     `json:"error,omitempty"`
	Text    string     `json:"text"`
	Stopped bool       `json:"stopped"` // ended on a stop token (not the token limit)
	Prompt  string     `json:"prompt_mode"`
	Timing  SideTiming `json:"timing"`
	// Parsed is the JSON object found in Text, when there is one.
	Parsed     json.RawMessage `json:"parsed,omitempty"`
	ParseError string          `json:"parse_error,omitempty"`
}

// InputSummary describes a run's input.
type InputSummary struct {
	Text  string      `json:"text"`
	Chars int         `json:"chars"`
	Files []InputFile `json:"files,omitempty"`
	Media []MediaRef  `json:"media,omitempty"`
}

// RunMedia is a run's media preparation. The vision and audio towers run
// once per run; both sides receive the same soft tokens.
type RunMedia struct {
	Status string `json:"status"` // preparing, done, error or cancelled
	// Done of Total items (images, video frames, the audio clip) have been
	// through their tower; Stage names the one in its tower now.
	Done       int     `json:"done"`
	Total      int     `json:"total"`
	Stage      string  `json:"stage,omitempty"`
	Images     int     `json:"images"` // images and video frames
	Audio      bool    `json:"audio"`
	SoftTokens int     `json:"soft_tokens"`
	TowerMs    float64 `json:"tower_ms,omitempty"`
	Error      string  `json:"error,omitempty"`
	Note       string  `json:"note"`
	// The item in its tower now: its tower is being loaded (Loading) or has
	// done Block of Blocks steps, ItemMs after the item started.
	Loading bool    `json:"loading,omitempty"`
	Block   int     `json:"block,omitempty"`
	Blocks  int     `json:"blocks,omitempty"`
	ItemMs  float64 `json:"item_ms,omitempty"`
	// Fraction of the whole pass's work is done (items weighted by their
	// measured time, steps by their share of an item), with about LeftMs to
	// go for all of it at a smoothed rate (0: not known yet).
	Fraction float64 `json:"fraction"`
	LeftMs   float64 `json:"left_ms,omitempty"`
	// Items are the finished items with their tower time.
	Items []RunMediaItem `json:"items"`
}

// RunMediaItem is one image, video frame or clip's tower pass.
type RunMediaItem struct {
	What string  `json:"what"`
	Ms   float64 `json:"ms"`
	// Cached: its output came from the tower cache (the same input on the
	// same model before).
	Cached bool `json:"cached"`
}

// MediaNote explains the input preparation of a run with media.
const MediaNote = "The vision and audio towers ran once for this run: both sides received the same soft tokens, and each side's input preparation includes its wait for them."

// RunRecord is a run: live while it runs, final in run:done and History.
type RunRecord struct {
	ID            string          `json:"id"`
	StartedMs     int64           `json:"started_ms"`
	Model         string          `json:"model"`
	RandomWeights bool            `json:"random_weights"`
	Input         InputSummary    `json:"input"`
	SchemaName    string          `json:"schema_name,omitempty"`
	Schema        json.RawMessage `json:"schema,omitempty"`
	Settings      RunSettings     `json:"settings"`
	Concurrent    bool            `json:"concurrent"`
	Note          string          `json:"note,omitempty"`
	Media         *RunMedia       `json:"media,omitempty"`
	Scorer        *ScorerSide     `json:"scorer,omitempty"`
	Generator     *GeneratorSide  `json:"generator,omitempty"`
	TotalMs       float64         `json:"total_ms"`
}

// ScorerUpdate is what changed on the scorer side since the last update.
type ScorerUpdate struct {
	Status string               `json:"status"`
	Error  string               `json:"error,omitempty"`
	Fields []scorer.FieldResult `json:"fields,omitempty"` // newly finished
	// Catalog holds the trie-decode steps chosen since the last update.
	Catalog []CatalogLive `json:"catalog,omitempty"`
	Done    int           `json:"done"`
	Total   int           `json:"total"`
	Timing  *SideTiming   `json:"timing,omitempty"`
}

// CatalogLive is one step of a field's trie decode as it happens: the names
// emitted so far and the step's distribution over its legal tokens.
type CatalogLive struct {
	Field string             `json:"field"`
	Names []string           `json:"names"`
	Step  scorer.CatalogStep `json:"step"`
}

// GeneratorUpdate is what changed on the generation side since the last
// update.
type GeneratorUpdate struct {
	Status string      `json:"status"`
	Error  string      `json:"error,omitempty"`
	Delta  string      `json:"delta,omitempty"` // text since the last update
	Tokens int         `json:"tokens"`
	Timing *SideTiming `json:"timing,omitempty"`
}

// RunUpdate is one coalesced run:update event.
type RunUpdate struct {
	ID        string           `json:"id"`
	ElapsedMs float64          `json:"elapsed_ms"`
	Scorer    *ScorerUpdate    `json:"scorer,omitempty"`
	Generator *GeneratorUpdate `json:"generator,omitempty"`
	Media     *RunMedia        `json:"media,omitempty"`
}
