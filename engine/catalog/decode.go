package catalog

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"verdict/engine/model"
	"verdict/native"
)

// Head selects the output head that chooses each token.
type Head int

const (
	// SparseHead computes the logits of the legal tokens only.
	SparseHead Head = iota
	// DenseHead computes the whole vocabulary's logits, then masks them.
	DenseHead
)

// DenseTolerance is the largest relative gap CheckDense accepts between the
// sparse and the dense head's logit of one legal token.
const DenseTolerance = 1e-5

// Options control a decode.
type Options struct {
	Head Head
	// Step picks where a sparse-head step runs (BackendStep, the default,
	// when the backend has a catalog step; HostStep, the reference). The
	// dense head always runs its steps on the host.
	Step StepMode
	// CheckDense computes the dense head too at every step and fails unless
	// both heads pick the same token with logits within DenseTolerance.
	CheckDense bool
	// MaxBatch bounds the sequences decoded at once (DecodeBatch; 0: 32).
	MaxBatch int
	// NoSharedPrefix turns off DecodeBatch's shared prefix: the leading
	// prompt tokens all its requests have in common (a catalog listed in
	// every prompt) are computed once and each request forks that cache.
	NoSharedPrefix bool
	// PrefillChunk bounds the prompt tokens a sequence feeds in one batched
	// step, so long prompts do not stall the others' decode steps (0: 512).
	PrefillChunk int
	// OneTokenSteps decodes one token a forward pass, with no forced runs
	// fed ahead: the plain decoder, the gates' reference.
	OneTokenSteps bool
	// OnStep, when set, receives every step as soon as its token is chosen
	// (a request's steps in token order).
	OnStep func(req int, st Step) error
	// OnDone, when set, receives each request's result as soon as it ends.
	OnDone func(req int, r Result)

	// Runner, when set, runs the decode's forward passes (a scheduler's
	// request, so that they join its steps beside other requests'); nil:
	// an Exec of the decode's own. The results are the same bits.
	Runner model.Runner

	rows int // the tests' bound on a forward pass's rows (0: the Exec's)
}

// Request is one decode: a prompt (token ids, ending with the model turn's
// header) and the number of entries to emit.
type Request struct {
	Prompt []int32
	K      int
	// Cache, when set, holds positions already processed (a forked shared
	// prefix) that Prompt continues; the decode extends it.
	Cache model.Cache
	// Catalog, when set, is this request's catalog instead of the batch's
	// (several catalogs decoded in one batch).
	Catalog *Catalog
}

// Step is one decode step.
type Step struct {
	Node   int32     `json:"node"`
	Legal  []int32   `json:"legal"`
	Chosen int32     `json:"chosen"`
	Margin *float64  `json:"margin"`           // best minus second-best legal logit; null with one legal token
	Logits []float32 `json:"logits,omitempty"` // per legal token
	Entry  int32     `json:"entry"`            // the entry completed by a SEP or STOP, else -1
}

// Probs returns the softmax of the step's legal logits.
func (st Step) Probs() []float64 {
	p := make([]float64, len(st.Logits))
	mx := math.Inf(-1)
	for _, v := range st.Logits {
		mx = math.Max(mx, float64(v))
	}
	sum := 0.0
	for i, v := range st.Logits {
		p[i] = math.Exp(float64(v) - mx)
		sum += p[i]
	}
	for i := range p {
		p[i] /= sum
	}
	return p
}

// Result is one request's answer.
type Result struct {
	Entries []int32  // in emission order
	Names   []string // their names
	Tokens  []int32  // every chosen token
	Steps   []Step
	Prompt  int // prompt tokens
	// Prefill is the time to the first chosen token, Decode the rest, both
	// from the request's admission; Head the time its steps spent in the
	// output head (a batched step's head time is charged to each of its
	// sequences) and Dense the cross-check's dense head time.
	Prefill, Decode, Head, Dense time.Duration
	DenseMaxRel                  float64 // CheckDense: the largest relative gap seen
}

