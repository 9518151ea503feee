package sched

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"verdict/engine/catalog"
	"verdict/engine/generate"
	"verdict/engine/model"
	"verdict/engine/models"
	"verdict/engine/scorer"
	"verdict/engine/tokenizer"
	"verdict/native"
)

var (
	once     sync.Once
	builtin  *models.Model
	tok      *tokenizer.Tokenizer
	openErr  error
	ticketSc *scorer.Schema
)

// open returns the built-in model (shared by the tests), its tokenizer and
// the support-ticket schema, skipping when no tokenizer.json is found
// unless VERDICT_REQUIRE_TOKENIZER=1.
func open(t *testing.T) (*models.Model, *tokenizer.Tokenizer, *scorer.Schema) {
	t.Helper()
	if _, err := models.LoadTokenizer(""); err != nil {
		if os.Getenv("VERDICT_REQUIRE_TOKENIZER") == "1" {
			t.Fatal(err)
		}
		t.Skipf("%v", err)
	}
	once.Do(func() {
		builtin, openErr = models.OpenContext(context.Background(), models.Builtin, models.Options{CacheDir: "off"})
		if openErr != nil {
			return
		}
		if tok, openErr = builtin.Tokenizer(); openErr != nil {
			return
		}
		var raw []byte
		if raw, openErr = os.ReadFile("../scorer/testdata/ticket.json"); openErr != nil {
			return
		}
		ticketSc, openErr = scorer.ParseSchema(raw)
	})
	if openErr != nil {
		t.Fatal(openErr)
	}
	return builtin, tok, ticketSc
}

// job is one request of a mix: a scorer request, a generation or a
// catalog decode.
type job struct {
	text    string
	backend string // scorer: json, cached or catalog
	gen     bool
	opt     generate.Options
	k       int // a catalog decode of k tools
}

// outcome is a job's result as compared: the scorer's fields without their
// times, or the generated ids.
type outcome struct {
	fields string
	ids    []int32
	err    error
}

func fieldsJSON(r *scorer.Result) (string, error) {
	fs := slices.Clone(r.Fields)
	for i := range fs {
		fs[i].Elapsed, fs[i].CatalogTiming = 0, nil
	}
	b, err := json.Marshal(fs)
	return string(b) + string(r.Answer), err
}

func mix(tk *tokenizer.Tokenizer) []job {
	texts := []string{
		"My parcel arrived two weeks late and the box was crushed. I want my money back.",
		"I was charged twice for the same order, please fix it.",
		"Can't log in since yesterday's update; the password reset link does nothing.",
		"Just wanted to say the new shipping options are great!",
		"The manual for the router has the wrong port numbers in chapter 3.",
		"Refund please. Item damaged, delivery late, and I was billed twice. Furious.",
	}
	var jobs []job
	for i, s := range texts {
		b := "json"
		if i%3 == 2 {
			b = "cached"
		}
		jobs = append(jobs, job{text: s, backend: b})
	}
	stop := tk.StopIDs()
	gens := []generate.Options{
		{MaxTokens: 12, Stop: stop},
		{MaxTokens: 9, Temperature: 0.8, TopK: 40, TopP: 0.95, Seed: 7, Stop: stop},
		{MaxTokens: 20, Temperature: 1.2, Seed: 11, Stop: stop},
		{MaxTokens: 5, Stop: stop},
	}
	for i, o := range gens {
		jobs = append(jobs, job{text: texts[(i*5+1)%len(texts)], gen: true, opt: o})
	}
	// The catalog decoder through the scheduler: a scorer request whose
	// choice fields are decoded through their tries, and tool choices.
	jobs = append(jobs, job{text: texts[4], backend: "catalog"})
	for i, k := range []int{1, 3, 2} {
		jobs = append(jobs, job{text: texts[(i*2+1)%len(texts)], k: k})
	}
	return jobs
}

