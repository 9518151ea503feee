// Package session is the engine as the app sees it: an opened model with its
// tokenizer and scorer behind a narrow set of methods — open and close, what
// the model is, media soft tokens, generation from an input (the prompt built
// and checked against the token limit here), and scoring.
package session

import (
	"context"
	"errors"
	"fmt"
	"image"
	"sync/atomic"
	"time"

	"verdict/engine/gemma3n"
	"verdict/engine/generate"
	"verdict/engine/model"
	"verdict/engine/models"
	"verdict/engine/prefix"
	"verdict/engine/prompt"
	"verdict/engine/sched"
	"verdict/engine/scorer"
	"verdict/engine/tokenizer"
)

// Session is an opened model, its tokenizer, its scorer and the scheduler
// that runs them. It is safe for concurrent use: generations and scorer
// requests each have their own caches, and their forward passes join one
// batch a step (sched), each with the results it would have alone.
type Session struct {
	m     *models.Model
	tok   *tokenizer.Tokenizer
	sc    *scorer.Scorer
	sched *sched.Scheduler
	info  Info
	// vision and audio are set once the tower has encoded an input.
	vision, audio atomic.Bool
	// set, when not nil, are the replicas of a session joined over several
	// devices (Join): the methods that run the model run on one of them
	// (sched is nil; m, tok, sc and info are the first replica's).
	set *replicaSet
	// fault, when set (tests), fails passes (see runner).
	fault atomic.Pointer[fault]
}

// Info describes the opened model.
type Info struct {
	Name string
	Path string
	// Family is the decoder family (models.FamilyGemma3n,
	// models.FamilyGemma4; "" unknown).
	Family    string
	Builtin   bool // the built-in model: random weights
	Synthetic bool // a full-size shape with random weights
	Params    int64
	Layers    int
	Hidden    int
	Vocab     int
	LoadTime  time.Duration
	// Vision and Audio say whether the checkpoint has those towers.
	Vision, Audio bool
	// ImageTokens and AudioTokens are the soft tokens of one image and of
	// one audio clip (0 when the config does not say).
	ImageTokens, AudioTokens int
	// Resident is the memory the loaded model holds on its backend.
	Resident Resident
}

// Resident is what an opened model keeps in its backend's memory.
type Resident struct {
	Weights     model.Weights // q4 or f32
	WeightBytes int64         // the decoder's weights (model.Costs.WeightBytes)
	// PLEBytes is the per-layer embedding table made resident on the
	// device (0: it stays on the host; model.Costs.ResidentBytes).
	PLEBytes int64
	// KVPositions and KVBytes are the key/value pool: positions of each
	// attention kind and the bytes reserved for them (the CPU backend
	// commits pages only when written).
	KVPositions int
	KVBytes     int64
	// Vision and Audio say whether that tower is loaded (towers load on
	// their first input); set by Towers, not by Info.
	Vision, Audio bool
}

// TowerProgress hears a tower's work: its load, then blocks done of total.
type TowerProgress = models.TowerProgress

// Open opens spec (see models.OpenContext) with its tokenizer and scorer;
// ctx stops the load.
func Open(ctx context.Context, spec string, opt models.Options) (*Session, error) {
	m, err := models.OpenContext(ctx, spec, opt)
	if err != nil {
		return nil, err
	}
	s, err := New(m)
	if err != nil {
		m.Close()
		return nil, err
	}
	return s, nil
}

