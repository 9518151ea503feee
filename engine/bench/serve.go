package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"verdict/engine/catalog"
	"verdict/engine/prefix"
	"verdict/engine/sched"
	"verdict/engine/scorer"
	"verdict/engine/session"
)

// ServeOptions are a serving benchmark's settings.
type ServeOptions struct {
	Records     int           // generated tickets scored at every concurrency
	Concurrency []int         // records in flight, one measurement each
	Clients     int           // concurrent clients of the mixed load (0: none)
	Duration    time.Duration // how long the mixed load runs
	GenTokens   int           // tokens a generation client asks for
}

// ServeLevel is one concurrency's bulk scoring.
type ServeLevel struct {
	Concurrency   int     `json:"concurrency"`
	Seconds       float64 `json:"seconds"`
	RecordsPerSec float64 `json:"records_per_sec"`
	Speedup       float64 `json:"speedup"` // over the first level
	Steps         int64   `json:"steps"`   // the scheduler's forward passes
	MaxMerged     int     `json:"max_merged"`
	// Devices are each replica's part of the records (several devices);
	// RecordsPerSec is their sum.
	Devices []DeviceShare `json:"devices,omitempty"`
}

// DeviceShare is one replica's part of a measurement on several devices.
type DeviceShare struct {
	Replica  int     `json:"replica"`
	Device   string  `json:"device"`
	Requests int64   `json:"requests"` // records, or the mixed load's requests
	Share    float64 `json:"share"`    // of all the requests
	PerSec   float64 `json:"per_sec"`  // its requests a second
	Steps    int64   `json:"steps"`
	Up       bool    `json:"up"`
}

// shares are each replica's requests between two Replicas reports, over
// sec seconds; nil for one device.
func shares(before, after []session.ReplicaInfo, sec float64) []DeviceShare {
	if len(after) == 0 || len(before) != len(after) {
		return nil
	}
	total := int64(0)
	for i := range after {
		total += after[i].Requests - before[i].Requests
	}
	out := make([]DeviceShare, len(after))
	for i, a := range after {
		n := a.Requests - before[i].Requests
		out[i] = DeviceShare{Replica: a.Index, Device: a.Device, Requests: n, Share: float64(n) / float64(max(total, 1)),
			PerSec: float64(n) / sec, Steps: a.Sched.Steps - before[i].Sched.Steps, Up: a.Up}
	}
	return out
}

// writeShares writes each replica's line of a measurement and their sum.
func writeShares(b *strings.Builder, ds []DeviceShare, unit string) {
	sum := 0.0
	for _, d := range ds {
		out := ""
		if !d.Up {
			out = ", taken out"
		}
		fmt.Fprintf(b, "    replica %d (%s): %8.1f %s/s  (%.1f%% of them, %d steps%s)\n", d.Replica, d.Device, d.PerSec, unit, 100*d.Share, d.Steps, out)
		sum += d.PerSec
	}
	fmt.Fprintf(b, "    sum of %d devices: %8.1f %s/s\n", len(ds), sum, unit)
}

// MixedReport is the mixed client load: scorer and generation clients at
// once, each sending its next request when the last is answered.
type MixedReport struct {
	Clients      int     `json:"clients"`
	Seconds      float64 `json:"seconds"`
	Scores       int     `json:"scores"`
	Generations  int     `json:"generations"`
	Refused      int     `json:"refused"` // answered with an error (the queue full, ...)
	ScoreAloneMs float64 `json:"score_alone_ms"`
	ScoreP50Ms   float64 `json:"score_p50_ms"`
	ScoreP99Ms   float64 `json:"score_p99_ms"`
	GenP50Ms     float64 `json:"generate_p50_ms"`
	GenP99Ms     float64 `json:"generate_p99_ms"`
	TokensPerSec float64 `json:"tokens_per_sec"` // generated and prompt tokens of every request
	PeakRSSMB    float64 `json:"peak_rss_mb"`
	// Devices are each replica's part of the requests (several devices).
	Devices []DeviceShare `json:"devices,omitempty"`
}

