package catalog_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"verdict/engine/catalog"
	"verdict/engine/fixture/testmodel"
	"verdict/engine/model"
)

// forcedSetup gives the tiny model, a catalog of tool-like names over the
// one-token-a-character tokenizer (long forced runs after the first
// letters) and n requests of random prompt ids (a common prefix of 24, so
// that batches share it) with k of 1..4.
func forcedSetup(t *testing.T, n int) (model.Model, *catalog.Catalog, []catalog.Request) {
	m := testmodel.Tiny(t)
	cat, err := catalog.Compile(entries("get_weather", "get_time", "send_email", "send_message", "search_web", "search_files",
		"read_file", "write_file", "list_calendar_events", "create_calendar_event", "translate", "calculator"), charTok{}, testGrammar)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(11, 12))
	prefix := make([]int32, 24)
	for i := range prefix {
		prefix[i] = int32(2000 + r.IntN(3000))
	}
	reqs := make([]catalog.Request, n)
	for i := range reqs {
		p := append([]int32(nil), prefix...)
		for j := 5 + r.IntN(30); j > 0; j-- {
			p = append(p, int32(2000+r.IntN(3000)))
		}
		reqs[i] = catalog.Request{Prompt: p, K: 1 + i%4}
	}
	return m, cat, reqs
}

// TestForcedRunsMatchOneTokenSteps: with forced runs fed ahead, every way
// of decoding (alone and batched, sparse and dense heads, backend and host
// step, the dense cross-check, prompt chunks, small batches, passes short
// of rows for every forced run) gives what one token a pass gives: names,
// tokens and every step's node, legal set, choice, entry, margin and
// logits, bit for bit, with the same token rows run in fewer passes, the
// tokens fed ahead counted, and OnStep hearing each request's steps in
// token order.
func TestForcedRunsMatchOneTokenSteps(t *testing.T) {
	m, cat, reqs := forcedSetup(t, 24)
	cases := []struct {
		name  string
		opt   catalog.Options
		alone bool
		fewer bool // fewer passes (and tokens fed ahead) expected
		n     int  // the first n requests (0: all; the dense head is slow)
	}{
		{"alone, backend step", catalog.Options{}, true, true, 0},
		{"alone, host step", catalog.Options{Step: catalog.HostStep}, true, true, 0},
		{"alone, dense head", catalog.Options{Head: catalog.DenseHead}, true, true, 6},
		{"alone, dense cross-check", catalog.Options{CheckDense: true}, true, true, 6},
		{"batch, backend step", catalog.Options{}, false, true, 0},
		{"batch, host step", catalog.Options{Step: catalog.HostStep}, false, true, 0},
		{"batch, dense head", catalog.Options{Head: catalog.DenseHead}, false, true, 6},
		{"batch, dense cross-check, host step", catalog.Options{CheckDense: true, Step: catalog.HostStep}, false, true, 6},
		{"batch, prompts 3 tokens at a time", catalog.Options{PrefillChunk: 3}, false, true, 0},
		{"batches of 1", catalog.Options{MaxBatch: 1, NoSharedPrefix: true}, false, true, 0},
		{"batches of 2", catalog.Options{MaxBatch: 2}, false, true, 0},
		{"batches of 3, prompts 5 at a time, host step", catalog.Options{MaxBatch: 3, PrefillChunk: 5, Step: catalog.HostStep}, false, true, 0},
		{"passes of 6 rows, batches of 4", catalog.WithRows(catalog.Options{MaxBatch: 4}, 6), false, true, 0},
		{"passes of 9 rows, batches of 8, host step", catalog.WithRows(catalog.Options{MaxBatch: 8, Step: catalog.HostStep}, 9), false, true, 0},
		{"passes of 4 rows, batches of 4", catalog.WithRows(catalog.Options{MaxBatch: 4, PrefillChunk: 2}, 4), false, false, 0},
		{"passes of 7 rows, batches of 6, dense head", catalog.WithRows(catalog.Options{MaxBatch: 6, Head: catalog.DenseHead}, 7), false, false, 6},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			reqs := reqs
			if c.n > 0 {
				reqs = reqs[:c.n]
			}
			decode := func(opt catalog.Options) ([]catalog.Result, catalog.Stats, [][]catalog.Step) {
				heard := make([][]catalog.Step, len(reqs))
				off := 0
				opt.OnStep = func(req int, st catalog.Step) error {
					heard[off+req] = append(heard[off+req], st)
					return nil
				}
				if !c.alone {
					out, st, err := catalog.DecodeBatch(context.Background(), m, cat, reqs, opt)
					if err != nil {
						t.Fatal(err)
					}
					return out, st, heard
				}
				var out []catalog.Result
				for i, r := range reqs {
					off = i
					res, err := catalog.Decode(context.Background(), m, cat, r, opt)
					if err != nil {
						t.Fatal(err)
					}
					out = append(out, res)
				}
				return out, catalog.Stats{}, heard
			}
			plainOpt := c.opt
			plainOpt.OneTokenSteps = true
			want, plain, _ := decode(plainOpt)
			got, st, heard := decode(c.opt)
			for i := range got {
				if d := catalog.Differ(got[i], want[i]); d != "" {
					t.Fatalf("request %d with forced runs: %s", i, d)
				}
				h := got[i]
				h.Steps = heard[i]
				if d := catalog.Differ(h, got[i]); d != "" {
					t.Fatalf("request %d: OnStep heard steps that differ from the result's: %s", i, d)
				}
			}
			sameResults(t, c.name, got, want) // margins and entries too
			if c.alone {
				return
			}
			t.Logf("%d passes (%d rows) one token a pass, %d (%d rows) with %d tokens fed ahead", plain.Steps, plain.Rows, st.Steps, st.Rows, st.Forced)
			if plain.Forced != 0 || st.Rows != plain.Rows || st.Steps+st.Forced < plain.Steps {
				t.Fatalf("one token a pass: %+v; forced runs: %+v", plain, st)
			}
			if c.fewer && (st.Forced == 0 || st.Steps >= plain.Steps) {
				t.Fatalf("%d passes with %d tokens fed ahead, %d one token a pass", st.Steps, st.Forced, plain.Steps)
			}
			if c.opt.MaxBatch == 1 && plain.Steps-st.Steps != st.Forced {
				t.Fatalf("batches of 1: %d passes one token a pass, %d with %d fed ahead", plain.Steps, st.Steps, st.Forced)
			}
		})
	}
}