// New makes a session of an opened model, which it then owns (Close closes
// it). A model without a tokenizer is refused, with the reason, and left
// open.
func New(m *models.Model) (*Session, error) {
	if m == nil || m.Model == nil {
		return nil, errors.New("session: no model")
	}
	tok, err := m.Tokenizer()
	if err != nil {
		return nil, err
	}
	img, aud := m.Inputs()
	cfg, sp := m.Config(), m.Chat().Media
	info := Info{
		Name: m.Name, Path: m.Path, Family: models.FamilyOf(m.Model), Builtin: m.Builtin, Synthetic: m.Synthetic,
		Params: m.Params(), Layers: cfg.Layers, Hidden: cfg.Hidden, Vocab: cfg.Vocab,
		LoadTime: m.LoadTime, Vision: img, Audio: aud,
		ImageTokens: sp.VisionTokens, AudioTokens: sp.AudioTokens,
		Resident: Resident{Weights: m.Weights(), WeightBytes: m.WeightBytes(), PLEBytes: m.ResidentBytes()},
	}
	info.Resident.KVPositions, info.Resident.KVBytes = m.KVPool()
	if info.Resident.Weights == "" {
		info.Resident.Weights = model.WeightsF32
	}
	sc := scorer.New(m.Model, tok)
	sch, err := sched.New(m.Model, sched.Options{Reclaim: sc.DropKept})
	if err != nil {
		return nil, err
	}
	return &Session{m: m, tok: tok, sc: sc, sched: sch, info: info}, nil
}

// Close stops the scheduler and releases the model.
func (s *Session) Close() error {
	if s.set != nil {
		return s.set.close()
	}
	s.sched.Close()
	return s.m.Close()
}

// PrefixStats reports the use of the scorer's prefixes kept across
// requests.
func (s *Session) PrefixStats() prefix.Stats {
	if s.set != nil {
		return s.set.prefixStats()
	}
	return s.sc.PrefixStats()
}

// SchedStats reports the scheduler's work so far.
func (s *Session) SchedStats() sched.Stats {
	if s.set != nil {
		return s.set.schedStats()
	}
	return s.sched.Stats()
}

// WithPriority marks ctx's requests as of priority p (sched.Interactive
// unless marked: the app's runs and API calls; sched.Bulk for datasets).
func WithPriority(ctx context.Context, p sched.Priority) context.Context {
	return context.WithValue(ctx, priorityKey{}, p)
}

type priorityKey struct{}

func priority(ctx context.Context) sched.Priority {
	if p, ok := ctx.Value(priorityKey{}).(sched.Priority); ok {
		return p
	}
	return sched.Interactive
}

// Info describes the model.
func (s *Session) Info() Info { return s.info }

// Identity is the model's name, content hash and weight format (see
// models.Model.Identity).
func (s *Session) Identity() (models.Identity, error) { return s.m.Identity() }

// Towers reports whether the vision and the audio tower are loaded: a tower
// loads with the first input it encodes.
func (s *Session) Towers() (vision, audio bool) {
	if s.set != nil {
		return s.set.towers()
	}
	return s.vision.Load(), s.audio.Load()
}

// Tokenizer is the model's tokenizer.
func (s *Session) Tokenizer() *tokenizer.Tokenizer { return s.tok }

// ImageTokens runs the vision tower on one image (see models.Model.ImageTokens).
func (s *Session) ImageTokens(ctx context.Context, img image.Image, progress TowerProgress) ([]float32, bool, error) {
	if s.set != nil {
		return s.set.imageTokens(ctx, img, progress)
	}
	soft, cached, err := s.m.ImageTokens(ctx, img, progress)
	if err == nil {
		s.vision.Store(true)
	}
	return soft, cached, err
}

// AudioTokens runs the audio tower on 16 kHz mono samples (see models.Model.AudioTokens).
func (s *Session) AudioTokens(ctx context.Context, pcm []float32, progress TowerProgress) ([]float32, bool, error) {
	if s.set != nil {
		return s.set.audioTokens(ctx, pcm, progress)
	}
	soft, cached, err := s.m.AudioTokens(ctx, pcm, progress)
	if err == nil {
		s.audio.Store(true)
	}
	return soft, cached, err
}

// HardEmbed is a token's embedding row, for the multimodal merge.
func (s *Session) HardEmbed(id int32) ([]float32, error) {
	if s.set != nil {
		return s.set.hardEmbed(id)
	}
	return s.m.HardEmbed(id)
}

