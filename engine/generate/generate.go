// Package generate runs ordinary autoregressive generation on a Gemma 3n
// decoder: greedy or sampled (temperature, top-k, top-p, seed), stop tokens,
// streamed token by token and cancellable.
package generate

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"time"

	"verdict/engine/gemma3n"
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
	Media *gemma3n.Media
	// OnPrefill, when set, hears the prompt's prefill: decoder layers done
	// of those it runs, after each.
	OnPrefill func(done, total int)
}

// Token is one generated token as it is emitted.
type Token struct {
	Index int
	ID    int32
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
func Run(ctx context.Context, m *gemma3n.Model, prompt []int32, opt Options, emit func(Token) error) (Result, error) {
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
	maxPos := m.Cfg.MaxPositionEmbeddings
	if maxPos > 0 && len(prompt) > maxPos {
		return res, fmt.Errorf("generate: the prompt has %d tokens, more than the model's max_position_embeddings of %d", len(prompt), maxPos)
	}
	start := time.Now()
	s := newSampler(opt)
	c := m.NewCache()
	c.OnLayer(opt.OnPrefill)
	input := prompt
	for len(res.IDs) < opt.MaxTokens {
		if maxPos > 0 && len(res.IDs) > 0 && c.Len()+len(input) > maxPos {
			break // the next token has no position left
		}
		if err := ctx.Err(); err != nil {
			res.Total = time.Since(start)
			return res, err
		}
		var h []float32
		var err error
		if opt.Media != nil && len(res.IDs) == 0 {
			var e []float32
			if e, err = m.EmbedMultimodal(input, *opt.Media); err == nil {
				h, err = m.ForwardEmbedsLast(c, input, e, 1)
			}
		} else {
			h, err = m.ForwardLast(c, input, 1) // only the last position's state is needed
		}
		if err != nil {
			return res, err
		}
		D := m.Cfg.HiddenSize
		logits := m.Logits(h[len(h)-D:], 1)
		if len(res.IDs) == 0 {
			res.Prefill = time.Since(start)
			c.OnLayer(nil)
		}
		id := s.pick(logits)
		res.IDs = append(res.IDs, id)
		if len(res.IDs) == 1 {
			res.FirstToken = time.Since(start)
		}
		if emit != nil {
			if err := emit(Token{Index: len(res.IDs) - 1, ID: id}); err != nil {
				res.Total = time.Since(start)
				return res, err
			}
		}
		if s.stop[id] {
			res.Stopped = true
			break
		}
		input = []int32{id}
	}
	res.Total = time.Since(start)
	res.Decode = res.Total - res.FirstToken
	return res, nil
}

type sampler struct {
	opt  Options
	rng  *rand.Rand
	stop map[int32]bool
	idx  []int32
}

func newSampler(opt Options) *sampler {
	s := &sampler{opt: opt, rng: rand.New(rand.NewPCG(opt.Seed, opt.Seed^0x9E3779B97F4A7C15)), stop: map[int32]bool{}}
	for _, id := range opt.Stop {
		s.stop[id] = true
	}
	return s
}

// pick chooses the next token from one row of logits: the argmax when
// greedy, else a draw after temperature, top-k and top-p (in that order, as
// transformers applies them).
func (s *sampler) pick(logits []float32) int32 {
	if s.opt.Temperature == 0 {
		var out [1]int32
		native.Argmax(out[:], logits, len(logits))
		return out[0]
	}
	native.Scale(logits, float32(1/s.opt.Temperature))
	// Candidates sorted by logit (ties: lower id first).
	if cap(s.idx) < len(logits) {
		s.idx = make([]int32, len(logits))
	}
	idx := s.idx[:len(logits)]
	for i := range idx {
		idx[i] = int32(i)
	}
	k := len(idx)
	if s.opt.TopK > 0 && s.opt.TopK < k {
		k = s.opt.TopK
	}
	less := func(a, b int32) bool {
		if logits[a] != logits[b] {
			return logits[a] > logits[b]
		}
		return a < b
	}
	partialSort(idx, k, less)
	idx = idx[:k]
	// Softmax over the kept candidates.
	mx := float64(logits[idx[0]])
	p := make([]float64, k)
	var sum float64
	for i, id := range idx {
		p[i] = math.Exp(float64(logits[id]) - mx)
		sum += p[i]
	}
	if tp := s.opt.TopP; tp > 0 && tp < 1 {
		var cum float64
		for i := range p {
			cum += p[i] / sum
			if cum >= tp {
				p, idx = p[:i+1], idx[:i+1]
				break
			}
		}
		sum = 0
		for _, v := range p {
			sum += v
		}
	}
	r := s.rng.Float64() * sum
	for i, v := range p {
		r -= v
		if r < 0 {
			return idx[i]
		}
	}
	return idx[len(idx)-1]
}

// partialSort orders the k best of idx first.
func partialSort(idx []int32, k int, less func(a, b int32) bool) {
	if k == len(idx) {
		sort.Slice(idx, func(i, j int) bool { return less(idx[i], idx[j]) })
		return
	}
	// Select the k best with a quickselect, then sort them.
	lo, hi := 0, len(idx)-1
	for lo < hi {
		p := idx[(lo+hi)/2]
		i, j := lo, hi
		for i <= j {
			for less(idx[i], p) {
				i++
			}
			for less(p, idx[j]) {
				j--
			}
			if i <= j {
				idx[i], idx[j] = idx[j], idx[i]
				i++
				j--
			}
		}
		if k-1 <= j {
			hi = j
		} else if k-1 >= i {
			lo = i
		} else {
			break
		}
	}
	top := idx[:k]
	sort.Slice(top, func(i, j int) bool { return less(top[i], top[j]) })
}
