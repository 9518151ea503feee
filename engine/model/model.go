// Package model is what the engine asks of a decoder family (issue 29): the
// interface a loaded model implements, and the value types its callers and
// its implementations share. The scorer, generation, the catalog decoder,
// the scheduler, the prefix cache, the decision head, the session and the
// model loader hold a Model; engine/gemma3n is one implementation, and a
// second family (Gemma 4) is another folder implementing the same
// interface. Like Ollama's model.Model over its ml.Backend, a family is a
// type over the generic backend (verdict/native); unlike Ollama's, the
// forward pass is the family's own from embedding to heads (Verdict's
// results are bit for bit those of transformers, so each family owns its
// arithmetic), and the interface is the work around it: ragged batches,
// paged keys and values, the heads a caller reads, and the limits.
//
// # What the callers use (the survey behind the interface)
//
// Before this package, 40 functions outside engine/gemma3n took or gave a
// *gemma3n.Model, and every consumer named gemma3n's types:
//
//   - scorer: Model (Acquire, NewCache, Need, AddMultimodal, KVPool,
//     Backend, Cfg.HiddenSize, Special), Exec (Keep; SelectLogprobs in its
//     heads), Runner, RunAll, Batch, Cache (Clone, Bind, OnLayer), Ticket,
//     Media, Special, KVBlock.
//   - generate: Model (Need, Acquire, NewCache, AddMultimodal, PLEResident,
//     Cfg's MaxPositionEmbeddings and VocabSize), Exec (Sample, Logits,
//     GreedyLoops, DecodeGreedy), Runner, GreedyLooper, ErrBusy, Batch, Row,
//     Cache (Reserve, Bind, OnLayer), Ticket, Media, MaxStops, GreedyChunk.
//   - catalog: Model (Acquire, NewCache, KVFits, WithKVPositions, CloseView,
//     Backend, Cfg's VocabSize, HiddenSize, MaxPositionEmbeddings), Exec
//     (CatalogHead, LogitsRows, NewLoop, Keep, Kept, Prefill, Upload),
//     Loop, Runner, RunAll, Batch, Cache (Clone, Reserve), KVError,
//     KVBlock, Special.
//   - sched: Model (Acquire, AdmitFits, Admit, Cfg.HiddenSize), Exec
//     (Rows, Run, Forward, GreedyLoops, DecodeGreedy), Batch, Row, Cache,
//     Ticket, KVError, KVBlock, ErrBusy.
//   - prefix: Cache (Fork, Blocks, Len), Batch, RunAll; its tests a Model.
//   - head: Model (Acquire, NewCache, Embed, Weights, Group, Cfg and
//     Special hashed as the model's identity), Batch, Cache.
//   - session: Model (Need, Admit, KVPool, WeightBytes, PLEBytes, Weights,
//     Cfg, Special), GreedyLooper, Batch, Exec, Cache, Media, KVError,
//     Weights and its parsing, the load stages, DefaultKVPositions.
//   - models (the loader): ParseConfig, LoadWith, LoadOptions, Weights,
//     DefaultGroup, the load stages, Media, Special (the audio vocabulary's
//     start), Cfg.VocabSizePerLayer (the GGUF vocabulary check).
//   - prompt: Special (the media tokens a prompt places and refuses).
//   - vision and audio glue: nothing of gemma3n's; their soft tokens reach
//     the decoder as Media, built in engine/models.
//   - bench: Model (costs: WeightBytes, DecodeBytes, ForwardFLOPs,
//     HeadBytes, PackedCache, Weights, Group), Exec (Greedy, DecodeGreedy,
//     Prefill), Batch, Cache, GreedyChunk.
//   - fixture: LoadModel, Model (Forward, Logits, Embed, AddMultimodal,
//     Cfg), Batch, Media, WeightsF32.
//   - convert: ParseConfig and WeightsF32 (the GGUF check loads Gemma 3n).
//   - app: nothing directly (the layering rule); through engine/models'
//     Model it read the embedded *gemma3n.Model's Special and Weights.
//
// # The interface
//
// A Model (model.go) is composed by role:
//
//   - Config and Chat: the limits a caller checks (vocabulary, hidden width,
//     layers, positions) and the chat format (turn markers and media
//     tokens); ConfigText identifies the whole configuration.
//   - Passes: Acquire gives an Exec (exec.go), which runs one Forward over
//     ragged rows of any sequences (Batch, batch.go) and the heads on its
//     outputs (dense logits, chosen rows, the scorer's selected
//     log-probabilities, sampling, greedy, the catalog's head inputs),
//     greedy device loops and the catalog's Loop. A Runner is an Exec or
//     a scheduler's request; GreedyLooper adds the greedy loop.
//   - Media: AddMultimodal merges a prompt's image and audio soft tokens
//     (Media) into a batch's rows; Embed gives token embeddings.
//   - KV (kv.go): a paged pool of KVBlock positions per block, one per
//     attention kind (global, sliding window). NewCache gives a sequence
//     (Cache: fork, clone, reserve, bind), Need/Admit/Ticket promise blocks
//     to a request, KVFits/AdmitFits refuse what can never fit, KVLayout
//     describes the layers that need keys of their own, the window and the
//     bytes per position, WithKVPositions makes a view with a pool of its
//     own.
//   - Costs and weights: the weight format, resident bytes and the
//     arithmetic of a pass, for the benchmarks and the session's info.
//
// What a family does inside (Gemma 3n's AltUp streams, Laurel, per-layer
// inputs, KV-sharing layers, its q4 packing) stays behind the interface;
// the loader (engine/models) is the one place that picks a family and
// calls its loader.
//
// The value types here (Row, Batch, Hook, Media, Special, Runner,
// GreedyLooper, ErrBusy, KVBlock, KVError, Weights, MaxStops, GreedyChunk)
// were gemma3n's; gemma3n imports this package, never the reverse, and
// keeps aliases only for the ones its own API is written in.
//
// After the switch, no function outside engine/gemma3n takes or gives a
// *gemma3n.Model but three that load the Gemma 3n reference models
// (engine/fixture.LoadModel, engine/fixture/testmodel's Load and Tiny: the
// fixtures are Gemma 3n's and its own tests read its config); the loader
// (engine/models) names gemma3n to open it, convert to write its GGUF.
package model

