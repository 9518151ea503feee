package session

import (
	"context"
	"errors"
	"fmt"
	"image"
	"log"
	"strings"
	"sync"
	"sync/atomic"

	"verdict/engine/model"
	"verdict/engine/models"
	"verdict/engine/prefix"
	"verdict/engine/sched"
	"verdict/engine/scorer"
	"verdict/native"
)

// Data parallel: one model on several devices. Gemma 3n fits one device,
// so scaling out is one replica of the model a device, each a Session of
// its own (its weights loaded once on its device, its key/value pool, its
// scorer and its scheduler), and a session that joins them (Join): each
// request it is given (Score, Generate, Select, PromptLogprobs, the towers,
// a calibration) runs whole on the replica with the shortest queue. A
// request's results do not depend on the replica: every replica computes
// the same bits, as the scheduler's rows do whatever batch they run in.
//
// A replica whose device fails (native.ErrDevice: memory it cannot
// allocate, a stream that fails) is taken out, with a logged message
// naming it and the error, and the request runs again on another one from
// the start (a generation's tokens already given to the caller are not
// given twice, a scorer request's fields neither); the requests running on
// it do the same as they fail. When no replica is left the request's error
// is returned.

// replicaSet is a joined session's replicas.
type replicaSet struct {
	parts []*replica
	logf  func(string)

	mu sync.Mutex // guards the replicas' counts and states
}

// replica is one device's session and its counts.
type replica struct {
	s      *Session
	index  int
	device string

	inflight int   // requests given to it and not returned
	started  int64 // requests given to it
	served   int64 // requests that returned from it (failed ones included)
	retried  int64 // requests that failed with it and ran again elsewhere
	down     error // why it was taken out (nil: in service)
}

// ReplicaInfo describes one replica of a joined session.
type ReplicaInfo struct {
	Index  int    `json:"index"`
	Device string `json:"device"` // as asked: cuda:1, cpu
	// Backend is what runs it (cpu, cuda).
	Backend string `json:"backend"`
	// Up is false once the replica was taken out; Error says why.
	Up    bool   `json:"up"`
	Error string `json:"error,omitempty"`
	// Requests are the requests it answered (errors included), Retried
	// those that failed with it and ran again elsewhere.
	Requests int64       `json:"requests"`
	Retried  int64       `json:"retried,omitempty"`
	Sched    sched.Stats `json:"scheduler"`
	// KVPositions is its key/value pool (a device's memory sizes it).
	KVPositions int `json:"kv_positions"`
}

// OpenDevices opens spec once on each backend (one replica a device,
// devices naming them: "cuda:0", "cpu") and joins the sessions (Join); one
// backend gives the plain session of Open. A load that fails closes the
// replicas opened before it and returns its error, naming the device.
// logf hears the replicas taken out (nil: the standard logger).
func OpenDevices(ctx context.Context, spec string, opt models.Options, backends []*native.Backend, devices []string, logf func(string)) (*Session, error) {
	if len(backends) == 0 || len(backends) != len(devices) {
		return nil, fmt.Errorf("session: %d backends for %d devices", len(backends), len(devices))
	}
	var parts []*Session
	closeAll := func() {
		for _, p := range parts {
			p.Close()
		}
	}
	for i, be := range backends {
		o := opt
		o.Backend = be
		s, err := Open(ctx, spec, o)
		if err != nil {
			closeAll()
			if len(backends) == 1 {
				return nil, err
			}
			return nil, fmt.Errorf("replica %d (%s): %w", i, devices[i], err)
		}
		parts = append(parts, s)
	}
	s, err := Join(parts, devices, logf)
	if err != nil {
		closeAll()
		return nil, err
	}
	return s, nil
}

