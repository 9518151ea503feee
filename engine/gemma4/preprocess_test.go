package gemma4

import (
	"encoding/json"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"verdict/engine/vision"
)

func u8s(v []int) []uint8 {
	out := make([]uint8, len(v))
	for i, x := range v {
		out[i] = uint8(x)
	}
	return out
}

// diffs counts the values of a that are more than tol from b's (0: not the
// same float32; half a level, 0.5/255: another 8-bit level), and any
// difference in length.
func diffs(a, b []float32, tol float64) int {
	n := 0
	for i := range min(len(a), len(b)) {
		if math.Abs(float64(a[i])-float64(b[i])) > tol || a[i] != a[i] {
			n++
		}
	}
	return n + max(len(a), len(b)) - min(len(a), len(b))
}

// halfLevel tells one 8-bit level from float32 rounding of k/255.
const halfLevel = 0.5 / 255

// TestPreprocessFixture holds Preprocess to the vision fixture's processor
// outputs: the 96×96 image that needs no resize, and the 50×70 image that
// Gemma4ImageProcessor (torchvision) resizes to 84×108. Both must be the
// same float32 values, bit for bit.
func TestPreprocessFixture(t *testing.T) {
	fx := openTowerFixture(t, "gemma4-synthetic-vision")
	pc := ImageProcessorConfig{fx.meta.Processor.PatchSize, fx.meta.Processor.MaxSoftTokens, fx.meta.Processor.PoolingKernel}
	img, shape := fx.ints(t, "image_u8")
	pixels, pos, n, err := pc.Preprocess(u8s(img), shape[0], shape[1])
	if err != nil {
		t.Fatal(err)
	}
	wantPV, wantPos := visionPatches(t, fx)
	if d := diffs(pixels, wantPV, 0); d != 0 || !slices.Equal(pos, wantPos) {
		t.Errorf("96x96 (no resize): %d pixel values differ, positions equal %v", d, slices.Equal(pos, wantPos))
	}
	var want int
	if err := json.Unmarshal(fx.meta.NumSoft, &want); err != nil || n != want {
		t.Errorf("96x96: %d soft tokens, the processor said %s", n, fx.meta.NumSoft)
	}

	rimg, rshape := fx.ints(t, "resize_image_u8")
	src := u8s(rimg)
	tv := fx.f32(t, "resize_pixel_values_tv")
	pil := fx.f32(t, "resize_pixel_values_pil")
	rpos, _ := fx.ints(t, "resize_position_ids")
	var meta struct {
		Resize struct {
			N int `json:"num_soft_tokens_tv"`
		} `json:"resize_case"`
	}
	if mj, err := os.ReadFile(filepath.Join(fx.dir, "meta.json")); err != nil || json.Unmarshal(mj, &meta) != nil || meta.Resize.N == 0 {
		t.Fatalf("meta.json: resize_case.num_soft_tokens_tv: %v", err)
	}
	got, gpos, gn, err := pc.Preprocess(src, rshape[0], rshape[1])
	if err != nil {
		t.Fatal(err)
	}
	real := len(rpos) / 2
	pd := pc.PatchSize * pc.PatchSize * 3
	if d := diffs(got[:real*pd], tv, 0); d != 0 {
		t.Errorf("50x70 -> 84x108: %d of %d pixel values differ from Gemma4ImageProcessor's", d, len(tv))
	}
	for i := range real {
		if gpos[i] != (Patch{rpos[2*i], rpos[2*i+1]}) {
			t.Fatalf("resized patch %d at %v, the processor's at (%d, %d)", i, gpos[i], rpos[2*i], rpos[2*i+1])
		}
	}
	for i := real; i < len(gpos); i++ {
		if gpos[i] != (Patch{-1, -1}) || slices.ContainsFunc(got[i*pd:(i+1)*pd], func(v float32) bool { return v != 0 }) {
			t.Fatalf("padding patch %d: %v, want zeros at (-1, -1)", i, gpos[i])
		}
	}
	if gn != meta.Resize.N {
		t.Errorf("50x70: %d soft tokens, the processor said %d", gn, meta.Resize.N)
	}
	// The check sees one level: PIL's resize (22-bit weights) differs from
	// torchvision's in a few values, and so does one input level changed or
	// the bilinear filter. (PIL's processor also rescales in float64, so
	// its values differ in the last bit more often.)
	if d := diffs(pil, tv, halfLevel); d == 0 {
		t.Error("the fixture's PIL and torchvision resizes are the same: the comparison would not see a one-level error")
	} else {
		t.Logf("Gemma4ImageProcessorPil: %d of %d values a level off Gemma4ImageProcessor's, %d not the same float32", d, len(tv), diffs(pil, tv, 0))
	}
	bumped := slices.Clone(src)
	bumped[3*(25*70+35)]++
	bp, _, _, _ := pc.Preprocess(bumped, rshape[0], rshape[1])
	bil, _ := vision.ResizeRGB(src, rshape[1], rshape[0], 108, 84, vision.Bilinear)
	bl, _, _, _ := pc.PatchifyImage(bil, 84, 108)
	for name, px := range map[string][]float32{"one input level": bp, "bilinear": bl} {
		if diffs(px[:real*pd], tv, halfLevel) == 0 {
			t.Errorf("%s: the comparison with the processor did not change", name)
		}
	}
}

