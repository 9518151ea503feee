package generate

import (
	"context"
	"fmt"
	"math"

	"verdict/engine/model"
	"verdict/native"
)

// MaxTopLogprobs bounds the alternatives a token's Logprobs lists.
const MaxTopLogprobs = 20

// Alt is one token id with its log-probability.
type Alt struct {
	ID      int32
	Logprob float64
}

// Logprobs are one position's log-probabilities under the model: the
// log-softmax of its soft-capped logits at temperature 1, whatever the
// sampling settings, of the token at that position (Logprob) and of the
// most probable ids (Top, most probable first, ties by lower id).
type Logprobs struct {
	Logprob float64
	Top     []Alt
}

// logprober reads a position's logits from the output head and computes
// its log-softmax on the host, in float64.
type logprober struct {
	top    int
	logits []float32
	lse    float64
}

func newLogprober(vocab, top int) *logprober {
	return &logprober{top: top, logits: make([]float32, vocab)}
}

// read computes the logits of the one row h [1, D] on x and their
// log-sum-exp.
func (p *logprober) read(x model.Exec, h native.Tensor) error {
	if err := x.Logits(p.logits, h); err != nil {
		return err
	}
	mx := math.Inf(-1)
	for _, v := range p.logits {
		mx = max(mx, float64(v))
	}
	var sum float64
	for _, v := range p.logits {
		sum += math.Exp(float64(v) - mx)
	}
	p.lse = mx + math.Log(sum)
	return nil
}

// of gives id's log-probability and the top alternatives of the row read
// last.
func (p *logprober) of(id int32) Logprobs {
	out := Logprobs{Logprob: float64(p.logits[id]) - p.lse}
	if p.top <= 0 {
		return out
	}
	// The top ids by logit, kept sorted in a short list.
	top := make([]Alt, 0, p.top+1)
	for i, v := range p.logits {
		lp := float64(v) - p.lse
		if len(top) == p.top && lp <= top[len(top)-1].Logprob {
			continue
		}
		j := len(top)
		for j > 0 && top[j-1].Logprob < lp {
			j--
		}
		top = append(top, Alt{})
		copy(top[j+1:], top[j:])
		top[j] = Alt{ID: int32(i), Logprob: lp}
		if len(top) > p.top {
			top = top[:p.top]
		}
	}
	out.Top = top
	return out
}

// PromptLogprobs runs prompt on r in chunks of r.Rows() and gives, for
// every token after the first, its log-probability given the tokens before
// it with the top most probable alternatives (0..MaxTopLogprobs): out[i]
// is prompt[i+1]'s. The key/value blocks come out of tk when set (an
// admission of m.Need(len(prompt))), else out of a reservation of its own.
func PromptLogprobs(ctx context.Context, r model.Runner, m model.Model, prompt []int32, top int, tk model.Ticket) ([]Logprobs, error) {
	if len(prompt) == 0 {
		return nil, fmt.Errorf("generate: empty prompt")
	}
	if top < 0 || top > MaxTopLogprobs {
		return nil, fmt.Errorf("generate: top logprobs must be 0..%d, got %d", MaxTopLogprobs, top)
	}
	if maxPos := m.Config().MaxPositions; maxPos > 0 && len(prompt) > maxPos {
		return nil, model.TooLong("generate: the prompt has %d tokens, more than the model's max_position_embeddings of %d", len(prompt), maxPos)
	}
	c := m.NewCache()
	defer c.Free()
	if tk != nil {
		c.Bind(tk)
	} else if err := c.Reserve(len(prompt)); err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	lp := newLogprober(m.Config().Vocab, top)
	out := make([]Logprobs, len(prompt)-1)
	var b model.Batch
	for lo := 0; lo < len(prompt); lo += r.Rows() {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		hi := min(lo+r.Rows(), len(prompt))
		b.Reset()
		outs := 0
		for p := lo; p < hi; p++ {
			// Every position but the last predicts the next token.
			want := p+1 < len(prompt)
			b.Rows = append(b.Rows, model.Row{Cache: c, Token: prompt[p], Embed: -1, Out: want})
			if want {
				outs++
			}
		}
		var then func(x model.Exec, h native.Tensor) error
		if outs > 0 {
			then = func(x model.Exec, h native.Tensor) error {
				for j := 0; j < outs; j++ {
					if err := lp.read(x, h.Slice(j, j+1)); err != nil {
						return err
					}
					out[lo+j] = lp.of(prompt[lo+j+1])
				}
				return nil
			}
		}
		if err := r.Run(&b, then); err != nil {
			return nil, err
		}
	}
	return out, nil
}
