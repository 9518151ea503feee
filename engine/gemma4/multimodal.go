package gemma4

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"

	"verdict/engine/model"
)

// Gemma 4's multimodal merge, as transformers' Gemma4Model.forward does it
// (build/fixtures/GEMMA4.md, "The merge"): the image and audio placeholders
// of a prompt take the towers' soft tokens in order (every image's, then
// every clip's kept frames); every other id takes its scaled token
// embedding (the begin and end tokens of a run are ordinary tokens). The
// per-layer table reads pad_token_id at the placeholders, and the per-layer
// projection reads the merged embeddings, so the soft tokens reach the
// per-layer inputs through it.
//
// Under text_config.use_bidirectional_attention "vision" (the 26B-A4B and
// 31B), transformers 5.17's create_masks_for_vision_model (after its PR
// 46850, as Google's own gemma library does it) masks the sliding layers
// with AND(sliding window, OR(causal, same image block)) and keeps the full
// layers causal. A block is a maximal run of consecutive vision tokens
// (get_block_sequence_ids_for_mask over mm_token_type_ids, which the
// processor sets by id: image and video placeholders; the begin and end
// tokens and audio are text). So on a sliding layer an image placeholder
// also sees its block's later placeholders, and the window still counts
// back from its own position; everything else is as before (text after the
// image attends causally, and sees the image through the ordinary mask).
// Here that is a per-position last key (blockLimits), which the reference
// and the Decoder's paged attention (native.PagedAttn.QLim) honour on the
// sliding layers.

// MediaTokens are a gemma4 config's media token ids: the placeholders the
// towers' soft tokens replace (Image, Audio, and Video, which no tower
// here fills) and the ordinary tokens that open and close their runs.
type MediaTokens struct {
	BOI, EOI, Image, Video, BOA, EOA, Audio int
	// VisionBidirectional is text_config.use_bidirectional_attention ==
	// "vision": an image block's placeholders attend to each other both
	// ways on the sliding layers (blockLimits).
	VisionBidirectional bool
}

// DefaultMediaTokens are Gemma4Config's defaults in transformers 5.17, the
// released checkpoints' ids (Media, and video_token_id 258884).
var DefaultMediaTokens = MediaTokens{BOI: Media.BOI, EOI: Media.EOI, Image: Media.Image, Video: 258884,
	BOA: Media.BOA, EOA: Media.EOA, Audio: Media.Audio}

// Special is t as the model interface's media tokens, without soft-token
// counts (an image's depends on its size, a clip's on its length).
func (t MediaTokens) Special() model.Special {
	return model.Special{BOI: t.BOI, EOI: t.EOI, Image: t.Image, BOA: t.BOA, EOA: t.EOA, Audio: t.Audio}
}

// check reports an id outside [0, vocab) or placeholders that coincide.
func (t MediaTokens) check(vocab int) error {
	for _, f := range []struct {
		name string
		id   int
	}{{"boi_token_id", t.BOI}, {"eoi_token_id", t.EOI}, {"image_token_id", t.Image}, {"video_token_id", t.Video},
		{"boa_token_id", t.BOA}, {"eoa_token_index", t.EOA}, {"audio_token_id", t.Audio}} {
		if f.id < 0 || f.id >= vocab {
			return fmt.Errorf("gemma4: %s %d is outside the vocabulary of %d", f.name, f.id, vocab)
		}
	}
	if t.Image == t.Audio || t.Image == t.Video || t.Audio == t.Video {
		return fmt.Errorf("gemma4: the image, video and audio placeholders (%d, %d, %d) must differ", t.Image, t.Video, t.Audio)
	}
	return nil
}

