package scorer_test

import (
	"context"
	"testing"
	"time"

	"verdict/engine/fixture/testmodel"
	"verdict/engine/model"
	"verdict/engine/scorer"
	"verdict/native"
)

// counting is a Runner that counts its passes (and takes at most rows
// rows a pass when rows is set).
type counting struct {
	model.Runner
	passes, rows int
}

func (c *counting) Rows() int {
	if c.rows > 0 {
		return c.rows
	}
	return c.Runner.Rows()
}

func (c *counting) Run(b *model.Batch, then func(x model.Exec, h native.Tensor) error) error {
	c.passes++
	return c.Runner.Run(b, then)
}

// countedScore scores the ticket on the tiny model twice, without a runner
// and through a counting one that takes at most rows rows a pass (0: the
// Exec's), checks that both give the same distributions bit for bit, and
// returns the passes the prefix took, those after it, the branch batches
// and the Exec's rows.
func countedScore(t *testing.T, rows int) (prefix, after, batches, execRows int) {
	t.Helper()
	m, tk, s := testmodel.Tiny(t), testmodel.Tokenizer(t), ticketSchema(t)
	ctx := context.Background()
	want, err := scorer.New(m, tk).Score(ctx, s, ticket, scorer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	x, err := m.Acquire()
	if err != nil {
		t.Fatal(err)
	}
	defer x.Release()
	if rows < 0 {
		rows = want.PromptTokens
	}
	c := &counting{Runner: x, rows: rows}
	prefix = -1
	got, err := scorer.New(m, tk).Score(ctx, s, ticket, scorer.Options{Runner: c, OnStage: func(stage string, _ time.Duration) {
		if stage == "prefill" {
			prefix = c.passes
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if d := maxDiff(distributions(got), distributions(want)); d != 0 {
		t.Errorf("the distributions differ by %g", d)
	}
	if got.BranchBatch != scorer.BranchBatchFor(m) {
		t.Errorf("branch batch %d, want %d", got.BranchBatch, scorer.BranchBatchFor(m))
	}
	return prefix, c.passes - prefix, len(got.Timings.Batches), x.Rows()
}

// TestLeadInThePrefixPasses: the tokens every key row starts with run in
// the prefix's passes, not in a pass of their own: after the prefix, every
// pass is a branch batch's.
func TestLeadInThePrefixPasses(t *testing.T) {
	prefix, after, batches, rows := countedScore(t, 0)
	if rows < 64 {
		t.Skipf("the tiny model's passes take %d rows: a branch batch may take several", rows)
	}
	if prefix < 1 || after != batches {
		t.Errorf("%d passes for the prefix, %d after it for %d branch batches", prefix, after, batches)
	}
}

// TestLeadInKeyRows: where passes cost by the pass and the lead would add
// one to the prefix's, the key rows keep it: a prefix of one pass's rows
// takes one pass, and the distributions are the same bits.
func TestLeadInKeyRows(t *testing.T) {
	defer scorer.SetCostsByPass(true)()
	if prefix, _, _, _ := countedScore(t, -1); prefix != 1 {
		t.Errorf("%d passes for a prefix of one pass's rows", prefix)
	}
}

// TestLeadInPrefix: the lead runs in the prefix's passes wherever passes
// cost by the row, and where they cost by the pass only if it adds none.
func TestLeadInPrefix(t *testing.T) {
	for _, c := range []struct {
		n, lead, rows int
		byPass, want  bool
	}{
		{300, 2, 512, false, true},
		{300, 2, 512, true, true},
		{511, 1, 512, true, true},
		{511, 2, 512, true, false}, // 513 rows: a second pass
		{512, 2, 512, true, false},
		{512, 2, 512, false, true},
		{600, 3, 512, true, true}, // two passes either way
		{1024, 3, 512, true, false},
		{300, 0, 512, false, false}, // no lead
	} {
		if got := scorer.LeadInPrefix(c.n, c.lead, c.rows, c.byPass); got != c.want {
			t.Errorf("%+v: %v", c, got)
		}
	}
}
