package session

import (
	"context"
	"errors"

	"verdict/engine/catalog"
)

// Selection is a catalog decode (Select): the decode's result and the
// compiled catalog it walked (the entries with their token ids), from which
// each step's legal tokens can be traced back to the entries below them.
type Selection struct {
	catalog.Result
	Catalog *catalog.Catalog
}

// Select decodes exactly k distinct entries of a catalog for a request, as
// `verdict catalog` does: the catalog prompt (the entries listed in a user
// turn, the request, the model turn's header) and the trie-constrained
// greedy decode of engine/catalog, entries separated by "\n" and ended by
// <end_of_turn>. The entries and the request are user text: special tokens
// in them stay text, and media tokens are refused.
//
// The request waits for admission in the scheduler's queue like any other
// (refused at once when the pool could never hold its prompt and longest
// answer, or when the queue is full); the decode's forward passes then join
// the scheduler's steps beside other requests', as the scorer's catalog
// fields' do (the same bits as a decode alone).
func (s *Session) Select(ctx context.Context, entries []catalog.Entry, request string, k int) (Selection, error) {
	if s.set != nil {
		var sel Selection
		err := s.set.do(ctx, func(p *Session) error {
			var err error
			sel, err = p.Select(ctx, entries, request, k)
			return err
		})
		return sel, err
	}
	sep, ok := s.tok.Lookup("\n")
	if !ok {
		return Selection{}, errors.New("session: the tokenizer has no single-token line break for catalog decoding")
	}
	cat, err := catalog.Compile(entries, s.tok, catalog.Grammar{Sep: sep, SepText: "\n", Stop: s.tok.EndOfTurn()})
	if err != nil {
		return Selection{}, err
	}
	if err := cat.CheckK(k); err != nil {
		return Selection{}, err
	}
	ids, err := catalog.Prompt(cat.Entries, k, request, s.m.Chat()).Encode(s.tok, s.m.Chat().Media)
	if err != nil {
		return Selection{}, err
	}
	req := catalog.Request{Prompt: ids, K: k}
	if err := catalog.CheckRequest(s.m.Model, cat, 0, req); err != nil {
		return Selection{}, err
	}
	// Admission: wait until the pool can promise the prompt and the longest
	// answer, then hand the promise back to the decode, which reserves the
	// same blocks for its own cache.
	rq := s.sched.Begin(ctx, priority(ctx))
	defer rq.End()
	tk, err := rq.Admit(s.m.Need(len(ids) + cat.MaxAnswer(k)))
	if err != nil {
		return Selection{}, err
	}
	tk.Release()
	res, err := catalog.Decode(ctx, s.m.Model, cat, req, catalog.Options{Runner: s.runner(rq)})
	if err != nil {
		return Selection{}, err
	}
	return Selection{Result: res, Catalog: cat}, nil
}