// decodeTools decodes k tools of engine/catalog/tools.json for text as
// `verdict catalog` does, on rq's steps (nil: alone).
func decodeTools(ctx context.Context, m *models.Model, tk *tokenizer.Tokenizer, text string, k int, rq *Request) (string, error) {
	raw, err := os.ReadFile("../catalog/tools.json")
	if err != nil {
		return "", err
	}
	entries, err := catalog.ParseEntries(raw)
	if err != nil {
		return "", err
	}
	sep, _ := tk.Lookup("\n")
	cat, err := catalog.Compile(entries, tk, catalog.Grammar{Sep: sep, SepText: "\n", Stop: tk.EndOfTurn()})
	if err != nil {
		return "", err
	}
	ids, err := catalog.Prompt(cat.Entries, k, text, m.Chat()).Encode(tk, m.Chat().Media)
	if err != nil {
		return "", err
	}
	opt := catalog.Options{}
	if rq != nil {
		tkt, err := rq.Admit(m.Need(len(ids) + cat.MaxAnswer(k)))
		if err != nil {
			return "", err
		}
		tkt.Release()
		opt.Runner = rq
	}
	res, err := catalog.Decode(ctx, m.Model, cat, catalog.Request{Prompt: ids, K: k}, opt)
	if err != nil {
		return "", err
	}
	b, err := json.Marshal(res.Steps)
	return fmt.Sprint(res.Names, res.Tokens) + string(b), err
}

// runJob runs j on runner r (nil: alone, on an Exec of its own), admitted
// through rq when set.
func runJob(ctx context.Context, m *models.Model, sc *scorer.Scorer, tk *tokenizer.Tokenizer, sch *scorer.Schema, j job, rq *Request) outcome {
	if j.k > 0 {
		var o outcome
		o.fields, o.err = decodeTools(ctx, m, tk, j.text, j.k, rq)
		return o
	}
	if j.gen {
		ids := tk.EncodeChat([]tokenizer.Turn{{Role: "user", Content: j.text}}, true)
		opt := j.opt
		var res generate.Result
		var err error
		if rq == nil {
			res, err = generate.Run(ctx, m.Model, ids, opt, nil)
		} else {
			var tkt model.Ticket
			tkt, err = rq.Admit(generate.Need(m.Model, len(ids), opt))
			if err != nil {
				return outcome{err: err}
			}
			defer tkt.Release()
			opt.Ticket = tkt
			res, err = generate.RunOn(ctx, rq, m.Model, ids, opt, nil)
		}
		return outcome{ids: res.IDs, err: err}
	}
	opt := scorer.Options{Backend: j.backend, BranchBatch: 4}
	if rq != nil {
		opt.Runner, opt.Admit = rq, rq.Admit
	}
	res, err := sc.Score(ctx, sch, j.text, opt)
	if err != nil {
		return outcome{err: err}
	}
	var o outcome
	o.fields, o.err = fieldsJSON(res)
	return o
}

func TestMixedRequestsBitIdentical(t *testing.T) {
	m, tk, sch := open(t)
	ctx := context.Background()
	jobs := mix(tk)
	alone := make([]outcome, len(jobs))
	sc := scorer.New(m.Model, tk)
	for i, j := range jobs {
		alone[i] = runJob(ctx, m, sc, tk, sch, j, nil)
		if alone[i].err != nil {
			t.Fatalf("job %d alone: %v", i, alone[i].err)
		}
	}
	for _, stepRows := range []int{0, 24} { // a step of an Exec's rows, and one that splits work over steps
		for round := 0; round < 2; round++ {
			s, err := New(m.Model, Options{StepRows: stepRows})
			if err != nil {
				t.Fatal(err)
			}
			order := rand.New(rand.NewPCG(uint64(round), 3)).Perm(len(jobs))
			got := make([]outcome, len(jobs))
			var wg sync.WaitGroup
			sc := scorer.New(m.Model, tk) // no prefix kept from the runs alone
			for _, i := range order {
				wg.Add(1)
				go func() {
					defer wg.Done()
					prio := Bulk
					if i%2 == 0 {
						prio = Interactive
					}
					rq := s.Begin(ctx, prio)
					defer rq.End()
					got[i] = runJob(ctx, m, sc, tk, sch, jobs[i], rq)
				}()
			}
			wg.Wait()
			st := s.Stats()
			s.Close()
			for i := range jobs {
				if got[i].err != nil {
					t.Errorf("step rows %d, round %d: job %d: %v", stepRows, round, i, got[i].err)
					continue
				}
				if got[i].fields != alone[i].fields || !slices.Equal(got[i].ids, alone[i].ids) {
					t.Errorf("step rows %d, round %d: job %d (%+v) differs from its run alone:\n got %s %v\nwant %s %v",
						stepRows, round, i, jobs[i], got[i].fields, got[i].ids, alone[i].fields, alone[i].ids)
				}
			}
			if st.MaxPasses < 2 {
				t.Errorf("step rows %d, round %d: no step merged two requests' passes (%+v)", stepRows, round, st)
			}
			if st.Running != 0 || st.Queued != 0 || st.Waiting != 0 {
				t.Errorf("after every request ended: %+v", st)
			}
			t.Logf("step rows %d, round %d: %+v", stepRows, round, st)
		}
	}
}