// Stats describes a DecodeBatch run as a whole.
type Stats struct {
	Steps   int           // batched forward passes
	Rows    int           // token rows they ran
	Forced  int           // tokens chosen without a pass of their own: fed ahead
	Forward time.Duration // in the decoder
	Head    time.Duration // in the output head
	Dense   time.Duration // in the cross-check's dense head
	Total   time.Duration
	MaxRows int // the most legal rows one step's sparse head read
	// SharedPrefix is the number of leading prompt tokens computed once for
	// every request (0: none), Prefix the time that took.
	SharedPrefix int
	Prefix       time.Duration
	// Waited is the number of requests admitted only after running ones
	// ended, for want of key/value room for their whole answer.
	Waited int
}

// Decode runs one request alone, with the serial no-repeat form (per-edge
// counts).
func Decode(ctx context.Context, m model.Model, c *Catalog, req Request, opt Options) (Result, error) {
	res, _, err := decodeAlone(ctx, m, c, req, opt)
	return res, err
}

// decodeAlone is Decode with the run's Stats.
func decodeAlone(ctx context.Context, m model.Model, c *Catalog, req Request, opt Options) (Result, Stats, error) {
	opt.MaxBatch = 1
	res, st, err := run(ctx, m, c, []Request{req}, opt, false)
	if err != nil {
		return Result{}, st, err
	}
	return res[0], st, nil
}

// DecodeBatch decodes many requests of catalog c (or each of its own
// Catalog), up to MaxBatch at once, each with its own KV cache: one
// batched forward pass per step over every running sequence's rows (decode
// steps with their forced runs fed ahead, and prompt chunks of newly
// admitted requests), one sparse head over the union of their legal rows.
// The prompt tokens every request without a Cache starts with are computed
// once and forked (unless NoSharedPrefix). Each result is bit-identical to
// Decode on that request alone.
func DecodeBatch(ctx context.Context, m model.Model, c *Catalog, reqs []Request, opt Options) ([]Result, Stats, error) {
	return run(ctx, m, c, reqs, opt, true)
}

// seq is one running request.
type seq struct {
	req     int
	st      *State
	cache   model.Cache
	own     bool    // the decoder made the cache (and frees it)
	outs    int     // the sequence's output rows this pass
	row     int     // the first of them in the pass's hidden states
	feed    []int32 // decoding: the tokens fed this pass (the last chosen, then a forced run)
	ahead   forcedRun
	fed     int // prompt tokens fed so far
	next    int32
	start   time.Time
	legal   []int32
	logits  []float32
	slot    int32 // the backend step's walk slot
	slotted bool  // slot is taken
}

// CheckRequest returns the error that decoding r, request i of catalog c,
// on m would stop at before its first step (nil when there is none): what
// checkRequest refuses. A batch can leave out the requests it refuses.
func CheckRequest(m model.Model, c *Catalog, i int, r Request) error {
	_, err := checkRequest(m, c, i, r)
	return err
}

// checkRequest refuses request i of catalog c that the model cannot
// decode (an empty prompt, k out of range, more positions than the model
// has or its pool can ever hold, a token outside the vocabulary); else it
// returns the most answer tokens the request can take.
func checkRequest(m model.Model, c *Catalog, i int, r Request) (int, error) {
	if len(r.Prompt) == 0 {
		return 0, fmt.Errorf("catalog: request %d has an empty prompt", i)
	}
	if err := c.CheckK(r.K); err != nil {
		return 0, fmt.Errorf("catalog: request %d: %w", i, err)
	}
	past := 0
	if r.Cache != nil {
		past = r.Cache.Len()
	}
	answer := c.MaxAnswer(r.K)
	if n, limit := past+len(r.Prompt)+answer, m.Config().MaxPositions; limit > 0 && n > limit {
		return 0, model.TooLong("catalog: request %d: %d prompt tokens and up to %d answer tokens exceed the model's %d positions", i, past+len(r.Prompt), answer, limit)
	}
	if err := checkFits(m, i, past, len(r.Prompt), answer); err != nil {
		return 0, err
	}
	for _, id := range r.Prompt {
		if id < 0 || int(id) >= m.Config().Vocab {
			return 0, fmt.Errorf("catalog: request %d: token id %d outside the vocabulary of %d", i, id, m.Config().Vocab)
		}
	}
	return answer, nil
}

