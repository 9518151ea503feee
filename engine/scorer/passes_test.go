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

// counting is a Runner that counts its passes.
type counting struct {
	model.Runner
	passes int
}

func (c *counting) Run(b *model.Batch, then func(x model.Exec, h native.Tensor) error) error {
	c.passes++
	return c.Runner.Run(b, then)
}

// TestLeadInThePrefixPasses: the tokens every key row starts with run in
// the prefix's passes, not in a pass of their own: after the prefix, every
// pass is a branch batch's, and the distributions are those of a request
// without a runner.
func TestLeadInThePrefixPasses(t *testing.T) {
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
	if x.Rows() < 64 {
		t.Skipf("the tiny model's passes take %d rows: a branch batch may take several", x.Rows())
	}
	c := &counting{Runner: x}
	atPrefill := -1
	got, err := scorer.New(m, tk).Score(ctx, s, ticket, scorer.Options{Runner: c, OnStage: func(stage string, _ time.Duration) {
		if stage == "prefill" {
			atPrefill = c.passes
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if after := c.passes - atPrefill; atPrefill < 1 || after != len(got.Timings.Batches) {
		t.Errorf("%d passes for the prefix, %d after it for %d branch batches", atPrefill, after, len(got.Timings.Batches))
	}
	if d := maxDiff(distributions(got), distributions(want)); d != 0 {
		t.Errorf("the distributions differ by %g", d)
	}
}