// Join makes one session of sessions of the same model on several devices
// (devices names them, for the log and Replicas), which it then owns:
// Close closes them all. One session is returned as it is. The sessions
// must be plain ones (not joined) of one model: the same name, shape and
// weight format.
func Join(parts []*Session, devices []string, logf func(string)) (*Session, error) {
	if len(parts) == 0 {
		return nil, errors.New("session: no replicas to join")
	}
	if len(devices) != len(parts) {
		return nil, fmt.Errorf("session: %d device names for %d replicas", len(devices), len(parts))
	}
	if len(parts) == 1 {
		return parts[0], nil
	}
	first := parts[0]
	rs := &replicaSet{logf: logf}
	if rs.logf == nil {
		rs.logf = func(s string) { log.Print(s) }
	}
	for i, p := range parts {
		if p == nil || p.set != nil {
			return nil, fmt.Errorf("session: replica %d (%s) is not a single device's session", i, devices[i])
		}
		a, b := first.info, p.info
		if a.Name != b.Name || a.Path != b.Path || a.Params != b.Params || a.Layers != b.Layers || a.Hidden != b.Hidden ||
			a.Vocab != b.Vocab || a.Resident.Weights != b.Resident.Weights || first.m.Group() != p.m.Group() {
			return nil, fmt.Errorf("session: replica %d (%s) is %s (%s weights), replica 0 (%s) is %s (%s weights): replicas must be one model",
				i, devices[i], b.Name, b.Resident.Weights, devices[0], a.Name, a.Resident.Weights)
		}
		rs.parts = append(rs.parts, &replica{s: p, index: i, device: devices[i]})
	}
	// The joined session answers what needs no device from the first
	// replica: the tokenizer, the model's description and special tokens.
	return &Session{m: first.m, tok: first.tok, sc: first.sc, info: first.info, set: rs}, nil
}

// Replicas describes a joined session's replicas; nil for one device's.
func (s *Session) Replicas() []ReplicaInfo {
	if s.set == nil {
		return nil
	}
	rs := s.set
	rs.mu.Lock()
	defer rs.mu.Unlock()
	out := make([]ReplicaInfo, len(rs.parts))
	for i, r := range rs.parts {
		out[i] = ReplicaInfo{Index: r.index, Device: r.device, Backend: r.s.m.Backend().Name(), Up: r.down == nil,
			Requests: r.served, Retried: r.retried, Sched: r.s.sched.Stats(), KVPositions: r.s.info.Resident.KVPositions}
		if r.down != nil {
			out[i].Error = r.down.Error()
		}
	}
	return out
}

// pick is the replica in service with the shortest queue (its scheduler's
// requests running and waiting, and passes queued, or the requests given
// to it and not yet there), the one given fewer requests on a tie; it
// counts the request given to it.
func (rs *replicaSet) pick() (*replica, error) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	var best *replica
	bestLoad := 0
	for _, r := range rs.parts {
		if r.down != nil {
			continue
		}
		st := r.s.sched.Stats()
		load := max(r.inflight, st.Running+st.Waiting) + st.Queued
		if best == nil || load < bestLoad || (load == bestLoad && r.started < best.started) {
			best, bestLoad = r, load
		}
	}
	if best == nil {
		var why []string
		for _, r := range rs.parts {
			why = append(why, fmt.Sprintf("replica %d (%s): %v", r.index, r.device, r.down))
		}
		return nil, fmt.Errorf("session: no replica left, every device failed (%s): %w", strings.Join(why, "; "), rs.parts[0].down)
	}
	best.inflight++
	best.started++
	return best, nil
}

// failed reports whether err, returned by a replica (down: taken out
// meanwhile) for a request whose context is ctx, is the replica's failure
// rather than the request's: a device error, or any error of a replica
// taken out.
func failed(ctx context.Context, err error, down bool) bool {
	return err != nil && ctx.Err() == nil && (errors.Is(err, native.ErrDevice) || down)
}

// do runs a request on the replica with the shortest queue; when that
// replica fails (failed), it takes it out and runs the request again on
// another, until one answers or none is left.
func (rs *replicaSet) do(ctx context.Context, run func(*Session) error) error {
	return rs.doFinal(ctx, func(p *Session) (bool, error) { return false, run(p) })
}

