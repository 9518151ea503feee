package prompt

import (
	"fmt"

	"verdict/engine/model"
)

// MaxRun bounds one image's or clip's soft-token count that Sized writes
// (Gemma 4's largest are 1120 an image and 750 a clip).
const MaxRun = 1 << 14

// Sized gives each media run of p (ChatImage, ChatAudio, Image, Audio) its
// item's soft-token count, for a model whose counts vary by item (Gemma 4:
// an image's size and a clip's length decide): the i-th image run, sp.BOI
// … sp.EOI, gets images[i] sp.Image placeholders, the i-th audio run
// audio[i] sp.Audio ones. A nil list leaves that kind's runs as built (the
// chat format's fixed count, Gemma 3n). A list whose length is not the
// number of runs, or a count below 1 or above MaxRun, is refused.
func (p Prompt) Sized(sp model.Special, images, audio []int) (Prompt, error) {
	if images == nil && audio == nil {
		return p, nil
	}
	for _, k := range []struct {
		kind   string
		counts []int
	}{{"image", images}, {"audio", audio}} {
		for i, n := range k.counts {
			if n < 1 || n > MaxRun {
				return nil, fmt.Errorf("prompt: %s %d has %d soft tokens (want 1 to %d)", k.kind, i+1, n, MaxRun)
			}
		}
	}
	out := make(Prompt, len(p))
	var ni, na int
	for i, s := range p {
		out[i] = s
		run := func(begin, soft, end int, counts []int, k *int) {
			if counts == nil || len(s.IDs) < 2 || s.IDs[0] != int32(begin) || s.IDs[len(s.IDs)-1] != int32(end) {
				return
			}
			if *k < len(counts) {
				ids := make([]int32, 0, counts[*k]+2)
				ids = append(ids, int32(begin))
				for range counts[*k] {
					ids = append(ids, int32(soft))
				}
				out[i].IDs = append(ids, int32(end))
			}
			*k++
		}
		if sp.BOI != sp.EOI {
			run(sp.BOI, sp.Image, sp.EOI, images, &ni)
		}
		if sp.BOA != sp.EOA {
			run(sp.BOA, sp.Audio, sp.EOA, audio, &na)
		}
	}
	if images != nil && ni != len(images) {
		return nil, fmt.Errorf("prompt: %d image soft-token counts for %d images in the prompt", len(images), ni)
	}
	if audio != nil && na != len(audio) {
		return nil, fmt.Errorf("prompt: %d audio soft-token counts for %d audio clips in the prompt", len(audio), na)
	}
	return out, nil
}
