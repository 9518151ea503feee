// Package preview makes what the UI shows of an input: downscaled JPEG/PNG
// thumbnails of images and video frames (with their timestamps), and a
// min/max waveform summary of PCM.
package preview

import (
	"bytes"
	"fmt"
	"image"
	"image/jpeg"
	"image/png"
	"time"

	"golang.org/x/image/draw"

	"verdict/media/video"
)

// Thumbnail returns img scaled down (Catmull-Rom) so that its longer side is
// at most maxSide, keeping the aspect ratio; smaller images are copied
// unscaled.
func Thumbnail(img image.Image, maxSide int) *image.RGBA {
	b := img.Bounds()
	w, h := b.Dx(), b.Dy()
	if maxSide > 0 && (w > maxSide || h > maxSide) {
		if w >= h {
			w, h = maxSide, max(1, (h*maxSide+w/2)/w)
		} else {
			w, h = max(1, (w*maxSide+h/2)/h), maxSide
		}
	}
	out := image.NewRGBA(image.Rect(0, 0, w, h))
	if w == b.Dx() && h == b.Dy() {
		draw.Draw(out, out.Rect, img, b.Min, draw.Src)
		return out
	}
	draw.CatmullRom.Scale(out, out.Rect, img, b, draw.Src, nil)
	return out
}

// JPEG encodes a thumbnail of img (longer side ≤ maxSide) at the given
// quality (1-100, 0 for 85).
func JPEG(img image.Image, maxSide, quality int) ([]byte, error) {
	if quality <= 0 {
		quality = 85
	}
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, Thumbnail(img, maxSide), &jpeg.Options{Quality: quality}); err != nil {
		return nil, fmt.Errorf("preview: jpeg: %w", err)
	}
	return buf.Bytes(), nil
}

// PNG encodes a thumbnail of img (longer side ≤ maxSide), lossless, keeping
// transparency.
func PNG(img image.Image, maxSide int) ([]byte, error) {
	var buf bytes.Buffer
	if err := png.Encode(&buf, Thumbnail(img, maxSide)); err != nil {
		return nil, fmt.Errorf("preview: png: %w", err)
	}
	return buf.Bytes(), nil
}

// Peak is the lowest and highest sample of one waveform bucket.
type Peak struct {
	Min float32 `json:"min"`
	Max float32 `json:"max"`
}

// Waveform summarises samples in at most buckets buckets of equal length
// (fewer when there are fewer samples), each with its min and max.
func Waveform(samples []float32, buckets int) []Peak {
	if buckets <= 0 || len(samples) == 0 {
		return nil
	}
	buckets = min(buckets, len(samples))
	out := make([]Peak, buckets)
	for i := range out {
		lo := i * len(samples) / buckets
		hi := (i + 1) * len(samples) / buckets
		p := Peak{Min: samples[lo], Max: samples[lo]}
		for _, v := range samples[lo+1 : hi] {
			p.Min = min(p.Min, v)
			p.Max = max(p.Max, v)
		}
		out[i] = p
	}
	return out
}

// Frame is a video frame preview: a JPEG thumbnail and its time.
type Frame struct {
	Time   time.Duration `json:"-"`
	Millis int64         `json:"ms"`    // Time in milliseconds
	Label  string        `json:"label"` // "m:ss.s"
	JPEG   []byte        `json:"jpeg"`
	Width  int           `json:"width"`
	Height int           `json:"height"`
}

// Frames makes JPEG thumbnails (longer side ≤ maxSide) of sampled video
// frames, labelled with their timestamps.
func Frames(frames []video.Frame, maxSide int) ([]Frame, error) {
	out := make([]Frame, len(frames))
	for i, f := range frames {
		th := Thumbnail(f.Image, maxSide)
		var buf bytes.Buffer
		if err := jpeg.Encode(&buf, th, &jpeg.Options{Quality: 80}); err != nil {
			return nil, fmt.Errorf("preview: frame %d: %w", i, err)
		}
		out[i] = Frame{Time: f.Time, Millis: f.Time.Milliseconds(), Label: Timestamp(f.Time),
			JPEG: buf.Bytes(), Width: th.Rect.Dx(), Height: th.Rect.Dy()}
	}
	return out, nil
}

// Timestamp formats a time in a video as m:ss.s.
func Timestamp(d time.Duration) string {
	tenths := d.Round(100*time.Millisecond) / (100 * time.Millisecond)
	return fmt.Sprintf("%d:%02d.%d", tenths/600, tenths/10%60, tenths%10)
}
