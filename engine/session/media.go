package session

import (
	"fmt"
	"image"

	"verdict/engine/models"
	"verdict/engine/prompt"
	"verdict/engine/scorer"
)

// encodeMedia tokenizes pr, a prompt in the model's chat format with md's
// media placeholders (nil: none), each run sized to its item's soft-token
// count when md carries them (Gemma 4's vary by image size and clip
// length; prompt.Prompt.Sized), after checking that the model takes md.
func (s *Session) encodeMedia(pr prompt.Prompt, md *scorer.Media) ([]int32, error) {
	sp := s.m.Chat().Media
	if md != nil {
		images, audio, err := s.mediaCounts(md)
		if err != nil {
			return nil, err
		}
		if pr, err = pr.Sized(sp, images, audio); err != nil {
			return nil, fmt.Errorf("session: %w", err)
		}
	}
	return pr.Encode(s.tok, sp)
}

// mediaCounts checks md against the model: images need its vision tower,
// audio its audio tower, and a model whose counts vary by item (its chat
// format has no fixed VisionTokens or AudioTokens) needs each item's count,
// which a single image or clip gives by its rows. It returns the per-item
// counts the prompt's runs take (nil: the format's fixed count).
func (s *Session) mediaCounts(md *scorer.Media) (images, audio []int, err error) {
	info, sp := s.info, s.m.Chat().Media
	nImages := len(md.Captions)
	if nImages > 0 && !info.Vision {
		return nil, nil, fmt.Errorf("session: %s takes no images (it has no usable vision tower); the request has %d", info.Name, nImages)
	}
	if md.Audio != nil && !info.Audio {
		return nil, nil, fmt.Errorf("session: %s takes no audio (it has no audio tower)", info.Name)
	}
	D := info.Hidden
	images, audio = md.ImageTokens, md.AudioTokens
	if images == nil && nImages > 0 && sp.VisionTokens == 0 {
		if nImages != 1 {
			return nil, nil, fmt.Errorf("session: %d images without their soft-token counts (model.Media.ImageTokens): %s's vary by image", nImages, info.Name)
		}
		images = []int{len(md.Image) / D}
	}
	if audio == nil && md.Audio != nil && sp.AudioTokens == 0 {
		audio = []int{len(md.Audio) / D}
	}
	if images != nil && len(images) != nImages {
		return nil, nil, fmt.Errorf("session: %d image soft-token counts for %d images", len(images), nImages)
	}
	for _, k := range []struct {
		kind   string
		counts []int
		rows   []float32
	}{{"image", images, md.Image}, {"audio", audio, md.Audio}} {
		if k.counts == nil {
			continue
		}
		sum := 0
		for i, n := range k.counts {
			if n < 1 || n > prompt.MaxRun {
				return nil, nil, fmt.Errorf("session: %s %d has %d soft tokens (want 1 to %d)", k.kind, i+1, n, prompt.MaxRun)
			}
			sum += n
		}
		if len(k.rows) != sum*D {
			return nil, nil, fmt.Errorf("session: %d %s soft-token values, the counts %v say %d rows of %d", len(k.rows), k.kind, k.counts, sum, D)
		}
	}
	return images, audio, nil
}

// checkedMedia wraps a scorer request's media (scorer.Options.Media) with
// mediaCounts' checks, giving the scorer a copy that carries the per-item
// counts (a single image's or clip's taken from its rows).
func (s *Session) checkedMedia(f func() (*scorer.Media, error)) func() (*scorer.Media, error) {
	if f == nil {
		return nil
	}
	return func() (*scorer.Media, error) {
		md, err := f()
		if err != nil || md == nil {
			return md, err
		}
		images, audio, err := s.mediaCounts(md)
		if err != nil {
			return nil, err
		}
		c := *md
		c.ImageTokens, c.AudioTokens = images, audio
		return &c, nil
	}
}

// SoftTokenWidth is the width of a soft token, the model's hidden size
// (app/inputs divides an item's soft tokens by it for the item's count).
func (s *Session) SoftTokenWidth() int { return s.info.Hidden }

// ImageTokenCount is the soft-token count of an image of width×height
// pixels for the model, before encoding (models.Model.ImageTokenCount:
// Gemma 3n's fixed count, Gemma 4's from the size).
func (s *Session) ImageTokenCount(width, height int) (int, error) {
	return s.m.ImageTokenCount(width, height)
}

// AudioTokenCount is the soft-token count of a 16 kHz mono clip of samples
// samples for the model, before encoding (models.Model.AudioTokenCount).
func (s *Session) AudioTokenCount(samples int) (int, error) {
	return s.m.AudioTokenCount(samples)
}

// ImageView is what a model's vision tower receives of an image
// (models.ImageView): the processor's output size and a key naming its
// settings.
type ImageView = models.ImageView

// ImageView is what the model's vision tower receives of a width×height
// image (models.Model.ImageView).
func (s *Session) ImageView(width, height int) (ImageView, error) {
	return s.m.ImageView(width, height)
}

// RenderImageView is the image the model's vision tower receives of img
// (models.Model.RenderImageView).
func (s *Session) RenderImageView(img image.Image) (*image.RGBA, error) {
	return s.m.RenderImageView(img)
}

// ShrinkImage bounds an image kept for later runs to limit pixels, keeping
// its aspect ratio (models.ShrinkImage).
func ShrinkImage(img image.Image, limit int) (image.Image, error) {
	return models.ShrinkImage(img, limit)
}

// Gemma3nView is the 768×768 image Gemma 3n's (the built-in model's)
// vision tower receives of img (models.Gemma3nView).
func Gemma3nView(img image.Image) *image.RGBA { return models.Gemma3nView(img) }
