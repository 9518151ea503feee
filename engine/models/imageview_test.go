package models_test

import (
	"bytes"
	"image"
	"image/color"
	"strings"
	"testing"

	"verdict/engine/gemma4"
	"verdict/engine/model"
	"verdict/engine/models"
	"verdict/engine/vision"
)

// viewImage is a w×h image of distinct colours.
func viewImage(w, h int) *image.NRGBA {
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for i := range img.Pix {
		img.Pix[i] = uint8(i*13 + i/7)
		if i%4 == 3 {
			img.Pix[i] = 255
		}
	}
	return img
}

// rgbBytes is img's RGB [h·w·3].
func rgbBytes(img image.Image) []uint8 {
	b := img.Bounds()
	var px []uint8
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			c := color.NRGBAModel.Convert(img.At(x, y)).(color.NRGBA)
			px = append(px, c.R, c.G, c.B)
		}
	}
	return px
}

// TestRenderImageView: Gemma 4's view of an image is its processor's
// resize to the target size (TargetSize, then the antialiased bicubic of
// ResizeRGB), at the size ImageView says, whose cells are the image's
// soft tokens; its key names the processor's settings. Gemma 3n's is the
// 768×768 stretch that Preprocess gives.
func TestRenderImageView(t *testing.T) {
	m, err := models.OpenWith(mmDir(t), models.Options{Weights: model.WeightsF32})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	proc := gemma4.ImageProcessorConfig{PatchSize: 4, MaxSoftTokens: 70, PoolingKernel: 3}
	for _, sz := range [][2]int{{1000, 500}, {70, 50}, {37, 23}, {96, 96}, {12, 12}} {
		img := viewImage(sz[0], sz[1])
		v, err := m.ImageView(sz[0], sz[1])
		if err != nil {
			t.Fatalf("%v: %v", sz, err)
		}
		th, tw, err := proc.TargetSize(sz[1], sz[0])
		if err != nil {
			t.Fatal(err)
		}
		if v.Width != tw || v.Height != th || v.Key != "gemma4 patch 4 pooling 3 tokens 70" {
			t.Errorf("%v: view %+v, want %dx%d and the processor's key", sz, v, tw, th)
		}
		if n, _ := m.ImageTokenCount(sz[0], sz[1]); n != (th/12)*(tw/12) {
			t.Errorf("%v: %d soft tokens, the view's cells %d", sz, n, (th/12)*(tw/12))
		}
		got, err := m.RenderImageView(img)
		if err != nil {
			t.Fatal(err)
		}
		want := rgbBytes(img)
		if th != sz[1] || tw != sz[0] {
			if want, err = vision.ResizeRGB(want, sz[0], sz[1], tw, th, vision.Bicubic); err != nil {
				t.Fatal(err)
			}
		}
		if b := got.Bounds(); b.Dx() != tw || b.Dy() != th || !bytes.Equal(rgbBytes(got), want) {
			t.Errorf("%v: the render (%v) is not the processor's resize to %dx%d", sz, got.Bounds(), tw, th)
		}
	}
	if _, err := m.RenderImageView(image.NewNRGBA(image.Rect(0, 0, 0, 3))); err == nil {
		t.Error("an empty image rendered")
	}

	b, err := models.OpenWith("builtin", models.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	img := viewImage(300, 100)
	if v, err := b.ImageView(300, 100); err != nil || v != (models.ImageView{Width: 768, Height: 768, Key: "gemma3n"}) {
		t.Errorf("Gemma 3n's view %+v (%v), want 768×768 \"gemma3n\"", v, err)
	}
	got, err := b.RenderImageView(img)
	if err != nil {
		t.Fatal(err)
	}
	px := vision.Preprocess(img)
	const n = 768 * 768
	for p := range n {
		for c := range 3 {
			if want := uint8(px[c*n+p]*255 + 0.5); got.Pix[4*p+c] != want {
				t.Fatalf("Gemma 3n's view at pixel %d channel %d: %d, Preprocess %d", p, c, got.Pix[4*p+c], want)
			}
		}
	}
}

// TestShrinkImage: an image within the limit is kept as it is; a larger one
// is shrunk, keeping its aspect ratio, to at most the limit, each side at
// most vision.MaxResizeSide, by the bicubic resize.
func TestShrinkImage(t *testing.T) {
	for _, c := range []struct {
		w, h, limit int
		kw, kh      int
	}{
		{100, 50, 5000, 100, 50},
		{100, 50, 1250, 50, 25},
		{1000, 10, 2500, 500, 5},
		{3, 3000, 900, 1, 948}, // a side of at least 1 (948 pixels)
		{200000, 2, 200000, 65536, 1},
	} {
		img := viewImage(c.w, c.h)
		out, err := models.ShrinkImage(img, c.limit)
		if err != nil {
			t.Fatalf("%dx%d: %v", c.w, c.h, err)
		}
		b := out.Bounds()
		if b.Dx() != c.kw || b.Dy() != c.kh {
			t.Errorf("%dx%d within %d: %dx%d, want %dx%d", c.w, c.h, c.limit, b.Dx(), b.Dy(), c.kw, c.kh)
		}
		if c.kw == c.w && c.kh == c.h && out != image.Image(img) {
			t.Errorf("%dx%d within %d: not kept as it is", c.w, c.h, c.limit)
		}
		if c.w*c.h <= 1<<16 && (c.kw != c.w || c.kh != c.h) {
			want, err := vision.ResizeRGB(rgbBytes(img), c.w, c.h, c.kw, c.kh, vision.Bicubic)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(rgbBytes(out), want) {
				t.Errorf("%dx%d: not the bicubic resize", c.w, c.h)
			}
		}
	}
	if _, err := models.ShrinkImage(viewImage(1<<14, 1<<13), 100); err == nil || !strings.Contains(err.Error(), "pixels") {
		t.Errorf("a 128-Mpixel image: %v, want it refused", err)
	}
}
