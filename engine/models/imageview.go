package models

import (
	"fmt"
	"image"
	"math"

	"verdict/engine/vision"
)

// ImageView is what a model's vision tower receives of an image of a given
// size: the image its processor makes, Width×Height (Gemma 3n: the
// 768×768 stretch; Gemma 4: the aspect-preserving target size), and Key,
// naming the processor's settings: equal keys, equal views of the same
// image (a cache of results over images can key on it).
type ImageView struct {
	Width, Height int
	Key           string
}

// ImageView is what the model's vision tower receives of a width×height
// image; an error where it takes no images or refuses that size.
func (m *Model) ImageView(width, height int) (ImageView, error) {
	if _, err := m.ImageTokenCount(width, height); err != nil {
		return ImageView{}, err
	}
	return m.enc().view(width, height)
}

// RenderImageView is the image the model's vision tower receives of img:
// its processor's resize, before the rescaling to [0, 1] (a value k
// there is k/255).
func (m *Model) RenderImageView(img image.Image) (*image.RGBA, error) {
	b := img.Bounds()
	if _, err := m.ImageView(b.Dx(), b.Dy()); err != nil {
		return nil, err
	}
	return m.enc().render(img)
}

// Gemma3nView is Gemma 3n's image processor's output (vision.Preprocess:
// RGB stretched to 768×768, values k/255) as an image: Preprocess of it
// gives the same pixels.
func Gemma3nView(img image.Image) *image.RGBA {
	px := vision.Preprocess(img)
	const side = vision.ImageSize
	const n = side * side
	out := image.NewRGBA(image.Rect(0, 0, side, side))
	for p := range n {
		o := out.Pix[4*p:]
		o[0], o[1], o[2], o[3] = to8(px[p]), to8(px[n+p]), to8(px[2*n+p]), 255
	}
	return out
}

// to8 is a value k/255 back as k.
func to8(v float32) uint8 {
	x := v*255 + 0.5
	switch {
	case x <= 0:
		return 0
	case x >= 255:
		return 255
	}
	return uint8(x)
}

func (g gemma3nMedia) view(int, int) (ImageView, error) {
	return ImageView{Width: vision.ImageSize, Height: vision.ImageSize, Key: "gemma3n"}, nil
}

func (g gemma3nMedia) render(img image.Image) (*image.RGBA, error) { return Gemma3nView(img), nil }

func (g *gemma4Media) view(width, height int) (ImageView, error) {
	th, tw, err := g.proc.TargetSize(height, width)
	if err != nil {
		return ImageView{}, err
	}
	p := g.proc
	return ImageView{Width: tw, Height: th,
		Key: fmt.Sprintf("gemma4 patch %d pooling %d tokens %d", p.PatchSize, p.PoolingKernel, p.MaxSoftTokens)}, nil
}

func (g *gemma4Media) render(img image.Image) (*image.RGBA, error) {
	px, h, w, err := rgb(img)
	if err != nil {
		return nil, err
	}
	th, tw, err := g.proc.TargetSize(h, w)
	if err != nil {
		return nil, err
	}
	if th != h || tw != w { // as Preprocess resizes
		if px, err = vision.ResizeRGB(px, w, h, tw, th, vision.Bicubic); err != nil {
			return nil, fmt.Errorf("gemma4: image processor: %w", err)
		}
	}
	return rgbaOf(px, tw, th), nil
}

// rgbaOf is an opaque RGBA image of rgb [h·w·3].
func rgbaOf(rgb []uint8, w, h int) *image.RGBA {
	out := image.NewRGBA(image.Rect(0, 0, w, h))
	for p := range w * h {
		o := out.Pix[4*p:]
		o[0], o[1], o[2], o[3] = rgb[3*p], rgb[3*p+1], rgb[3*p+2], 255
	}
	return out
}

// ShrinkImage is img when it is within limit pixels, else img shrunk to
// at most limit pixels and sides of vision.MaxResizeSide, keeping its
// aspect ratio (each side at least 1), as an opaque RGBA image resized as
// Gemma 4's processor resizes (antialiased bicubic of its RGB, alpha
// dropped; a side over what the resize takes is first thinned to every
// n-th pixel). A store of images keeps them so: a Gemma 4 processor's
// largest target is 2,580,480 pixels, so an image kept at 4 Mpixels is
// only ever shrunk by it, never enlarged. An image shrunk is an
// *image.RGBA; one within the limit is img itself.
func ShrinkImage(img image.Image, limit int) (image.Image, error) {
	b := img.Bounds()
	w, h := b.Dx(), b.Dy()
	kw, kh := shrunkSize(w, h, limit)
	if kw == w && kh == h {
		return img, nil
	}
	px, _, _, err := rgb(img)
	if err != nil {
		return nil, err
	}
	if n := (max(w, h) + vision.MaxResizeSide - 1) / vision.MaxResizeSide; n > 1 {
		px, w, h = thin(px, w, h, n)
	}
	out, err := vision.ResizeRGB(px, w, h, kw, kh, vision.Bicubic)
	if err != nil {
		return nil, fmt.Errorf("shrinking a %dx%d image to %dx%d: %w", w, h, kw, kh, err)
	}
	return rgbaOf(out, kw, kh), nil
}

// shrunkSize is w×h shrunk to at most limit pixels and sides of
// vision.MaxResizeSide, keeping the aspect ratio (each side at least 1).
func shrunkSize(w, h, limit int) (int, int) {
	if int64(w)*int64(h) <= int64(limit) {
		return w, h
	}
	f := math.Sqrt(float64(limit) / (float64(w) * float64(h)))
	f = min(f, float64(vision.MaxResizeSide)/float64(max(w, h))) // what the resize takes
	kw, kh := int(float64(w)*f), int(float64(h)*f)
	return min(w, max(1, kw)), min(h, max(1, kh))
}

// thin keeps every n-th pixel of rgb [h·w·3] along its longer side.
func thin(rgb []uint8, w, h, n int) ([]uint8, int, int) {
	if w >= h {
		ow := (w + n - 1) / n
		out := make([]uint8, 0, ow*h*3)
		for y := range h {
			for x := 0; x < w; x += n {
				out = append(out, rgb[(y*w+x)*3:(y*w+x)*3+3]...)
			}
		}
		return out, ow, h
	}
	oh := (h + n - 1) / n
	out := make([]uint8, 0, w*oh*3)
	for y := 0; y < h; y += n {
		out = append(out, rgb[y*w*3:(y+1)*w*3]...)
	}
	return out, w, oh
}
