package generate_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"verdict/engine/fixture/testmodel"
	"verdict/engine/generate"
	"verdict/engine/model"
)

var prompt = []int32{2, 105, 2364, 107, 6190, 506, 1894, 106, 107, 105, 4368, 107}

func run(t *testing.T, m model.Model, opt generate.Options) []int32 {
	t.Helper()
	var streamed []int32
	res, err := generate.Run(context.Background(), m, prompt, opt, func(tk generate.Token) error {
		if tk.Index != len(streamed) {
			t.Errorf("token index %d, want %d", tk.Index, len(streamed))
		}
		streamed = append(streamed, tk.ID)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(streamed, res.IDs) {
		t.Errorf("streamed %v, result %v", streamed, res.IDs)
	}
	return res.IDs
}

func TestSampling(t *testing.T) {
	m := testmodel.Tiny(t)
	greedy := run(t, m, generate.Options{MaxTokens: 8})
	if len(greedy) != 8 {
		t.Fatalf("got %d tokens, want 8", len(greedy))
	}
	for _, tc := range []struct {
		name string
		opt  generate.Options
	}{
		{"top-k 1 is greedy", generate.Options{MaxTokens: 8, Temperature: 1, TopK: 1, Seed: 7}},
		{"tiny top-p is greedy", generate.Options{MaxTokens: 8, Temperature: 1, TopP: 1e-9, Seed: 7}},
		{"low temperature is greedy", generate.Options{MaxTokens: 8, Temperature: 1e-4, Seed: 3}},
	} {
		if got := run(t, m, tc.opt); !slices.Equal(got, greedy) {
			t.Errorf("%s: got %v, want %v", tc.name, got, greedy)
		}
	}
	a := run(t, m, generate.Options{MaxTokens: 8, Temperature: 1, Seed: 1})
	b := run(t, m, generate.Options{MaxTokens: 8, Temperature: 1, Seed: 1})
	c := run(t, m, generate.Options{MaxTokens: 8, Temperature: 1, Seed: 2})
	if !slices.Equal(a, b) {
		t.Errorf("same seed gave %v and %v", a, b)
	}
	if slices.Equal(a, c) {
		t.Errorf("seeds 1 and 2 both gave %v", a)
	}
	// A stop token ends generation right after it is emitted.
	stopped := run(t, m, generate.Options{MaxTokens: 8, Stop: []int32{greedy[2]}})
	if !slices.Equal(stopped, greedy[:3]) {
		t.Errorf("with stop token %d: got %v, want %v", greedy[2], stopped, greedy[:3])
	}
}

func TestCancel(t *testing.T) {
	m := testmodel.Tiny(t)
	ctx, cancel := context.WithCancel(context.Background())
	res, err := generate.Run(ctx, m, prompt, generate.Options{MaxTokens: 50}, func(tk generate.Token) error {
		if tk.Index == 2 {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) || len(res.IDs) != 3 {
		t.Errorf("got %d tokens and %v, want 3 tokens and context.Canceled", len(res.IDs), err)
	}
	stop := errors.New("enough")
	_, err = generate.Run(context.Background(), m, prompt, generate.Options{MaxTokens: 50}, func(generate.Token) error { return stop })
	if !errors.Is(err, stop) {
		t.Errorf("emit error: got %v", err)
	}
}

func TestOptionErrors(t *testing.T) {
	m := testmodel.Tiny(t)
	for _, opt := range []generate.Options{
		{MaxTokens: 0},
		{MaxTokens: 1, Temperature: -1},
		{MaxTokens: 1, TopP: 1.5},
		{MaxTokens: 1, TopK: -2},
	} {
		if _, err := generate.Run(context.Background(), m, prompt, opt, nil); err == nil {
			t.Errorf("Run with %+v succeeded", opt)
		}
	}
	if _, err := generate.Run(context.Background(), m, nil, generate.Options{MaxTokens: 1}, nil); err == nil {
		t.Error("Run with an empty prompt succeeded")
	}
}

// TestMaxPositions: a prompt longer than max_position_embeddings is refused
// with both numbers, and generation ends when the sequence fills it.
func TestMaxPositions(t *testing.T) {
	small := *testmodel.Tiny(t) // a copy: the shared model keeps its config
	small.Cfg.MaxPositionEmbeddings = len(prompt) + 3
	long := append(slices.Clone(prompt), prompt[:4]...)
	_, err := generate.Run(context.Background(), &small, long, generate.Options{MaxTokens: 5}, nil)
	if err == nil || !strings.Contains(err.Error(), "prompt has 16 tokens, more than the model's max_position_embeddings of 15") {
		t.Errorf("long prompt: %v", err)
	}
	res, err := generate.Run(context.Background(), &small, prompt, generate.Options{MaxTokens: 50}, nil)
	if err != nil || len(res.IDs) != 4 || res.Stopped {
		t.Errorf("generation up to the limit: %d tokens (stopped %v), %v; want 4 (positions 12..14 fed, one more picked)", len(res.IDs), res.Stopped, err)
	}
	// The forward pass itself refuses positions past the limit.
	c := small.NewCache()
	if _, err := small.Forward(c, long, nil); err == nil || !strings.Contains(err.Error(), "16 tokens exceed the model's max_position_embeddings of 15") {
		t.Errorf("Forward of 16 tokens: %v", err)
	}
}
