package model

// Row is one row of a forward batch: a token of a sequence at the
// sequence's next position.
type Row struct {
	Cache Cache
	Token int32 // the token; an implementation may read more of it than its embedding
	Embed int32 // -1: the token's own embedding; else the row of Batch.Embeds
	Out   bool  // its final hidden state is wanted
}

// Batch is the rows of one forward pass (Exec.Forward): prefill chunks and
// decode steps of any sequences, in any mix. A sequence's rows take its
// next positions in batch order.
type Batch struct {
	Rows []Row
	// Embeds holds given input embeddings [k, Hidden] (multimodal prompts).
	Embeds []float32
	// Hook, when set, sees the hidden state of every row after the
	// embeddings (layer −1) and after every layer; every row runs every
	// layer.
	Hook Hook
}

// Hook receives the hidden states [rows, Hidden] after the embeddings
// (layer −1) and after every layer, as transformers' output_hidden_states
// reports them. It must not keep the slice.
type Hook func(layer int, h []float32)

// Reset empties b, keeping its memory.
func (b *Batch) Reset() {
	b.Rows, b.Embeds, b.Hook = b.Rows[:0], b.Embeds[:0], nil
}

// Add appends the tokens ids of cache c, the last outs of them wanted.
func (b *Batch) Add(c Cache, ids []int32, outs int) {
	for t, id := range ids {
		b.Rows = append(b.Rows, Row{Cache: c, Token: id, Embed: -1, Out: t >= len(ids)-outs})
	}
}

// AddEmbeds is Add with the tokens' input embeddings e [len(ids), Hidden]
// given.
func (b *Batch) AddEmbeds(c Cache, ids []int32, e []float32, outs int) {
	D := len(e) / max(len(ids), 1)
	for t, id := range ids {
		b.Rows = append(b.Rows, Row{Cache: c, Token: id, Embed: int32(len(b.Embeds)/max(D, 1) + t), Out: t >= len(ids)-outs})
	}
	b.Embeds = append(b.Embeds, e...)
}

// Outputs reports the number of rows whose output is wanted.
func (b *Batch) Outputs() int {
	n := 0
	for _, r := range b.Rows {
		if r.Out {
			n++
		}
	}
	return n
}

// Media holds the embeddings of a prompt's multimodal positions
// (Model.AddMultimodal).
type Media struct {
	// Image holds the soft tokens of every image, in prompt order:
	// [images·VisionTokens, Hidden].
	Image []float32
	// Audio holds the audio soft tokens [AudioTokens, Hidden] (nil: no
	// audio).
	Audio []float32
	// Hard embeds a multimodal control token (an id of the towers'
	// vocabularies, e.g. <end_of_image>).
	Hard func(id int32) ([]float32, error)
	// ImageTokens, when set, is each image's soft-token count in prompt
	// order, for a model whose images differ in count (Gemma 4: it
	// depends on the image's size); Image then holds their sum of rows.
	// nil: every image has the chat format's VisionTokens.
	ImageTokens []int
	// AudioTokens, when set, is each audio clip's soft-token count in
	// prompt order (Gemma 4 takes several clips of any length); Audio
	// then holds their sum of rows.
	AudioTokens []int
}
