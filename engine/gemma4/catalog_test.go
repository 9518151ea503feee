package gemma4_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"verdict/engine/catalog"
	"verdict/engine/gemma4"
)

// g4Catalog is the Gemma 4 catalog case's catalog: 44 names of 1 to 4
// tokens of the test tokenizer (verbs and nouns are one token each, "_"
// and "s" one more), in a trie where names are token prefixes of others
// ("get", "get_news", "get_notes").
var g4Catalog = strings.Fields(`get set read play stop open maps notes songs calls
 get_news get_time get_mail get_map set_time set_note read_file read_mail read_news read_text
 send_mail send_text send_card send_photo play_song play_news find_file find_photo find_song find_map
 open_file open_map open_card stop_song stop_call call_card
 get_notes list_files list_songs list_calls read_notes find_files open_maps send_photos`)

// g4Cases are the case's requests: an intent and k.
var g4Cases = []struct {
	intent string
	k      int
}{
	{"Play me something calm and then tell me the news.", 1},
	{"Email the file to Anna and remind me at noon.", 3},
	{"Where is the nearest cafe? Show it on a map and text Bob.", 5},
}

// g4CatalogPrompt is catalog.Prompt's text for entries without
// descriptions, written out by hand in Gemma 4's chat format (the large
// template adds its closed thought channel to the generation prompt).
func g4CatalogPrompt(names []string, k int, intent string, large bool) string {
	var b strings.Builder
	b.WriteString("<bos><|turn>user\nTools:\n")
	for i, n := range names {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString("- " + n)
	}
	fmt.Fprintf(&b, "\n\nName the %d tools, one per line, that best serve this request:\n%s<turn|>\n<|turn>model\n", k, intent)
	if large {
		b.WriteString(gemma4.ThoughtChannel)
	}
	return b.String()
}

// bruteStep is one step of the brute-force decode with the logits of its
// legal tokens.
type bruteStep struct {
	legal  []int32
	logits []float32
}

