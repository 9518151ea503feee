package generate_test

import (
	"context"
	"slices"
	"testing"

	"verdict/engine/fixture/testmodel"
	"verdict/engine/generate"
)

// TestLoopPath: greedy generation a chunk of tokens a device loop gives
// the tokens of a pass a token, with and without stop tokens (inside a
// chunk, at its end, never), with the tail past the last whole chunk, and
// stops between chunks when cancelled.
func TestLoopPath(t *testing.T) {
	m := testmodel.Tiny(t)
	if !m.InputsResident() {
		t.Fatal("the tiny model's per-layer table is not resident")
	}
	n := 2*generate.LoopSteps + 5
	want := run(t, m, generate.Options{MaxTokens: n})
	defer generate.SetLoopsAlways(true)()
	for _, tc := range []struct {
		name string
		opt  generate.Options
		want []int32
	}{
		{"no stop", generate.Options{MaxTokens: n}, want},
		{"stop inside a chunk", generate.Options{MaxTokens: n, Stop: []int32{want[20]}}, want[:slices.Index(want, want[20])+1]},
		{"stop at a chunk's end", generate.Options{MaxTokens: n, Stop: []int32{want[generate.LoopSteps]}},
			want[:slices.Index(want, want[generate.LoopSteps])+1]},
		{"a chunk exactly", generate.Options{MaxTokens: generate.LoopSteps + 1}, want[:generate.LoopSteps+1]},
	} {
		if got := run(t, m, tc.opt); !slices.Equal(got, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	res, err := generate.Run(ctx, m, prompt, generate.Options{MaxTokens: n}, func(tk generate.Token) error {
		if tk.Index == 3 {
			cancel()
		}
		return nil
	})
	if err != context.Canceled || len(res.IDs) != generate.LoopSteps+1 || !slices.Equal(res.IDs, want[:len(res.IDs)]) {
		t.Errorf("cancelled inside the first chunk: %d tokens, %v; want the chunk's %d and context.Canceled", len(res.IDs), err, generate.LoopSteps+1)
	}
}
