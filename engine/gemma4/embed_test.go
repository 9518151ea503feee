package gemma4

import (
	"strings"
	"testing"
)

// TestEmbed: the decoder's Embed (kit.Embed over the Exec's input side)
// gives the reference's scaled embedding rows bit for bit, across more ids
// than an Exec's rows, and refuses an id outside the vocabulary.
func TestEmbed(t *testing.T) {
	fx := loadFixture(t, "gemma4-synthetic-tiny")
	d := fx.decoder(t, Options{BatchRows: 3})
	m, D := d.Ref, d.cfg.Hidden
	ids := []int32{0, 5, 1, int32(d.cfg.Vocab - 1), 7, 5, 2}
	got, err := d.Embed(ids)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(ids)*D {
		t.Fatalf("%d values for %d ids of %d", len(got), len(ids), D)
	}
	for i, id := range ids {
		for j := range D {
			if w := m.Embed[int(id)*D+j] * m.embScale; got[i*D+j] != w {
				t.Fatalf("id %d (row %d) value %d: %v, want %v", id, i, j, got[i*D+j], w)
			}
		}
	}
	if _, err := d.Embed([]int32{1, int32(d.cfg.Vocab)}); err == nil || !strings.Contains(err.Error(), "outside the vocabulary") {
		t.Errorf("an id past the vocabulary: %v", err)
	}
}