// TestResizeHand checks vision.ResizeRGB's bicubic on sizes computed by
// hand (the float answer, then rounding): Keys' cubic (a = −0.5) weights,
// renormalised at the edges, widened by the scale when downscaling.
func TestResizeHand(t *testing.T) {
	gray := func(v ...uint8) []uint8 {
		out := make([]uint8, 0, 3*len(v))
		for _, x := range v {
			out = append(out, x, x, x)
		}
		return out
	}
	for _, c := range []struct {
		name   string
		in     []uint8
		w, ow  int
		f      vision.Filter
		want   []uint8
		reason string
	}{
		// 2 -> 4: centres 0.25, 0.75, ...; taps at 0.25 and 1.25 weigh
		// 0.8671875 and −0.0703125, renormalised: 1.0882, −0.0882, so
		// 100·1.0882 − 200·0.0882 = 91.2; the next output 120.7, then
		// 179.3, 208.8.
		{"upscale bicubic", gray(100, 200), 2, 4, vision.Bicubic, gray(91, 121, 179, 209), "overshoot at the edges"},
		{"upscale bilinear", gray(100, 200), 2, 4, vision.Bilinear, gray(100, 125, 175, 200), "the triangle filter"},
		// 4 -> 2: support 4, taps at −0.25, 0.25, 0.75, 1.25 (input units
		// halved) weigh 0.4587, 0.4587, 0.1198, −0.0372: 35.2 and 144.8.
		{"downscale bicubic", gray(0, 60, 120, 180), 4, 2, vision.Bicubic, gray(35, 145), "antialiased support"},
		// Clipping: the negative lobe takes a dark pixel next to white
		// below zero.
		{"clip", gray(0, 255), 2, 4, vision.Bicubic, gray(0, 53, 202, 255), "clipped to 0..255"},
	} {
		got, err := vision.ResizeRGB(c.in, c.w, 1, c.ow, 1, c.f)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("%s (%s): %v, %v, want %v", c.name, c.reason, got, err, c.want)
		}
	}
	// The same in the vertical pass.
	got, err := vision.ResizeRGB(gray(100, 200), 1, 2, 1, 4, vision.Bicubic)
	if err != nil || !slices.Equal(got, gray(91, 121, 179, 209)) {
		t.Errorf("vertical upscale: %v, %v", got, err)
	}
	for _, c := range []struct {
		src          []uint8
		w, h, ow, oh int
		want         string
	}{
		{gray(1, 2), 2, 1, 0, 1, "output width 0"},
		{gray(1, 2), 2, 1, 1, vision.MaxResizeSide + 1, "output height"},
		{gray(1, 2, 3), 2, 1, 4, 1, "9 bytes"},
		{nil, -1, 1, 4, 1, "width -1"},
	} {
		if _, err := vision.ResizeRGB(c.src, c.w, c.h, c.ow, c.oh, vision.Bicubic); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ResizeRGB(%d bytes, %dx%d -> %dx%d): err %v, want %q", len(c.src), c.w, c.h, c.ow, c.oh, err, c.want)
		}
	}
}

