package vision

import (
	"compress/gzip"
	"encoding/binary"
	"image"
	"image/color"
	_ "image/jpeg"
	_ "image/png"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func decodeImage(t testing.TB, path string) image.Image {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, _, err := image.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func readF32(t testing.TB, path string) []float32 {
	t.Helper()
	b := readFile(t, path)
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

// pilDecoded reads testdata/<name>.pil.rgb.gz (PIL's decode, raw 8-bit RGB)
// as an image.
func pilDecoded(t testing.TB, name string, w, h int) image.Image {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name+".pil.rgb.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(gz)
	if err != nil || len(raw) != w*h*3 {
		t.Fatalf("%s: %d bytes, %v", name, len(raw), err)
	}
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for p := range w * h {
		copy(img.Pix[4*p:4*p+3], raw[3*p:3*p+3])
		img.Pix[4*p+3] = 255
	}
	return img
}

// TestPreprocessReferences compares Preprocess with transformers' pixel
// values (PIL processor: .slow.f32, torchvision processor: .fast.f32; the
// two are identical in transformers 5.17) for two upscaled and two
// downscaled images, decoded with image/png and image/jpeg.
//
// The JPEG is checked twice: from PIL's own decode (testdata/*.pil.rgb.gz,
// made by testdata/make_pil_decode.py), which isolates the resampling and
// must match to 1/255, and from Go's image/jpeg, whose integer IDCT differs
// from libjpeg-turbo's by a level or two on some pixels (the decoder is not
// this package's), so that one is held to 4/255.
func TestPreprocessReferences(t *testing.T) {
	for _, c := range []struct {
		name, tarball, image string
		pil                  bool // use PIL's decode instead of Go's
		tol                  float64
	}{
		{"yellow_rose.png", "gemma3n-preprocess", "yellow_rose.png", false, 1},                       // RGBA 400×301, upscaled
		{"go-turns-two.jpeg/pil-decode", "gemma3n-preprocess", "go-turns-two-280x360.jpeg", true, 1}, // 280×360, upscaled
		{"go-turns-two.jpeg/go-decode", "gemma3n-preprocess", "go-turns-two-280x360.jpeg", false, 4},
		{"welcome.png", "gemma3n-preprocess-downscale", "welcome.png", false, 1},       // RGBA 2048×1024, downscaled
		{"onyx-query.png", "gemma3n-preprocess-downscale", "onyx-query.png", false, 1}, // RGBA 1322×1760, downscaled
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			untar(t, c.tarball, dir, c.image, c.image+".slow.f32", c.image+".fast.f32")
			img := decodeImage(t, filepath.Join(dir, c.image))
			if c.pil {
				pil := pilDecoded(t, strings.TrimSuffix(c.image, ".jpeg"), img.Bounds().Dx(), img.Bounds().Dy())
				a, _, _ := toRGB(img)
				b, _, _ := toRGB(pil)
				worst := 0
				for i := range a {
					worst = max(worst, int(a[i])-int(b[i]), int(b[i])-int(a[i]))
				}
				t.Logf("image/jpeg vs PIL decode: max difference %d levels", worst)
				img = pil
			}
			got := Preprocess(img)
			if len(got) != 3*ImageSize*ImageSize {
				t.Fatalf("got %d values", len(got))
			}
			best := math.Inf(1)
			for _, kind := range []string{"slow", "fast"} {
				want := readF32(t, filepath.Join(dir, c.image+"."+kind+".f32"))
				d, at := maxAbsDiff(got, want)
				off := 0
				for i := range got {
					if math.Abs(float64(got[i]-want[i])) > 0.5/255 {
						off++
					}
				}
				t.Logf("%s: max |got - want| = %.3g (%.2f/255) at %d; %d of %d values off by a level or more", kind, d, d*255, at, off, len(got))
				best = min(best, d)
			}
			if best > c.tol/255+1e-6 {
				t.Errorf("max abs error %.3g (%.2f/255) > %g/255 against both references", best, best*255, c.tol)
			}
		})
	}
}

func TestPreprocessImageKinds(t *testing.T) {
	// The same picture in several image.Image types gives the same pixels.
	const w, h = 37, 23
	nrgba := image.NewNRGBA(image.Rect(0, 0, w, h))
	gray := image.NewGray(image.Rect(0, 0, w, h))
	pal := image.NewPaletted(image.Rect(0, 0, w, h), color.Palette{})
	for i := range 256 {
		pal.Palette = append(pal.Palette, color.NRGBA{uint8(i), uint8(i), uint8(i), 255})
	}
	rgba := image.NewRGBA(image.Rect(5, 7, 5+w, 7+h)) // non-zero origin
	g16 := image.NewGray16(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			v := uint8((x*7 + y*13) % 256)
			nrgba.SetNRGBA(x, y, color.NRGBA{v, v, v, uint8(x * 5)}) // alpha is dropped
			gray.SetGray(x, y, color.Gray{v})
			pal.SetColorIndex(x, y, v)
			rgba.SetRGBA(5+x, 7+y, color.RGBA{v, v, v, 255})
			g16.SetGray16(x, y, color.Gray16{uint16(v)<<8 | 0x7f})
		}
	}
	want := Preprocess(gray)
	for name, img := range map[string]image.Image{"nrgba": nrgba, "paletted": pal, "rgba": rgba, "gray16": g16} {
		got := Preprocess(img)
		if d, at := maxAbsDiff(got, want); d != 0 {
			t.Errorf("%s: differs from gray by %g at %d", name, d, at)
		}
	}
	// A uniform image stays uniform, exactly k/255.
	u := image.NewNRGBA(image.Rect(0, 0, 3000, 5))
	for i := 0; i < len(u.Pix); i += 4 {
		u.Pix[i], u.Pix[i+1], u.Pix[i+2], u.Pix[i+3] = 10, 128, 255, 255
	}
	px := Preprocess(u)
	for c, v := range []float32{10, 128, 255} {
		for i := c * ImageSize * ImageSize; i < (c+1)*ImageSize*ImageSize; i++ {
			if px[i] != v/255 {
				t.Fatalf("uniform channel %d: [%d] = %g, want %g", c, i, px[i], v/255)
			}
		}
	}
	// Premultiplied colours are un-premultiplied.
	pm := image.NewRGBA(image.Rect(0, 0, 1, 1))
	pm.SetRGBA(0, 0, color.RGBA{50, 25, 0, 128})
	if rgb, _, _ := toRGB(pm); rgb[0] != 100 || rgb[1] != 50 || rgb[2] != 0 {
		t.Errorf("un-premultiplied = %v, want [100 50 0]", rgb)
	}
	// An empty image gives zeros of the right size.
	if px := Preprocess(image.NewNRGBA(image.Rect(0, 0, 0, 0))); len(px) != 3*ImageSize*ImageSize {
		t.Errorf("empty image: %d values", len(px))
	}
}