func run(ctx context.Context, m model.Model, c *Catalog, reqs []Request, opt Options, batched bool) ([]Result, Stats, error) {
	start := time.Now()
	var stats Stats
	maxBatch, chunk := opt.MaxBatch, opt.PrefillChunk
	if maxBatch <= 0 {
		maxBatch = 32
	}
	if chunk <= 0 {
		chunk = 512
	}
	cats := make([]*Catalog, len(reqs))
	answer := make([]int, len(reqs)) // the most answer tokens of each request
	for i, r := range reqs {
		c := c
		if r.Catalog != nil {
			c = r.Catalog
		}
		if c == nil {
			return nil, stats, fmt.Errorf("catalog: request %d has no catalog", i)
		}
		cats[i] = c
		var err error
		if answer[i], err = checkRequest(m, c, i, r); err != nil {
			return nil, stats, err
		}
	}
	rn := opt.Runner
	if rn == nil {
		x, err := m.Acquire()
		if err != nil {
			return nil, stats, err
		}
		defer x.Release()
		rn = x
	}
	rows := rn.Rows()
	if opt.rows > 0 {
		rows = min(rows, opt.rows)
	}
	if opt.MaxBatch <= 0 {
		maxBatch = min(maxBatch, rows) // a runner of few rows a step (a scheduler's budget)
	}
	if maxBatch > rows {
		return nil, stats, fmt.Errorf("catalog: a batch of %d sequences exceeds the %d rows of a forward pass", maxBatch, rows)
	}
	var shared model.Cache
	if batched && !opt.NoSharedPrefix {
		t0 := time.Now()
		var err error
		if shared, stats.SharedPrefix, err = sharedPrefix(rn, m, reqs); err != nil {
			return nil, stats, err
		}
		if shared != nil {
			defer shared.Free()
		}
		stats.Prefix = time.Since(t0)
	}
	// The backend step's state lives on the Exec that runs the passes: it
	// is made, and sequences take their walk slots, inside a pass's head
	// (where the Exec is this decode's, even when it is a scheduler's).
	var dev *devSteps
	wantDev := opt.Head == SparseHead && opt.Step == BackendStep
	defer func() {
		if dev != nil {
			dev.close()
		}
	}()
	slotted := func(x model.Exec, running []*seq) error {
		if wantDev {
			wantDev = false
			if st, w, sc := x.CatalogHead(); st.Backend().HasCatalogStep() {
				dev = newDevSteps(st, w, sc, maxBatch, !batched)
			}
		}
		if dev == nil {
			return nil
		}
		for _, s := range running {
			if !s.slotted {
				var err error
				if s.slot, err = dev.admit(s.st.cat, reqs[s.req].K); err != nil {
					return err
				}
				s.slotted = true
			}
		}
		return nil
	}
	out := make([]Result, len(reqs))
	var running []*seq
	nextReq, waiting := 0, -1
	var b model.Batch
	for nextReq < len(reqs) || len(running) > 0 {
		if err := ctx.Err(); err != nil {
			return nil, stats, err
		}
		for len(running) < maxBatch && nextReq < len(reqs) {
			st, err := cats[nextReq].NewState(reqs[nextReq].K, batched, nextReq)
			if err != nil {
				return nil, stats, err
			}
			cache, fed, own := reqs[nextReq].Cache, 0, true
			switch {
			case cache != nil:
				own = false
			case shared != nil:
				cache, fed = shared.Clone(), stats.SharedPrefix
			default:
				cache = m.NewCache()
			}
			// Admission: the request's whole prompt and answer are promised
			// their key/value blocks, or it waits for running ones to end.
			if err := cache.Reserve(len(reqs[nextReq].Prompt) - fed + answer[nextReq]); err != nil {
				if own {
					cache.Free()
				}
				if len(running) > 0 {
					if waiting != nextReq {
						stats.Waited++
						waiting = nextReq
					}
					break
				}
				if fed > 0 {
					// A fork plus the prefix it shares can need a block more
					// than the prompt alone (checkFits): with nothing
					// running, drop the prefix and compute prompts whole.
					shared.Free()
					shared = nil
					continue
				}
				return nil, stats, fmt.Errorf("catalog: request %d: %w", nextReq, err)
			}
			sq := &seq{req: nextReq, st: st, cache: cache, own: own, fed: fed, start: time.Now()}
			running = append(running, sq)
			out[nextReq].Prompt = len(reqs[nextReq].Prompt)
			nextReq++
		}
		// One batched forward pass: a prompt chunk, or the last chosen token
		// and its forced run, of every running sequence (decode steps
		// first, then forced runs in turn, truncated to the rows there are:
		// prompt chunks take the rows left).
		b.Reset()
		room := rows
		for _, s := range running {
			if s.fed >= len(reqs[s.req].Prompt) {
				room--
			}
		}
		for _, s := range running {
			if s.fed < len(reqs[s.req].Prompt) {
				continue
			}
			s.feed = append(s.feed[:0], s.next)
			if opt.OneTokenSteps || room == 0 {
				continue
			}
			s.st.forced(&s.ahead)
			n := len(s.ahead.tokens)
			if s.ahead.done {
				n-- // nothing needs the output after STOP
			}
			n = min(n, room)
			s.feed = append(s.feed, s.ahead.tokens[:n]...)
			room -= n
		}
		var act []*seq
		for _, s := range running {
			s.outs = 0
			p := reqs[s.req].Prompt
			if s.fed < len(p) {
				n := min(chunk, len(p)-s.fed)
				if !batched {
					n = len(p) - s.fed // alone: the whole prompt at once
				}
				n = min(n, room)
				if n == 0 {
					continue
				}
				room -= n
				ids := p[s.fed : s.fed+n]
				s.fed += n
				if s.fed == len(p) {
					s.outs = 1
					b.Add(s.cache, ids, 1)
				} else {
					b.Add(s.cache, ids, 0)
				}
				stats.Rows += n
			} else {
				s.outs = len(s.feed)
				b.Add(s.cache, s.feed, s.outs)
				stats.Rows += s.outs
				stats.Forced += s.outs - 1
			}
		}
		t0 := time.Now()
		err := rn.Run(&b, func(x model.Exec, h native.Tensor) error {
			stats.Forward += time.Since(t0)
			if err := slotted(x, running); err != nil {
				return err
			}
			// The sequences with outputs this pass, their rows of h
			// contiguous and in batch order.
			row := 0
			for _, s := range running {
				if s.outs == 0 {
					continue
				}
				s.row = row
				row += s.outs
				act = append(act, s)
			}
			if len(act) > 0 {
				return step(x, m, act, h, opt, &stats, out, dev)
			}
			return nil
		})
		if err != nil {
			for _, s := range running {
				if s.own {
					s.cache.Free()
				}
			}
			return nil, stats, err
		}
		stats.Steps++
		kept := running[:0]
		for _, s := range running {
			if s.st.Done() {
				if s.own {
					s.cache.Free()
				}
				if dev != nil && s.slotted {
					dev.release(s)
				}
				r := &out[s.req]
				r.Decode = time.Since(s.start) - r.Prefill
				r.Entries = slices.Clone(s.st.Emitted())
				for _, e := range r.Entries {
					r.Names = append(r.Names, s.st.cat.Entries[e].Name)
				}
				if opt.OnDone != nil {
					opt.OnDone(s.req, *r)
				}
				continue
			}
			kept = append(kept, s)
		}
		running = kept
	}
	stats.Total = time.Since(start)
	return out, stats, nil
}