func TestAdmissionWaitsAndRefuses(t *testing.T) {
	m, tk, _ := open(t)
	ctx := context.Background()
	ids := tk.EncodeChat([]tokenizer.Turn{{Role: "user", Content: "Write a haiku about queues."}}, true)
	opt := generate.Options{MaxTokens: 8, Stop: tk.StopIDs()}
	need := generate.Need(m.Model, len(ids), opt)
	ref, err := generate.Run(ctx, m.Model, ids, opt, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A pool of one request's global blocks: four requests run one at a
	// time, each waiting for the one before.
	blocks := max(need[0], need[1])
	v, err := m.Model.WithKVPositions(blocks * model.KVBlock)
	if err != nil {
		t.Fatal(err)
	}
	defer v.CloseView()
	s, err := New(v, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var wg sync.WaitGroup
	outs := make([][]int32, 4)
	errs := make([]error, 4)
	for i := range outs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rq := s.Begin(ctx, Bulk)
			defer rq.End()
			tkt, err := rq.Admit(generate.Need(v, len(ids), opt))
			if err != nil {
				errs[i] = err
				return
			}
			defer tkt.Release()
			o := opt
			o.Ticket = tkt
			res, err := generate.RunOn(ctx, rq, v, ids, o, nil)
			outs[i], errs[i] = res.IDs, err
		}()
	}
	wg.Wait()
	for i := range outs {
		if errs[i] != nil || !slices.Equal(outs[i], ref.IDs) {
			t.Errorf("request %d in a pool of one request: %v %v, want %v", i, errs[i], outs[i], ref.IDs)
		}
	}
	if st := s.Stats(); st.Waited == 0 {
		t.Errorf("no request waited for blocks: %+v", st)
	}
	if free := v.KVFree(); free[0] < need[0] {
		t.Errorf("after every request ended %v blocks are free, want at least %v", free, need)
	}
	// One block more than the pool: refused at once, naming the sizes.
	rq := s.Begin(ctx, Bulk)
	_, err = rq.Admit([2]int{blocks + 1, 0})
	rq.End()
	var nf *NeverFitsError
	if !errors.As(err, &nf) || nf.KV.Need != blocks+1 || nf.KV.Free != blocks {
		t.Errorf("a request one block beyond the pool: %v, want a NeverFitsError of %d of %d", err, blocks+1, blocks)
	}
}

