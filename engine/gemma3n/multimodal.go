package gemma3n

import (
	"fmt"

	"verdict/engine/model"
)

// Media holds the embeddings of a prompt's multimodal positions; Hard
// embeds the ids at or above the per-layer table's text vocabulary.
type Media = model.Media

// AddMultimodal appends a prompt with media to b as rows of cache c, the
// last outs wanted, merged as transformers merges them: text ids take their
// scaled token embeddings, ids from the vision and audio vocabularies their
// hard embeddings, and the image and audio soft-token positions the media
// rows in order (given embeddings, set over their rows).
func (m *Model) AddMultimodal(b *Batch, c model.Cache, ids []int32, md Media, outs int) error {
	D, sp := m.Cfg.HiddenSize, m.Special
	first := int32(m.Cfg.VocabSizePerLayer) // the multimodal vocabularies start here
	start := len(b.Rows)
	var img, aud int
	for t, id := range ids {
		row := Row{Cache: c, Token: id, Embed: -1, Out: t >= len(ids)-outs}
		var e []float32
		switch {
		case id < first:
		case int(id) == sp.Image && sp.Image != 0:
			if (img+1)*D > len(md.Image) {
				b.Rows = b.Rows[:start]
				return fmt.Errorf("gemma3n: the prompt has more image placeholders than the %d image soft tokens given", len(md.Image)/D)
			}
			e = md.Image[img*D : (img+1)*D]
			img++
		case int(id) == sp.Audio && sp.Audio != 0:
			if (aud+1)*D > len(md.Audio) {
				b.Rows = b.Rows[:start]
				return fmt.Errorf("gemma3n: the prompt has more audio placeholders than the %d audio soft tokens given", len(md.Audio)/D)
			}
			e = md.Audio[aud*D : (aud+1)*D]
			aud++
		default:
			if md.Hard == nil {
				b.Rows = b.Rows[:start]
				return fmt.Errorf("gemma3n: token %d needs a multimodal embedder", id)
			}
			h, err := md.Hard(id)
			if err != nil {
				b.Rows = b.Rows[:start]
				return err
			}
			if len(h) != D {
				b.Rows = b.Rows[:start]
				return fmt.Errorf("gemma3n: the embedding of token %d has %d values, want %d", id, len(h), D)
			}
			e = h
		}
		if e != nil {
			row.Embed = int32(len(b.Embeds) / D)
			b.Embeds = append(b.Embeds, e...)
		}
		b.Rows = append(b.Rows, row)
	}
	if img*D != len(md.Image) || aud*D != len(md.Audio) {
		b.Rows = b.Rows[:start]
		return fmt.Errorf("gemma3n: %d image and %d audio soft tokens given for %d and %d placeholders",
			len(md.Image)/D, len(md.Audio)/D, img, aud)
	}
	return nil
}