// minSharedPrefix is the shortest common prompt prefix worth computing once.
const minSharedPrefix = 16

// sharedPrefix computes the leading tokens the prompts of every request
// without a cache of its own have in common, all but each prompt's last
// (whose output is wanted), when at least two such requests share at least
// minSharedPrefix tokens. A fork of the returned cache continues any of them
// exactly as a prefill of its whole prompt would (rows and attention do not
// depend on how a prompt is cut).
func sharedPrefix(rn model.Runner, m model.Model, reqs []Request) (model.Cache, int, error) {
	var first []int32
	n, count := -1, 0
	for _, r := range reqs {
		if r.Cache != nil {
			continue
		}
		count++
		if first == nil {
			first, n = r.Prompt, len(r.Prompt)-1
			continue
		}
		k := 0
		for k < n && k < len(r.Prompt)-1 && r.Prompt[k] == first[k] {
			k++
		}
		n = k
	}
	if count < 2 || n < minSharedPrefix {
		return nil, 0, nil
	}
	c := m.NewCache()
	var b model.Batch
	b.Add(c, first[:n], 0)
	if err := model.RunAll(rn, &b); err != nil {
		c.Free()
		return nil, 0, err
	}
	return c, n, nil
}

// step chooses the tokens of every sequence in act from its output rows
// of h (s.outs rows from s.row), in rounds: round j takes every sequence's
// j-th row, which chooses its next token through the head, records it and
// advances the walk, on the backend (dev, then replayed on the host) or on
// the host. A sequence's rounds before its last choose the forced run it
// was fed (each a step of one legal token, as a pass of its own would
// record it); its last is its next real choice.
//
// This is bit-identical to a pass per token: a row's hidden state does not
// depend on how a sequence's tokens are cut into passes (what the prompt
// chunks rely on too), and a forced run holds exactly the tokens the walk
// would choose, so each row sees the context a pass of its own would.
func step(x model.Exec, m model.Model, act []*seq, h native.Tensor, opt Options, stats *Stats, out []Result, dev *devSteps) error {
	V := m.Config().Vocab
	rows, rounds := 0, 0
	for _, s := range act {
		rows += s.outs
		rounds = max(rounds, s.outs)
	}
	var sparse, dense []float32
	var union []int32
	var tHost, tDense time.Duration
	if dev == nil {
		// The host's head runs once over every row, for the union of every
		// round's legal set: round 0's from the walk, a forced round's its
		// token, the last's (past a whole run) the set the run ended at.
		for _, s := range act {
			var err error
			if s.legal, err = s.st.Legal(s.legal[:0]); err != nil {
				return fmt.Errorf("request %d: %w", s.req, err)
			}
			union = append(union, s.legal...)
			if s.outs > 1 {
				union = append(union, s.feed[1:s.outs]...)
				if last := s.outs - 1; last < len(s.ahead.tokens) {
					union = append(union, s.ahead.tokens[last])
				} else {
					union = append(union, s.ahead.final...)
				}
			}
		}
		slices.Sort(union)
		union = slices.Compact(union)
		stats.MaxRows = max(stats.MaxRows, len(union))
		if opt.Head == SparseHead {
			t0 := time.Now()
			sparse = make([]float32, rows*len(union))
			if err := x.LogitsRows(sparse, h, union); err != nil {
				return err
			}
			tHost = time.Since(t0)
		}
	}
	if opt.Head == DenseHead || opt.CheckDense {
		t0 := time.Now()
		dense = make([]float32, rows*V)
		if err := x.Logits(dense, h); err != nil {
			return err
		}
		d := time.Since(t0)
		if opt.Head == DenseHead {
			tHost = d
		} else {
			tDense = d
		}
	}
	stats.Head += tHost
	stats.Dense += tDense
	devLogits, devBest := make([][]float32, len(act)), make([]int, len(act))
	var ract []*seq
	var hrows []int32
	for j := 0; j < rounds; j++ {
		ract, hrows = ract[:0], hrows[:0]
		for _, s := range act {
			if s.outs > j {
				ract, hrows = append(ract, s), append(hrows, int32(s.row+j))
			}
		}
		var tDev time.Duration
		switch {
		case dev != nil:
			t0 := time.Now()
			if err := dev.step(ract, hrows, h, devLogits, devBest); err != nil {
				return err
			}
			tDev = time.Since(t0)
			stats.Head += tDev
			var u []int32
			for _, s := range ract {
				u = append(u, s.legal...)
			}
			slices.Sort(u)
			stats.MaxRows = max(stats.MaxRows, len(slices.Compact(u)))
		case j > 0:
			for _, s := range ract {
				var err error
				if s.legal, err = s.st.Legal(s.legal[:0]); err != nil {
					return fmt.Errorf("request %d: %w", s.req, err)
				}
			}
		}
		for i, s := range ract {
			if err := choose(s, j, int(hrows[i]), opt, out, union, sparse, dense, V, devLogits[i], devBest[i], dev); err != nil {
				return err
			}
			r := &out[s.req]
			r.Head += tDev
			if j == 0 {
				r.Head += tHost
				r.Dense += tDense
			}
		}
	}
	return nil
}

