package model_test

import (
	"errors"
	"slices"
	"testing"

	"verdict/engine/model"
	"verdict/native"
)

// Batch.Add and AddEmbeds describe their rows: the last outs wanted, given
// embeddings indexed in the order they were appended.
func TestBatchRows(t *testing.T) {
	var b model.Batch
	b.Add(nil, []int32{5, 6, 7}, 1)
	b.AddEmbeds(nil, []int32{8, 9}, []float32{1, 2, 3, 4}, 2) // D = 2
	b.AddEmbeds(nil, []int32{10}, []float32{5, 6}, 0)
	var embed []int32
	var out []bool
	for _, r := range b.Rows {
		embed, out = append(embed, r.Embed), append(out, r.Out)
	}
	if want := []int32{-1, -1, -1, 0, 1, 2}; !slices.Equal(embed, want) {
		t.Errorf("embedding rows %v, want %v", embed, want)
	}
	if want := []bool{false, false, true, true, true, false}; !slices.Equal(out, want) {
		t.Errorf("wanted %v, want %v", out, want)
	}
	if b.Outputs() != 3 || len(b.Embeds) != 6 {
		t.Errorf("%d outputs, %d embedding values: want 3 and 6", b.Outputs(), len(b.Embeds))
	}
	b.Reset()
	if len(b.Rows) != 0 || len(b.Embeds) != 0 || b.Hook != nil {
		t.Error("Reset left rows")
	}
}

// chunks is a Runner that records the batches it runs.
type chunks struct {
	rows int
	got  [][]int32
	err  error
}

func (c *chunks) Rows() int { return c.rows }

func (c *chunks) Run(b *model.Batch, then func(model.Exec, native.Tensor) error) error {
	var ids []int32
	for _, r := range b.Rows {
		ids = append(ids, r.Token)
	}
	c.got = append(c.got, ids)
	return c.err
}

// RunAll runs a long batch in chunks of the runner's rows, in order, and
// stops at the first error.
func TestRunAll(t *testing.T) {
	var b model.Batch
	b.Add(nil, []int32{1, 2, 3, 4, 5}, 0)
	r := &chunks{rows: 2}
	if err := model.RunAll(r, &b); err != nil {
		t.Fatal(err)
	}
	if len(r.got) != 3 || !slices.Equal(r.got[0], []int32{1, 2}) || !slices.Equal(r.got[2], []int32{5}) {
		t.Errorf("chunks %v", r.got)
	}
	bad := errors.New("full")
	r = &chunks{rows: 2, err: bad}
	if err := model.RunAll(r, &b); !errors.Is(err, bad) || len(r.got) != 1 {
		t.Errorf("%v after %d chunks: want the first chunk's error", err, len(r.got))
	}
	if err := model.RunAll(r, &model.Batch{}); err == nil {
		t.Error("an empty batch ran")
	}
}

func TestKVErrorAndWeights(t *testing.T) {
	e := &model.KVError{Need: 3, Free: 1, Kind: model.KindName(model.KVSliding)}
	if got := e.Error(); got != "model: the key/value pool has 1 free sliding-window blocks of 16 positions, 3 needed" {
		t.Errorf("KVError: %q", got)
	}
	if model.KindName(model.KVGlobal) != "global" {
		t.Error("kind 0 is not global")
	}
	for _, s := range []string{"f32", "q4"} {
		if w, err := model.ParseWeights(s); err != nil || string(w) != s {
			t.Errorf("ParseWeights(%q) = %q, %v", s, w, err)
		}
	}
	if _, err := model.ParseWeights("f16"); err == nil {
		t.Error("ParseWeights(f16) did not fail")
	}
}