// bruteForce decodes a request by the catalog decoder's rule
// (docs/catalog.md), apart from engine/catalog and from the Decoder, with
// the plain-Go reference Model: the legal tokens of a step are found by
// scanning every entry (the next token of each unemitted entry that
// continues the current name; SEP while entries are owed, STOP when none
// are, where the current name is a whole unemitted entry); the largest
// legal logit wins, ties to the lower id. The walk runs on the reference's
// own KV cache; then one Forward of the whole sequence (prompt and every
// chosen token, no cache) gives every step's logits at once, and the walk
// must make the same choices on them: those logits are the ones recorded.
// Node ids follow the documented numbering: creation order, entries
// inserted in catalog order, the root 0. bias, when not nil, may change a
// step's legal logits (the perturbation test).
func bruteForce(t testing.TB, m *gemma4.Model, names []string, toks [][]int32, sep, stop int32, prompt []int32, k int,
	bias func(step int, legal []int32, logits []float32)) (catalog.FixtureCase, []bruteStep) {
	t.Helper()
	key := func(ids []int32) string { return fmt.Sprint(ids) }
	node := map[string]int32{key(nil): 0}
	for _, ts := range toks {
		for d := 1; d <= len(ts); d++ {
			if _, ok := node[key(ts[:d])]; !ok {
				node[key(ts[:d])] = int32(len(node))
			}
		}
	}
	V := m.Cfg.Vocab
	seq := make([]int, len(prompt))
	for i, id := range prompt {
		seq[i] = int(id)
	}
	// walk decodes with logits(step) giving a step's whole row.
	walk := func(logits func(step int, chosen int32) []float32) (catalog.FixtureCase, []bruteStep) {
		fc := catalog.FixtureCase{K: k, PromptIDs: prompt}
		var steps []bruteStep
		emitted := make([]bool, len(names))
		var cur []int32
		chosen := int32(-1)
		for n := 0; ; n++ {
			if n > 64 {
				t.Fatal("brute force: no STOP after 64 steps")
			}
			var legal []int32
			for e, ts := range toks {
				switch {
				case emitted[e] || len(ts) < len(cur) || !slices.Equal(ts[:len(cur)], cur):
				case len(ts) > len(cur):
					legal = append(legal, ts[len(cur)])
				case len(fc.ExpectedNames)+1 < k:
					legal = append(legal, sep)
				default:
					legal = append(legal, stop)
				}
			}
			slices.Sort(legal)
			legal = slices.Compact(legal)
			if len(legal) == 0 {
				t.Fatalf("brute force: no legal token at step %d", n)
			}
			row := logits(n, chosen)
			ll := make([]float32, len(legal))
			for i, id := range legal {
				ll[i] = row[id]
			}
			if bias != nil {
				bias(n, legal, ll)
			}
			best := 0
			for i := range ll {
				if ll[i] > ll[best] {
					best = i
				}
			}
			var margin *float64
			if len(legal) > 1 {
				second := math.Inf(-1)
				for i, v := range ll {
					if i != best {
						second = math.Max(second, float64(v))
					}
				}
				mg := float64(ll[best]) - second
				margin = &mg
			}
			chosen = legal[best]
			fc.Steps = append(fc.Steps, struct {
				Node   int32    `json:"node"`
				Legal  []int32  `json:"legal"`
				Chosen int32    `json:"chosen"`
				Margin *float64 `json:"margin"`
			}{node[key(cur)], legal, chosen, margin})
			steps = append(steps, bruteStep{legal, ll})
			fc.ExpectedTokens = append(fc.ExpectedTokens, chosen)
			if chosen != sep && chosen != stop {
				cur = append(cur, chosen)
				continue
			}
			e := slices.IndexFunc(toks, func(ts []int32) bool { return slices.Equal(ts, cur) })
			emitted[e] = true
			fc.ExpectedNames = append(fc.ExpectedNames, names[e])
			cur = nil
			if chosen == stop {
				return fc, steps
			}
		}
	}
	cache := m.NewCache()
	fc, _ := walk(func(step int, chosen int32) []float32 {
		in := []int{int(chosen)}
		if step == 0 {
			in = seq
		}
		lg, err := m.Forward(in, cache, nil)
		if err != nil {
			t.Fatal(err)
		}
		return lg[len(lg)-V:]
	})
	for _, c := range fc.ExpectedTokens {
		seq = append(seq, int(c))
	}
	whole, err := m.Forward(seq, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	confirmed, steps := walk(func(step int, _ int32) []float32 {
		p := len(prompt) - 1 + step
		return whole[p*V : (p+1)*V]
	})
	if !slices.Equal(confirmed.ExpectedTokens, fc.ExpectedTokens) {
		t.Fatalf("brute force: the walk on the reference's cache chose %v, on one Forward of the whole sequence %v", fc.ExpectedTokens, confirmed.ExpectedTokens)
	}
	return confirmed, steps
}

// g4Fixture is the brute-force answer to the case in catalog-tiny.json's
// format (what build/fixtures/make_gemma4_catalog_fixture.py records with
// transformers), read back through catalog.ParseFixture.
func g4Fixture(t testing.TB, m *gemma4.Model, tok g4Tok, large bool) (*catalog.Fixture, [][]bruteStep) {
	t.Helper()
	sep, _ := tok.Lookup("\n")
	stop := tok.EndOfTurn()
	f := catalog.Fixture{Sep: sep, Stop: stop}
	toks := tokensOf(tok, g4Catalog)
	for i, n := range g4Catalog {
		f.Catalog = append(f.Catalog, catalog.Entry{Name: n, TokenIDs: toks[i]})
	}
	nodes := map[string]bool{}
	for _, ts := range toks {
		for d := 1; d <= len(ts); d++ {
			nodes[fmt.Sprint(ts[:d])] = true
		}
	}
	f.TrieNodes = len(nodes) + 1
	var all [][]bruteStep
	for _, c := range g4Cases {
		prompt := tok.Encode(g4CatalogPrompt(g4Catalog, c.k, c.intent, large))
		fc, steps := bruteForce(t, m, g4Catalog, toks, sep, stop, prompt, c.k, nil)
		fc.Intent = c.intent
		f.Cases = append(f.Cases, fc)
		all = append(all, steps)
	}
	data, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	back, err := catalog.ParseFixture(data)
	if err != nil {
		t.Fatal(err)
	}
	return back, all
}

// checkRecorded checks the case as transformers recorded it
// (testdata/catalog-<fixture>.json, written by
// build/fixtures/make_gemma4_catalog_fixture.py on the GPU machine), when
// it is there: the Decoder passes its gates, and it holds the brute force's
// names and tokens.
func checkRecorded(t *testing.T, name string, brute *catalog.Fixture, tok g4Tok, d *gemma4.Decoder) {
	path := filepath.Join("testdata", "catalog-"+name+".json")
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		t.Logf("%s: not recorded yet (build/fixtures/make_gemma4_catalog_fixture.py)", path)
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	f, err := catalog.ParseFixture(data)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	gates, err := catalog.CheckFixture(context.Background(), f, tok, d, nil)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if bad := failedGates(gates); len(bad) > 0 {
		t.Fatalf("%s: the catalog decoder differs from transformers:\n%s", path, strings.Join(bad, "\n"))
	}
	if len(f.Cases) != len(brute.Cases) || f.TrieNodes != brute.TrieNodes {
		t.Fatalf("%s: %d cases and %d trie nodes, the brute force %d and %d", path, len(f.Cases), f.TrieNodes, len(brute.Cases), brute.TrieNodes)
	}
	for i, c := range f.Cases {
		if b := brute.Cases[i]; !slices.Equal(c.ExpectedNames, b.ExpectedNames) || !slices.Equal(c.ExpectedTokens, b.ExpectedTokens) {
			t.Errorf("%s case %d: transformers %v (%v), the brute force %v (%v)", path, i, c.ExpectedNames, c.ExpectedTokens, b.ExpectedNames, b.ExpectedTokens)
		}
	}
	t.Logf("%s: %d cases recorded by transformers pass", path, len(f.Cases))
}

// tokensOf tokenizes names as plain text.
func tokensOf(tok g4Tok, names []string) [][]int32 {
	out := make([][]int32, len(names))
	for i, n := range names {
		out[i] = tok.EncodePlain(n)
	}
	return out
}

// failedGates lists the gates with a failure.
func failedGates(gs []catalog.Gate) []string {
	var out []string
	for _, g := range gs {
		if g.Failed > 0 {
			out = append(out, g.Name+": "+g.First)
		}
	}
	return out
}

// TestCatalogOnGemma4: the catalog decoder on the tiny dense and MoE Gemma
// 4 Decoder gives the brute-force answer of the plain-Go reference
// (bruteForce): catalog.CheckFixture's gates (prompts and trie as recorded,
// every step's node, legal set, choice and margin within
// catalog.FixtureMargin, names and tokens, through the sparse head with the
// backend's step and the dense cross-check, the host's step, the dense head
// with a mask, and all cases in one batch), each step's legal logits within
// gemma4.TolF32 of the reference's, and catalog.DecodeLoop's names and
// tokens with the host loop and with the device loop (on the CPU backend,
// which records no loops, the device mode runs from the host and says so). A recorded
// token changed, k changed, or one logit of the reference moved past the
// margin fails the gates.
func TestCatalogOnGemma4(t *testing.T) {
	ctx := context.Background()
	tok := testTokenizer(t)
	for _, name := range tinyNames {
		t.Run(name, func(t *testing.T) {
			ref, d := openTiny(t, name)
			large := gemma4.TemplateOf(ref.Cfg) == gemma4.TemplateLarge
			f, steps := g4Fixture(t, ref, tok, large)
			minMargin := math.Inf(1)
			for _, c := range f.Cases {
				for _, st := range c.Steps {
					if st.Margin != nil {
						minMargin = math.Min(minMargin, *st.Margin)
					}
				}
			}
			// A margin under the decoder's logit error would make the
			// brute-force answer a coin toss; pick other intents then.
			if !(minMargin > 4*gemma4.TolF32) {
				t.Fatalf("the smallest brute-force margin %.3g is within 4x the logit tolerance %g", minMargin, gemma4.TolF32)
			}
			gates, err := catalog.CheckFixture(ctx, f, tok, d, nil)
			if err != nil {
				t.Fatal(err)
			}
			if bad := failedGates(gates); len(bad) > 0 {
				t.Fatalf("the catalog decoder differs from the brute force:\n%s", strings.Join(bad, "\n"))
			}
			checkRecorded(t, name, f, tok, d)
			cat, err := catalog.Compile(f.Catalog, tok, catalog.Grammar{Sep: f.Sep, SepText: "\n", Stop: f.Stop})
			if err != nil {
				t.Fatal(err)
			}
			worst := 0.0
			var reqs []catalog.Request
			for i, c := range f.Cases {
				reqs = append(reqs, catalog.Request{Prompt: c.PromptIDs, K: c.K})
				res, err := catalog.Decode(ctx, d, cat, reqs[i], catalog.Options{})
				if err != nil {
					t.Fatal(err)
				}
				for s, st := range res.Steps {
					for j, v := range st.Logits {
						e := math.Abs(float64(v) - float64(steps[i][s].logits[j]))
						worst = math.Max(worst, e)
						if !(e <= gemma4.TolF32) {
							t.Errorf("case %d step %d token %d: logit %.7f, the reference %.7f", i, s, st.Legal[j], v, steps[i][s].logits[j])
						}
					}
				}
			}
			for _, mode := range []catalog.LoopMode{catalog.HostLoop, catalog.DeviceLoop} {
				out, ls, err := catalog.DecodeLoop(ctx, d, cat, reqs, mode)
				if err != nil {
					t.Fatal(err)
				}
				for i, c := range f.Cases {
					if !slices.Equal(out[i].Names, c.ExpectedNames) || !slices.Equal(out[i].Tokens, c.ExpectedTokens) {
						t.Errorf("loop mode %d case %d: %v (tokens %v), the brute force %v (%v)", mode, i, out[i].Names, out[i].Tokens, c.ExpectedNames, c.ExpectedTokens)
					}
				}
				if mode == catalog.DeviceLoop {
					t.Logf("device loop asked for: ran on the device %v, %d steps", ls.Device, ls.Steps)
				}
			}
			var answers []string
			for _, c := range f.Cases {
				answers = append(answers, fmt.Sprintf("k=%d %v", c.K, c.ExpectedNames))
			}
			t.Logf("%d entries, %d trie nodes; %s; smallest margin %.3g; largest legal-logit gap to the reference %.3g (tolerance %g)",
				len(f.Catalog), f.TrieNodes, strings.Join(answers, ", "), minMargin, worst, gemma4.TolF32)

			// The gates catch a wrong recording.
			clone := func() *catalog.Fixture {
				data, err := json.Marshal(f)
				if err != nil {
					t.Fatal(err)
				}
				g, err := catalog.ParseFixture(data)
				if err != nil {
					t.Fatal(err)
				}
				return g
			}
			perturbed := func(what string, g *catalog.Fixture) {
				gates, err := catalog.CheckFixture(ctx, g, tok, d, nil)
				bad := failedGates(gates)
				switch {
				case err != nil:
					t.Logf("%s: refused: %v", what, err)
				case len(bad) == 0:
					t.Errorf("%s: every gate passed", what)
				default:
					t.Logf("%s: %d gates fail, first %s", what, len(bad), bad[0])
				}
			}
			g := clone()
			l := g.Cases[1].Steps[0].Legal
			g.Cases[1].ExpectedTokens[0] = l[(slices.Index(l, g.Cases[1].ExpectedTokens[0])+1)%len(l)]
			perturbed("a recorded token changed", g)
			g = clone()
			g.Cases[0].K++
			perturbed("k one more", g)
			// One logit of the reference moved: case 2's first step's
			// runner-up raised past the winner.
			moved := clone()
			c := g4Cases[2]
			fc, _ := bruteForce(t, ref, g4Catalog, tokensOf(tok, g4Catalog), f.Sep, f.Stop, f.Cases[2].PromptIDs, c.k, func(step int, legal []int32, lg []float32) {
				if step == 0 {
					best := slices.Index(legal, f.Cases[2].ExpectedTokens[0])
					lg[(best+1)%len(lg)] = lg[best] + 1e-3
				}
			})
			fc.Intent = c.intent
			moved.Cases[2] = fc
			if slices.Equal(moved.Cases[2].ExpectedTokens, f.Cases[2].ExpectedTokens) {
				t.Fatal("moving one logit did not change the brute-force answer")
			}
			perturbed("one logit moved", moved)
		})
	}
}