// Score runs the scorer on input (see scorer.Scorer.Score) as a request of
// the scheduler: admitted once the pool holds its branches, its passes
// merged with other requests'. A Runner or Admit in opt is replaced.
func (s *Session) Score(ctx context.Context, schema *scorer.Schema, input string, opt scorer.Options) (*scorer.Result, error) {
	if s.set != nil {
		return s.set.score(ctx, schema, input, opt)
	}
	opt.Media = s.checkedMedia(opt.Media)
	rq := s.sched.Begin(ctx, priority(ctx))
	defer rq.End()
	opt.Runner, opt.Admit = s.runner(rq), rq.Admit
	return s.sc.Score(ctx, schema, input, opt)
}

// ScoreRows are the token rows scoring input against schema reads (see
// scorer.Scorer.Rows): the shared prefix, and per decision each
// candidate's tokens after it.
func (s *Session) ScoreRows(schema *scorer.Schema, input string) (prefix []int32, rows [][][]int32, err error) {
	return s.sc.Rows(schema, input)
}

// CalibrateReport fits and reports a calibration (see scorer.Scorer.CalibrateReport).
func (s *Session) CalibrateReport(ctx context.Context, schema *scorer.Schema, examples []scorer.Example, opt scorer.Options) (*scorer.Calibration, *scorer.CalibrationReport, error) {
	if s.set != nil {
		return s.set.calibrate(ctx, schema, examples, opt)
	}
	return s.sc.CalibrateReport(ctx, schema, examples, opt)
}

// Prompt kinds of a generation.
const (
	// PromptChat is a one-turn chat: the system message (if any), the
	// media placeholders, then the input.
	PromptChat = "chat"
	// PromptSchema is the scorer's shared prefix for the schema: the model
	// is asked to answer it as JSON.
	PromptSchema = "schema"
	// PromptRaw is the input as the whole prompt (see RawPrompt): no chat
	// format, control tokens written as text are control tokens.
	PromptRaw = "raw"
)

// MaxInputTokens is the most prompt tokens a generation takes (the
// scorer's limit).
const MaxInputTokens = scorer.MaxInputTokens

// Sampling are a generation's settings.
type Sampling struct {
	MaxTokens   int     // > 0
	Temperature float64 // 0: greedy
	TopK        int     // 0: off
	TopP        float64 // 0 or 1: off
	Seed        uint64
	// Logprobs gives each Token its log-probabilities, with TopLogprobs
	// (0..20) alternatives (see generate.Options): the same tokens as
	// without.
	Logprobs    bool
	TopLogprobs int
}

// Request is one generation.
type Request struct {
	Kind   string // PromptChat, PromptSchema or PromptRaw
	Input  string // the user's text (PromptRaw: the whole prompt)
	System string // PromptChat: an optional system message
	// History are PromptChat's earlier turns, before the user's Input (see
	// Turn): user and model turns in alternation, from a user turn to a
	// model turn.
	History []Turn
	Schema  *scorer.Schema // PromptSchema: the schema asked
	// Media are the prepared soft tokens and captions (nil: text only).
	Media    *scorer.Media
	Sampling Sampling
	// OnPrompt, when set, hears the prompt's token count once it is built
	// and within the limit, before the prefill.
	OnPrompt func(tokens int)
	// OnPrefill, when set, hears the prefill: decoder layers done of
	// those it runs, after each.
	OnPrefill func(done, total int)
}

// Token is one generated token: its id and the text it adds. Piece may be
// empty (a stop token, or bytes of a character not yet complete); the
// pieces of a generation and Result.Tail together are the decode of its
// ids without the stop tokens.
type Token struct {
	Index int
	ID    int32
	Piece string
	Stop  bool // a stop token: generation ends after it
	// Logprobs are its log-probabilities (Sampling.Logprobs; else nil).
	Logprobs *Logprobs
}

// Result summarises a generation.
type Result struct {
	IDs          []int32
	Stopped      bool // ended on a stop token
	PromptTokens int
	Prefill      time.Duration
	FirstToken   time.Duration // from the start of the prefill to the first token
	Decode       time.Duration // after the first token
	Total        time.Duration
	// Tail is the text held back by the decoder at the end (bytes of an
	// incomplete character), written after the last piece.
	Tail string
}

// PrefillTokensPerSec is the prompt's processing rate.
func (r Result) PrefillTokensPerSec() float64 { return rate(r.PromptTokens, r.Prefill) }

