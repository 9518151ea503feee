// Package bench measures the engine's speed: prompt prefill and token decode
// rates on a model, with the machine they ran on.
package bench

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"verdict/engine/generate"
	"verdict/engine/model"
	"verdict/native"
)

// Machine describes the computer a benchmark ran on.
type Machine struct {
	Processor string `json:"processor"`
	Cores     int    `json:"cores"`
	Threads   int    `json:"threads"`
	OS        string `json:"os"`
	Arch      string `json:"arch"`
}

// ThisMachine describes the current computer.
func ThisMachine() Machine {
	return Machine{Processor: native.HostProcessor(), Cores: native.HostCores(), Threads: native.Threads(), OS: runtime.GOOS, Arch: runtime.GOARCH}
}

func (m Machine) String() string {
	return fmt.Sprintf("%s, %d cores, %d threads, %s/%s", m.Processor, m.Cores, m.Threads, m.OS, m.Arch)
}

// Report is one model's prefill and decode measurement.
type Report struct {
	Model          string  `json:"model"`
	Params         int64   `json:"params"`
	PromptTokens   int     `json:"prompt_tokens"`
	DecodeTokens   int     `json:"decode_tokens"`
	PrefillSeconds float64 `json:"prefill_seconds"`
	PrefillTPS     float64 `json:"prefill_tokens_per_second"`
	DecodeSeconds  float64 `json:"decode_seconds"`
	DecodeTPS      float64 `json:"decode_tokens_per_second"`
	Machine        Machine `json:"machine"`
}

func (r Report) String() string {
	return fmt.Sprintf("%s (%.3g B params): prefill %d tokens in %.3fs = %.1f tokens/s; decode %d tokens in %.3fs = %.2f tokens/s\nmachine: %s",
		r.Model, float64(r.Params)/1e9, r.PromptTokens, r.PrefillSeconds, r.PrefillTPS, r.DecodeTokens, r.DecodeSeconds, r.DecodeTPS, r.Machine)
}

// Prompt returns n deterministic token ids of ordinary text range, starting
// with BOS.
func Prompt(n int) []int32 {
	ids := make([]int32, n)
	ids[0] = 2
	for i := 1; i < n; i++ {
		ids[i] = int32(1000 + (i*7919)%200000)
	}
	return ids
}

// prefillRuns is the number of timed prefills Run takes the best of.
const prefillRuns = 3

// Run prefills a prompt of promptTokens and then decodes decodeTokens greedily
// (no stop tokens), timing both phases, after a warm-up run of the same prompt
// (first launches and buffers are not the steady state a user sees); the
// prefill figure is the best of prefillRuns.
func Run(ctx context.Context, name string, m model.Model, promptTokens, decodeTokens int) (Report, error) {
	r := Report{Model: name, Params: m.Params(), PromptTokens: promptTokens, DecodeTokens: decodeTokens, Machine: ThisMachine()}
	if promptTokens < 1 || decodeTokens < 1 {
		return r, fmt.Errorf("bench: prompt and decode token counts must be positive")
	}
	prompt := Prompt(promptTokens)
	// The warm-up decodes as many tokens as the measured run, so that the
	// shapes it records (a decode step's pass, a device loop) are there.
	if _, err := generate.Run(ctx, m, prompt, generate.Options{MaxTokens: decodeTokens + 1}, nil); err != nil {
		return r, err
	}
	var best *generate.Result
	for i := 0; i < prefillRuns; i++ {
		tokens := 1
		if i == prefillRuns-1 {
			tokens = decodeTokens + 1
		}
		res, err := generate.Run(ctx, m, prompt, generate.Options{MaxTokens: tokens}, nil)
		if err != nil {
			return r, err
		}
		if best == nil || res.Prefill < best.Prefill {
			best = &res
		}
		if i == prefillRuns-1 {
			r.DecodeTokens = len(res.IDs) - 1
			r.DecodeSeconds = res.Decode.Seconds()
			r.DecodeTPS = res.DecodeTokensPerSec()
		}
	}
	r.PrefillSeconds = best.Prefill.Seconds()
	r.PrefillTPS = best.PrefillTokensPerSec()
	return r, nil
}

// loopChunk is the tokens a device loop of DecodeBatch decodes a run:
// generation's.
const loopChunk = model.GreedyChunk

// DecodeBatch measures greedy decoding of seqs sequences at once after a
// shared prompt of promptTokens: each step is one pass over seqs rows and
// one head pass (as device loops of loopChunk steps where the backend
// runs them: Exec.GreedyLoops), and the figure is the tokens of all
// sequences per second.
func DecodeBatch(ctx context.Context, m model.Model, promptTokens, decodeTokens, seqs int) (tokens int, seconds float64, err error) {
	if promptTokens < 1 || decodeTokens < 1 || seqs < 1 || seqs > 64 {
		return 0, 0, fmt.Errorf("bench: batched decode needs positive counts and at most 64 sequences")
	}
	x, err := m.Acquire()
	if err != nil {
		return 0, 0, err
	}
	defer x.Release()
	prompt := m.NewCache()
	defer prompt.Free()
	var b model.Batch
	b.Add(prompt, Prompt(promptTokens), 0)
	if _, err := x.Prefill(&b); err != nil {
		return 0, 0, err
	}
	cs := make([]model.Cache, seqs)
	next := make([]int32, seqs)
	for i := range cs {
		cs[i] = prompt.Clone()
		defer cs[i].Free()
		next[i] = int32(1000 + 17*i) // distinct first tokens
	}
	step := func() error {
		if err := ctx.Err(); err != nil {
			return err
		}
		b.Reset()
		for i, c := range cs {
			b.Add(c, next[i:i+1], 1)
		}
		h, err := x.Forward(&b)
		if err != nil {
			return err
		}
		return x.Greedy(next, h)
	}
	if x.GreedyLoops() {
		// The device's own loop, a chunk of loopChunk tokens a run (the
		// first run records it), as generation decodes.
		chunk := func() error {
			if err := ctx.Err(); err != nil {
				return err
			}
			toks, err := x.DecodeGreedy(cs, next, loopChunk, nil)
			if err != nil {
				return err
			}
			for i := range next {
				next[i] = toks[i][len(toks[i])-1]
			}
			return nil
		}
		if err := chunk(); err != nil {
			return 0, 0, err
		}
		runs := max(1, (decodeTokens-1)/loopChunk)
		t := time.Now()
		for k := 0; k < runs; k++ {
			if err := chunk(); err != nil {
				return 0, 0, err
			}
		}
		return runs * loopChunk * seqs, time.Since(t).Seconds(), nil
	}
	if err := step(); err != nil { // warm: the first step of this shape
		return 0, 0, err
	}
	t := time.Now()
	for k := 1; k < decodeTokens; k++ {
		if err := step(); err != nil {
			return 0, 0, err
		}
	}
	return (decodeTokens - 1) * seqs, time.Since(t).Seconds(), nil
}
