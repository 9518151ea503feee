package preview

import (
	"bytes"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"testing"
	"time"

	"verdict/media/video"
)

func solid(w, h int, c color.Color) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.Set(x, y, c)
		}
	}
	return img
}

func TestThumbnail(t *testing.T) {
	tests := []struct{ w, h, max, wantW, wantH int }{
		{1920, 1080, 320, 320, 180},
		{1080, 1920, 320, 180, 320},
		{100, 50, 320, 100, 50},
		{5000, 10, 100, 100, 1},
		{640, 480, 0, 640, 480},
	}
	for _, tt := range tests {
		th := Thumbnail(solid(tt.w, tt.h, color.RGBA{200, 10, 10, 255}), tt.max)
		if th.Rect.Dx() != tt.wantW || th.Rect.Dy() != tt.wantH {
			t.Errorf("%d×%d max %d: %v, want %d×%d", tt.w, tt.h, tt.max, th.Rect, tt.wantW, tt.wantH)
		}
		if r, g, _, _ := th.At(th.Rect.Dx()/2, th.Rect.Dy()/2).RGBA(); r>>8 < 190 || g>>8 > 20 {
			t.Errorf("%d×%d: colour lost: %d,%d", tt.w, tt.h, r>>8, g>>8)
		}
	}
	// A non-zero origin is handled.
	sub := solid(40, 40, color.RGBA{0, 0, 255, 255}).SubImage(image.Rect(10, 10, 30, 20))
	if th := Thumbnail(sub, 10); th.Rect.Dx() != 10 || th.Rect.Dy() != 5 {
		t.Errorf("sub-image thumbnail %v", th.Rect)
	}
}

func TestEncodings(t *testing.T) {
	img := solid(800, 600, color.RGBA{0, 128, 0, 255})
	j, err := JPEG(img, 200, 0)
	if err != nil {
		t.Fatal(err)
	}
	if cfg, err := jpeg.DecodeConfig(bytes.NewReader(j)); err != nil || cfg.Width != 200 || cfg.Height != 150 {
		t.Errorf("jpeg %+v %v", cfg, err)
	}
	p, err := PNG(img, 64)
	if err != nil {
		t.Fatal(err)
	}
	if cfg, err := png.DecodeConfig(bytes.NewReader(p)); err != nil || cfg.Width != 64 || cfg.Height != 48 {
		t.Errorf("png %+v %v", cfg, err)
	}
}

func TestWaveform(t *testing.T) {
	s := []float32{0, 1, -1, 0.5, 0.25, -0.25, 0, 0}
	got := Waveform(s, 4)
	want := []Peak{{0, 1}, {-1, 0.5}, {-0.25, 0.25}, {0, 0}}
	if len(got) != len(want) {
		t.Fatalf("%v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("bucket %d: %v, want %v", i, got[i], want[i])
		}
	}
	if n := len(Waveform(s, 100)); n != len(s) {
		t.Errorf("more buckets than samples: %d", n)
	}
	if Waveform(nil, 10) != nil || Waveform(s, 0) != nil {
		t.Error("empty input should give nil")
	}
	// Uneven division still covers every sample.
	long := make([]float32, 1001)
	long[1000] = 0.9
	if w := Waveform(long, 7); w[6].Max != 0.9 {
		t.Errorf("last sample lost: %v", w[6])
	}
}

func TestFrames(t *testing.T) {
	frames := []video.Frame{
		{Time: 0, Image: solid(640, 360, color.White)},
		{Time: 61500 * time.Millisecond, Image: solid(640, 360, color.Black)},
	}
	out, err := Frames(frames, 160)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 2 || out[1].Label != "1:01.5" || out[1].Millis != 61500 || out[0].Label != "0:00.0" {
		t.Errorf("labels %q %q, ms %d", out[0].Label, out[1].Label, out[1].Millis)
	}
	if out[0].Width != 160 || out[0].Height != 90 {
		t.Errorf("size %d×%d", out[0].Width, out[0].Height)
	}
	if _, err := jpeg.Decode(bytes.NewReader(out[0].JPEG)); err != nil {
		t.Errorf("frame JPEG: %v", err)
	}
}