// ServeReport is `verdict bench serve`'s result for one model.
type ServeReport struct {
	Model  string       `json:"model"`
	Levels []ServeLevel `json:"levels"`
	Mixed  *MixedReport `json:"mixed,omitempty"`
	Prefix prefix.Stats `json:"prefix_cache"`
	Sched  sched.Stats  `json:"scheduler"`
	Notes  []string     `json:"notes,omitempty"`
	Memory Memory       `json:"memory"`
	Tokens int          `json:"prompt_tokens"` // of one record
	// Replicas are the replicas at the end (several devices).
	Replicas []session.ReplicaInfo `json:"replicas,omitempty"`
}

func (r ServeReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: score-file rate, %d-token prompts\n", r.Model, r.Tokens)
	for _, l := range r.Levels {
		fmt.Fprintf(&b, "  concurrency %3d: %8.1f records/s  (%.2fx, %d steps, up to %d passes a step)\n",
			l.Concurrency, l.RecordsPerSec, l.Speedup, l.Steps, l.MaxMerged)
		if len(l.Devices) > 0 {
			writeShares(&b, l.Devices, "records")
		}
	}
	fmt.Fprintf(&b, "  prefix cache: %d of %d lookups hit (%.1f%%), %d of %d prompt tokens forked\n",
		r.Prefix.Hits, r.Prefix.Lookups, 100*r.Prefix.HitRate(), r.Prefix.TokensFound, r.Prefix.TokensAsked)
	if m := r.Mixed; m != nil {
		fmt.Fprintf(&b, "  %d mixed clients for %.0f s: %d scores, %d generations, %d refused; %.0f tokens/s\n",
			m.Clients, m.Seconds, m.Scores, m.Generations, m.Refused, m.TokensPerSec)
		fmt.Fprintf(&b, "    score p50 %.1f ms, p99 %.1f ms (%.1fx its %.1f ms alone); generate p50 %.1f ms, p99 %.1f ms; peak RSS %.0f MB\n",
			m.ScoreP50Ms, m.ScoreP99Ms, m.ScoreP99Ms/max(m.ScoreAloneMs, 1e-9), m.ScoreAloneMs, m.GenP50Ms, m.GenP99Ms, m.PeakRSSMB)
		if len(m.Devices) > 0 {
			writeShares(&b, m.Devices, "requests")
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "  note: %s\n", n)
	}
	return b.String()
}

// Tickets returns n generated support tickets, the same for a seed.
func Tickets(n int, seed uint64) []string {
	rng := rand.New(rand.NewPCG(seed, 0x7ec7))
	opens := []string{"Hi,", "Hello team,", "To whom it may concern:", "Urgent:", "Hey,", "Good morning,"}
	issues := []string{
		"my parcel arrived two weeks late", "the box was crushed and the item broken", "I was charged twice for order %d",
		"I can't log in since the update", "the password reset link does nothing", "the invoice shows the wrong address",
		"the manual for model %d has the wrong port numbers", "my refund for order %d never came", "the tracking page is empty",
	}
	asks := []string{"Please refund me.", "Can someone call me back?", "Fix this today.", "What are my options?",
		"I want to cancel my subscription.", "Thanks for your help.", "This is the third time I write."}
	out := make([]string, n)
	for i := range out {
		k := 1 + rng.IntN(3)
		var parts []string
		parts = append(parts, opens[rng.IntN(len(opens))])
		for j := 0; j < k; j++ {
			is := issues[rng.IntN(len(issues))]
			if strings.Contains(is, "%d") {
				is = fmt.Sprintf(is, 1000+rng.IntN(9000))
			}
			parts = append(parts, is+".")
		}
		parts = append(parts, asks[rng.IntN(len(asks))])
		out[i] = strings.Join(parts, " ")
	}
	return out
}