import "verdict/native"

// Model is a loaded decoder of one family on one backend: read-only after
// its load and safe for concurrent passes, each on an Exec of its own with
// sequences (Cache) of its pool.
type Model interface {
	// Config reports the limits callers check.
	Config() Config
	// Chat reports the chat format: turn markers and media tokens.
	Chat() Chat
	// ConfigText is the model's whole configuration as text: what
	// identifies it (a decision head records its hash).
	ConfigText() string
	// Backend reports the backend the model runs on.
	Backend() *native.Backend

	Passes
	KV
	Costs

	// Close releases the model's memory; it must not be used afterwards.
	Close() error
}

// Passes are a model's forward passes and media merging.
type Passes interface {
	// Acquire returns an Exec for the caller's exclusive use; Release gives
	// it back.
	Acquire() (Exec, error)
	// AddMultimodal appends a prompt with media to b as rows of cache c,
	// the last outs wanted: text ids take their token embeddings, the media
	// placeholders md's soft tokens in order, other multimodal control
	// tokens md.Hard's embeddings.
	AddMultimodal(b *Batch, c Cache, ids []int32, md Media, outs int) error
	// Embed returns the input embeddings of ids [len(ids), Hidden] on the
	// host.
	Embed(ids []int32) ([]float32, error)
	// Forward runs ids through the decoder on c (nil: a cache of its own,
	// freed after) and returns the final hidden states of every position
	// [len(ids), Hidden] on the host; hook sees every layer. A convenience
	// for checks and tools.
	Forward(c Cache, ids []int32, hook Hook) ([]float32, error)
	// Logits computes the output logits [n, Vocab] of host hidden states
	// h [n, Hidden].
	Logits(h []float32, n int) ([]float32, error)
	// InputsResident reports whether everything a token's pass reads is on
	// the backend, so that a device loop may feed any token (Exec.NewLoop
	// with no token table, Exec.DecodeGreedy).
	InputsResident() bool
}

