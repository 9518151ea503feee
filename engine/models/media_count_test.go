package models_test

import (
	"context"
	"image"
	"math"
	"strings"
	"testing"

	"verdict/engine/model"
	"verdict/engine/models"
)

// TestMediaTokenCounts: ImageTokenCount and AudioTokenCount, computed
// before encoding, are the soft tokens ImageTokens and AudioTokens give:
// for Gemma 4 (the multimodal fixture, max_soft_tokens 70) per image size
// and per clip length, from the shortest clip with a frame to lengths on
// either side of the extractor's padding multiple and the subsampling's
// steps; for Gemma 3n (the built-in model) the chat format's fixed counts.
// Sizes and lengths the processors refuse are refused.
func TestMediaTokenCounts(t *testing.T) {
	m, err := models.OpenWith(mmDir(t), models.Options{Weights: model.WeightsF32})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	D := m.SoftTokenWidth()
	ctx := context.Background()
	for _, sz := range [][2]int{{96, 96}, {70, 50}, {50, 70}, {37, 23}, {23, 37}, {100, 60}, {12, 12}, {1, 1}, {300, 200}} {
		img := image.NewNRGBA(image.Rect(0, 0, sz[0], sz[1]))
		for i := range img.Pix {
			img.Pix[i] = uint8(i * 13)
		}
		soft, _, err := m.ImageTokens(ctx, img, nil)
		if err != nil {
			t.Fatalf("%dx%d: %v", sz[0], sz[1], err)
		}
		n, err := m.ImageTokenCount(sz[0], sz[1])
		if err != nil || n != len(soft)/D {
			t.Errorf("%dx%d: ImageTokenCount %d (%v), the tower gave %d", sz[0], sz[1], n, err, len(soft)/D)
		}
	}
	for _, n := range []int{161, 162, 200, 479, 480, 481, 639, 640, 641, 1600, 9000, 10200, 16000, 16001} {
		pcm := make([]float32, n)
		for i := range pcm {
			pcm[i] = float32(0.2 * math.Sin(float64(i)*0.07))
		}
		soft, _, err := m.AudioTokens(ctx, pcm, nil)
		if err != nil {
			t.Fatalf("%d samples: %v", n, err)
		}
		c, err := m.AudioTokenCount(n)
		if err != nil || c != len(soft)/D {
			t.Errorf("%d samples: AudioTokenCount %d (%v), the tower gave %d", n, c, err, len(soft)/D)
		}
	}
	for _, c := range []struct {
		name string
		f    func() (int, error)
		want string
	}{
		{"a 0x5 image", func() (int, error) { return m.ImageTokenCount(0, 5) }, "0x5"},
		{"a 100-sample clip", func() (int, error) { return m.AudioTokenCount(100) }, "too short"},
		{"a 31 s clip", func() (int, error) { return m.AudioTokenCount(31 * 16000) }, "longer"},
	} {
		if n, err := c.f(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %d, %v; want an error naming %q", c.name, n, err, c.want)
		}
	}

	g3, err := models.Open(models.Builtin)
	if err != nil {
		t.Fatal(err)
	}
	defer g3.Close()
	sp := g3.Chat().Media
	soft, _, err := g3.ImageTokens(ctx, image.NewRGBA(image.Rect(0, 0, 40, 30)), nil)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := g3.ImageTokenCount(40, 30); err != nil || n != sp.VisionTokens || n != len(soft)/g3.SoftTokenWidth() {
		t.Errorf("Gemma 3n: ImageTokenCount %d (%v), the chat format's %d, the tower's %d", n, err, sp.VisionTokens, len(soft)/g3.SoftTokenWidth())
	}
	clip := make([]float32, 8000)
	soft, _, err = g3.AudioTokens(ctx, clip, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := g3.AudioTokenCount(len(clip)); err != nil || n != sp.AudioTokens || n != len(soft)/g3.SoftTokenWidth() {
		t.Errorf("Gemma 3n: AudioTokenCount %d (%v), the chat format's %d, the tower's %d", n, err, sp.AudioTokens, len(soft)/g3.SoftTokenWidth())
	}
}
