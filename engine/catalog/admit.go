package catalog

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"verdict/engine/model"
)

// answerBounds returns, for every k from 0 to the number of entries, the
// most tokens an answer of k entries can take: the k longest entries'
// tokens plus one separator or stop after each.
func answerBounds(entries []Entry) []int {
	lens := make([]int, len(entries))
	for i, e := range entries {
		lens[i] = len(e.TokenIDs) + 1
	}
	slices.Sort(lens)
	slices.Reverse(lens)
	sums := make([]int, len(lens)+1)
	for i, n := range lens {
		sums[i+1] = sums[i] + n
	}
	return sums
}

// MaxAnswer reports the most tokens an answer of k distinct entries can
// take (every chosen token, the separators and the stop included): the k
// longest entries' token paths plus k control tokens. It panics unless
// 1 <= k <= len(c.Entries).
func (c *Catalog) MaxAnswer(k int) int {
	if k < 1 || k >= len(c.answer) {
		panic(fmt.Sprintf("catalog: MaxAnswer(%d) of a catalog of %d entries", k, len(c.Entries)))
	}
	return c.answer[k]
}

// ErrNeverFits marks a request whose prompt and longest possible answer
// need more key/value blocks than the model's whole pool holds: it is
// refused at admission, before any step.
var ErrNeverFits = errors.New("never fits in the key/value pool")

// checkFits refuses request i (past positions already cached, prompt
// tokens to feed, up to answer answer tokens) when the pool could not hold
// it even empty. The error wraps ErrNeverFits and the *model.KVError
// naming the blocks.
func checkFits(m model.Model, i, past, prompt, answer int) error {
	err := m.KVFits(past + prompt + answer)
	if err == nil {
		return nil
	}
	var kv *model.KVError
	if !errors.As(err, &kv) {
		return fmt.Errorf("catalog: request %d: %w", i, err)
	}
	return &neverFits{fmt.Sprintf("catalog: request %d %v: %d prompt tokens and up to %d answer tokens need %d %s key/value blocks of %d positions, the pool holds %d",
		i, ErrNeverFits, past+prompt, answer, kv.Need, kv.Kind, model.KVBlock, kv.Free), kv}
}

// neverFits is checkFits's error: ErrNeverFits and the pool's KVError.
type neverFits struct {
	msg string
	kv  *model.KVError
}

func (e *neverFits) Error() string   { return e.msg }
func (e *neverFits) Unwrap() []error { return []error{ErrNeverFits, e.kv} }

// admissionGate checks admission against a small key/value pool (views of
// m with pools of their own): a request one block beyond the whole pool is
// refused before any step, alone and behind requests that fit; in a pool
// of exactly its size it decodes to its reference; and the whole set in a
// pool only as large as its largest request, where requests must wait for
// earlier ones to end, gives every reference, with and without the shared
// prefix.
func admissionGate(ctx context.Context, m model.Model, c *Catalog, reqs []Request, ref []Result, g *Gate) error {
	var idx []int // the requests without a cache of their own (of m's pool)
	for i, r := range reqs {
		if r.Cache == nil {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return nil
	}
	cat := func(i int) *Catalog {
		if reqs[i].Catalog != nil {
			return reqs[i].Catalog
		}
		return c
	}
	probe, err := m.WithKVPositions(1)
	if err != nil {
		return err
	}
	defer probe.CloseView()
	// need is the pool size, in blocks, request i needs alone.
	need := func(i int) (int, error) {
		err := probe.KVFits(len(reqs[i].Prompt) + cat(i).MaxAnswer(reqs[i].K))
		var kv *model.KVError
		if !errors.As(err, &kv) {
			return 0, fmt.Errorf("catalog: gates: request %d in a pool of one block: %v", i, err)
		}
		return kv.Need, nil
	}
	view := func(blocks int) (model.Model, error) { return m.WithKVPositions(blocks * model.KVBlock) }
	decode := func(v model.Model, which []int, opt Options) ([]Result, Stats, int, error) {
		rs := make([]Request, len(which))
		for j, i := range which {
			rs[j] = reqs[i]
		}
		steps := 0
		opt.MaxBatch = max(opt.MaxBatch, len(rs))
		opt.OnStep = func(int, Step) error { steps++; return nil }
		out, st, err := DecodeBatch(ctx, v, c, rs, opt)
		return out, st, steps, err
	}
	largest, most := idx[0], 0
	for _, i := range idx {
		n, err := need(i)
		if err != nil {
			return err
		}
		if n > most {
			largest, most = i, n
		}
	}
	// Refused: the largest request and the first, each in a pool one block
	// short of it, alone and behind the others.
	for _, i := range slices.Compact([]int{largest, idx[0]}) {
		n, err := need(i)
		if err != nil {
			return err
		}
		if n < 2 {
			continue
		}
		err = func() error {
			small, err := view(n - 1)
			if err != nil {
				return err
			}
			defer small.CloseView()
			behind := append(slices.DeleteFunc(slices.Clone(idx), func(j int) bool { return j == i }), i)
			for _, which := range [][]int{{i}, behind} {
				_, st, steps, err := decode(small, which, Options{})
				g.check(errors.Is(err, ErrNeverFits) && st.Steps == 0 && steps == 0,
					"request %d (last of %d) in a pool of %d blocks, %d needed: %d forward passes, %d steps, error %v",
					i, len(which), n-1, n, st.Steps, steps, err)
			}
			exact, err := view(n)
			if err != nil {
				return err
			}
			defer exact.CloseView()
			out, _, _, err := decode(exact, []int{i}, Options{})
			if err != nil {
				g.check(false, "request %d in a pool of exactly its %d blocks: %v", i, n, err)
				return nil
			}
			d := differ(out[0], ref[i])
			g.check(d == "", "request %d in a pool of exactly its %d blocks: %s", i, n, d)
			return nil
		}()
		if err != nil {
			return err
		}
	}
	// Waiting: at least four requests in one batch, in a pool that holds
	// the largest alone.
	set := slices.Clone(idx)
	for len(set) < 4 {
		set = append(set, idx...)
	}
	pool, err := view(most)
	if err != nil {
		return err
	}
	defer pool.CloseView()
	for _, opt := range []Options{{NoSharedPrefix: true}, {}} {
		out, st, _, err := decode(pool, set, opt)
		if err != nil {
			g.check(false, "%d requests in a pool of %d blocks (shared prefix %v): %v", len(set), most, !opt.NoSharedPrefix, err)
			continue
		}
		if opt.NoSharedPrefix {
			g.check(st.Waited > 0, "%d requests in a pool of %d blocks, the largest's size: none waited", len(set), most)
		}
		for j, i := range set {
			d := differ(out[j], ref[i])
			g.check(d == "", "request %d of %d in a pool of %d blocks (shared prefix %v, %d waited): %s",
				i, len(set), most, !opt.NoSharedPrefix, st.Waited, d)
		}
	}
	return nil
}
