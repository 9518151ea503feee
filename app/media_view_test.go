package app

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"image"
	"image/draw"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"verdict/engine/fixture/testmodel"
)

// tinyGemma4Dir is the tiny multimodal Gemma 4 fixture as a model folder
// with a test tokenizer and a processor of patch 4, pooling 3 and 70 soft
// tokens (as TestGemma4MediaCounts makes it).
func tinyGemma4Dir(t *testing.T) string {
	t.Helper()
	src := testmodel.Dir(t, "gemma4-synthetic-multimodal.tar.gz")
	dir := t.TempDir()
	for _, f := range []string{"config.json", "buffers.safetensors", "recipe.json"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, f), b, 0o644)
	}
	os.WriteFile(filepath.Join(dir, "tokenizer.json"), tinyGemma4Tokenizer(), 0o644)
	os.WriteFile(filepath.Join(dir, "processor_config.json"), []byte(`{"image_processor": {"patch_size": 4, "max_soft_tokens": 70, "pooling_kernel_size": 3}}`), 0o644)
	return dir
}

// TestMediaFollowsTheModel: one 1000×500 image, kept across model loads,
// is what each loaded model receives: the built-in Gemma 3n's 768×768
// view (256 soft tokens, model.png the view of the decoded image), Gemma
// 4's resize to its own target size (the count of that size, the model's
// own count, model.png the processor's resize of the decoded image);
// the digest follows, and a run's input carries it.
func TestMediaFollowsTheModel(t *testing.T) {
	needTokenizer(t)
	s, _ := mediaServices(t, nil)
	data := testPNG(t, 1000, 500)
	decoded, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	it := mustAdd(t, s.Media.Upload("wide.png", data))
	// tinyGemma4Dir's processor (patch 4, pooling 3: cells of 12 pixels, 70
	// soft tokens: 630 patches, 10,080 pixels) scales 1000×500 by
	// √(10080/500000) = 0.1420 and rounds each side down to a cell:
	// 132×60, 11 × 5 = 55 soft tokens.
	const tw, th, cell = 132, 60, 12
	g4dir := tinyGemma4Dir(t)

	digests := map[string][32]byte{} // by view
	for _, c := range []struct {
		name, spec string
		tokens     int // 0: the count of the target size
		w, h       int // model.png's size
		note       string
		view       string // models of the same view have the same digest
	}{
		{name: "no model", w: ModelImageSide, h: ModelImageSide, tokens: DefaultImageTokens, note: "stretched to 768×768", view: "3n"},
		{name: "gemma3n", spec: "builtin", w: ModelImageSide, h: ModelImageSide, tokens: DefaultImageTokens, note: "stretched to 768×768", view: "3n"},
		{name: "gemma4", spec: g4dir, w: tw, h: th, note: "keeping the aspect ratio", view: "4"},
		{name: "gemma3n again", spec: "builtin", w: ModelImageSide, h: ModelImageSide, tokens: DefaultImageTokens, note: "stretched to 768×768", view: "3n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.spec != "" {
				if _, err := s.Models.Open(c.spec); err != nil {
					t.Fatal(err)
				}
				deadline := time.Now().Add(60 * time.Second)
				for m := s.Models.Info(); m.State != ModelReady; m = s.Models.Info() {
					if m.State == ModelError || time.Now().After(deadline) {
						t.Fatalf("%s: %s %s", c.spec, m.State, m.Error)
					}
					time.Sleep(10 * time.Millisecond)
				}
			}
			items := s.Media.Items()
			if len(items) != 1 || items[0].ID != it.ID {
				t.Fatalf("items %+v, want the image added before", items)
			}
			want := c.tokens
			if want == 0 {
				want = (th / cell) * (tw / cell)
				if n, err := s.Models.loadedNow().s.ImageTokenCount(1000, 500); err != nil || n != want {
					t.Fatalf("the model counts %d soft tokens (%v), the target size %dx%d %d", n, err, tw, th, want)
				}
			}
			if items[0].Tokens != want {
				t.Errorf("%d soft tokens, want %d", items[0].Tokens, want)
			}
			if !strings.Contains(items[0].Note, c.note) {
				t.Errorf("note %q, want it to say %q", items[0].Note, c.note)
			}
			code, _, body := get(t, s.Media.Files(), items[0].ModelView)
			if code != 200 {
				t.Fatalf("model.png: %d %s", code, body)
			}
			view, err := png.Decode(bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			if b := view.Bounds(); b.Dx() != c.w || b.Dy() != c.h {
				t.Fatalf("model.png is %dx%d, want %dx%d", b.Dx(), b.Dy(), c.w, c.h)
			}
			var wantPix []uint8
			if c.w == ModelImageSide && c.h == ModelImageSide {
				wantPix = ModelView(decoded).Pix
			} else {
				// Each side is rounded down to a multiple of the cell.
				if r, tol := float64(c.w)/float64(c.h), 2*float64(cell)/float64(c.h); math.Abs(r-2) > tol {
					t.Errorf("model.png's aspect ratio %.3f, the image's 2 (within %.2f)", r, tol)
				}
				// The model's own render (engine/models' TestRenderImageView
				// holds it to the processor's resize).
				v, err := s.Models.loadedNow().s.RenderImageView(decoded)
				if err != nil {
					t.Fatal(err)
				}
				wantPix = v.Pix
			}
			opaque := image.NewRGBA(image.Rect(0, 0, c.w, c.h)) // the PNG's pixels as the RGBA views hold them
			draw.Draw(opaque, opaque.Rect, view, view.Bounds().Min, draw.Src)
			if got := opaque.Pix; !bytes.Equal(got, wantPix) {
				t.Errorf("model.png differs from the image the tower receives")
			}
			e := s.Media.entry(it.ID)
			in, refs, err := s.Media.input([]string{it.ID})
			if err != nil {
				t.Fatal(err)
			}
			d, ok := imageDigest(in.Images[0].Image)
			if !ok || d != e.digest {
				t.Errorf("the run's image has digest %x (%v), its item %x", d[:4], ok, e.digest[:4])
			}
			if refs[0].Tokens != want {
				t.Errorf("the run counts %d soft tokens, want %d", refs[0].Tokens, want)
			}
			for view, other := range digests {
				if same := other == e.digest; same != (view == c.view) {
					t.Errorf("the digest under %s equal to that of the %s view: %v", c.name, view, same)
				}
			}
			digests[c.view] = e.digest
		})
	}
}

