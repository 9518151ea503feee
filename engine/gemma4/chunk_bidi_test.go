package gemma4

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"verdict/engine/generate"
	"verdict/engine/model"
	"verdict/engine/sched"
	"verdict/engine/scorer"
	"verdict/engine/tokenizer"
	"verdict/native"
)

// fakeSeq is a stand-in sequence for cutChunk, which only tells rows'
// sequences apart.
type fakeSeq struct {
	model.Cache
	id int
}

// TestCutChunk: where a chunk may end under use_bidirectional_attention
// "vision": anywhere in text, before an image block it would cut (or
// before the block's last row, so that the row after it comes along), at
// the batch's end whatever it is; a block that with the row after it does
// not fit is refused naming its first row. Two sequences' blocks count
// apart; a placeholder without its embedding is text.
func TestCutChunk(t *testing.T) {
	const I = 9
	a, b := &fakeSeq{id: 1}, &fakeSeq{id: 2}
	// rows writes a batch: "t" a text row, "i" a placeholder with its soft
	// token, "p" the image id without one; upper case rows are b's.
	rows := func(s string) []model.Row {
		var out []model.Row
		for k, c := range s {
			r := model.Row{Cache: a, Token: 1, Embed: -1}
			if c >= 'A' && c <= 'Z' {
				r.Cache = b
				c += 'a' - 'A'
			}
			switch c {
			case 'i':
				r.Token, r.Embed = I, int32(k)
			case 'p':
				r.Token = I
			}
			out = append(out, r)
		}
		return out
	}
	for _, c := range []struct {
		name   string
		rows   string
		lo, hi int
		want   int
		err    string
	}{
		{"text", "tttttttt", 0, 4, 4, ""},
		{"a block after the end", "ttttiiit", 0, 4, 4, ""},
		{"before a block it would cut", "ttiiiitt", 0, 4, 2, ""},
		{"before the block's last row", "ttiiiitt", 0, 6, 2, ""},
		{"the block and the row after it", "ttiiiitt", 2, 7, 7, ""},
		{"the batch's end inside a block", "ttiiii", 0, 6, 6, ""},
		{"a placeholder without its soft token is text", "ttpppptt", 0, 4, 4, ""},
		{"the other sequence's text ends no block", "tiiTTTtt", 0, 5, 1, ""},
		{"two sequences' blocks", "tIIiiTtt", 0, 7, 7, ""},
		{"two sequences' blocks, one cut", "tIIiiTtt", 0, 6, 1, ""},
		{"a block longer than the chunk", "tiiiiiitt", 1, 5, 0, "image block from row 1 with the row after it is longer than the 4 rows a chunk from row 1 may take"},
		{"the other sequence's block", "tIIIIIIt", 1, 4, 0, "image block from row 1"},
	} {
		got, err := cutChunk(rows(c.rows), c.lo, c.hi, I)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: %d, %v; want an error with %q", c.name, got, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%s: %d, %v; want %d", c.name, got, err, c.want)
		}
	}
}

// chunkSchemas are scored on the multimodal fixture: a field of each kind
// (the json backend), choice fields (the cached backend, whose answer codes
// are single characters under mmTokenizer).
var chunkSchemas = map[string]string{
	scorer.BackendJSON: `{"fields":[
 {"name":"priority","question":"How urgent?","type":"choice","options":["low","medium","high"]},
 {"name":"refund","question":"Refund asked?","type":"bool"},
 {"name":"issues","question":"Which?","type":"independent","labels":["late","broken"]},
 {"name":"anger","question":"Anger 1-3?","type":"score","levels":["1","2","3"]}]}`,
	scorer.BackendCached: `{"fields":[
 {"name":"priority","question":"How urgent?","type":"choice","options":["low","medium","high"]},
 {"name":"topic","question":"About?","type":"choice","options":["delivery","billing","product","other"]}]}`,
}

