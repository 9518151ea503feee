package decode

import (
	"bytes"
	"fmt"
	"image"
	"image/draw"
	"image/gif"
	"image/jpeg"
	"image/png"
	"io"

	"golang.org/x/image/bmp"
	"golang.org/x/image/webp"

	"verdict/media/limits"
)

type imageCodec struct {
	config func(io.Reader) (image.Config, error)
	decode func(io.Reader) (image.Image, error)
}

var imageCodecs = map[string]imageCodec{
	PNG:  {png.DecodeConfig, png.Decode},
	JPEG: {jpeg.DecodeConfig, decodeJPEG},
	GIF:  {gif.DecodeConfig, decodeGIF},
	WebP: {webp.DecodeConfig, webp.Decode},
	BMP:  {bmp.DecodeConfig, bmp.Decode},
}

// ImageFile decodes the image file at path; see DecodeImage.
func ImageFile(path string) (image.Image, string, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, "", err
	}
	return DecodeImage(path, data)
}

// DecodeImage decodes a PNG, JPEG, GIF (first frame), WebP or BMP image,
// detected from the content; name is used in errors only. A JPEG's EXIF
// orientation is applied, as the Hugging Face processor's image loader does
// (PIL's exif_transpose). It returns the image and its format name.
// Images larger than limits.MaxImagePixels are refused before decoding.
func DecodeImage(name string, data []byte) (img image.Image, format string, err error) {
	if len(data) == 0 {
		return nil, "", &Error{Name: name, Problem: ErrEmpty}
	}
	f := Sniff(data[:min(len(data), SniffLen)])
	codec, ok := imageCodecs[f.Name]
	if !ok {
		return nil, f.Name, unsupported(name, f, Image)
	}
	defer guard(name, f.Name, &err)
	cfg, err := codec.config(bytes.NewReader(data))
	if err != nil {
		return nil, f.Name, fail(name, f.Name, err)
	}
	if cfg.Width <= 0 || cfg.Height <= 0 {
		return nil, f.Name, &Error{Name: name, Format: f.Name, Problem: ErrCorrupt,
			Err: fmt.Errorf("image is %d×%d pixels", cfg.Width, cfg.Height)}
	}
	if int64(cfg.Width)*int64(cfg.Height) > limits.MaxImagePixels {
		e := limits.Pixels(cfg.Width, cfg.Height)
		e.Source = name
		return nil, f.Name, e
	}
	img, err = codec.decode(bytes.NewReader(data))
	if err != nil {
		return nil, f.Name, fail(name, f.Name, err)
	}
	if f.Name == JPEG {
		img = orient(img, jpegOrientation(data))
	}
	return img, f.Name, nil
}

// unsupported explains why a file is not an image (or not audio) this
// package decodes.
func unsupported(name string, f Format, want Kind) *Error {
	e := &Error{Name: name, Format: f.Name, Problem: ErrUnsupported}
	supported := "PNG, JPEG, GIF, WebP or BMP"
	if want == Audio {
		supported = "WAV, MP3, FLAC or Ogg Vorbis"
	}
	switch {
	case f.Name == "":
		e.Err = fmt.Errorf("not a recognised %s file (supported: %s)", want, supported)
	case f.Kind == Video:
		e.Err = fmt.Errorf("this is a video; open it as a video (supported %s: %s)", want, supported)
	case f.Kind != want:
		e.Err = fmt.Errorf("this is %s, not %s (supported: %s)", article(f.Kind), want, supported)
	default:
		e.Err = fmt.Errorf("%s files are not supported (supported: %s)", f.Name, supported)
	}
	return e
}

func article(k Kind) string {
	if k == Image {
		return "an image"
	}
	return k.String()
}

// decodeGIF returns the first frame composed onto the GIF's logical screen.
// Only that frame is decoded: an animation's later frames are never read,
// so a long one costs no more memory than its first frame.
func decodeGIF(r io.Reader) (image.Image, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	cfg, err := gif.DecodeConfig(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	first, err := gif.Decode(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	screen := image.Rect(0, 0, cfg.Width, cfg.Height)
	if screen.Empty() || first.Bounds() == screen {
		return first, nil
	}
	canvas := image.NewRGBA(screen)
	draw.Draw(canvas, first.Bounds(), first, first.Bounds().Min, draw.Over)
	return canvas, nil
}
