package gemma3n

import "fmt"

// Media holds the embeddings of a prompt's multimodal positions.
type Media struct {
	// Image holds the soft tokens of every image, in prompt order:
	// [images·VisionTokens, D].
	Image []float32
	// Audio holds the audio soft tokens [AudioTokens, D] (nil: no audio).
	Audio []float32
	// Hard embeds a multimodal control token (ids at or above the text
	// vocabulary of the per-layer table, e.g. <end_of_image>).
	Hard func(id int32) ([]float32, error)
}

// EmbedMultimodal returns the input embeddings [len(ids), D] of a prompt
// with media, merged as transformers merges them: text ids are scaled token
// embeddings, ids from the vision and audio vocabularies take their hard
// embeddings, and the image and audio soft-token positions take the media
// rows in order.
func (m *Model) EmbedMultimodal(ids []int32, md Media) ([]float32, error) {
	D, sp := m.Cfg.HiddenSize, m.Special
	e, err := m.Embed(ids)
	if err != nil {
		return nil, err
	}
	first := int32(m.Cfg.VocabSizePerLayer) // the multimodal vocabularies start here
	var img, aud int
	for t, id := range ids {
		row := e[t*D : (t+1)*D]
		switch {
		case id < first:
			continue
		case int(id) == sp.Image && sp.Image != 0:
			if (img+1)*D > len(md.Image) {
				return nil, fmt.Errorf("gemma3n: the prompt has more image placeholders than the %d image soft tokens given", len(md.Image)/D)
			}
			copy(row, md.Image[img*D:(img+1)*D])
			img++
		case int(id) == sp.Audio && sp.Audio != 0:
			if (aud+1)*D > len(md.Audio) {
				return nil, fmt.Errorf("gemma3n: the prompt has more audio placeholders than the %d audio soft tokens given", len(md.Audio)/D)
			}
			copy(row, md.Audio[aud*D:(aud+1)*D])
			aud++
		default:
			if md.Hard == nil {
				return nil, fmt.Errorf("gemma3n: token %d needs a multimodal embedder", id)
			}
			h, err := md.Hard(id)
			if err != nil {
				return nil, err
			}
			if len(h) != D {
				return nil, fmt.Errorf("gemma3n: the embedding of token %d has %d values, want %d", id, len(h), D)
			}
			copy(row, h)
		}
	}
	if img*D != len(md.Image) || aud*D != len(md.Audio) {
		return nil, fmt.Errorf("gemma3n: %d image and %d audio soft tokens given for %d and %d placeholders",
			len(md.Image)/D, len(md.Audio)/D, img, aud)
	}
	return e, nil
}