// DecodeTokensPerSec is the rate of the tokens after the first.
func (r Result) DecodeTokensPerSec() float64 { return rate(len(r.IDs)-1, r.Decode) }

func rate(n int, d time.Duration) float64 {
	if n <= 0 || d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// Encode builds req's prompt and tokenizes it: its ids, refused when the
// input spells a media token or when there are more than MaxInputTokens.
func (s *Session) Encode(req Request) ([]int32, error) {
	var ids []int32
	var err error
	switch req.Kind {
	case PromptChat:
		if len(req.History) > 0 {
			ids, err = s.encodeTurns(req)
			break
		}
		if req.Media != nil {
			ids, err = s.encodeMedia(ChatPrompt(s.m.Chat(), req.Media, req.System, req.Input), req.Media)
			break
		}
		// Text only: the model's chat template (its text trimmed), with
		// media tokens spelled in the text refused.
		ids, err = ChatTurnsPrompt(s.m.Chat(), nil, req.System, []Turn{{Role: "user", Content: req.Input}}).Encode(s.tok, s.m.Chat().Media)
	case PromptSchema:
		if req.Schema == nil {
			return nil, errors.New("session: a schema prompt needs a schema")
		}
		var captions []string
		audio := false
		if req.Media != nil {
			captions, audio = req.Media.Captions, req.Media.Audio != nil
		}
		ids, err = s.encodeMedia(req.Schema.MediaPrompt(req.Input, captions, audio, s.m.Chat()), req.Media)
	case PromptRaw:
		if req.Media != nil {
			return nil, errors.New("session: a raw prompt takes no media")
		}
		ids, err = s.RawPrompt(req.Input)
	default:
		return nil, fmt.Errorf("session: unknown prompt kind %q (chat, schema or raw)", req.Kind)
	}
	if err != nil {
		return nil, err
	}
	if len(ids) > MaxInputTokens {
		return nil, &scorer.LimitError{What: "input tokens", Value: len(ids), Max: MaxInputTokens}
	}
	return ids, nil
}

// Generate builds req's prompt (Encode) and generates from it, calling emit
// for every token as soon as it is chosen. It stops at Sampling.MaxTokens,
// after a stop token (end of turn, end of text), when emit returns an error,
// or when ctx is done (returning ctx's error with what was generated so far).
func (s *Session) Generate(ctx context.Context, req Request, emit func(Token) error) (Result, error) {
	if s.set != nil {
		return s.set.generate(ctx, req, emit)
	}
	ids, err := s.Encode(req)
	if err != nil {
		return Result{}, err
	}
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	if req.OnPrompt != nil {
		req.OnPrompt(len(ids))
	}
	var md *model.Media
	if req.Media != nil {
		md = &req.Media.Media
	}
	sm := req.Sampling
	st := s.newStreamer()
	opt := generate.Options{
		MaxTokens: sm.MaxTokens, Temperature: sm.Temperature, TopK: sm.TopK, TopP: sm.TopP, Seed: sm.Seed,
		Stop: s.tok.StopIDs(), Media: md, OnPrefill: req.OnPrefill,
		Logprobs: sm.Logprobs, TopLogprobs: sm.TopLogprobs,
	}
	rq := s.sched.Begin(ctx, priority(ctx))
	defer rq.End()
	tk, err := rq.Admit(generate.Need(s.m.Model, len(ids), opt))
	if err != nil {
		return Result{PromptTokens: len(ids)}, fmt.Errorf("generate: %w", err)
	}
	defer tk.Release()
	opt.Ticket = tk
	res, err := generate.RunOn(ctx, s.runner(rq), s.m.Model, ids, opt, func(t generate.Token) error {
		tk := st.token(t.Index, t.ID)
		tk.Logprobs = t.Logprobs
		if emit != nil {
			return emit(tk)
		}
		return nil
	})
	return Result{
		IDs: res.IDs, Stopped: res.Stopped, PromptTokens: res.PromptLen,
		Prefill: res.Prefill, FirstToken: res.FirstToken, Decode: res.Decode, Total: res.Total,
		Tail: st.dec.Flush(),
	}, err
}

// streamer turns generated ids into Tokens: stop tokens flagged and left
// out of the text, the others decoded into whole characters as they come.
type streamer struct {
	dec   *tokenizer.StreamDecoder
	stops map[int32]bool
}

func (s *Session) newStreamer() *streamer {
	st := &streamer{dec: s.tok.NewStreamDecoder(), stops: map[int32]bool{}}
	for _, id := range s.tok.StopIDs() {
		st.stops[id] = true
	}
	return st
}

func (st *streamer) token(index int, id int32) Token {
	tk := Token{Index: index, ID: id, Stop: st.stops[id]}
	if !tk.Stop {
		tk.Piece = st.dec.Add(id)
	}
	return tk
}

// ChatPrompt is a one-turn chat prompt for generation in chat format ch:
// the system message (if any: a turn of its own, or the start of the user's
// turn when the format has no system turn), the media placeholders (each
// after its caption, when it has one), then the text, and the generation
// prompt. Only the chat markup gives control tokens: special tokens in the
// system message, captions and text stay text.
func ChatPrompt(ch model.Chat, media *scorer.Media, system, text string) prompt.Prompt {
	pr := chatStart(ch, system)
	if media != nil {
		for i, c := range media.Captions {
			if c != "" {
				pr.User(c)
			}
			pr.ChatImage(ch, fmt.Sprintf("image %d", i+1))
		}
		if media.Audio != nil {
			pr.ChatAudio(ch, "audio")
		}
	}
	pr.User(text)
	pr.Text(ch.Close() + ch.Generation())
	return pr
}

// SchemaPrompt is the schema's shared prefix for input with captions (one
// per image) and an audio clip, in the model's chat format: its text with
// media runs written as <image 1>, <audio>, and its token count. Each run
// takes the chat format's fixed count: a model whose counts vary by item
// (Gemma 4) needs SchemaPromptSized.
func (s *Session) SchemaPrompt(schema *scorer.Schema, input string, captions []string, audio bool) (text string, tokens int, err error) {
	return s.SchemaPromptSized(schema, input, captions, audio, nil, 0)
}

// SchemaPromptSized is SchemaPrompt with each item's soft-token count
// (ImageTokenCount, AudioTokenCount): imageTokens[i] for image i and
// audioTokens for the clip. nil and 0 leave the chat format's fixed counts
// (Gemma 3n's); a model without them (Gemma 4) refuses media given no
// counts.
func (s *Session) SchemaPromptSized(schema *scorer.Schema, input string, captions []string, audio bool, imageTokens []int, audioTokens int) (text string, tokens int, err error) {
	ch := s.m.Chat()
	sp := ch.Media
	pr := schema.MediaPrompt(input, captions, audio, ch)
	var clip []int
	switch {
	case audio && audioTokens > 0:
		clip = []int{audioTokens}
	case audio && sp.AudioTokens == 0:
		return "", 0, fmt.Errorf("session: %s's clips vary in soft tokens: the prompt needs the clip's count", s.info.Name)
	}
	if imageTokens == nil && len(captions) > 0 && sp.VisionTokens == 0 {
		return "", 0, fmt.Errorf("session: %s's images vary in soft tokens: the prompt needs each image's count", s.info.Name)
	}
	if pr, err = pr.Sized(sp, imageTokens, clip); err != nil {
		return "", 0, fmt.Errorf("session: %w", err)
	}
	ids, err := pr.Encode(s.tok, sp)
	if err != nil {
		return "", 0, err
	}
	return pr.String(), len(ids), nil
}

// SchemaPromptText is SchemaPrompt's text with no model loaded: in Gemma
// 3n's chat format (the built-in model's), not a loaded model's, with
// imageTokens and audioTokens the soft tokens of one image and one clip.
// With a model, SchemaPromptSized writes that model's format.
func SchemaPromptText(schema *scorer.Schema, input string, captions []string, audio bool, imageTokens, audioTokens int) string {
	ch := gemma3n.ChatFormat(model.Special{VisionTokens: imageTokens, AudioTokens: audioTokens})
	return schema.MediaPrompt(input, captions, audio, ch).String()
}
