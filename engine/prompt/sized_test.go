package prompt

import (
	"slices"
	"strings"
	"testing"

	"verdict/engine/model"
)

// TestSized: each media run takes its item's count, in order, text and
// other ids untouched; nil counts keep the runs; wrong lengths and counts
// out of range are refused by kind and item.
func TestSized(t *testing.T) {
	sp := model.Special{BOI: 10, EOI: 11, Image: 12, BOA: 20, EOA: 21, Audio: 22}
	ch := model.Chat{Media: sp}
	var p Prompt
	p.Text("a")
	p.ChatImage(ch, "image 1")
	p.User("b")
	p.ChatImage(ch, "image 2")
	p.ChatAudio(ch, "audio")
	p = append(p, Segment{IDs: []int32{10, 5, 11}}) // an image run by its ends, whatever is inside
	run := func(begin, soft, end int32, n int) []int32 {
		ids := []int32{begin}
		for range n {
			ids = append(ids, soft)
		}
		return append(ids, end)
	}
	for _, c := range []struct {
		name          string
		images, audio []int
		want          [][]int32 // the IDs segments, in order
		err           string
	}{
		{"nil keeps the runs", nil, nil, [][]int32{run(10, 12, 11, 0), run(10, 12, 11, 0), run(20, 22, 21, 0), {10, 5, 11}}, ""},
		{"per item", []int{2, 3, 1}, []int{4}, [][]int32{run(10, 12, 11, 2), run(10, 12, 11, 3), run(20, 22, 21, 4), run(10, 12, 11, 1)}, ""},
		{"audio only", nil, []int{1}, [][]int32{run(10, 12, 11, 0), run(10, 12, 11, 0), run(20, 22, 21, 1), {10, 5, 11}}, ""},
		{"too few image counts", []int{2, 3}, nil, nil, "2 image soft-token counts for 3 images"},
		{"too many audio counts", nil, []int{1, 1}, nil, "2 audio soft-token counts for 1 audio clips"},
		{"zero", []int{2, 0, 1}, nil, nil, "image 2 has 0 soft tokens"},
		{"absurd", nil, []int{MaxRun + 1}, nil, "audio 1 has 16385 soft tokens"},
	} {
		got, err := p.Sized(sp, c.images, c.audio)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: %v, want %q", c.name, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var ids [][]int32
		for i, s := range got {
			if s.IDs != nil {
				ids = append(ids, s.IDs)
			} else if s.Text != p[i].Text || s.User != p[i].User || s.Label != p[i].Label {
				t.Errorf("%s: segment %d changed: %+v", c.name, i, s)
			}
		}
		if !slices.EqualFunc(ids, c.want, slices.Equal) {
			t.Errorf("%s: runs %v, want %v", c.name, ids, c.want)
		}
	}
	if _, err := p.Sized(model.Special{}, []int{1}, nil); err == nil {
		t.Error("counts for a format without media tokens were accepted")
	}
}
