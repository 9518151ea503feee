package catalog_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"

	"verdict/engine/catalog"
	"verdict/engine/fixture/testmodel"
	"verdict/engine/model"
)

// TestMaxAnswer: the longest answer of k entries is the k longest names'
// tokens plus a separator or stop after each.
func TestMaxAnswer(t *testing.T) {
	c, err := catalog.Compile(entries("ab", "abcd", "x", "abc"), charTok{}, testGrammar)
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[int]int{1: 5, 2: 9, 3: 12, 4: 14} {
		if got := c.MaxAnswer(k); got != want {
			t.Errorf("MaxAnswer(%d) = %d, want %d", k, got, want)
		}
	}
}

// admissionSetup is the tiny model, the fixture's catalog and requests,
// and a probe view for pool sizes.
func admissionSetup(t *testing.T) (model.Model, *catalog.Catalog, []catalog.Request, func(catalog.Request) int) {
	t.Helper()
	f := loadFixture(t)
	tok := testmodel.Tokenizer(t)
	m := testmodel.Tiny(t)
	cat, err := catalog.Compile(f.Catalog, tok, grammar(tok))
	if err != nil {
		t.Fatal(err)
	}
	var reqs []catalog.Request
	for _, c := range f.Cases {
		reqs = append(reqs, catalog.Request{Prompt: c.PromptIDs, K: c.K})
	}
	probe, err := m.WithKVPositions(1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(probe.CloseView)
	// need: the blocks a request needs in an empty pool.
	need := func(r catalog.Request) int {
		var kv *model.KVError
		if err := probe.KVFits(len(r.Prompt) + cat.MaxAnswer(r.K)); !errors.As(err, &kv) {
			t.Fatalf("a request in a pool of one block: %v", err)
		}
		return kv.Need
	}
	return m, cat, reqs, need
}

func view(t *testing.T, m model.Model, blocks int) model.Model {
	t.Helper()
	v, err := m.WithKVPositions(blocks * model.KVBlock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.CloseView)
	return v
}

// TestRefusedAtAdmission: a request the whole pool cannot hold is refused
// before any forward pass, alone or behind requests that fit, with an
// error naming the request and the sizes.
func TestRefusedAtAdmission(t *testing.T) {
	m, cat, reqs, need := admissionSetup(t)
	big := slices.MaxFunc(reqs, func(a, b catalog.Request) int { return need(a) - need(b) })
	n := need(big)
	small := view(t, m, n-1)
	for _, tc := range []struct {
		name string
		reqs []catalog.Request
	}{
		{"alone", []catalog.Request{big}},
		{"behind two that fit", []catalog.Request{reqs[4], reqs[4], big}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if need(reqs[4]) > n-1 {
				t.Fatalf("request 4 needs %d blocks, more than the pool's %d", need(reqs[4]), n-1)
			}
			steps := 0
			_, st, err := catalog.DecodeBatch(context.Background(), small, cat, tc.reqs,
				catalog.Options{OnStep: func(int, catalog.Step) error { steps++; return nil }})
			var kv *model.KVError
			if !errors.Is(err, catalog.ErrNeverFits) || !errors.As(err, &kv) {
				t.Fatalf("want a refusal at admission, got %v", err)
			}
			last := len(tc.reqs) - 1
			for _, s := range []string{"request " + itoa(last), itoa(len(big.Prompt)) + " prompt tokens", itoa(n) + " global key/value blocks", "holds " + itoa(n-1)} {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("the error %q does not say %q", err, s)
				}
			}
			if st.Steps != 0 || steps != 0 {
				t.Errorf("refused after %d forward passes and %d steps, want none", st.Steps, steps)
			}
		})
	}
}

// TestAdmissionWaits: in a pool that holds the largest request alone,
// every request waits its turn and decodes to its result alone, with and
// without the shared prefix (a fork and its prefix can need a block more
// than the prompt whole); in a pool of exactly a request's size, it fits.
func TestAdmissionWaits(t *testing.T) {
	m, cat, reqs, need := admissionSetup(t)
	most := 0
	for _, r := range reqs {
		most = max(most, need(r))
	}
	pool := view(t, m, most)
	alone := make([]catalog.Result, len(reqs))
	for i, r := range reqs {
		var err error
		if alone[i], err = catalog.Decode(context.Background(), view(t, m, need(r)), cat, r, catalog.Options{}); err != nil {
			t.Fatalf("request %d in a pool of exactly its %d blocks: %v", i, need(r), err)
		}
		if len(alone[i].Tokens) > cat.MaxAnswer(r.K) {
			t.Fatalf("request %d: %d answer tokens, more than MaxAnswer(%d) = %d", i, len(alone[i].Tokens), r.K, cat.MaxAnswer(r.K))
		}
	}
	for _, tc := range []struct {
		name string
		opt  catalog.Options
		wait bool
	}{
		{"whole prompts", catalog.Options{MaxBatch: 16, NoSharedPrefix: true}, true},
		{"shared prefix", catalog.Options{MaxBatch: 16}, false},
		{"one at a time", catalog.Options{MaxBatch: 1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			set := append(slices.Clone(reqs), reqs...)
			out, st, err := catalog.DecodeBatch(context.Background(), pool, cat, set, tc.opt)
			if err != nil {
				t.Fatal(err)
			}
			if tc.wait && st.Waited == 0 {
				t.Errorf("%d requests in a pool of %d blocks: none waited", len(set), most)
			}
			if tc.opt.MaxBatch == 1 && st.Waited != 0 {
				t.Errorf("one at a time: %d waited", st.Waited)
			}
			for i := range set {
				if !slices.Equal(out[i].Tokens, alone[i%len(reqs)].Tokens) {
					t.Fatalf("request %d: %v, alone %v", i, out[i].Names, alone[i%len(reqs)].Names)
				}
			}
		})
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestSharedPrefixTooBig: a request twice in a pool of exactly its size,
// where the shared prefix's blocks and a fork's reservation come to a
// block more than the prompt whole: the decoder drops the prefix rather
// than refuse a request that fits.
func TestSharedPrefixTooBig(t *testing.T) {
	m, cat, reqs, need := admissionSetup(t)
	for i, r := range reqs {
		a, b := (len(r.Prompt)-1)%model.KVBlock, (1+cat.MaxAnswer(r.K))%model.KVBlock
		if a == 0 || b == 0 || a+b > model.KVBlock {
			continue // the fork costs no extra block
		}
		pool := view(t, m, need(r))
		alone, err := catalog.Decode(context.Background(), pool, cat, r, catalog.Options{})
		if err != nil {
			t.Fatal(err)
		}
		out, st, err := catalog.DecodeBatch(context.Background(), pool, cat, []catalog.Request{r, r}, catalog.Options{})
		if err != nil {
			t.Fatalf("request %d twice in a pool of its %d blocks: %v", i, need(r), err)
		}
		if st.SharedPrefix != len(r.Prompt)-1 {
			t.Errorf("a shared prefix of %d tokens, want %d", st.SharedPrefix, len(r.Prompt)-1)
		}
		for j := range out {
			if !slices.Equal(out[j].Tokens, alone.Tokens) {
				t.Errorf("copy %d: %v, alone %v", j, out[j].Names, alone.Names)
			}
		}
		return
	}
	t.Fatal("no fixture request whose fork needs a block more")
}