// ParseMediaTokens reads the media token ids of a gemma4 config.json (the
// top level of a Gemma4ForConditionalGeneration's config), each absent one
// taking transformers' default (DefaultMediaTokens), and checks them
// against text_config.vocab_size. A gemma4_text config has none: an error.
func ParseMediaTokens(data []byte) (MediaTokens, error) {
	if len(data) > maxJSONConfig {
		return MediaTokens{}, fmt.Errorf("gemma4: config.json is %d bytes (at most %d)", len(data), maxJSONConfig)
	}
	var r struct {
		ModelType string `json:"model_type"`
		BOI       *int   `json:"boi_token_id"`
		EOI       *int   `json:"eoi_token_id"`
		Image     *int   `json:"image_token_id"`
		Video     *int   `json:"video_token_id"`
		BOA       *int   `json:"boa_token_id"`
		EOA       *int   `json:"eoa_token_index"`
		EOAID     *int   `json:"eoa_token_id"`
		Audio     *int   `json:"audio_token_id"`
		Text      *struct {
			Vocab         *int    `json:"vocab_size"`
			Bidirectional *string `json:"use_bidirectional_attention"`
		} `json:"text_config"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return MediaTokens{}, fmt.Errorf("gemma4: config.json: %w", err)
	}
	if r.ModelType != "gemma4" {
		return MediaTokens{}, fmt.Errorf("gemma4: config.json: model_type %q has no media tokens (want gemma4)", r.ModelType)
	}
	if r.Text == nil || r.Text.Vocab == nil {
		return MediaTokens{}, errors.New("gemma4: config.json: text_config.vocab_size is missing")
	}
	if *r.Text.Vocab < 1 || *r.Text.Vocab > MaxVocab {
		// As ParseConfig: ids checked against an absurd vocabulary are no check.
		return MediaTokens{}, fmt.Errorf("gemma4: config.json: text_config.vocab_size %d is outside [1, %d]", *r.Text.Vocab, MaxVocab)
	}
	if r.EOA != nil && r.EOAID != nil && *r.EOA != *r.EOAID {
		return MediaTokens{}, fmt.Errorf("gemma4: config.json: eoa_token_index %d and eoa_token_id %d differ", *r.EOA, *r.EOAID)
	}
	if r.EOA == nil {
		r.EOA = r.EOAID
	}
	t := DefaultMediaTokens
	for _, f := range []struct {
		dst *int
		v   *int
	}{{&t.BOI, r.BOI}, {&t.EOI, r.EOI}, {&t.Image, r.Image}, {&t.Video, r.Video}, {&t.BOA, r.BOA}, {&t.EOA, r.EOA}, {&t.Audio, r.Audio}} {
		if f.v != nil {
			*f.dst = *f.v
		}
	}
	t.VisionBidirectional = r.Text.Bidirectional != nil && *r.Text.Bidirectional == "vision"
	if err := t.check(*r.Text.Vocab); err != nil {
		return MediaTokens{}, fmt.Errorf("%w (config.json)", err)
	}
	return t, nil
}

// mediaSource is where each position's input embedding comes from:
// -1 for the token's own, else the row of the media rows (every image's
// soft tokens, then every clip's).
type mediaSource []int

// placeMedia matches the placeholders of ids to nImage image and nAudio
// audio soft tokens, in order. imageCounts and audioCounts, when set, are
// each image's and clip's soft-token counts: the runs of consecutive
// placeholders must have them. Ids must lie in [0, vocab); a video
// placeholder is refused (no video tower).
func placeMedia(ids []int, t *MediaTokens, vocab, nImage, nAudio int, imageCounts, audioCounts []int) (mediaSource, error) {
	src := make(mediaSource, len(ids))
	var img, aud int
	var imgRuns, audRuns []int
	prev := -1
	for i, id := range ids {
		src[i] = -1
		if id < 0 || id >= vocab {
			return nil, fmt.Errorf("gemma4: token id %d (at %d) is outside the vocabulary of %d", id, i, vocab)
		}
		switch {
		case t == nil:
		case id == t.Image:
			if img == nImage {
				return nil, fmt.Errorf("gemma4: the prompt has more image placeholders than the %d image soft tokens given", nImage)
			}
			if prev != id {
				imgRuns = append(imgRuns, 0)
			}
			imgRuns[len(imgRuns)-1]++
			src[i] = img
			img++
		case id == t.Audio:
			if aud == nAudio {
				return nil, fmt.Errorf("gemma4: the prompt has more audio placeholders than the %d audio soft tokens given", nAudio)
			}
			if prev != id {
				audRuns = append(audRuns, 0)
			}
			audRuns[len(audRuns)-1]++
			src[i] = nImage + aud
			aud++
		case id == t.Video:
			return nil, fmt.Errorf("gemma4: a video placeholder (token %d at %d): video is not supported", id, i)
		}
		prev = id
	}
	if img != nImage || aud != nAudio {
		return nil, fmt.Errorf("gemma4: %d image and %d audio soft tokens given for %d and %d placeholders", nImage, nAudio, img, aud)
	}
	if err := checkRuns("image", imgRuns, imageCounts, nImage); err != nil {
		return nil, err
	}
	if err := checkRuns("audio", audRuns, audioCounts, nAudio); err != nil {
		return nil, err
	}
	return src, nil
}

// checkRuns compares the placeholder runs of one kind with the given
// per-item counts (none given: nothing to compare).
func checkRuns(kind string, runs, counts []int, total int) error {
	if counts == nil {
		return nil
	}
	sum := 0
	for i, n := range counts {
		if n < 1 {
			return fmt.Errorf("gemma4: %s %d has %d soft tokens, want at least 1", kind, i, n)
		}
		sum += n
	}
	if sum != total {
		return fmt.Errorf("gemma4: the %s counts add up to %d soft tokens, %d were given", kind, sum, total)
	}
	if len(runs) != len(counts) {
		return fmt.Errorf("gemma4: the prompt has %d runs of %s placeholders for %d %s inputs", len(runs), kind, len(counts), kind)
	}
	for i := range runs {
		if runs[i] != counts[i] {
			return fmt.Errorf("gemma4: %s run %d has %d placeholders, the %s has %d soft tokens", kind, i, runs[i], kind, counts[i])
		}
	}
	return nil
}

// blockLimits returns, under use_bidirectional_attention "vision", the
// last key position each of ids (at positions pos0 on) attends to on a
// sliding layer: an image placeholder's is the last placeholder of its
// block (the maximal run of consecutive image placeholders), every other
// id's its own position. It returns nil when no position sees past itself
// (no image, or t nil or not bidirectional): attention is causal.
func blockLimits(ids []int, t *MediaTokens, pos0 int) []int {
	if t == nil || !t.VisionBidirectional || !slices.Contains(ids, t.Image) {
		return nil
	}
	lim := make([]int, len(ids))
	for i := 0; i < len(ids); {
		j := i + 1
		if ids[i] == t.Image {
			for j < len(ids) && ids[j] == t.Image {
				j++
			}
		}
		for k := i; k < j; k++ {
			lim[k] = pos0 + j - 1
		}
		i = j
	}
	return lim
}

// mediaRows checks the image and audio soft tokens (whole rows of d
// finite values) and returns their row counts.
func mediaRows(image, audio []float32, d int) (nImage, nAudio int, err error) {
	for _, m := range []struct {
		kind string
		v    []float32
	}{{"image", image}, {"audio", audio}} {
		if len(m.v)%d != 0 {
			return 0, 0, fmt.Errorf("gemma4: %d %s soft-token values are not whole rows of %d", len(m.v), m.kind, d)
		}
		for i, v := range m.v {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return 0, 0, fmt.Errorf("gemma4: %s soft token %d has value %v", m.kind, i/d, v)
			}
		}
	}
	return len(image) / d, len(audio) / d, nil
}

// MergeMedia builds a prompt's decoder inputs (ForwardEmbeds) with the
// towers' soft tokens: image [images' soft tokens, D] fills the image
// placeholders of ids in order and audio [clips' kept soft tokens, D]
// (KeptAudio) the audio ones; every count must match. It returns the input
// embeddings [len(ids)·D] and the ids the per-layer table reads (the
// placeholders as pad_token_id).
func (m *Model) MergeMedia(ids []int, t MediaTokens, image, audio []float32) (embeds []float32, plIDs []int, err error) {
	c := m.Cfg
	D := c.Hidden
	if err := t.check(c.Vocab); err != nil {
		return nil, nil, err
	}
	nImage, nAudio, err := mediaRows(image, audio, D)
	if err != nil {
		return nil, nil, err
	}
	src, err := placeMedia(ids, &t, c.Vocab, nImage, nAudio, nil, nil)
	if err != nil {
		return nil, nil, err
	}
	embeds = make([]float32, len(ids)*D)
	plIDs = make([]int, len(ids))
	for i, id := range ids {
		out := embeds[i*D : (i+1)*D]
		switch s := src[i]; {
		case s < 0:
			plIDs[i] = id
			for j, v := range m.Embed[id*D : (id+1)*D] {
				out[j] = v * m.embScale
			}
		case s < nImage:
			plIDs[i] = c.PadID
			copy(out, image[s*D:])
		default:
			plIDs[i] = c.PadID
			copy(out, audio[(s-nImage)*D:])
		}
	}
	return embeds, plIDs, nil
}

// ForwardMedia is MergeMedia followed by ForwardEmbeds: the logits
// [len(ids)·V] of a prompt with media. Under use_bidirectional_attention
// "vision" each image block attends both ways on the sliding layers
// (blockLimits); a block is this call's run of placeholders, so a prompt
// must not be split inside one across calls.
func (m *Model) ForwardMedia(ids []int, t MediaTokens, image, audio []float32, cache *Cache, tr *Trace) ([]float32, error) {
	e, pl, err := m.MergeMedia(ids, t, image, audio)
	if err != nil {
		return nil, err
	}
	pos0 := 0
	if cache != nil {
		pos0 = cache.Len()
	}
	return m.forwardEmbeds(e, pl, blockLimits(ids, &t, pos0), cache, tr)
}

// KeptAudio returns the rows of one clip's soft tokens soft [T', d] whose
// output mask is true (Audio.Encode), in order: what the merge places.
func KeptAudio(soft []float32, mask []bool, d int) ([]float32, error) {
	if d < 1 || len(soft) != len(mask)*d {
		return nil, fmt.Errorf("gemma4: %d audio soft-token values for %d frames of %d", len(soft), len(mask), d)
	}
	var out []float32
	for i, ok := range mask {
		if ok {
			out = append(out, soft[i*d:(i+1)*d]...)
		}
	}
	return out, nil
}

// SetMediaTokens gives the decoder its checkpoint's media token ids
// (ParseMediaTokens), so that AddMultimodal places soft tokens. Call it
// before the decoder is shared; a decoder without them takes text only.
func (d *Decoder) SetMediaTokens(t MediaTokens) error {
	if err := t.check(d.cfg.Vocab); err != nil {
		return err
	}
	d.media = &t
	return nil
}

// AddMultimodal appends a prompt with media to b as rows of cache c, the
// last outs wanted, merged as MergeMedia merges it: the image and audio
// placeholders take md.Image's and md.Audio's rows in order (given
// embeddings, whose per-layer inputs read the pad id's row), every other
// id its token embedding. md.ImageTokens and md.AudioTokens, when set, must
// be the lengths of the placeholder runs. md.Hard is not used: Gemma 4's
// begin and end tokens are ordinary tokens. b is unchanged on error.
func (d *Decoder) AddMultimodal(b *model.Batch, c model.Cache, ids []int32, md model.Media, outs int) error {
	D := d.cfg.Hidden
	if d.media == nil && (len(md.Image) > 0 || len(md.Audio) > 0) {
		return errors.New("gemma4: images and audio need the decoder's media token ids (SetMediaTokens); without them it takes text only")
	}
	nImage, nAudio, err := mediaRows(md.Image, md.Audio, D)
	if err != nil {
		return err
	}
	wide := make([]int, len(ids))
	for i, id := range ids {
		wide[i] = int(id)
	}
	src, err := placeMedia(wide, d.media, d.cfg.Vocab, nImage, nAudio, md.ImageTokens, md.AudioTokens)
	if err != nil {
		return err
	}
	if nImage+nAudio == 0 {
		b.Add(c, ids, outs)
		return nil
	}
	base := int32(len(b.Embeds) / D)
	if len(b.Embeds)%D != 0 {
		return fmt.Errorf("gemma4: the batch holds %d embedding values, not whole rows of %d", len(b.Embeds), D)
	}
	b.Embeds = append(b.Embeds, md.Image...)
	b.Embeds = append(b.Embeds, md.Audio...)
	for t, id := range ids {
		row := model.Row{Cache: c, Token: id, Embed: -1, Out: t >= len(ids)-outs}
		if s := src[t]; s >= 0 {
			row.Embed = base + int32(s)
		}
		b.Rows = append(b.Rows, row)
	}
	return nil
}