// TestKeptImageBounded: an image within MaxKeptPixels is kept as decoded,
// a larger one shrunk within it keeping its aspect ratio; its Gemma 3n
// view is made from the image as decoded either way.
func TestKeptImageBounded(t *testing.T) {
	for _, c := range []struct {
		w, h   int
		shrunk bool
	}{
		{1000, 500, false},
		{2048, 2048, false},
		{2049, 2048, true},
		{4000, 3000, true},
		{30000, 40, false},
		{200000, 30, true},
	} {
		img := image.NewRGBA(image.Rect(0, 0, c.w, c.h))
		for i := range img.Pix {
			img.Pix[i] = uint8(i*7 + i/4097)
		}
		for i := 3; i < len(img.Pix); i += 4 {
			img.Pix[i] = 255
		}
		e, err := newImageEntry(img, "x.png", SourceFile)
		if err != nil {
			t.Fatalf("%dx%d: %v", c.w, c.h, err)
		}
		b := e.image.Bounds()
		if px := b.Dx() * b.Dy(); px > MaxKeptPixels {
			t.Errorf("%dx%d kept as %dx%d: %d pixels, over %d", c.w, c.h, b.Dx(), b.Dy(), px, MaxKeptPixels)
		}
		if shrunk := b.Dx() != c.w || b.Dy() != c.h; shrunk != c.shrunk {
			t.Errorf("%dx%d kept as %dx%d", c.w, c.h, b.Dx(), b.Dy())
		}
		if r, kr := float64(c.w)/float64(c.h), float64(b.Dx())/float64(b.Dy()); math.Abs(kr/r-1) > 2/float64(min(b.Dx(), b.Dy())) {
			t.Errorf("%dx%d kept as %dx%d: aspect ratio %.4f, want %.4f", c.w, c.h, b.Dx(), b.Dy(), kr, r)
		}
		if e.item.Width != c.w || e.item.Height != c.h {
			t.Errorf("%dx%d: the item says %dx%d", c.w, c.h, e.item.Width, e.item.Height)
		}
		if c.w*c.h < 1<<24 && !bytes.Equal(e.view3n.Pix, ModelView(img).Pix) {
			t.Errorf("%dx%d: the Gemma 3n view is not that of the image as decoded", c.w, c.h)
		}
	}
}