// choose is round j of step for s (hidden row row): the pick from its
// logits (the backend's, else the host head's sparse or dense row), the
// dense cross-check, the step recorded and the walk advanced.
func choose(s *seq, j, row int, opt Options, out []Result, union []int32, sparse, dense []float32, V int, devLogits []float32, devBest int, dev *devSteps) error {
	r := &out[s.req]
	logits := devLogits
	if dev == nil {
		logits = make([]float32, len(s.legal))
		for k, t := range s.legal {
			if opt.Head == DenseHead {
				logits[k] = dense[row*V+int(t)]
				continue
			}
			u, ok := slices.BinarySearch(union, t)
			if !ok {
				return fmt.Errorf("catalog: request %d, step %d: legal token %d is not among the head's rows", s.req, s.st.Step(), t)
			}
			logits[k] = sparse[row*len(union)+u]
		}
	}
	best, margin, err := Pick(logits)
	if err != nil {
		return fmt.Errorf("catalog: request %d, step %d: %w", s.req, s.st.Step(), err)
	}
	if dev != nil && best != devBest {
		return fmt.Errorf("catalog: request %d, step %d: the backend picks token %d, the host %d", s.req, s.st.Step(), s.legal[devBest], s.legal[best])
	}
	if opt.CheckDense && opt.Head == SparseHead {
		dl := make([]float32, len(s.legal))
		for k, t := range s.legal {
			dl[k] = dense[row*V+int(t)]
			rel := math.Abs(float64(logits[k])-float64(dl[k])) / math.Max(math.Abs(float64(dl[k])), 1e-30)
			r.DenseMaxRel = math.Max(r.DenseMaxRel, rel)
			if rel > DenseTolerance {
				return fmt.Errorf("catalog: request %d, step %d: token %d: sparse head logit %v, dense %v (relative gap %.2g > %g)",
					s.req, s.st.Step(), t, logits[k], dl[k], rel, DenseTolerance)
			}
		}
		if db, _, err := Pick(dl); err != nil || db != best {
			return fmt.Errorf("catalog: request %d, step %d: the sparse head picks token %d, the dense head %d", s.req, s.st.Step(), s.legal[best], s.legal[max(db, 0)])
		}
	}
	node := s.st.Node()
	chosen := s.legal[best]
	if j+1 < s.outs && chosen != s.feed[j+1] {
		return fmt.Errorf("catalog: request %d, step %d: chose token %d, but token %d was fed ahead as forced", s.req, s.st.Step(), chosen, s.feed[j+1])
	}
	if err := s.st.Advance(chosen); err != nil {
		return fmt.Errorf("request %d: %w", s.req, err)
	}
	if dev != nil {
		if err := dev.check(s); err != nil {
			return err
		}
	}
	st := Step{Node: node, Legal: slices.Clone(s.legal), Chosen: chosen, Logits: logits, Entry: -1}
	if !math.IsNaN(margin) {
		st.Margin = &margin
	}
	if g := s.st.cat.Grammar; chosen == g.Sep || chosen == g.Stop {
		em := s.st.Emitted()
		st.Entry = em[len(em)-1]
	}
	if len(r.Steps) == 0 {
		r.Prefill = time.Since(s.start)
	}
	r.Steps = append(r.Steps, st)
	r.Tokens = append(r.Tokens, chosen)
	s.next = chosen
	if opt.OnStep != nil {
		if err := opt.OnStep(s.req, st); err != nil {
			return err
		}
	}
	return nil
}
