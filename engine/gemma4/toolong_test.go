package gemma4

import (
	"errors"
	"strings"
	"testing"

	"verdict/engine/model"
)

// TestTooLongMarked: a Forward past the model's max_position_embeddings is
// refused with an error errors.Is matches to model.ErrTooLong (the API's
// 400 limit_exceeded, not an engine failure), naming both counts, and the
// cache is left as it was.
func TestTooLongMarked(t *testing.T) {
	fx := loadFixture(t, "gemma4-synthetic-tiny")
	d := fx.decoder(t, Options{BatchRows: 8, KVPositions: 64})
	d.cfg.MaxPositions = 6
	x, err := d.Acquire()
	if err != nil {
		t.Fatal(err)
	}
	defer x.Release()
	c := d.NewCache()
	defer c.Free()
	var b model.Batch
	b.Add(c, []int32{2, 5, 9, 11, 17}, 1)
	if _, err := x.Forward(&b); err != nil {
		t.Fatal(err)
	}
	for _, ids := range [][]int32{{3, 4}, {3, 4, 5, 6, 7, 8, 9}} {
		b.Reset()
		b.Add(c, ids, 1)
		_, err := x.Forward(&b)
		if !errors.Is(err, model.ErrTooLong) || !strings.Contains(err.Error(), "max_position_embeddings of 6") {
			t.Errorf("%d more positions after 5: %v, want a model.ErrTooLong naming 6", len(ids), err)
		}
		if c.Len() != 5 {
			t.Errorf("the refused Forward left %d positions, want 5", c.Len())
		}
	}
	b.Reset()
	b.Add(c, []int32{3}, 1)
	if _, err := x.Forward(&b); err != nil {
		t.Errorf("the sixth position: %v", err)
	}
}