// TestImageBombRefused: a PNG whose header asks for 100000×100000 pixels is
// refused before decoding, by the image size limit.
func TestImageBombRefused(t *testing.T) {
	s, _ := mediaServices(t, nil)
	var b bytes.Buffer
	b.WriteString("\x89PNG\r\n\x1a\n")
	ihdr := make([]byte, 13)
	binary.BigEndian.PutUint32(ihdr[0:], 100000)
	binary.BigEndian.PutUint32(ihdr[4:], 100000)
	ihdr[8], ihdr[9] = 8, 2 // 8-bit RGB
	chunk := append([]byte("IHDR"), ihdr...)
	binary.Write(&b, binary.BigEndian, uint32(len(ihdr)))
	b.Write(chunk)
	binary.Write(&b, binary.BigEndian, crc32.ChecksumIEEE(chunk))
	r := s.Media.Upload("bomb.png", b.Bytes())
	if r.Item != nil || r.Limit == nil || r.Limit.Limit != "image size" {
		t.Fatalf("a 100000x100000 PNG: %+v", r)
	}
	if len(s.Media.Items()) != 0 {
		t.Error("the bomb is in the input")
	}
}

// TestTextOnlyModelHasNoModelView: under a Gemma 4 model without a vision
// tower an image item carries no model_view (its note says why) and the
// view's URL answers 404 naming the reason; under Gemma 3n it has both.
func TestTextOnlyModelHasNoModelView(t *testing.T) {
	needTokenizer(t)
	s, _ := mediaServices(t, nil)
	it := mustAdd(t, s.Media.Upload("wide.png", testPNG(t, 40, 30)))
	url := it.ModelView
	if url == "" {
		t.Fatal("no model_view with no model loaded (Gemma 3n's view)")
	}
	dir := t.TempDir()
	src := filepath.Join(testmodel.Dir(t, "gemma4-synthetic-tiny.tar.gz"))
	for _, f := range []string{"config.json", "model.safetensors"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), tinyGemma4Tokenizer(), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Models.Open(dir); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for m := s.Models.Info(); m.State != ModelReady; m = s.Models.Info() {
		if m.State == ModelError || time.Now().After(deadline) {
			t.Fatalf("%s: %s %s", dir, m.State, m.Error)
		}
		time.Sleep(10 * time.Millisecond)
	}
	items := s.Media.Items()
	if len(items) != 1 {
		t.Fatalf("items %+v", items)
	}
	if items[0].ModelView != "" {
		t.Errorf("model_view %q under a model without a vision tower", items[0].ModelView)
	}
	if !strings.Contains(items[0].Note, "takes no images") {
		t.Errorf("note %q, want it to say the model takes no images", items[0].Note)
	}
	code, _, body := get(t, s.Media.Files(), url)
	if code != 404 || !strings.Contains(string(body), "no vision tower") {
		t.Errorf("model.png: %d %q, want 404 naming the missing vision tower", code, body)
	}
}