// mmTokenizer is a tokenizer for the multimodal fixture's 256-token
// vocabulary: the chat format's control tokens, the config's media tokens
// at their ids (249..255), and one token a character (others <unk>).
func mmTokenizer(t *testing.T, tok MediaTokens) *tokenizer.Tokenizer {
	t.Helper()
	vocab := map[string]int{}
	var added []map[string]any
	special := func(s string, id int) {
		vocab[s] = id
		added = append(added, map[string]any{"id": id, "content": s, "special": true,
			"single_word": false, "lstrip": false, "rstrip": false, "normalized": false})
	}
	for i, s := range []string{"<pad>", "<eos>", "<bos>", "<unk>", "<|turn>", "<turn|>", "<start_of_turn>", "<end_of_turn>"} {
		special(s, i)
	}
	for s, id := range map[string]int{"<|image>": tok.BOI, "<image|>": tok.EOI, "<|image|>": tok.Image,
		"<|audio>": tok.BOA, "<audio|>": tok.EOA, "<|audio|>": tok.Audio, "<|video|>": tok.Video} {
		special(s, id)
	}
	id := 8 // after the chat format's tokens
	for _, r := range "▁\nabcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,:;!?\"'{}[]()-_/*#<>|=+" {
		vocab[string(r)] = id
		id++
	}
	if id > 249 {
		t.Fatalf("%d character tokens reach the media ids", id)
	}
	str := func(s string) map[string]any { return map[string]any{"String": s} }
	js, err := json.Marshal(map[string]any{
		"version": "1.0", "added_tokens": added,
		"normalizer":    map[string]any{"type": "Replace", "pattern": str(" "), "content": "▁"},
		"pre_tokenizer": map[string]any{"type": "Split", "pattern": str(" "), "behavior": "MergedWithPrevious", "invert": false},
		"decoder": map[string]any{"type": "Sequence", "decoders": []any{
			map[string]any{"type": "Replace", "pattern": str("▁"), "content": " "}, map[string]any{"type": "Fuse"}}},
		"model": map[string]any{"type": "BPE", "unk_token": "<unk>", "fuse_unk": true, "byte_fallback": false,
			"ignore_merges": false, "vocab": vocab, "merges": [][]string{}},
	})
	if err != nil {
		t.Fatal(err)
	}
	tk, err := tokenizer.Parse(js)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// recorder is an Exec as a scorer's Runner that records each pass's rows
// (CutChunk and the rest stay the Exec's).
type recorder struct {
	*Exec
	passes [][]model.Row
}

func (r *recorder) Run(b *model.Batch, then func(x model.Exec, h native.Tensor) error) error {
	r.passes = append(r.passes, slices.Clone(b.Rows))
	return r.Exec.Run(b, then)
}

// blindCut is the fewest rows an Exec may take (the block first..last and
// the row after it) whose chunks of a prompt of n rows, cut by rows alone,
// end inside the block; 0 when none under n does.
func blindCut(first, last, n int) int {
	for k := last - first + 2; k < n; k++ {
		if e := (first/k + 1) * k; e > first && e <= last {
			return k
		}
	}
	return 0
}

// TestScorerBidirectionalChunks: the scorer scores an image prompt on the
// multimodal fixture under use_bidirectional_attention "vision" (its
// 64-placeholder block longer than the window of 16) on an Exec of too few
// rows for its prefix, whose chunks by rows alone would end inside the
// block: its prefix and branch chunks end where Exec.CutChunk allows, and
// every distribution (json and cached backends) is the one of an Exec
// that runs the prefix in one Forward, bit for bit; through a scheduler
// whose step takes as few rows too, with two requests at once, the same.
func TestScorerBidirectionalChunks(t *testing.T) {
	fx := loadMMFixture(t)
	tok := fx.tok
	tok.VisionBidirectional = true
	decoder := func(rows int) *Decoder {
		d, err := NewDecoder(fx.m, Options{KVPositions: 4096, BatchRows: rows})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		if err := d.SetMediaTokens(tok); err != nil {
			t.Fatal(err)
		}
		return d
	}
	tk := mmTokenizer(t, tok)
	schemas := map[string]*scorer.Schema{}
	for backend, js := range chunkSchemas {
		s, err := scorer.ParseSchema([]byte(js))
		if err != nil {
			t.Fatal(err)
		}
		schemas[backend] = s
	}
	const input = "My parcel came late and broken; I want my money back."
	media := func() (*scorer.Media, error) {
		return &scorer.Media{Media: model.Media{Image: fx.image, ImageTokens: fx.images}, Captions: []string{""}}, nil
	}
	// dists is every candidate's log-likelihood and probability, in order.
	dists := func(r *scorer.Result) []float64 {
		var out []float64
		for _, f := range r.Fields {
			for _, d := range f.Decisions {
				for _, c := range d.Candidates {
					out = append(out, c.LogLikelihood, c.Probability)
				}
			}
		}
		return out
	}

	// One Forward for the prefix: its rows show where the block lies.
	big := decoder(0)
	bx, err := big.acquire()
	if err != nil {
		t.Fatal(err)
	}
	defer bx.Release()
	rec := &recorder{Exec: bx}
	want := map[string][]float64{}
	prefixRows, blockAt := map[string]int{}, map[string]int{}
	for _, backend := range []string{scorer.BackendJSON, scorer.BackendCached} {
		rec.passes = nil
		r, err := scorer.New(big, tk).Score(context.Background(), schemas[backend], input, scorer.Options{Backend: backend, Media: media, Runner: rec})
		if err != nil {
			t.Fatalf("%s, one Forward: %v", backend, err)
		}
		want[backend] = dists(r)
		prefix := rec.passes[0]
		prefixRows[backend] = len(prefix)
		blockAt[backend] = slices.IndexFunc(prefix, func(r model.Row) bool { return r.Embed >= 0 && int(r.Token) == tok.Image })
		if blockAt[backend] < 0 || len(prefix) > bx.Rows() {
			t.Fatalf("%s: the prefix of %d rows (one Forward of %d) has its block at %d", backend, len(prefix), bx.Rows(), blockAt[backend])
		}
	}
	first, n := blockAt[scorer.BackendJSON], prefixRows[scorer.BackendJSON]
	if blockAt[scorer.BackendCached] != first {
		t.Fatalf("the image block begins at %d in the json prompt, %d in the cached one", first, blockAt[scorer.BackendCached])
	}
	last := first + fx.images[0] - 1
	// The fewest rows, at least the block and the row after it, whose
	// chunks by rows alone end inside the block.
	rows := blindCut(first, last, n)
	if rows == 0 {
		t.Fatalf("no Exec smaller than the prefix of %d rows cuts its block %d..%d", n, first, last)
	}
	t.Logf("prefixes of %v rows, image block %d..%d, Execs of %d rows (chunks by rows alone end at %d)", prefixRows, first, last, rows, (first/rows+1)*rows)

	check := func(name string, got, want []float64) {
		t.Helper()
		if !slices.Equal(got, want) {
			t.Errorf("%s: log-likelihoods and probabilities %v, one Forward gives %v (want the same bits)", name, got, want)
		}
	}
	small := decoder(rows)
	sx, err := small.acquire()
	if err != nil {
		t.Fatal(err)
	}
	defer sx.Release()
	for _, backend := range []string{scorer.BackendJSON, scorer.BackendCached} {
		srec := &recorder{Exec: sx}
		r, err := scorer.New(small, tk).Score(context.Background(), schemas[backend], input, scorer.Options{Backend: backend, Media: media, Runner: srec})
		if err != nil {
			t.Fatalf("%s, Execs of %d rows: %v", backend, rows, err)
		}
		check(fmt.Sprintf("%s, Execs of %d rows", backend, rows), dists(r), want[backend])
		var ends []int // the prefix's passes: those of its sequence
		end := 0
		for _, p := range srec.passes {
			if p[0].Cache != srec.passes[0][0].Cache {
				break
			}
			end += len(p)
			ends = append(ends, end)
		}
		if len(ends) < 2 || ends[len(ends)-1] != prefixRows[backend] || slices.ContainsFunc(ends, func(e int) bool { return e > first && e <= last }) {
			t.Errorf("%s: the prefix's chunks end at %v (the block %d..%d): want several, none inside the block", backend, ends, first, last)
		}
		t.Logf("%s: the prefix's chunks end at %v; %d passes in all", backend, ends, len(srec.passes))
	}

	// Through a scheduler whose steps take rows rows, two requests at once.
	sch, err := sched.New(big, sched.Options{StepRows: rows})
	if err != nil {
		t.Fatal(err)
	}
	defer sch.Close()
	sc := scorer.New(big, tk)
	var wg sync.WaitGroup
	got := make([][]float64, 2)
	errs := make([]error, 2)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rq := sch.Begin(context.Background(), sched.Interactive)
			defer rq.End()
			r, err := sc.Score(context.Background(), schemas[scorer.BackendJSON], input, scorer.Options{Media: media, Runner: rq, Admit: rq.Admit})
			if err != nil {
				errs[i] = err
				return
			}
			got[i] = dists(r)
		}()
	}
	wg.Wait()
	for i := range got {
		if errs[i] != nil {
			t.Fatalf("scheduler request %d: %v", i, errs[i])
		}
		check(fmt.Sprintf("scheduler request %d, steps of %d rows", i, rows), got[i], want[scorer.BackendJSON])
	}
	st := sch.Stats()
	t.Logf("scheduler: %d steps, %d passes, at most %d merged", st.Steps, st.Passes, st.MaxPasses)

	t.Run("generation", func(t *testing.T) {
		// The fixture's prompt (its image block and a clip) generated on an
		// Exec whose chunks by rows alone would cut the block: the tokens
		// and their log-probabilities of one Forward, bit for bit.
		ids := ids32(fx.meta.IDs)
		first := slices.Index(fx.meta.IDs, tok.Image)
		rows := blindCut(first, first+fx.images[0]-1, len(ids))
		if rows == 0 {
			t.Fatalf("no Exec smaller than the prompt of %d rows cuts its block from %d", len(ids), first)
		}
		md := model.Media{Image: fx.image, Audio: fx.audio}
		gen := func(d *Decoder) []generate.Token {
			x, err := d.Acquire()
			if err != nil {
				t.Fatal(err)
			}
			defer x.Release()
			var out []generate.Token
			opt := generate.Options{MaxTokens: 3, Media: &md, Logprobs: true, TopLogprobs: 3}
			if _, err := generate.RunOn(context.Background(), x, d, ids, opt, func(tk generate.Token) error {
				out = append(out, tk)
				return nil
			}); err != nil {
				t.Fatalf("Execs of %d rows: %v", x.Rows(), err)
			}
			return out
		}
		want, got := gen(big), gen(decoder(rows))
		same := len(got) == len(want)
		for i := range min(len(got), len(want)) {
			same = same && got[i].ID == want[i].ID && got[i].Logprobs.Logprob == want[i].Logprobs.Logprob &&
				slices.Equal(got[i].Logprobs.Top, want[i].Logprobs.Top)
		}
		if !same {
			t.Errorf("Execs of %d rows generate %+v, one Forward %+v (want the same bits)", rows, got, want)
		}
		t.Logf("a prompt of %d rows, its block from %d, Execs of %d rows: %d tokens as one Forward's", len(ids), first, rows, len(got))
	})
}