func TestQueueBoundAndCancel(t *testing.T) {
	m, _, _ := open(t)
	ctx := context.Background()
	v, err := m.Model.WithKVPositions(4 * model.KVBlock)
	if err != nil {
		t.Fatal(err)
	}
	defer v.CloseView()
	s, err := New(v, Options{MaxWaiting: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	hold := s.Begin(ctx, Interactive)
	tkt, err := hold.Admit([2]int{4, 0}) // the whole pool
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	waitErr := make(chan error, 1)
	w := s.Begin(cctx, Bulk)
	go func() { _, err := w.Admit([2]int{2, 0}); waitErr <- err }()
	deadline := time.Now().Add(10 * time.Second)
	for s.Stats().Waiting == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	third := s.Begin(ctx, Bulk)
	if _, err := third.Admit([2]int{1, 0}); !errors.Is(err, ErrQueueFull) {
		t.Errorf("a request beyond the queue's bound: %v, want ErrQueueFull", err)
	}
	third.End()
	cancel()
	if err := <-waitErr; !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled wait: %v", err)
	}
	w.End()
	if st := s.Stats(); st.Waiting != 0 {
		t.Errorf("the cancelled request still waits: %+v", st)
	}
	tkt.Release()
	hold.End()
	if free := v.KVFree(); free[0] != 4 {
		t.Errorf("after the holder ended %v blocks are free, want 4", free)
	}
}

// TestCancelFreesBlocks cancels generations mid-way among others: every
// block comes back, and the others' tokens are their runs alone.
func TestCancelFreesBlocks(t *testing.T) {
	m, tk, _ := open(t)
	ctx := context.Background()
	ids := tk.EncodeChat([]tokenizer.Turn{{Role: "user", Content: "Count slowly to one hundred."}}, true)
	opt := generate.Options{MaxTokens: 24}
	ref, err := generate.Run(ctx, m.Model, ids, opt, nil)
	if err != nil {
		t.Fatal(err)
	}
	v, err := m.Model.WithKVPositions(1 << 12)
	if err != nil {
		t.Fatal(err)
	}
	defer v.CloseView()
	before := v.KVFree()
	s, err := New(v, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var wg sync.WaitGroup
	res := make([]generate.Result, 6)
	errs := make([]error, 6)
	for i := range res {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithCancel(ctx)
			defer cancel()
			rq := s.Begin(cctx, Interactive)
			defer rq.End()
			tkt, err := rq.Admit(generate.Need(v, len(ids), opt))
			if err != nil {
				errs[i] = err
				return
			}
			defer tkt.Release()
			o := opt
			o.Ticket = tkt
			res[i], errs[i] = generate.RunOn(cctx, rq, v, ids, o, func(tk generate.Token) error {
				if i%2 == 1 && tk.Index == 3 {
					cancel()
				}
				return nil
			})
		}()
	}
	wg.Wait()
	for i := range res {
		if i%2 == 1 {
			if !errors.Is(errs[i], context.Canceled) || len(res[i].IDs) > 5 {
				t.Errorf("cancelled generation %d: %v after %d tokens", i, errs[i], len(res[i].IDs))
			}
			continue
		}
		if errs[i] != nil || !slices.Equal(res[i].IDs, ref.IDs) {
			t.Errorf("generation %d beside cancelled ones: %v %v, want %v", i, errs[i], res[i].IDs, ref.IDs)
		}
	}
	if after := v.KVFree(); after != before {
		t.Errorf("free blocks %v after, %v before", after, before)
	}
}

func TestTakeOrdersByPriority(t *testing.T) {
	s := &Scheduler{rows: 10}
	mk := func(n int, hook bool) *pass {
		b := &model.Batch{Rows: make([]model.Row, n)}
		if hook {
			b.Hook = func(int, []float32) {}
		}
		return &pass{b: b}
	}
	bulk1, bulk2 := mk(4, false), mk(4, false)
	inter1, inter2 := mk(3, false), mk(5, false)
	s.queue[Bulk] = []*pass{bulk1, bulk2}
	s.queue[Interactive] = []*pass{inter1, inter2}
	step := s.take()
	if want := []*pass{inter1, inter2}; !slices.Equal(step, want) {
		t.Errorf("first step took %d passes, want the two interactive ones (%d rows of 10)", len(step), 8)
	}
	step = s.take()
	if want := []*pass{bulk1, bulk2}; !slices.Equal(step, want) {
		t.Errorf("second step took %d passes, want both bulk ones", len(step))
	}
	h1, p := mk(1, true), mk(1, false)
	s.queue[Interactive] = []*pass{p, h1}
	if step := s.take(); len(step) != 1 || step[0] != p {
		t.Errorf("a pass with a hook was merged: %d passes", len(step))
	}
	if step := s.take(); len(step) != 1 || step[0] != h1 {
		t.Errorf("the hook's pass did not run alone")
	}
}

// TestDecodeGreedySolo: a request running alone decodes greedy tokens in a
// loop step of its own, the tokens of passes a token each; beside another
// request it is told it is busy.
func TestDecodeGreedySolo(t *testing.T) {
	m, tk, _ := open(t)
	if !m.InputsResident() {
		t.Skip("the device loop needs the per-layer table resident")
	}
	ctx := context.Background()
	ids := tk.EncodeChat([]tokenizer.Turn{{Role: "user", Content: "Name three rivers."}}, true)
	ref, err := generate.Run(ctx, m.Model, ids, generate.Options{MaxTokens: 17}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(m.Model, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rq := s.Begin(ctx, Interactive)
	defer rq.End()
	tkt, err := rq.Admit(generate.Need(m.Model, len(ids), generate.Options{MaxTokens: 17}))
	if err != nil {
		t.Fatal(err)
	}
	defer tkt.Release()
	c := m.Model.NewCache()
	defer c.Free()
	c.Bind(tkt)
	var first int32
	b := model.Batch{}
	b.Add(c, ids, 1)
	if err := rq.Run(&b, func(x model.Exec, h native.Tensor) error {
		var err error
		first, err = x.Sample(h, native.Sampling{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	toks, err := rq.DecodeGreedy([]model.Cache{c}, []int32{first}, 16, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := append([]int32{first}, toks[0]...); !slices.Equal(got, ref.IDs) {
		t.Errorf("a loop step alone: %v, want %v", got, ref.IDs)
	}
	other := s.Begin(ctx, Bulk)
	otk, err := other.Admit([2]int{1, 0})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rq.DecodeGreedy([]model.Cache{c}, []int32{toks[0][15]}, 16, nil); !errors.Is(err, model.ErrBusy) {
		t.Errorf("a loop beside another request: %v, want ErrBusy", err)
	}
	otk.Release()
	other.End()
}