// doFinal is do for a run that can say its error is final: the caller's
// own (a generation's emit), never run again.
func (rs *replicaSet) doFinal(ctx context.Context, run func(*Session) (final bool, err error)) error {
	for {
		r, err := rs.pick()
		if err != nil {
			return err
		}
		final, err := run(r.s)
		rs.mu.Lock()
		r.inflight--
		r.served++
		retry := !final && failed(ctx, err, r.down != nil)
		if retry {
			r.retried++
			if r.down == nil {
				r.down = err
				left := 0
				for _, q := range rs.parts {
					if q.down == nil {
						left++
					}
				}
				rs.mu.Unlock()
				rs.logf(fmt.Sprintf("replica %d (%s) taken out of service: %v; its requests run again on the other replicas (%d left)",
					r.index, r.device, err, left))
				continue
			}
		}
		rs.mu.Unlock()
		if !retry {
			return err
		}
	}
}

// close closes every replica.
func (rs *replicaSet) close() error {
	var err error
	for _, r := range rs.parts {
		if e := r.s.Close(); err == nil {
			err = e
		}
	}
	return err
}

// prefixStats adds up the replicas' prefix caches.
func (rs *replicaSet) prefixStats() prefix.Stats {
	var t prefix.Stats
	for _, r := range rs.parts {
		p := r.s.PrefixStats()
		t.Lookups += p.Lookups
		t.Hits += p.Hits
		t.TokensAsked += p.TokensAsked
		t.TokensFound += p.TokensFound
		t.Entries += p.Entries
		t.Blocks += p.Blocks
		t.Budget += p.Budget
		t.Evicted += p.Evicted
	}
	return t
}

// schedStats adds up the replicas' schedulers (MaxPasses: the most of
// any).
func (rs *replicaSet) schedStats() sched.Stats {
	var t sched.Stats
	for _, r := range rs.parts {
		p := r.s.sched.Stats()
		t.Steps += p.Steps
		t.Rows += p.Rows
		t.Passes += p.Passes
		t.MaxPasses = max(t.MaxPasses, p.MaxPasses)
		t.Admitted += p.Admitted
		t.Waited += p.Waited
		t.Refused += p.Refused
		t.Alone += p.Alone
		t.Running += p.Running
		t.Waiting += p.Waiting
		t.Queued += p.Queued
	}
	return t
}

// towers reports whether any replica has loaded a tower.
func (rs *replicaSet) towers() (vision, audio bool) {
	for _, r := range rs.parts {
		v, a := r.s.Towers()
		vision, audio = vision || v, audio || a
	}
	return vision, audio
}

// score runs Score on a replica. A field's result reaches OnField once,
// and a catalog field's steps OnCatalogStep once each, however often the
// request runs.
func (rs *replicaSet) score(ctx context.Context, schema *scorer.Schema, input string, opt scorer.Options) (*scorer.Result, error) {
	var mu sync.Mutex
	fields := map[string]bool{}
	steps := map[string]int{}
	onField, onStep := opt.OnField, opt.OnCatalogStep
	var res *scorer.Result
	err := rs.do(ctx, func(p *Session) error {
		o := opt
		run := map[string]int{} // this run's steps a field
		if onField != nil {
			o.OnField = func(f scorer.FieldResult) {
				mu.Lock()
				seen := fields[f.Name]
				fields[f.Name] = true
				mu.Unlock()
				if !seen {
					onField(f)
				}
			}
		}
		if onStep != nil {
			o.OnCatalogStep = func(field string, names []string, st scorer.CatalogStep) {
				mu.Lock()
				run[field]++
				fresh := run[field] > steps[field]
				if fresh {
					steps[field] = run[field]
				}
				mu.Unlock()
				if fresh {
					onStep(field, names, st)
				}
			}
		}
		var err error
		res, err = p.Score(ctx, schema, input, o)
		return err
	})
	return res, err
}

