// Package generate runs ordinary autoregressive generation on a Gemma 3n
// decoder: greedy or sampled (temperature, top-k, top-p, seed), stop tokens,
// streamed token by token and cancellable.
package generate

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"time"

	"verdict/engine/model"
	"verdict/native"
)

// Options control one generation.
type Options struct {
	MaxTokens   int     // upper bound on generated tokens (> 0)
	Temperature float64 // 0: greedy
	TopK        int     // 0: off
	TopP        float64 // 0 or 1: off
	Seed        uint64
	Stop        []int32 // generation ends after emitting one of these
	// Media holds the soft tokens of the prompt's image and audio
	// placeholders (nil: a text-only prompt).
	Media *model.Media
	// OnPrefill, when set, hears the prompt's prefill: decoder layers done
	// of those it runs, after each.
	OnPrefill func(done, total int)
	// Ticket, when set, is the request's admission (Model.Admit of Need):
	// the sequence's blocks come out of it instead of a reservation of its
	// own.
	Ticket model.Ticket
	// Logprobs gives every token its log-probability and, when TopLogprobs
	// (0..MaxTopLogprobs) is positive, that many most probable alternatives
	// (see Logprobs). The head's logits are read back for it; the tokens
	// chosen are the same as without (greedy runs step by step then, not in
	// device loops).
	Logprobs    bool
	TopLogprobs int
}

// Need is the key/value blocks a generation of prompt tokens under opt can
// take (what Run reserves): the prompt and its longest answer.
func Need(m model.Model, prompt int, opt Options) [2]int {
	return m.Need(prompt + answerBound(m, prompt, opt))
}

// answerBound is the most tokens a generation can add after prompt tokens:
// MaxTokens, or fewer where the model's positions end.
func answerBound(m model.Model, prompt int, opt Options) int {
	answer := opt.MaxTokens
	if maxPos := m.Config().MaxPositions; maxPos > 0 {
		answer = min(answer, maxPos-prompt+1)
	}
	return answer
}

// Token is one generated token as it is emitted.
type Token struct {
	Index int
	ID    int32
	// Logprobs are the token's log-probabilities (Options.Logprobs; nil
	// without).
	Logprobs *Logprobs
}

// Result summarises a finished generation.
type Result struct {
	IDs        []int32
	Stopped    bool // ended on a stop token
	PromptLen  int
	Prefill    time.Duration
	FirstToken time.Duration // from the start to the first token
	Decode     time.Duration // after the first token
	Total      time.Duration
}

// PrefillTokensPerSec is the prompt's processing rate.
func (r Result) PrefillTokensPerSec() float64 { return rate(r.PromptLen, r.Prefill) }

// DecodeTokensPerSec is the rate of the tokens after the first.
func (r Result) DecodeTokensPerSec() float64 { return rate(len(r.IDs)-1, r.Decode) }