// Costs are what the benchmarks and the session report of a model's
// weights and arithmetic.
type Costs interface {
	// Weights reports how the model keeps its large matrices.
	Weights() Weights
	// Group reports the q4 group size (0 for f32 weights).
	Group() int
	// PackedCache reports the packed-weights cache file ("" when none)
	// and whether this load read it from disk rather than building it.
	PackedCache() (path string, fromDisk bool)
	// Params counts the decoder's parameters (for display).
	Params() int64
	// WeightBytes reports the memory the decoder's weights take.
	WeightBytes() int64
	// ResidentBytes reports the device memory of tables the model keeps
	// resident besides its weights (0: none, or the host's backend).
	ResidentBytes() int64
	// DecodeBytes reports the bytes one decode step reads at context
	// length ctx (the new token included).
	DecodeBytes(ctx int) int64
	// ForwardFLOPs reports the floating-point operations of a pass over n
	// tokens after ctx0 cached ones, outputs of them reaching the head;
	// consumers > 0: only the last consumers rows are wanted (0: all).
	ForwardFLOPs(n, ctx0, outputs, consumers int) float64
	// HeadBytes reports the bytes the dense head and the catalog's
	// sparse head read for rows output rows.
	HeadBytes(rows int) (dense, sparse int64)
}

// Config is what callers need of a model's shape: its limits.
type Config struct {
	// Vocab is the output vocabulary: token ids of text rows and logit
	// columns are in [0, Vocab).
	Vocab int
	// Hidden is the width D of embeddings, hidden states, soft tokens and
	// the outputs a head reads.
	Hidden int
	// Layers is the number of decoder layers (a Hook sees Layers+1
	// states: after the embeddings and after each layer).
	Layers int
	// MaxPositions is the most positions a sequence may hold (0: no
	// limit).
	MaxPositions int
}

// Chat is a model's chat format: the markers its prompts are written with
// (control tokens as text) and its media tokens. A turn is TurnStart, the
// role, "\n", its content, TurnEnd, "\n"; the generation prompt is the
// assistant's turn opened, then Answer.
type Chat struct {
	// BOS begins a prompt ("<bos>").
	BOS string
	// TurnStart and TurnEnd open a turn (followed by the role and a
	// newline) and end it ("<start_of_turn>", "<end_of_turn>").
	TurnStart, TurnEnd string
	// User and Assistant are the roles' names ("user", "model").
	User, Assistant string
	// System is the role of a system turn of its own ("system" in Gemma
	// 4). "" when the format has none (Gemma 3n): a system message then
	// starts the first user turn, followed by a blank line.
	System string
	// Answer is what the generation prompt writes after the assistant's
	// turn header ("" in Gemma 3n; Gemma 4's 26B and 31B templates close
	// an empty thought channel there when thinking is off).
	Answer string
	// MediaPad is the text on each side of an image's or audio clip's run
	// of tokens: "\n\n" where the processor writes it (Gemma 3n), "" where
	// it does not (Gemma 4).
	MediaPad string
	// Media are the media tokens and soft-token counts.
	Media Special
}

// Open is the header of a turn of role: TurnStart, the role, a newline.
func (c Chat) Open(role string) string { return c.TurnStart + role + "\n" }

// Close ends a turn: TurnEnd and a newline.
func (c Chat) Close() string { return c.TurnEnd + "\n" }

// Generation is the generation prompt: the assistant's turn opened, then
// Answer.
func (c Chat) Generation() string { return c.Open(c.Assistant) + c.Answer }

// Special are the media token ids of a multimodal model's chat format and
// its soft tokens per image and audio clip (zero when text only): a prompt
// places an image as BOI, VisionTokens × Image, EOI, and audio as BOA,
// AudioTokens × Audio, EOA.
type Special struct {
	BOI, EOI, Image, BOA, EOA, Audio int
	VisionTokens, AudioTokens        int
}