// TestPreprocessSizes covers the patch budget's edges with the released
// settings (patch 16, 280 soft tokens, pooling 3: 2520 patches, sides in
// multiples of 48) and the fixture's (patch 4, 70, 3), target sizes worked
// out by hand from get_aspect_ratio_preserving_size.
func TestPreprocessSizes(t *testing.T) {
	released := ImageProcessorConfig{16, 280, 3}
	small := ImageProcessorConfig{4, 70, 3}
	for _, c := range []struct {
		name           string
		p              ImageProcessorConfig
		h, w           int
		th, tw, tokens int
	}{
		{"exactly the budget", released, 672, 960, 672, 960, 280},
		{"one row over", released, 673, 960, 672, 912, 266}, // factor 0.99926: 672.5 -> 672, 959.3 -> 912
		{"tiny square", released, 1, 1, 768, 768, 256},      // factor 803.2: 16 cells a side
		{"one row, long", released, 1, 5000, 48, 13440, 280},
		{"one column, tallest", released, 65536, 1, 13440, 48, 280},
		{"small upscale", small, 47, 47, 96, 96, 64}, // factor √(10080/2209) = 2.136: 100.4 -> 96 (multiples of 12)
		{"largest released budget", ImageProcessorConfig{16, 1120, 3}, 1344, 1920, 1344, 1920, 1120},
	} {
		th, tw, err := c.p.TargetSize(c.h, c.w)
		if err != nil || th != c.th || tw != c.tw {
			t.Errorf("%s: %dx%d -> %dx%d, %v; want %dx%d", c.name, c.h, c.w, th, tw, err, c.th, c.tw)
			continue
		}
		rgb := make([]uint8, c.h*c.w*3)
		for i := range rgb {
			rgb[i] = uint8(i*7 + i/3)
		}
		px, pos, n, err := c.p.Preprocess(rgb, c.h, c.w)
		if err != nil || n != c.tokens || len(pos) != c.p.MaxPatches() || len(px) != c.p.MaxPatches()*c.p.PatchSize*c.p.PatchSize*3 {
			t.Errorf("%s: %d soft tokens, %d positions, %d values, %v; want %d tokens", c.name, n, len(pos), len(px), err, c.tokens)
		}
	}
	for _, c := range []struct {
		name string
		p    ImageProcessorConfig
		rgb  []uint8
		h, w int
		want string
	}{
		{"zero height", released, nil, 0, 10, "out of range"},
		{"a side over 65536", released, nil, 65537, 1, "out of range"},
		{"absurd sides, no buffer", released, nil, 1 << 40, 1 << 40, "out of range"},
		{"short buffer", released, make([]uint8, 10), 2, 2, "10 bytes for a 2x2"},
		{"bad budget", ImageProcessorConfig{16, 300, 3}, make([]uint8, 12), 2, 2, "max_soft_tokens 300"},
		// FuzzPreprocess's testdata/fuzz/FuzzPreprocess/patch256-pool64: each
		// setting within the vision config's bounds, 3.6 TB of padded patches.
		{"patch 256, pooling 64", ImageProcessorConfig{256, 1120, 64}, nil, 65536, 1, "is 300647710720 padded pixels, over 8388608"},
		{"patch 32, pooling 6, 1120 tokens", ImageProcessorConfig{32, 1120, 6}, nil, 10, 10, "padded pixels, over 8388608"},
	} {
		if _, _, _, err := c.p.Preprocess(c.rgb, c.h, c.w); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want one containing %q", c.name, err, c.want)
		}
	}
}