func rate(n int, d time.Duration) float64 {
	if n <= 0 || d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// Run generates from prompt, calling emit for every token as soon as it is
// chosen. It stops at MaxTokens, on a stop token, when the sequence fills
// the model's max_position_embeddings, when emit returns an error, or when
// ctx is done (returning ctx.Err() with what was generated so far). A prompt
// longer than max_position_embeddings is refused.
func Run(ctx context.Context, m model.Model, prompt []int32, opt Options, emit func(Token) error) (Result, error) {
	x, err := m.Acquire()
	if err != nil {
		return Result{PromptLen: len(prompt)}, err
	}
	defer x.Release()
	return RunOn(ctx, x, m, prompt, opt, emit)
}

// RunOn is Run with its forward passes on r (an Exec of the caller's, or a
// scheduler's request): the same tokens whatever r merges them with.
// Greedy device loops run where r is a GreedyLooper that is not busy.
func RunOn(ctx context.Context, r model.Runner, m model.Model, prompt []int32, opt Options, emit func(Token) error) (Result, error) {
	res := Result{PromptLen: len(prompt)}
	if len(prompt) == 0 {
		return res, fmt.Errorf("generate: empty prompt")
	}
	if opt.MaxTokens <= 0 {
		return res, fmt.Errorf("generate: max tokens must be positive, got %d", opt.MaxTokens)
	}
	if opt.Temperature < 0 || math.IsNaN(opt.Temperature) {
		return res, fmt.Errorf("generate: temperature must be >= 0, got %v", opt.Temperature)
	}
	if opt.TopP < 0 || opt.TopP > 1 {
		return res, fmt.Errorf("generate: top-p must be in [0, 1], got %v", opt.TopP)
	}
	if opt.TopK < 0 {
		return res, fmt.Errorf("generate: top-k must be >= 0, got %d", opt.TopK)
	}
	if opt.TopLogprobs < 0 || opt.TopLogprobs > MaxTopLogprobs {
		return res, fmt.Errorf("generate: top logprobs must be 0..%d, got %d", MaxTopLogprobs, opt.TopLogprobs)
	}
	maxPos := m.Config().MaxPositions
	if maxPos > 0 && len(prompt) > maxPos {
		return res, model.TooLong("generate: the prompt has %d tokens, more than the model's max_position_embeddings of %d", len(prompt), maxPos)
	}
	start := time.Now()
	s := newSampler(opt)
	c := m.NewCache()
	defer c.Free()
	// Admission: the blocks of the whole answer are promised up front, so
	// the sequence never runs out of them halfway.
	if opt.Ticket != nil {
		c.Bind(opt.Ticket)
	} else if err := c.Reserve(len(prompt) + answerBound(m, len(prompt), opt)); err != nil {
		return res, fmt.Errorf("generate: %w", err)
	}
	x, _ := r.(model.GreedyLooper) // device loops: an Exec, or a request running alone
	c.OnLayer(opt.OnPrefill)
	var b model.Batch
	input := prompt
	// take records a chosen token and streams it; it reports whether
	// generation ends here (a stop token) and emit's error.
	var lp *logprober
	if opt.Logprobs {
		lp = newLogprober(m.Config().Vocab, opt.TopLogprobs)
	}
	take := func(id int32) (bool, error) {
		res.IDs = append(res.IDs, id)
		if len(res.IDs) == 1 {
			res.FirstToken = time.Since(start)
		}
		if emit != nil {
			tk := Token{Index: len(res.IDs) - 1, ID: id}
			if lp != nil {
				l := lp.of(id)
				tk.Logprobs = &l
			}
			if err := emit(tk); err != nil {
				res.Total = time.Since(start)
				return true, err
			}
		}
		if s.stop[id] {
			res.Stopped = true
		}
		return res.Stopped, nil
	}
	loops := x != nil && lp == nil && opt.Temperature == 0 && len(opt.Stop) <= model.MaxStops && !loopsOff &&
		(x.GreedyLoops() || loopsAlways && m.InputsResident())
	busy := false
	for len(res.IDs) < opt.MaxTokens {
		if loops && !busy && len(res.IDs) > 0 && opt.MaxTokens-len(res.IDs) >= loopSteps && (maxPos <= 0 || c.Len()+loopSteps <= maxPos) {
			// Greedy tokens a chunk at a time on the device, no host work
			// between them.
			if err := ctx.Err(); err != nil {
				res.Total = time.Since(start)
				return res, err
			}
			toks, err := x.DecodeGreedy([]model.Cache{c}, input, loopSteps, opt.Stop)
			if errors.Is(err, model.ErrBusy) {
				busy = true // others share the runner: this token in a pass merged with theirs
				continue
			}
			if err != nil {
				return res, err
			}
			stop := false
			for _, id := range toks[0] {
				if stop, err = take(id); err != nil {
					return res, err
				}
			}
			if stop {
				break
			}
			s.one[0] = res.IDs[len(res.IDs)-1]
			input = s.one[:]
			continue
		}
		if maxPos > 0 && len(res.IDs) > 0 && c.Len()+len(input) > maxPos {
			break // the next token has no position left
		}
		if err := ctx.Err(); err != nil {
			res.Total = time.Since(start)
			return res, err
		}
		b.Reset()
		if opt.Media != nil && len(res.IDs) == 0 {
			if err := m.AddMultimodal(&b, c, input, *opt.Media, 1); err != nil {
				return res, err
			}
		} else {
			b.Add(c, input, 1) // only the last position's state is needed
		}
		for len(b.Rows) > r.Rows() { // a long prompt: its leading rows first, cut where the model allows
			hi, err := model.NextCut(r, b.Rows, 0, len(b.Rows))
			if err != nil {
				return res, err
			}
			head := model.Batch{Rows: b.Rows[:hi], Embeds: b.Embeds}
			if err := r.Run(&head, nil); err != nil {
				return res, err
			}
			b.Rows = b.Rows[hi:]
		}
		var id int32
		draw := s.draw()
		first := len(res.IDs) == 0
		err := r.Run(&b, func(x model.Exec, h native.Tensor) error {
			if first {
				res.Prefill = time.Since(start)
			}
			if lp != nil {
				// The head computed twice: once read back, once sampled
				// from as without logprobs.
				if err := lp.read(x, h.Slice(h.Rows()-1, h.Rows())); err != nil {
					return err
				}
			}
			var err error
			id, err = x.Sample(h, draw)
			return err
		})
		if err != nil {
			return res, err
		}
		if first {
			c.OnLayer(nil)
		}
		if stop, err := take(id); err != nil || stop {
			if err != nil {
				return res, err
			}
			break
		}
		s.one[0] = id
		input = s.one[:]
		busy = false
	}
	res.Total = time.Since(start)
	res.Decode = res.Total - res.FirstToken
	return res, nil
}

// loopSteps is the greedy tokens one device loop decodes; fewer left are
// decoded a token a pass.
const loopSteps = model.GreedyChunk

// loopsOff (VERDICT_GEN_LOOP=0) decodes every token a pass, for
// comparisons; loopsAlways (tests) takes the loop path on any backend.
var (
	loopsOff    = os.Getenv("VERDICT_GEN_LOOP") == "0"
	loopsAlways = false
)

// sampler holds a run's sampling settings and random stream.
type sampler struct {
	opt  Options
	rng  *rand.Rand
	stop map[int32]bool
	one  [1]int32
}

func newSampler(opt Options) *sampler {
	s := &sampler{opt: opt, rng: rand.New(rand.NewPCG(opt.Seed, opt.Seed^0x9E3779B97F4A7C15)), stop: map[int32]bool{}}
	for _, id := range opt.Stop {
		s.stop[id] = true
	}
	return s
}

// draw returns the next token's sampling request: the argmax when greedy,
// else temperature, top-k and top-p (in that order, as transformers applies
// them) with the next uniform draw of the run's seeded stream.
func (s *sampler) draw() native.Sampling {
	if s.opt.Temperature == 0 {
		return native.Sampling{}
	}
	return native.Sampling{InvTemp: float32(1 / s.opt.Temperature), TopK: s.opt.TopK, TopP: s.opt.TopP, U: s.rng.Float64()}
}