// Serve measures a session serving many requests: the support-ticket
// records scored at each concurrency (bulk priority, the rate and the
// speedup over the first level), then the mixed client load.
func Serve(ctx context.Context, name string, s *session.Session, schema *scorer.Schema, opt ServeOptions) (ServeReport, error) {
	rep := ServeReport{Model: name}
	recs := Tickets(opt.Records, 1)
	if len(recs) == 0 || len(opt.Concurrency) == 0 {
		return rep, fmt.Errorf("bench serve: no records or no concurrency")
	}
	if _, n, err := s.SchemaPrompt(schema, recs[0], nil, false); err == nil {
		rep.Tokens = n
	}
	bulk := session.WithPriority(ctx, sched.Bulk)
	// Warm: the schema compiled, its instructions kept (on every replica:
	// requests one at a time go round them).
	for range max(len(s.Replicas()), 1) {
		if _, err := s.Score(bulk, schema, recs[0], scorer.Options{}); err != nil {
			return rep, err
		}
	}
	for _, c := range opt.Concurrency {
		if c < 1 {
			return rep, fmt.Errorf("bench serve: concurrency %d", c)
		}
		before, repsBefore := s.SchedStats(), s.Replicas()
		t0 := time.Now()
		if err := scoreAll(bulk, s, schema, recs, c); err != nil {
			return rep, err
		}
		sec := time.Since(t0).Seconds()
		after := s.SchedStats()
		l := ServeLevel{Concurrency: c, Seconds: sec, RecordsPerSec: float64(len(recs)) / sec,
			Steps: after.Steps - before.Steps, MaxMerged: after.MaxPasses, Devices: shares(repsBefore, s.Replicas(), sec)}
		if len(rep.Levels) > 0 {
			l.Speedup = l.RecordsPerSec / rep.Levels[0].RecordsPerSec
		} else {
			l.Speedup = 1
		}
		rep.Levels = append(rep.Levels, l)
	}
	rep.Prefix = s.PrefixStats()
	if opt.Clients > 0 {
		m, err := mixed(ctx, s, schema, recs, opt)
		if err != nil {
			return rep, err
		}
		rep.Mixed = &m
	}
	rep.Sched = s.SchedStats()
	rep.Memory = ReadMemory()
	rep.Replicas = s.Replicas()
	return rep, nil
}

// scoreAll scores recs with c in flight at once.
func scoreAll(ctx context.Context, s *session.Session, schema *scorer.Schema, recs []string, c int) error {
	next := make(chan string)
	errs := make(chan error, c)
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for i := 0; i < c; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for text := range next {
				if _, err := s.Score(ctx, schema, text, scorer.Options{}); err != nil {
					errs <- err
					cancel()
					return
				}
			}
		}()
	}
feed:
	for _, r := range recs {
		select {
		case next <- r:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return ctx.Err()
	}
}

