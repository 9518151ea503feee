package session

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"verdict/engine/catalog"
	"verdict/engine/models"
	"verdict/engine/scorer"
	"verdict/native"
)

// openReplicas opens the built-in model n times on the CPU, one replica
// each (fake devices: they share the cores), joined; the log lines go to
// the returned function's result.
func openReplicas(t *testing.T, n int) (*Session, func() []string) {
	t.Helper()
	open(t) // skips without a tokenizer
	backends := make([]*native.Backend, n)
	devices := make([]string, n)
	for i := range backends {
		backends[i], devices[i] = native.Default(), "cpu"
	}
	var mu sync.Mutex
	var lines []string
	s, err := OpenDevices(context.Background(), models.Builtin, models.Options{CacheDir: "off"}, backends, devices, func(l string) {
		mu.Lock()
		lines = append(lines, l)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(lines)
	}
}

// job is one request of the replica tests: a scorer request (json or
// cached), a generation (greedy or sampled), a prompt's logprobs or a
// catalog selection.
type job struct {
	kind    string
	text    string
	backend string
	gen     Sampling
}

func replicaJobs(n int) []job {
	rng := rand.New(rand.NewPCG(3, 30))
	words := []string{"parcel", "late", "refund", "broken", "invoice", "password", "thanks", "angry", "twice", "order"}
	var jobs []job
	for i := range n {
		var b strings.Builder
		for range 4 + rng.IntN(12) {
			b.WriteString(words[rng.IntN(len(words))] + " ")
		}
		text := fmt.Sprintf("ticket %d: %s", i, b.String())
		switch i % 6 {
		case 0:
			jobs = append(jobs, job{kind: "score", text: text, backend: "json"})
		case 1:
			jobs = append(jobs, job{kind: "score", text: text, backend: "cached"})
		case 2:
			jobs = append(jobs, job{kind: "generate", text: text, gen: Sampling{MaxTokens: 4 + i%9}})
		case 3:
			jobs = append(jobs, job{kind: "generate", text: text, gen: Sampling{MaxTokens: 3 + i%7, Temperature: 0.8, TopK: 40, TopP: 0.9, Seed: uint64(i)}})
		case 4:
			jobs = append(jobs, job{kind: "logprobs", text: text})
		default:
			jobs = append(jobs, job{kind: "select", text: text})
		}
	}
	return jobs
}

// run runs j on s: its results as text, every bit of every number, and
// for a generation the tokens it streamed.
func (j job) run(ctx context.Context, t *testing.T, s *Session, sc *scorer.Schema) (string, error) {
	var b strings.Builder
	switch j.kind {
	case "score":
		var fields []string
		r, err := s.Score(ctx, sc, j.text, scorer.Options{Backend: j.backend, OnField: func(f scorer.FieldResult) { fields = append(fields, f.Name) }})
		if err != nil {
			return "", err
		}
		for _, f := range r.Fields {
			for _, d := range f.Decisions {
				for _, c := range d.Candidates {
					fmt.Fprintf(&b, "%s=%x/%x ", c.Value, c.LogLikelihood, c.Probability)
				}
			}
		}
		fmt.Fprintf(&b, "fields %v", fields)
	case "generate":
		var streamed []int32
		r, err := s.Generate(ctx, Request{Kind: PromptChat, Input: j.text, Sampling: j.gen}, func(tk Token) error {
			if tk.Index != len(streamed) {
				t.Errorf("token %d streamed as number %d", tk.Index, len(streamed))
			}
			streamed = append(streamed, tk.ID)
			return nil
		})
		if err != nil {
			return "", err
		}
		if !slices.Equal(streamed, r.IDs) {
			t.Errorf("streamed %v, the result holds %v", streamed, r.IDs)
		}
		fmt.Fprint(&b, r.IDs, r.Stopped, r.PromptTokens)
	case "logprobs":
		ids, lps, err := s.PromptLogprobs(ctx, Request{Kind: PromptChat, Input: j.text}, 3)
		if err != nil {
			return "", err
		}
		fmt.Fprint(&b, ids)
		for _, lp := range lps {
			fmt.Fprintf(&b, " %x", lp.Logprob)
			for _, a := range lp.Top {
				fmt.Fprintf(&b, ",%d:%x", a.ID, a.Logprob)
			}
		}
	case "select":
		sel, err := s.Select(ctx, catalog.Tools()[:10], j.text, 2)
		if err != nil {
			return "", err
		}
		fmt.Fprint(&b, sel.Names, sel.Tokens)
	}
	return b.String(), nil
}

// all runs jobs at once on s (in a shuffled order), each result at its
// index.
func all(t *testing.T, s *Session, sc *scorer.Schema, jobs []job) ([]string, []error) {
	got := make([]string, len(jobs))
	errs := make([]error, len(jobs))
	var wg sync.WaitGroup
	for _, i := range rand.New(rand.NewPCG(7, 9)).Perm(len(jobs)) {
		wg.Go(func() { got[i], errs[i] = jobs[i].run(context.Background(), t, s, sc) })
	}
	wg.Wait()
	return got, errs
}

// alone runs each job by itself on the one-device session.
func alone(t *testing.T, sc *scorer.Schema, jobs []job) []string {
	s := open(t)
	want := make([]string, len(jobs))
	for i, j := range jobs {
		var err error
		if want[i], err = j.run(context.Background(), t, s, sc); err != nil {
			t.Fatalf("job %d (%s) alone: %v", i, j.kind, err)
		}
	}
	return want
}

// TestReplicasSameResults: three replicas answer scorer requests,
// generations, prompt logprobs and catalog selections, all at once, with
// the bits one device gives each alone, and every replica answers some.
func TestReplicasSameResults(t *testing.T) {
	s, logs := openReplicas(t, 3)
	sc := schema(t)
	jobs := replicaJobs(36)
	want := alone(t, sc, jobs)
	got, errs := all(t, s, sc, jobs)
	for i := range jobs {
		if errs[i] != nil {
			t.Fatalf("job %d (%s): %v", i, jobs[i].kind, errs[i])
		}
		if got[i] != want[i] {
			t.Errorf("job %d (%s) on the replicas:\n got %s\nwant %s", i, jobs[i].kind, got[i], want[i])
		}
	}
	// One at a time, they go round the replicas too.
	for i, j := range jobs[:6] {
		if r, err := j.run(context.Background(), t, s, sc); err != nil || r != want[i] {
			t.Errorf("job %d (%s) alone on the replicas: %v\n got %s\nwant %s", i, j.kind, err, r, want[i])
		}
	}
	reps := s.Replicas()
	if len(reps) != 3 {
		t.Fatalf("%d replicas, want 3", len(reps))
	}
	total := int64(0)
	for _, r := range reps {
		if !r.Up || r.Error != "" || r.Retried != 0 {
			t.Errorf("replica %d: %+v, want it up", r.Index, r)
		}
		if r.Requests == 0 || r.Sched.Steps == 0 {
			t.Errorf("replica %d answered %d requests in %d steps: the requests were not spread", r.Index, r.Requests, r.Sched.Steps)
		}
		if r.Device != "cpu" || r.Backend != "cpu" {
			t.Errorf("replica %d: device %q, backend %q", r.Index, r.Device, r.Backend)
		}
		total += r.Requests
	}
	if total != int64(len(jobs)+6) {
		t.Errorf("the replicas answered %d requests, %d were sent", total, len(jobs)+6)
	}
	t.Logf("requests a replica: %d, %d, %d", reps[0].Requests, reps[1].Requests, reps[2].Requests)
	if st := s.SchedStats(); st.Steps != reps[0].Sched.Steps+reps[1].Sched.Steps+reps[2].Sched.Steps {
		t.Errorf("SchedStats %d steps, the replicas' add up to another number", st.Steps)
	}
	if l := logs(); len(l) != 0 {
		t.Errorf("log %q", l)
	}
	if s.Info().Name != open(t).Info().Name || s.Info().Params != open(t).Info().Params {
		t.Errorf("Info %+v", s.Info())
	}
	if one := open(t); one.Replicas() != nil {
		t.Errorf("one device's session has replicas %+v", one.Replicas())
	}
}

// TestReplicaFails: a replica whose device fails partway through its
// requests is taken out (logged, naming it and the error), and every
// request it had runs again on the others with the same results: a
// generation streams each token once. When the last one fails, the
// request's error comes back.
func TestReplicaFails(t *testing.T) {
	s, logs := openReplicas(t, 3)
	sc := schema(t)
	jobs := replicaJobs(30)
	want := alone(t, sc, jobs)
	deviceErr := fmt.Errorf("native: cpu: stream failed (error 700): %w", native.ErrDevice)
	var passes atomic.Int64
	s.setFault(1, func() error {
		if passes.Add(1) > 5 { // after a few passes: requests on it are partway
			return deviceErr
		}
		return nil
	})
	got, errs := all(t, s, sc, jobs)
	for i := range jobs {
		if errs[i] != nil {
			t.Fatalf("job %d (%s): %v", i, jobs[i].kind, errs[i])
		}
		if got[i] != want[i] {
			t.Errorf("job %d (%s) after the failure:\n got %s\nwant %s", i, jobs[i].kind, got[i], want[i])
		}
	}
	reps := s.Replicas()
	if r := reps[1]; r.Up || !strings.Contains(r.Error, "stream failed (error 700)") || r.Retried == 0 {
		t.Errorf("replica 1: %+v, want it taken out with its requests run again", r)
	}
	for _, i := range []int{0, 2} {
		if !reps[i].Up || reps[i].Requests == 0 {
			t.Errorf("replica %d: %+v", i, reps[i])
		}
	}
	l := logs()
	if len(l) != 1 || !strings.Contains(l[0], "replica 1 (cpu) taken out of service") || !strings.Contains(l[0], "error 700") ||
		!strings.Contains(l[0], "its requests run again on the other replicas (2 left)") {
		t.Errorf("log %q, want one line naming replica 1 and its error", l)
	}
	t.Logf("%s; requests a replica: %d (%d retried), %d, %d", l, reps[1].Requests, reps[1].Retried, reps[0].Requests, reps[2].Requests)
	// Later requests avoid it.
	before := reps[1].Requests
	for i, j := range jobs[:4] {
		if r, err := j.run(context.Background(), t, s, sc); err != nil || r != want[i] {
			t.Errorf("job %d after: %v", i, err)
		}
	}
	if n := s.Replicas()[1].Requests; n != before {
		t.Errorf("the replica taken out answered %d more requests", n-before)
	}
	// A request's own error is not a device's: nothing is taken out.
	if _, err := s.Score(context.Background(), sc, "", scorer.Options{Backend: "nope"}); err == nil {
		t.Error("a bad backend: no error")
	}
	if reps := s.Replicas(); !reps[0].Up || !reps[2].Up {
		t.Errorf("a request's error took a replica out: %+v", reps)
	}
	// Every device fails: the error comes back.
	s.setFault(0, func() error { return deviceErr })
	s.setFault(2, func() error { return deviceErr })
	_, err := jobs[0].run(context.Background(), t, s, sc)
	if err == nil || !errors.Is(err, native.ErrDevice) || !strings.Contains(err.Error(), "error 700") {
		t.Fatalf("every replica failing: error %v", err)
	}
	if _, err := jobs[2].run(context.Background(), t, s, sc); err == nil || !strings.Contains(err.Error(), "no replica left") {
		t.Errorf("no replica left: error %v", err)
	}
	if l := logs(); len(l) != 3 {
		t.Errorf("%d log lines, want one a replica: %q", len(l), l)
	}
}

// TestJoinRefuses: Join takes sessions of one model, with a name each.
func TestJoinRefuses(t *testing.T) {
	s := open(t)
	if j, err := Join([]*Session{s}, []string{"cpu"}, nil); err != nil || j != s {
		t.Errorf("one session: %v, %v", j, err)
	}
	if _, err := Join(nil, nil, nil); err == nil {
		t.Error("no sessions: no error")
	}
	if _, err := Join([]*Session{s, s}, []string{"cpu"}, nil); err == nil {
		t.Error("two sessions, one name: no error")
	}
	other := &Session{m: s.m, tok: s.tok, info: s.info}
	other.info.Name = "another model"
	if _, err := Join([]*Session{s, other}, []string{"cuda:0", "cuda:1"}, nil); err == nil || !strings.Contains(err.Error(), "replica 1 (cuda:1) is another model") {
		t.Errorf("two models: %v", err)
	}
}

// TestReplicaFailsMidGeneration: a generation whose device fails after it
// streamed tokens runs again on the other replica, which streams only the
// tokens after those: each once, the same as on one device.
func TestReplicaFailsMidGeneration(t *testing.T) {
	s, logs := openReplicas(t, 2)
	sc := schema(t)
	j := job{kind: "generate", text: "Tell me about parcels", gen: Sampling{MaxTokens: 12, Temperature: 0.7, Seed: 5}}
	want := alone(t, sc, []job{j})[0]
	var passes atomic.Int64
	var streamed []int32
	atFail := -1
	s.setFault(0, func() error { // the first request goes to replica 0
		if passes.Add(1) > 4 {
			if atFail < 0 {
				atFail = len(streamed)
			}
			return fmt.Errorf("native: cpu: out of memory allocating 4096 bytes: %w", native.ErrDevice)
		}
		return nil
	})
	r, err := s.Generate(context.Background(), Request{Kind: PromptChat, Input: j.text, Sampling: j.gen}, func(tk Token) error {
		if tk.Index != len(streamed) {
			t.Errorf("token %d streamed as number %d", tk.Index, len(streamed))
		}
		streamed = append(streamed, tk.ID)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(r.IDs, r.Stopped, r.PromptTokens); got != want || !slices.Equal(streamed, r.IDs) {
		t.Errorf("got %s, streamed %v, want %s", got, streamed, want)
	}
	if atFail < 1 || atFail >= len(streamed) {
		t.Errorf("replica 0 failed after %d of %d tokens, want partway", atFail, len(streamed))
	}
	reps := s.Replicas()
	if reps[0].Up || reps[0].Retried != 1 || reps[1].Requests != 1 || passes.Load() < 5 {
		t.Errorf("replicas %+v after %d passes on replica 0", reps, passes.Load())
	}
	if l := logs(); len(l) != 1 || !strings.Contains(l[0], "replica 0 (cpu) taken out of service: native: cpu: out of memory") {
		t.Errorf("log %q", l)
	}
	// The caller's own error is not the device's: it ends the request.
	stop := errors.New("enough")
	if _, err := s.Generate(context.Background(), Request{Kind: PromptChat, Input: j.text, Sampling: j.gen}, func(Token) error { return stop }); !errors.Is(err, stop) {
		t.Errorf("emit's error: %v", err)
	}
	if !s.Replicas()[1].Up {
		t.Error("emit's error took the replica out")
	}
}