func TestComputeWeights(t *testing.T) {
	for _, c := range []struct{ in, out int }{{400, 768}, {2048, 768}, {1760, 768}, {768, 768}, {1, 768}, {5000, 768}} {
		a := computeWeights(c.in, c.out)
		for i := range c.out {
			if a.lo[i] < 0 || a.n[i] < 1 || a.lo[i]+a.n[i] > c.in || a.n[i] > a.ksize {
				t.Fatalf("%d->%d: output %d reads [%d, %d)", c.in, c.out, i, a.lo[i], a.lo[i]+a.n[i])
			}
			sum := int32(0)
			for _, w := range a.w[i*a.ksize : i*a.ksize+a.n[i]] {
				sum += w
			}
			// Rounded weights sum to 2^prec within a few units.
			if d := sum - int32(1)<<a.prec; d < -int32(a.n[i]) || d > int32(a.n[i]) {
				t.Fatalf("%d->%d: output %d weights sum %d, want %d", c.in, c.out, i, sum, int32(1)<<a.prec)
			}
		}
	}
}

func BenchmarkPreprocess(b *testing.B) {
	dir := b.TempDir()
	untar(b, "gemma3n-preprocess", dir, "yellow_rose.png", "go-turns-two-280x360.jpeg")
	untar(b, "gemma3n-preprocess-downscale", dir, "welcome.png", "onyx-query.png")
	for _, name := range []string{"yellow_rose.png", "go-turns-two-280x360.jpeg", "welcome.png", "onyx-query.png"} {
		img := decodeImage(b, filepath.Join(dir, name))
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				Preprocess(img)
			}
		})
	}
}