// TestPreprocessConstant: a constant image stays constant through the
// resize (up and down), exactly k·float32(1/255) on every real patch.
func TestPreprocessConstant(t *testing.T) {
	p := ImageProcessorConfig{16, 70, 3}
	for _, size := range [][2]int{{300, 200}, {20, 31}, {1000, 37}} {
		h, w := size[0], size[1]
		rgb := make([]uint8, h*w*3)
		for i := range rgb {
			rgb[i] = []uint8{10, 128, 255}[i%3]
		}
		px, pos, _, err := p.Preprocess(rgb, h, w)
		if err != nil {
			t.Fatal(err)
		}
		for i, q := range pos {
			if q == (Patch{-1, -1}) {
				break
			}
			for j := range 16 * 16 * 3 {
				if want := float32([]uint8{10, 128, 255}[j%3]) * float32(1.0/255); px[i*768+j] != want {
					t.Fatalf("%dx%d: patch %d value %d = %g, want %g", h, w, i, j, px[i*768+j], want)
				}
			}
		}
	}
}

// preprocessGoldens is testdata/gemma4-preprocess.tar.gz
// (build/fixtures/make_gemma4_preprocess_fixtures.py): the processors'
// outputs over many sizes and settings.
type preprocessGoldens struct {
	exp  map[string]refTensor
	meta struct {
		Transformers string `json:"transformers"`
		Images       []struct {
			Name              string `json:"name"`
			Tensor            string `json:"tensor"`
			Seed, H, W        int
			PatchSize         int    `json:"patch_size"`
			MaxSoftTokens     int    `json:"max_soft_tokens"`
			Pooling           int    `json:"pooling_kernel_size"`
			Target            [2]int `json:"target"`
			Tokens            int    `json:"num_soft_tokens_tv"`
			CRC               uint32 `json:"crc32_tv"`
			CRCPil            uint32 `json:"crc32_pil"`
			LevelsDifferTvPil int    `json:"levels_differ_tv_pil"`
		} `json:"images"`
		TargetSizes struct {
			Settings struct {
				PatchSize     int `json:"patch_size"`
				MaxSoftTokens int `json:"max_soft_tokens"`
				Pooling       int `json:"pooling_kernel_size"`
			} `json:"settings"`
			Cases [][]any `json:"cases"`
		} `json:"target_sizes"`
		Audio []struct {
			Name    string          `json:"name"`
			Tensor  string          `json:"tensor"`
			Samples int             `json:"samples"`
			Rate    int             `json:"sampling_rate"`
			Kwargs  json.RawMessage `json:"kwargs"`
			Config  json.RawMessage `json:"config"`
			Frames  int             `json:"frames"`
			Valid   int             `json:"valid"`
		} `json:"audio"`
	}
}

