package catalog

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"verdict/engine/model"
)

// Gate is one of the decoder's checks (Gates) and how many of its cases
// passed; First describes the first case that failed.
type Gate struct {
	Name           string `json:"name"`
	Passed, Failed int    `json:"-"`
	First          string `json:"first_failure,omitempty"`
}

func (g *Gate) check(ok bool, format string, args ...any) {
	if ok {
		g.Passed++
		return
	}
	if g.Failed == 0 {
		g.First = fmt.Sprintf(format, args...)
	}
	g.Failed++
}

// Gates runs the catalog decoder's checks on a model's backend over reqs:
// every way of running a request must give the reference's result (the
// request decoded alone with the host's step, one token a forward pass),
// bit for bit: forced runs fed ahead (every way but the reference feeds
// them), the backend's step alone, all requests in one batch, batches of 1, 2, 7, 32 and 64,
// shuffles random batches (sizes 1..64, requests drawn with repeats, seed
// fixed), prompts fed in chunks of 7 tokens, and the dense head with the
// mask; every result emits exactly k distinct entries; a request beyond the
// key/value pool is refused at admission, before any step, and requests
// that do not fit at once wait and decode to their results; and the whole
// set decoded twice gives the same bits.
func Gates(ctx context.Context, m model.Model, c *Catalog, reqs []Request, shuffles int, seed uint64) ([]Gate, error) {
	if len(reqs) == 0 {
		return nil, fmt.Errorf("catalog: gates need requests")
	}
	ref := make([]Result, len(reqs))
	for i, r := range reqs {
		res, err := Decode(ctx, m, c, r, Options{Step: HostStep, OneTokenSteps: true})
		if err != nil {
			return nil, fmt.Errorf("catalog: gates: the reference of request %d: %w", i, err)
		}
		ref[i] = res
	}
	var gates []Gate
	add := func(name string) *Gate {
		gates = append(gates, Gate{Name: name})
		return &gates[len(gates)-1]
	}
	// batch decodes the requests idx in one batch and checks each against
	// its reference.
	batch := func(g *Gate, idx []int, opt Options) error {
		rs := make([]Request, len(idx))
		for j, i := range idx {
			rs[j] = reqs[i]
		}
		opt.MaxBatch = max(opt.MaxBatch, len(rs))
		out, _, err := DecodeBatch(ctx, m, c, rs, opt)
		if err != nil {
			return err
		}
		for j, i := range idx {
			d := differ(out[j], ref[i])
			g.check(d == "", "request %d in a batch of %d: %s", i, len(idx), d)
		}
		return nil
	}
	all := make([]int, len(reqs))
	for i := range all {
		all[i] = i
	}

	g := add("exactly k distinct entries")
	for i, r := range ref {
		seen := map[int32]bool{}
		for _, e := range r.Entries {
			seen[e] = true
		}
		g.check(len(r.Entries) == reqs[i].K && len(seen) == reqs[i].K, "request %d: %d entries (%d distinct) for k = %d",
			i, len(r.Entries), len(seen), reqs[i].K)
	}
	g = add("backend step = host step, alone")
	for i, r := range reqs {
		res, err := Decode(ctx, m, c, r, Options{})
		if err != nil {
			return gates, err
		}
		d := differ(res, ref[i])
		g.check(d == "", "request %d: %s", i, d)
	}
	g = add("forced runs fed ahead = one token a step")
	forced, tokens := 0, 0
	for i, r := range reqs {
		res, st, err := decodeAlone(ctx, m, c, r, Options{})
		if err != nil {
			return gates, err
		}
		forced += st.Forced
		tokens += len(res.Tokens)
		d := differ(res, ref[i])
		g.check(d == "", "request %d alone, forced runs fed ahead: %s", i, d)
	}
	g.Name += fmt.Sprintf(" (%d of %d tokens fed ahead)", forced, tokens)
	if err := batch(g, all, Options{OneTokenSteps: true}); err != nil {
		return gates, err
	}
	g = add("dense head + mask = sparse head, alone")
	for i, r := range reqs {
		res, err := Decode(ctx, m, c, r, Options{Head: DenseHead})
		if err != nil {
			return gates, err
		}
		same := slices.Equal(res.Tokens, ref[i].Tokens) && len(res.Steps) == len(ref[i].Steps)
		g.check(same, "request %d: the dense head chose %v, the sparse %v", i, res.Tokens, ref[i].Tokens)
	}
	if err := batch(add("all requests in one batch = alone"), all, Options{}); err != nil {
		return gates, err
	}
	g = add("batches of 1, 2, 7, 32, 64 = alone")
	for _, n := range []int{1, 2, 7, 32, 64} {
		idx := make([]int, n)
		for j := range idx {
			idx[j] = j % len(reqs)
		}
		if err := batch(g, idx, Options{}); err != nil {
			return gates, err
		}
	}
	if err := batch(add("prompts fed 7 tokens at a time = alone"), all, Options{PrefillChunk: 7}); err != nil {
		return gates, err
	}
	g = add(fmt.Sprintf("%d shuffled batches = alone", shuffles))
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for s := 0; s < shuffles; s++ {
		idx := make([]int, 1+rng.IntN(64))
		for j := range idx {
			idx[j] = rng.IntN(len(reqs))
		}
		if err := batch(g, idx, Options{}); err != nil {
			return gates, err
		}
	}
	if err := loopGates(ctx, m, c, reqs, ref, add); err != nil {
		return gates, err
	}
	if err := admissionGate(ctx, m, c, reqs, ref, add("KV pool exhaustion refused at admission")); err != nil {
		return gates, err
	}
	g = add("the set decoded twice = itself")
	a, _, err := DecodeBatch(ctx, m, c, reqs, Options{})
	if err != nil {
		return gates, err
	}
	b, _, err := DecodeBatch(ctx, m, c, reqs, Options{})
	if err != nil {
		return gates, err
	}
	for i := range a {
		d := differ(a[i], b[i])
		g.check(d == "", "request %d: %s", i, d)
	}
	return gates, nil
}

// differ says how two results of one request differ ("" when they do not):
// entries, tokens, and every step's node, legal set, choice and logits, bit
// for bit.
func differ(a, b Result) string {
	switch {
	case !slices.Equal(a.Entries, b.Entries):
		return fmt.Sprintf("entries %v, want %v", a.Entries, b.Entries)
	case !slices.Equal(a.Tokens, b.Tokens):
		return fmt.Sprintf("tokens %v, want %v", a.Tokens, b.Tokens)
	case len(a.Steps) != len(b.Steps):
		return fmt.Sprintf("%d steps, want %d", len(a.Steps), len(b.Steps))
	}
	for s := range a.Steps {
		x, y := a.Steps[s], b.Steps[s]
		if x.Node != y.Node || x.Chosen != y.Chosen || !slices.Equal(x.Legal, y.Legal) || len(x.Logits) != len(y.Logits) {
			return fmt.Sprintf("step %d: node %d chose %d of %v, want node %d, %d of %v", s, x.Node, x.Chosen, x.Legal, y.Node, y.Chosen, y.Legal)
		}
		for j := range x.Logits {
			if math.Float32bits(x.Logits[j]) != math.Float32bits(y.Logits[j]) {
				return fmt.Sprintf("step %d: logit %d is %v, want %v", s, j, x.Logits[j], y.Logits[j])
			}
		}
	}
	return ""
}