// mixed runs opt.Clients clients for opt.Duration: even ones score a
// ticket, odd ones generate a reply to it, each waiting for its answer.
func mixed(ctx context.Context, s *session.Session, schema *scorer.Schema, recs []string, opt ServeOptions) (MixedReport, error) {
	rep := MixedReport{Clients: opt.Clients}
	t0 := time.Now()
	if _, err := s.Score(ctx, schema, recs[len(recs)-1], scorer.Options{}); err != nil {
		return rep, err
	}
	rep.ScoreAloneMs = float64(time.Since(t0).Microseconds()) / 1000
	ResetPeakMemory()
	repsBefore := s.Replicas()
	var mu sync.Mutex
	var scoreMs, genMs []float64
	tokens := 0
	deadline := time.Now().Add(opt.Duration)
	var wg sync.WaitGroup
	start := time.Now()
	for c := 0; c < opt.Clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := c; time.Now().Before(deadline); i += opt.Clients {
				text := recs[i%len(recs)]
				t := time.Now()
				n := 0
				var err error
				if c%2 == 0 {
					var r *scorer.Result
					if r, err = s.Score(ctx, schema, text, scorer.Options{}); err == nil {
						n = r.PromptTokens
					}
				} else {
					var r session.Result
					r, err = s.Generate(ctx, session.Request{Kind: session.PromptChat, Input: "Reply to this ticket: " + text,
						Sampling: session.Sampling{MaxTokens: max(opt.GenTokens, 1)}}, nil)
					n = r.PromptTokens + len(r.IDs)
				}
				ms := float64(time.Since(t).Microseconds()) / 1000
				mu.Lock()
				switch {
				case err != nil:
					rep.Refused++
				case c%2 == 0:
					scoreMs = append(scoreMs, ms)
				default:
					genMs = append(genMs, ms)
				}
				tokens += n
				mu.Unlock()
				if ctx.Err() != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	rep.Seconds = time.Since(start).Seconds()
	rep.Scores, rep.Generations = len(scoreMs), len(genMs)
	rep.ScoreP50Ms, rep.ScoreP99Ms = quantile(scoreMs, 0.5), quantile(scoreMs, 0.99)
	rep.GenP50Ms, rep.GenP99Ms = quantile(genMs, 0.5), quantile(genMs, 0.99)
	rep.TokensPerSec = float64(tokens) / rep.Seconds
	rep.PeakRSSMB = float64(ReadMemory().HWM) / (1 << 20)
	rep.Devices = shares(repsBefore, s.Replicas(), rep.Seconds)
	return rep, ctx.Err()
}

// quantile is the q-quantile of xs (nearest rank), 0 for none.
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	i := int(q*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// CheckMix is the scheduler's gate on a session: scorer requests (json,
// cached and catalog), generations (greedy and seeded sampling) and tool
// choices (Select: the catalog decoder) run one at a time,
// then all at once in a shuffled order, each with the same bits both ways
// (every candidate's log-likelihood and probability, every token). It
// returns the number of requests and of passes the busiest step merged.
func CheckMix(ctx context.Context, s *session.Session, schema *scorer.Schema, n int) (requests, merged int, err error) {
	recs := Tickets(n, 2)
	type job struct {
		text    string
		backend string
		gen     *session.Sampling
		k       int // tools chosen from catalog.Tools (Select)
	}
	var jobs []job
	for i, r := range recs {
		switch i % 6 {
		case 0, 1:
			jobs = append(jobs, job{text: r, backend: []string{"json", "cached"}[i%2]})
		case 4:
			jobs = append(jobs, job{text: r, backend: "catalog"})
		case 5:
			jobs = append(jobs, job{text: r, k: 1 + i%3})
		case 2:
			jobs = append(jobs, job{text: r, gen: &session.Sampling{MaxTokens: 6 + i%11}})
		default:
			jobs = append(jobs, job{text: r, gen: &session.Sampling{MaxTokens: 5 + i%7, Temperature: 0.9, TopK: 50, TopP: 0.95, Seed: uint64(i)}})
		}
	}
	run := func(ctx context.Context, j job) (string, error) {
		if j.k > 0 {
			sel, err := s.Select(ctx, catalog.Tools(), j.text, j.k)
			if err != nil {
				return "", err
			}
			var b strings.Builder
			for _, st := range sel.Steps {
				fmt.Fprintf(&b, "%d:%x ", st.Chosen, st.Logits)
			}
			return fmt.Sprint(sel.Names) + b.String(), nil
		}
		if j.gen != nil {
			r, err := s.Generate(ctx, session.Request{Kind: session.PromptChat, Input: j.text, Sampling: *j.gen}, nil)
			return fmt.Sprint(r.IDs), err
		}
		r, err := s.Score(ctx, schema, j.text, scorer.Options{Backend: j.backend})
		if err != nil {
			return "", err
		}
		var b strings.Builder
		for _, f := range r.Fields {
			for _, d := range f.Decisions {
				for _, c := range d.Candidates {
					fmt.Fprintf(&b, "%s=%x/%x ", c.Value, c.LogLikelihood, c.Probability)
				}
			}
		}
		return b.String(), nil
	}
	alone := make([]string, len(jobs))
	for i, j := range jobs {
		if alone[i], err = run(ctx, j); err != nil {
			return 0, 0, fmt.Errorf("request %d alone: %w", i, err)
		}
	}
	before := s.SchedStats().Steps
	got := make([]string, len(jobs))
	errs := make([]error, len(jobs))
	var wg sync.WaitGroup
	for _, i := range rand.New(rand.NewPCG(5, 8)).Perm(len(jobs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = run(ctx, jobs[i])
		}()
	}
	wg.Wait()
	st := s.SchedStats()
	for i := range jobs {
		if errs[i] != nil {
			return len(jobs), st.MaxPasses, fmt.Errorf("request %d beside the others: %w", i, errs[i])
		}
		if got[i] != alone[i] {
			return len(jobs), st.MaxPasses, fmt.Errorf("request %d (%s) differs beside the others:\n got %s\nwant %s", i, jobs[i].text, got[i], alone[i])
		}
	}
	if st.Steps == before {
		return len(jobs), st.MaxPasses, fmt.Errorf("the concurrent requests ran no step")
	}
	return len(jobs), st.MaxPasses, nil
}