// generate runs Generate on a replica; a run after a failed one gives the
// caller only the tokens past those it had (the same ones: a rerun
// computes the same bits), and OnPrompt hears the prompt once.
func (rs *replicaSet) generate(ctx context.Context, req Request, emit func(Token) error) (Result, error) {
	var sent []int32
	var prompted atomic.Bool
	onPrompt := req.OnPrompt
	var res Result
	err := rs.doFinal(ctx, func(p *Session) (bool, error) {
		r := req
		if onPrompt != nil {
			r.OnPrompt = func(n int) {
				if !prompted.Swap(true) {
					onPrompt(n)
				}
			}
		}
		var own error // the caller's emit's error, or a rerun's different token
		var err error
		res, err = p.Generate(ctx, r, func(t Token) error {
			if t.Index < len(sent) {
				if t.ID != sent[t.Index] {
					own = fmt.Errorf("session: token %d is %d on the replica that ran the generation again, %d before", t.Index, t.ID, sent[t.Index])
				}
				return own
			}
			sent = append(sent, t.ID)
			if emit != nil {
				own = emit(t)
			}
			return own
		})
		return own != nil, err
	})
	return res, err
}

// promptLogprobs runs PromptLogprobs on a replica.
func (rs *replicaSet) promptLogprobs(ctx context.Context, req Request, top int) (ids []int32, lps []Logprobs, err error) {
	var prompted atomic.Bool
	onPrompt := req.OnPrompt
	err = rs.do(ctx, func(p *Session) error {
		r := req
		if onPrompt != nil {
			r.OnPrompt = func(n int) {
				if !prompted.Swap(true) {
					onPrompt(n)
				}
			}
		}
		var err error
		ids, lps, err = p.PromptLogprobs(ctx, r, top)
		return err
	})
	return ids, lps, err
}

// imageTokens, audioTokens, hardEmbed, selectEntries and calibrate run the
// request on a replica.
func (rs *replicaSet) imageTokens(ctx context.Context, img image.Image, progress TowerProgress) (soft []float32, cached bool, err error) {
	err = rs.do(ctx, func(p *Session) error {
		soft, cached, err = p.ImageTokens(ctx, img, progress)
		return err
	})
	return soft, cached, err
}

func (rs *replicaSet) audioTokens(ctx context.Context, pcm []float32, progress TowerProgress) (soft []float32, cached bool, err error) {
	err = rs.do(ctx, func(p *Session) error {
		soft, cached, err = p.AudioTokens(ctx, pcm, progress)
		return err
	})
	return soft, cached, err
}

func (rs *replicaSet) hardEmbed(id int32) (row []float32, err error) {
	err = rs.do(context.Background(), func(p *Session) error {
		row, err = p.HardEmbed(id)
		return err
	})
	return row, err
}

func (rs *replicaSet) calibrate(ctx context.Context, schema *scorer.Schema, examples []scorer.Example, opt scorer.Options) (c *scorer.Calibration, rep *scorer.CalibrationReport, err error) {
	err = rs.do(ctx, func(p *Session) error {
		c, rep, err = p.CalibrateReport(ctx, schema, examples, opt)
		return err
	})
	return c, rep, err
}

// fault, when set on a replica (tests), is called before each of its
// forward passes: an error it returns is the pass's.
type fault = func() error

// runner is the scheduler's request rq as the runner of a request's
// passes: rq itself, or rq behind the fault set for tests.
func (s *Session) runner(rq *sched.Request) model.GreedyLooper {
	if f := s.fault.Load(); f != nil {
		return faultRunner{rq, *f}
	}
	return rq
}

// faultRunner is a scheduler's request whose passes first ask fault.
type faultRunner struct {
	*sched.Request
	fault fault
}

func (f faultRunner) Run(b *model.Batch, then func(x model.Exec, h native.Tensor) error) error {
	if err := f.fault(); err != nil {
		return err
	}
	return f.Request.Run(b, then)
}

func (f faultRunner) DecodeGreedy(caches []model.Cache, next []int32, steps int, stop []int32) ([][]int32, error) {
	if err := f.fault(); err != nil {
		return nil, err
	}
	return f.Request.DecodeGreedy(caches, next, steps, stop)
}
