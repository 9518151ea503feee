package audio

import (
	"context"
	"fmt"

	"verdict/native"
)

// Embed maps encoder rows (Encode's output, [N, HiddenSize]) to soft tokens
// [N, TextHidden]: embed_audio's soft path, soft_embedding_norm →
// embedding_projection → an unscaled RMSNorm. Rows are independent.
func (t *Tower) Embed(enc []float32) ([]float32, error) {
	D := t.Cfg.HiddenSize
	if len(enc)%D != 0 {
		return nil, fmt.Errorf("audio: Embed: %d values is not a multiple of %d", len(enc), D)
	}
	return t.embed(enc, t.softNorm), nil
}

func (t *Tower) embed(x, norm []float32) []float32 {
	D, n := t.Cfg.HiddenSize, len(x)/t.Cfg.HiddenSize
	eps := float32(t.Cfg.RMSNormEps)
	h := make([]float32, len(x))
	native.RMSNorm(h, x, norm, D, eps)
	out := make([]float32, n*t.textHidden)
	native.Linear(out, h, t.projection, n)
	native.RMSNorm(out, out, nil, t.textHidden, eps)
	return out
}

// HardEmbed is embed_audio's embedding of an audio-vocabulary token id
// (Cfg.VocabOffset ≤ id < Cfg.VocabOffset+Cfg.VocabSize, e.g.
// <end_of_audio> 262272 or the padding id 262399): hard_embedding_norm →
// embedding_projection → an unscaled RMSNorm, [TextHidden]. The text decoder
// uses it in place of embed_tokens for every id ≥ VocabOffset.
func (t *Tower) HardEmbed(id int32) ([]float32, error) {
	row := int(id) - t.Cfg.VocabOffset
	if row < 0 || row >= t.Cfg.VocabSize {
		return nil, fmt.Errorf("audio: HardEmbed: id %d is outside the audio vocabulary [%d, %d)",
			id, t.Cfg.VocabOffset, t.Cfg.VocabOffset+t.Cfg.VocabSize)
	}
	D := t.Cfg.HiddenSize
	return t.embed(t.embedding[row*D:(row+1)*D], t.hardNorm), nil
}

// SoftTokens turns a mono 16 kHz clip into the Cfg.SoftTokens (188) rows
// [188, TextHidden] that replace the <audio_soft_token> placeholders of a
// prompt, as Gemma3nModel.forward builds them: Features, Encode, Embed, then
// every padded row and the rows past the encoder's output (up to 188) are
// the hard embedding of the padding id Cfg.TextVocabSize−1 (262399). Clips
// longer than 30 s are truncated by Features.
func (t *Tower) SoftTokens(samples []float32) ([]float32, error) {
	return t.SoftTokensContext(context.Background(), samples, nil)
}

// SoftTokensContext is SoftTokens with EncodeContext's cancellation and
// progress.
func (t *Tower) SoftTokensContext(ctx context.Context, samples []float32, progress func(done, total int)) ([]float32, error) {
	feats, mask := Features(samples)
	enc, encMask, err := t.EncodeContext(ctx, feats, mask, progress)
	if err != nil {
		return nil, err
	}
	return t.PadSoftTokens(enc, encMask)
}

// PadSoftTokens embeds encoder output (Encode's) and pads it to the clip's
// soft tokens as SoftTokens does.
func (t *Tower) PadSoftTokens(enc []float32, encMask []bool) ([]float32, error) {
	if len(encMask) > t.Cfg.SoftTokens {
		return nil, fmt.Errorf("audio: %d encoder rows exceed the %d soft tokens of a clip", len(encMask), t.Cfg.SoftTokens)
	}
	emb, err := t.Embed(enc)
	if err != nil {
		return nil, err
	}
	H := t.textHidden
	out := make([]float32, t.Cfg.SoftTokens*H)
	copy(out, emb)
	for n := range t.Cfg.SoftTokens {
		if n >= len(encMask) || !encMask[n] {
			copy(out[n*H:(n+1)*H], t.pad)
		}
	}
	return out, nil
}