// openPreprocessGoldens opens the goldens, or skips the test when they have
// not been recorded (they need transformers, so the GPU machine).
func openPreprocessGoldens(t *testing.T) *preprocessGoldens {
	t.Helper()
	const name = "gemma4-preprocess"
	if _, err := os.Stat(filepath.Join("..", "..", "testdata", name+".tar.gz")); err != nil {
		t.Skipf("testdata/%s.tar.gz not recorded yet (build/fixtures/make_gemma4_preprocess_fixtures.py)", name)
	}
	dir := fixtureDir(t, name)
	g := &preprocessGoldens{}
	mj, err := os.ReadFile(filepath.Join(dir, "meta.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(mj, &g.meta); err != nil {
		t.Fatalf("%s meta.json: %v", name, err)
	}
	if g.exp, err = readExpected(filepath.Join(dir, "expected.safetensors")); err != nil {
		t.Fatal(err)
	}
	return g
}

// goldenImage is the goldens' IMAGE_RULE: integers only, so the same bytes
// as NumPy's.
func goldenImage(h, w, seed int) []uint8 {
	out := make([]uint8, h*w*3)
	for y := range h {
		for x := range w {
			for c := range 3 {
				n := (int64(x)*2654435761 ^ int64(y)*40503 ^ int64(c+seed)*977) >> 7
				out[(y*w+x)*3+c] = uint8((3*int64(x) + 2*int64(y) + 85*int64(c) + n%64) % 256)
			}
		}
	}
	return out
}

// unpatchify turns Preprocess's real patches back into [th, tw, 3] levels,
// requiring row-major positions and values exactly level·float32(1/255).
func unpatchify(px []float32, pos []Patch, th, tw, ps int) ([]uint8, error) {
	pw := tw / ps
	out := make([]uint8, th*tw*3)
	for i := range th / ps * pw {
		if pos[i] != (Patch{i % pw, i / pw}) {
			return nil, fmt.Errorf("patch %d at %v", i, pos[i])
		}
		for r := range ps {
			for c := range ps {
				for ch := range 3 {
					v := px[i*ps*ps*3+(r*ps+c)*3+ch]
					l := uint8(math.Round(float64(v) * 255))
					if float32(l)*float32(1.0/255) != v {
						return nil, fmt.Errorf("patch %d value %g is not a level", i, v)
					}
					out[((i/pw*ps+r)*tw+i%pw*ps+c)*3+ch] = l
				}
			}
		}
	}
	return out, nil
}

// TestPreprocessGoldens holds Preprocess to Gemma4ImageProcessor on every
// recorded size: the target, the soft tokens and the resized levels, bit for
// bit (their CRC-32; the levels themselves where stored, to count
// differences), and TargetSize to get_aspect_ratio_preserving_size.
func TestPreprocessGoldens(t *testing.T) {
	g := openPreprocessGoldens(t)
	for _, c := range g.meta.Images {
		p := ImageProcessorConfig{c.PatchSize, c.MaxSoftTokens, c.Pooling}
		px, pos, n, err := p.Preprocess(goldenImage(c.H, c.W, c.Seed), c.H, c.W)
		if err != nil {
			t.Errorf("%s: %v", c.Name, err)
			continue
		}
		th, tw := c.Target[0], c.Target[1]
		levels, err := unpatchify(px, pos, th, tw, c.PatchSize)
		if err != nil || n != c.Tokens {
			t.Errorf("%s: %d soft tokens (processor %d), %v", c.Name, n, c.Tokens, err)
			continue
		}
		crc := crc32.ChecksumIEEE(levels)
		note := ""
		if ref, ok := g.exp[c.Tensor+"_tv"]; ok {
			d := 0
			for i, v := range ref.i {
				if i >= len(levels) || int(levels[i]) != v {
					d++
				}
			}
			note = fmt.Sprintf(", %d of %d levels differ", d, len(ref.i))
		}
		t.Logf("%s: %dx%d -> %dx%d, %d soft tokens, CRC %08x (torchvision %08x, PIL %08x; PIL differs in %d levels)%s",
			c.Name, c.H, c.W, th, tw, n, crc, c.CRC, c.CRCPil, c.LevelsDifferTvPil, note)
		if crc != c.CRC {
			t.Errorf("%s: the resized image is not Gemma4ImageProcessor's%s", c.Name, note)
		}
	}
	s := g.meta.TargetSizes.Settings
	p := ImageProcessorConfig{s.PatchSize, s.MaxSoftTokens, s.Pooling}
	for _, c := range g.meta.TargetSizes.Cases {
		h, w := int(c[0].(float64)), int(c[1].(float64))
		th, tw, err := p.TargetSize(h, w)
		if msg, isErr := c[2].(string); isErr {
			if err == nil {
				t.Errorf("%dx%d: %dx%d, transformers refused it (%s)", h, w, th, tw, msg)
			}
			continue
		}
		if err != nil || th != int(c[2].(float64)) || tw != int(c[3].(float64)) {
			t.Errorf("%dx%d: %dx%d (%v), transformers %vx%v", h, w, th, tw, err, c[2], c[3])
		}
	}
}
