package decode

import (
	"bytes"
	"encoding/binary"
	"errors"
	"image"
	"image/color"
	"image/gif"
	"image/jpeg"
	"image/png"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/image/bmp"

	"verdict/media/internal/mediatest"
	"verdict/media/limits"
)

// testImage is 16×8: the left half red, the right half blue.
func testImage() *image.NRGBA {
	img := image.NewNRGBA(image.Rect(0, 0, 16, 8))
	for y := range 8 {
		for x := range 16 {
			c := color.NRGBA{R: 255, A: 255}
			if x >= 8 {
				c = color.NRGBA{B: 255, A: 255}
			}
			img.Set(x, y, c)
		}
	}
	return img
}

func encode(t *testing.T, format string) []byte {
	t.Helper()
	var buf bytes.Buffer
	var err error
	img := testImage()
	switch format {
	case PNG:
		err = png.Encode(&buf, img)
	case JPEG:
		err = jpeg.Encode(&buf, img, &jpeg.Options{Quality: 95})
	case GIF:
		err = gif.Encode(&buf, img, nil)
	case BMP:
		err = bmp.Encode(&buf, img)
	case WebP:
		dir := t.TempDir()
		in, out := filepath.Join(dir, "in.png"), filepath.Join(dir, "out.webp")
		if err := os.WriteFile(in, encode(t, PNG), 0o644); err != nil {
			t.Fatal(err)
		}
		mediatest.Run(t, "cwebp", "-quiet", "-q", "95", in, "-o", out)
		data, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func near(a, b uint32) bool {
	d := int(a>>8) - int(b>>8)
	return d > -40 && d < 40
}

func checkRedBlue(t *testing.T, img image.Image, w, h int) {
	t.Helper()
	b := img.Bounds()
	if b.Dx() != w || b.Dy() != h {
		t.Fatalf("size %v, want %d×%d", b, w, h)
	}
	r, g, bl, _ := img.At(b.Min.X+1, b.Min.Y+h/2).RGBA()
	if !near(r, 0xffff) || !near(g, 0) || !near(bl, 0) {
		t.Errorf("left pixel %d,%d,%d, want red", r>>8, g>>8, bl>>8)
	}
	r, g, bl, _ = img.At(b.Max.X-2, b.Min.Y+h/2).RGBA()
	if !near(r, 0) || !near(g, 0) || !near(bl, 0xffff) {
		t.Errorf("right pixel %d,%d,%d, want blue", r>>8, g>>8, bl>>8)
	}
}

func TestDecodeImageFormats(t *testing.T) {
	for _, format := range []string{PNG, JPEG, GIF, BMP, WebP} {
		t.Run(format, func(t *testing.T) {
			data := encode(t, format)
			// The name's extension lies: detection is by content.
			img, got, err := DecodeImage("picture.txt", data)
			if err != nil {
				t.Fatal(err)
			}
			if got != format {
				t.Errorf("format %q, want %q", got, format)
			}
			checkRedBlue(t, img, 16, 8)
		})
	}
}

func TestDecodeImageCommittedWebP(t *testing.T) {
	// A lossless 4×2 WebP made by cwebp: top row red, bottom row blue.
	img, format, err := ImageFile("testdata/tiny-lossless.webp")
	if err != nil {
		t.Fatal(err)
	}
	if format != WebP || img.Bounds().Dx() != 4 || img.Bounds().Dy() != 2 {
		t.Fatalf("%s %v", format, img.Bounds())
	}
	if r, _, b, _ := img.At(0, 0).RGBA(); r>>8 != 255 || b>>8 != 0 {
		t.Errorf("top-left %d/%d, want red", r>>8, b>>8)
	}
	if r, _, b, _ := img.At(3, 1).RGBA(); r>>8 != 0 || b>>8 != 255 {
		t.Errorf("bottom-right %d/%d, want blue", r>>8, b>>8)
	}
}

func TestDecodeGIFFirstFrame(t *testing.T) {
	pal := color.Palette{color.RGBA{255, 0, 0, 255}, color.RGBA{0, 255, 0, 255}, color.RGBA{0, 0, 0, 0}}
	f1 := image.NewPaletted(image.Rect(2, 2, 6, 6), pal) // all red, smaller than the screen
	f2 := image.NewPaletted(image.Rect(0, 0, 8, 8), pal)
	for i := range f2.Pix {
		f2.Pix[i] = 1
	}
	var buf bytes.Buffer
	err := gif.EncodeAll(&buf, &gif.GIF{Image: []*image.Paletted{f1, f2}, Delay: []int{10, 10},
		Config: image.Config{ColorModel: pal, Width: 8, Height: 8}})
	if err != nil {
		t.Fatal(err)
	}
	img, _, err := DecodeImage("anim.gif", buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if img.Bounds() != image.Rect(0, 0, 8, 8) {
		t.Fatalf("bounds %v, want the 8×8 screen", img.Bounds())
	}
	if r, g, _, a := img.At(3, 3).RGBA(); r>>8 != 255 || g != 0 || a>>8 != 255 {
		t.Errorf("frame pixel = %d,%d alpha %d, want red from the first frame", r>>8, g>>8, a>>8)
	}
	if _, _, _, a := img.At(0, 0).RGBA(); a != 0 {
		t.Errorf("outside the first frame alpha %d, want transparent", a)
	}
}

// TestDecodeGIFOnlyFirstFrame: an animation's later frames are not decoded:
// a corrupt second frame does not matter, and a 40-frame animation costs
// the memory of one frame.
func TestDecodeGIFOnlyFirstFrame(t *testing.T) {
	pal := color.Palette{color.RGBA{255, 0, 0, 255}, color.RGBA{0, 255, 0, 255}}
	anim := func(side, frames int) []byte {
		f := image.NewPaletted(image.Rect(0, 0, side, side), pal)
		g := &gif.GIF{Config: image.Config{ColorModel: pal, Width: side, Height: side}}
		for range frames {
			g.Image, g.Delay = append(g.Image, f), append(g.Delay, 10)
		}
		var buf bytes.Buffer
		if err := gif.EncodeAll(&buf, g); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	two := anim(8, 2)
	frame := len(anim(8, 3)) - len(two) // the bytes of one frame
	// Cut the second frame short, 12 bytes into it.
	broken := two[:len(two)-1-frame+12]
	if img, _, err := DecodeImage("broken.gif", broken); err != nil || img.Bounds() != image.Rect(0, 0, 8, 8) {
		t.Errorf("GIF with a corrupt second frame: %v, want the first frame", err)
	}

	data := anim(1000, 40) // 40 MB of frames
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	img, _, err := DecodeImage("long.gif", data)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if img.Bounds() != image.Rect(0, 0, 1000, 1000) {
		t.Fatalf("bounds %v", img.Bounds())
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 8<<20 {
		t.Errorf("decoding a 40-frame 1000×1000 GIF allocated %d MB, want under 8 MB (one frame is 1 MB)", got>>20)
	}
}

// withOrientation inserts an EXIF APP1 segment with the given orientation
// after a JPEG's SOI marker.
func withOrientation(jpg []byte, o uint16, bo binary.AppendByteOrder) []byte {
	tiff := []byte("II*\x00")
	if bo == binary.AppendByteOrder(binary.BigEndian) {
		tiff = []byte("MM\x00*")
	}
	tiff = bo.AppendUint32(tiff, 8)
	tiff = bo.AppendUint16(tiff, 1)
	tiff = bo.AppendUint16(tiff, 0x0112)
	tiff = bo.AppendUint16(tiff, 3)
	tiff = bo.AppendUint32(tiff, 1)
	tiff = bo.AppendUint16(tiff, o)
	tiff = append(tiff, 0, 0, 0, 0, 0, 0) // value padding, next IFD
	seg := append([]byte("Exif\x00\x00"), tiff...)
	out := append([]byte{}, jpg[:2]...)
	out = append(out, 0xff, 0xe1)
	out = binary.BigEndian.AppendUint16(out, uint16(len(seg)+2))
	out = append(out, seg...)
	return append(out, jpg[2:]...)
}

func TestDecodeJPEGOrientation(t *testing.T) {
	jpg := encode(t, JPEG) // 16×8, red left, blue right
	tests := []struct {
		o          uint16
		bo         binary.AppendByteOrder
		w, h       int
		redAt      image.Point
		blueAt     image.Point
		rotatedDim bool
	}{
		{1, binary.LittleEndian, 16, 8, image.Pt(1, 4), image.Pt(14, 4), false},
		{2, binary.LittleEndian, 16, 8, image.Pt(14, 4), image.Pt(1, 4), false},
		{3, binary.BigEndian, 16, 8, image.Pt(14, 4), image.Pt(1, 4), false},
		{4, binary.LittleEndian, 16, 8, image.Pt(1, 4), image.Pt(14, 4), false},
		{6, binary.LittleEndian, 8, 16, image.Pt(4, 1), image.Pt(4, 14), true},  // 90° clockwise: left goes up
		{8, binary.BigEndian, 8, 16, image.Pt(4, 14), image.Pt(4, 1), true},     // 90° counter-clockwise
		{5, binary.LittleEndian, 8, 16, image.Pt(4, 1), image.Pt(4, 14), true},  // transpose
		{7, binary.LittleEndian, 8, 16, image.Pt(4, 14), image.Pt(4, 1), true},  // transverse
		{9, binary.LittleEndian, 16, 8, image.Pt(1, 4), image.Pt(14, 4), false}, // invalid: ignored
	}
	for _, tt := range tests {
		img, _, err := DecodeImage("photo.jpg", withOrientation(jpg, tt.o, tt.bo))
		if err != nil {
			t.Fatalf("orientation %d: %v", tt.o, err)
		}
		if b := img.Bounds(); b.Dx() != tt.w || b.Dy() != tt.h {
			t.Errorf("orientation %d: %v, want %d×%d", tt.o, b, tt.w, tt.h)
			continue
		}
		if r, _, _, _ := img.At(tt.redAt.X, tt.redAt.Y).RGBA(); r>>8 < 200 {
			t.Errorf("orientation %d: not red at %v", tt.o, tt.redAt)
		}
		if _, _, b, _ := img.At(tt.blueAt.X, tt.blueAt.Y).RGBA(); b>>8 < 200 {
			t.Errorf("orientation %d: not blue at %v", tt.o, tt.blueAt)
		}
	}
}

// badSOF breaks the length of a JPEG's start-of-frame segment.
func badSOF(jpg []byte) []byte {
	out := append([]byte{}, jpg...)
	i := bytes.Index(out, []byte{0xff, 0xc0})
	out[i+2], out[i+3] = 0, 5
	return out
}

func TestDecodeImageErrors(t *testing.T) {
	png := encode(t, PNG)
	jpg := encode(t, JPEG)
	gifData := encode(t, GIF)
	bmpData := encode(t, BMP)
	webp, err := os.ReadFile("testdata/tiny-lossless.webp")
	if err != nil {
		t.Fatal(err)
	}
	huge := append([]byte{}, gifData...)
	binary.LittleEndian.PutUint16(huge[6:], 20000) // logical screen 20000×20000
	binary.LittleEndian.PutUint16(huge[8:], 20000)
	corruptPNG := append([]byte{}, png...)
	for i := 40; i < len(corruptPNG)-20; i++ {
		corruptPNG[i] ^= 0x5a
	}
	tests := []struct {
		name    string
		data    []byte
		problem error
		format  string
		msg     string
	}{
		{"empty.png", nil, ErrEmpty, "", "empty"},
		{"truncated.png", png[:len(png)/2], ErrTruncated, PNG, "truncated"},
		{"truncated.jpg", jpg[:len(jpg)/2], ErrTruncated, JPEG, "truncated"},
		{"truncated.gif", gifData[:len(gifData)-10], ErrTruncated, GIF, "truncated"},
		{"truncated.bmp", bmpData[:len(bmpData)/2], ErrTruncated, BMP, "truncated"},
		{"truncated.webp", webp[:24], ErrTruncated, WebP, "truncated"},
		{"corrupt.png", corruptPNG, ErrCorrupt, PNG, "corrupt"},
		{"corrupt.jpg", badSOF(jpg), ErrCorrupt, JPEG, "corrupt"},
		{"noise.png", bytes.Repeat([]byte("noise"), 20), ErrUnsupported, "", "not a recognised image"},
		{"scan.tiff", []byte("II*\x00\x08\x00\x00\x00"), ErrUnsupported, "TIFF", "TIFF files are not supported"},
		{"song.png", []byte("ID3\x03\x00\x00\x00\x00\x00\x00"), ErrUnsupported, MP3, "not image"},
		{"clip.png", []byte("\x00\x00\x00\x18ftypisom\x00\x00\x02\x00"), ErrUnsupported, "MP4", "open it as a video"},
	}
	for _, tt := range tests {
		_, _, err := DecodeImage(tt.name, tt.data)
		var de *Error
		if !errors.As(err, &de) {
			t.Errorf("%s: error %v, want *Error", tt.name, err)
			continue
		}
		if !errors.Is(err, tt.problem) || de.Format != tt.format {
			t.Errorf("%s: %v (format %q), want %v with format %q", tt.name, err, de.Format, tt.problem, tt.format)
		}
		if !strings.Contains(err.Error(), tt.name) || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("%s: message %q should name the file and say %q", tt.name, err, tt.msg)
		}
	}
	_, _, err = DecodeImage("huge.gif", huge)
	var le *limits.Error
	if !errors.As(err, &le) || le.Limit != limits.ImagePixels || !strings.Contains(err.Error(), "huge.gif") {
		t.Errorf("20000×20000 GIF: %v, want an image size limit error", err)
	}
	if _, _, err := ImageFile(filepath.Join(t.TempDir(), "missing.png")); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

func TestSniff(t *testing.T) {
	tests := []struct {
		head      string
		name      string
		kind      Kind
		supported bool
	}{
		{"\x89PNG\r\n\x1a\n", PNG, Image, true},
		{"RIFF\x00\x00\x00\x00WAVEfmt ", WAV, Audio, true},
		{"RIFF\x00\x00\x00\x00AVI LIST", "AVI", Video, true},
		{"fLaC\x00", FLAC, Audio, true},
		{"OggS\x00\x02" + strings.Repeat("\x00", 22) + "\x01vorbis", OggVorbis, Audio, true},
		{"OggS\x00\x02" + strings.Repeat("\x00", 22) + "OpusHead", "Ogg Opus", Audio, false},
		{"\xff\xfb\x90\x00", MP3, Audio, true},
		{"\xff\xf1\x50\x80", "AAC (ADTS)", Audio, false},
		{"ID3\x04\x00\x00\x00\x00\x00\x00fLaC", FLAC, Audio, true},
		{"FORM\x00\x00\x00\x00AIFF", "AIFF", Audio, false},
		{"\x00\x00\x00\x20ftypM4A \x00", "M4A", Audio, false},
		{"\x00\x00\x00\x20ftypheic\x00", "HEIC", Image, false},
		{"\x00\x00\x00\x20ftypavif\x00", "AVIF", Image, false},
		{"\x00\x00\x00\x20ftypisom\x00", "MP4", Video, true},
		{"\x00\x00\x00\x14ftypqt  \x00", "QuickTime", Video, true},
		{"\x1a\x45\xdf\xa3\x9f\x42\x86\x81\x01webm", "WebM", Video, true},
		{"  <svg xmlns=", "SVG", Image, false},
		{"hello", "", Unknown, false},
	}
	for _, tt := range tests {
		f := Sniff([]byte(tt.head))
		if f.Name != tt.name || f.Kind != tt.kind || f.Supported != tt.supported {
			t.Errorf("Sniff(%q) = %+v, want %s %v %v", tt.head, f, tt.name, tt.kind, tt.supported)
		}
	}
}
