package gemma3n_test

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"verdict/engine/fixture"
	"verdict/engine/fixture/testmodel"
	"verdict/engine/gemma3n"
	"verdict/engine/model"
)

// greedyRef decodes steps tokens of a sequence alone with Forward and
// Greedy from prompt, returning the chosen tokens and the cache.
func greedyRef(t *testing.T, x model.Exec, m *gemma3n.Model, prompt []int32, steps int) ([]int32, model.Cache) {
	t.Helper()
	c := m.NewCache()
	var b gemma3n.Batch
	b.Add(c, prompt, 1)
	out := make([]int32, 1)
	var toks []int32
	in := prompt
	for len(toks) < steps {
		b.Reset()
		b.Add(c, in, 1)
		h, err := x.Forward(&b)
		if err != nil {
			t.Fatal(err)
		}
		if err := x.Greedy(out, h); err != nil {
			t.Fatal(err)
		}
		toks = append(toks, out[0])
		in = []int32{out[0]}
	}
	return toks, c
}

// TestDecodeGreedy: two sequences decoded greedily in one loop choose the
// tokens each chooses alone with Forward and Greedy, each stopping after
// its first stop token; the caches then hold exactly the fed tokens (the
// next pass gives the reference's token), and the pool gets every
// reserved slot back.
func TestDecodeGreedy(t *testing.T) {
	m := testmodel.Tiny(t)
	x, err := m.Acquire()
	if err != nil {
		t.Fatal(err)
	}
	defer x.Release()
	r := rand.New(rand.NewPCG(5, 6))
	const steps = 12
	prompts := [][]int32{randTokens(r, 23), randTokens(r, 9)}
	ref := make([][]int32, 2)
	for s, p := range prompts {
		var c model.Cache
		ref[s], c = greedyRef(t, x, m, p, steps+1)
		c.Free()
	}
	stop := []int32{ref[0][6], 7}
	free0 := m.FreeBlocks()
	caches := make([]model.Cache, 2)
	next := make([]int32, 2)
	for s, p := range prompts {
		caches[s] = m.NewCache()
		var b gemma3n.Batch
		b.Add(caches[s], p[:len(p)-1], 0)
		if _, err := x.Forward(&b); err != nil {
			t.Fatal(err)
		}
		next[s] = p[len(p)-1]
	}
	got, err := x.DecodeGreedy(caches, next, steps, stop)
	if err != nil {
		t.Fatal(err)
	}
	for s := range prompts {
		want := ref[s][:steps]
		for j, id := range want {
			if slices.Contains(stop, id) {
				want = want[:j+1]
				break
			}
		}
		if !slices.Equal(got[s], want) {
			t.Errorf("sequence %d: got %v, want %v", s, got[s], want)
		}
		if n := caches[s].Len(); n != len(prompts[s])+len(got[s])-1 {
			t.Errorf("sequence %d: the cache holds %d positions, want %d", s, n, len(prompts[s])+len(got[s])-1)
		}
		// The next pass continues where the loop stopped.
		more, err := x.DecodeGreedy(caches[s:s+1], got[s][len(got[s])-1:], 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		if k := len(got[s]); more[0][0] != ref[s][k] {
			t.Errorf("sequence %d: the token after the loop is %d, want %d", s, more[0][0], ref[s][k])
		}
	}
	for _, tc := range []struct {
		name  string
		next  []int32
		stop  []int32
		steps int
		want  string
	}{
		{"count", []int32{1}, nil, 3, "1 first tokens for 2 sequences"},
		{"vocabulary", []int32{1, -4}, nil, 3, "token id -4 outside the vocabulary"},
		{"stops", []int32{1, 2}, make([]int32, 65), 3, "65 stop tokens, at most 64"},
		{"steps", []int32{1, 2}, nil, 0, "a loop of 0 steps"},
	} {
		if _, err := x.DecodeGreedy(caches, tc.next, tc.steps, tc.stop); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	for _, c := range caches {
		c.Free()
	}
	if got := m.FreeBlocks(); got != free0 {
		t.Errorf("free blocks %v after the loops, %v before them", got, free0)
	}
}

// TestPLEPlace: VERDICT_PLE=host keeps the per-layer table on the host,
// where a loop over any token is refused by name; an unknown place is a
// load error naming the choices.
func TestPLEPlace(t *testing.T) {
	t.Setenv("VERDICT_PLE", "host")
	m := testmodel.Tiny(t)
	if m.PLEResident() {
		t.Fatal("VERDICT_PLE=host: the table is resident")
	}
	x, err := m.Acquire()
	if err != nil {
		t.Fatal(err)
	}
	defer x.Release()
	c := m.NewCache()
	defer c.Free()
	if x.GreedyLoops() {
		t.Error("GreedyLoops without a resident table")
	}
	if _, err := x.DecodeGreedy([]model.Cache{c}, []int32{2}, 4, nil); err == nil || !strings.Contains(err.Error(), "per-layer table on the device") {
		t.Errorf("DecodeGreedy with the table on the host: %v", err)
	}
	t.Setenv("VERDICT_PLE", "gpu")
	if _, _, err := fixture.LoadModel(testmodel.Dir(t, "gemma3n-synthetic-tiny.tar.gz")); err == nil || !strings.Contains(err.Error(), `place "gpu": want auto, host or device`) {
		t.Errorf("VERDICT_PLE=gpu: %v", err)
	}
}