// TestForcedRunsFixture: on the fixture's catalogs and the Gemma tokenizer
// (its names' tokens, not characters), 64 requests of assorted k decode to
// the same results with forced runs as one token a pass, batched and
// alone, on the backend and the host step.
func TestForcedRunsFixture(t *testing.T) {
	m := testmodel.Tiny(t)
	f := loadFixture(t)
	tok := testmodel.Tokenizer(t)
	main, prefix, _, pr := fixtureCatalogs(t)
	reqs := fixtureRequests(t, f, tok, main, 64)
	for _, set := range []struct {
		name string
		cat  *catalog.Catalog
		reqs []catalog.Request
	}{{"main", main, reqs}, {"prefix", prefix, pr}} {
		for _, mode := range []catalog.StepMode{catalog.BackendStep, catalog.HostStep} {
			for _, batched := range []bool{false, true} {
				what := fmt.Sprintf("%s, step mode %d, batched %v", set.name, mode, batched)
				rs := set.reqs
				if !batched {
					rs = rs[:min(8, len(rs))]
				}
				want, _ := decodeMode(t, m, set.cat, rs, catalog.Options{Step: mode, OneTokenSteps: true, MaxBatch: 16}, batched)
				got, st := decodeMode(t, m, set.cat, rs, catalog.Options{Step: mode, MaxBatch: 16}, batched)
				sameResults(t, what, got, want)
				if batched && st.Forced == 0 {
					t.Fatalf("%s: no token fed ahead", what)
				}
			}
		}
	}
}

// decodeMode decodes reqs in one DecodeBatch or each alone.
func decodeMode(t *testing.T, m model.Model, c *catalog.Catalog, reqs []catalog.Request, opt catalog.Options, batched bool) ([]catalog.Result, catalog.Stats) {
	t.Helper()
	if batched {
		out, st, err := catalog.DecodeBatch(context.Background(), m, c, reqs, opt)
		if err != nil {
			t.Fatal(err)
		}
		return out, st
	}
	var out []catalog.Result
	for _, r := range reqs {
		res, err := catalog.Decode(context.Background(), m, c, r, opt)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, res)
	}
	return out, catalog.Stats{}
}

// TestRowsBound: a bound on a pass's rows below the batch is refused.
func TestRowsBound(t *testing.T) {
	m, cat, reqs := forcedSetup(t, 2)
	_, _, err := catalog.DecodeBatch(context.Background(), m, cat, reqs, catalog.WithRows(catalog.Options{MaxBatch: 4}, 3))
	if err == nil || !strings.Contains(err.Error(), "exceeds the 3 rows") {
		t.Fatalf("error %v", err)
	}
}
