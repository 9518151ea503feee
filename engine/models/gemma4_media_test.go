package models_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"image"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"verdict/engine/fixture/testmodel"
	"verdict/engine/gemma4"
	"verdict/engine/model"
	"verdict/engine/models"
	"verdict/engine/weights"
)

// tensors reads a safetensors file's F32 and I32 tensors (the fixtures'
// expected.safetensors), as float64 values with their shapes.
func tensors(t testing.TB, path string) map[string]struct {
	v     []float64
	shape []int
} {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := binary.LittleEndian.Uint64(b)
	var hdr map[string]json.RawMessage
	if err := json.Unmarshal(b[8:8+n], &hdr); err != nil {
		t.Fatal(err)
	}
	out := map[string]struct {
		v     []float64
		shape []int
	}{}
	data := b[8+n:]
	for name, raw := range hdr {
		var e struct {
			DType   string   `json:"dtype"`
			Shape   []int    `json:"shape"`
			Offsets [2]int64 `json:"data_offsets"`
		}
		if name == "__metadata__" || json.Unmarshal(raw, &e) != nil {
			continue
		}
		d := data[e.Offsets[0]:e.Offsets[1]]
		v := make([]float64, len(d)/4)
		for i := range v {
			u := binary.LittleEndian.Uint32(d[4*i:])
			switch e.DType {
			case "F32":
				v[i] = float64(math.Float32frombits(u))
			case "I32":
				v[i] = float64(int32(u))
			}
		}
		out[name] = struct {
			v     []float64
			shape []int
		}{v, e.Shape}
	}
	return out
}

// mmDir is the multimodal fixture's folder with the vision fixture's image
// processor settings (patch 4, max_soft_tokens 70, pooling 3) written as
// processor_config.json, as a checkpoint folder carries them.
func mmDir(t testing.TB) string {
	t.Helper()
	src := testmodel.Dir(t, "gemma4-synthetic-multimodal.tar.gz")
	dir := t.TempDir()
	for _, f := range []string{"config.json", "recipe.json", "buffers.safetensors", "meta.json", "expected.safetensors"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	proc := `{"image_processor": {"patch_size": 4, "max_soft_tokens": 70, "pooling_kernel_size": 3}}`
	if err := os.WriteFile(filepath.Join(dir, "processor_config.json"), []byte(proc), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// fixtureImage is the vision fixture's 96×96 image (image_u8).
func fixtureImage(t testing.TB, vx map[string]struct {
	v     []float64
	shape []int
}) *image.NRGBA {
	t.Helper()
	u8 := vx["image_u8"]
	h, w := u8.shape[0], u8.shape[1]
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			p := u8.v[(y*w+x)*3:]
			img.SetNRGBA(x, y, color.NRGBA{uint8(p[0]), uint8(p[1]), uint8(p[2]), 255})
		}
	}
	return img
}

func maxDiff32(a []float32, b []float64) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	var m float64
	for i := range a {
		m = max(m, math.Abs(float64(a[i])-b[i]))
	}
	return m
}

// TestOpenGemma4Multimodal: the loader opens the multimodal fixture
// (Gemma4ForConditionalGeneration) with its media tokens in Chat and both
// towers; an image through ImageTokens (RGB, the processor, the vision
// tower) gives the vision fixture's soft tokens, each clip's features the
// audio fixture's kept soft tokens, and the fixture's prompt with them
// through the model interface (AddMultimodal) gives transformers' logits,
// within meta.json's tolerances; a changed pixel or a missing clip fails.
func TestOpenGemma4Multimodal(t *testing.T) {
	dir := mmDir(t)
	m, err := models.OpenWith(dir, models.Options{Weights: model.WeightsF32})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if f := models.FamilyOf(m.Model); f != models.FamilyGemma4 {
		t.Errorf("family %q", f)
	}
	sp := m.Chat().Media
	if want := (model.Special{BOI: 250, EOI: 251, Image: 252, BOA: 254, EOA: 255, Audio: 253}); sp != want {
		t.Errorf("Chat().Media %+v, want the config's ids %+v", sp, want)
	}
	if img, aud := m.Inputs(); !img || !aud {
		t.Errorf("Inputs() = %v, %v; the fixture has both towers", img, aud)
	}
	D := m.Config().Hidden
	if m.SoftTokenWidth() != D {
		t.Errorf("SoftTokenWidth %d, hidden %d", m.SoftTokenWidth(), D)
	}
	var meta struct {
		Tolerances map[string]float64 `json:"tolerances"`
		IDs        []int32            `json:"input_ids"`
	}
	mj, _ := os.ReadFile(filepath.Join(dir, "meta.json"))
	if err := json.Unmarshal(mj, &meta); err != nil {
		t.Fatal(err)
	}
	vx := tensors(t, filepath.Join(testmodel.Dir(t, "gemma4-synthetic-vision.tar.gz"), "expected.safetensors"))
	ax := tensors(t, filepath.Join(testmodel.Dir(t, "gemma4-synthetic-audio.tar.gz"), "expected.safetensors"))
	mx := tensors(t, filepath.Join(dir, "expected.safetensors"))

	// The image: RGB bytes → the processor → the tower.
	img := fixtureImage(t, vx)
	soft, cached, err := m.ImageTokens(context.Background(), img, nil)
	if err != nil || cached {
		t.Fatalf("image: cached %v, %v", cached, err)
	}
	if n := len(soft) / D; n != 64 {
		t.Fatalf("the image gave %d soft tokens, the fixture has 64", n)
	}
	if e := maxDiff32(soft, vx["soft_tokens"].v); e > meta.Tolerances["vision_soft_tokens"] {
		t.Errorf("image soft tokens: max error %.3g, tolerance %.3g", e, meta.Tolerances["vision_soft_tokens"])
	} else {
		t.Logf("image soft tokens: max error %.3g (tolerance %.3g)", e, meta.Tolerances["vision_soft_tokens"])
	}
	if again, cached, _ := m.ImageTokens(context.Background(), img, nil); !cached || &again[0] != &soft[0] {
		t.Error("the same image again did not come from the tower cache")
	}
	changed := image.NewNRGBA(img.Rect)
	copy(changed.Pix, img.Pix)
	changed.Pix[4*(40*96+40)] ^= 0x40
	if other, _, err := m.ImageTokens(context.Background(), changed, nil); err != nil || slices.Equal(other, soft) {
		t.Errorf("a changed pixel gave the same soft tokens (%v)", err)
	}

	// The clips: the audio fixture's features → the tower → the kept rows.
	feats, fshape := ax["input_features"].v, ax["input_features"].shape
	masks := ax["input_features_mask"].v
	T, F := fshape[1], fshape[2]
	om, oshape := ax["output_mask"].v, ax["output_mask"].shape
	var audio []float32
	var clips []int
	for b := range fshape[0] {
		f := make([]float32, T*F)
		for i := range f {
			f[i] = float32(feats[b*T*F+i])
		}
		mask := make([]bool, T)
		for i := range mask {
			mask[i] = masks[b*T+i] != 0
		}
		kept, _, err := m.AudioFeatureTokens(f, mask)
		if err != nil {
			t.Fatal(err)
		}
		// The fixture's soft tokens of clip b, rows of its output mask.
		var want []float64
		T2 := oshape[1]
		for i := range T2 {
			if om[b*T2+i] != 0 {
				want = append(want, ax["soft_tokens"].v[(b*T2+i)*D:(b*T2+i+1)*D]...)
			}
		}
		if e := maxDiff32(kept, want); e > meta.Tolerances["audio_soft_tokens"] {
			t.Errorf("clip %d soft tokens: max error %.3g, tolerance %.3g", b, e, meta.Tolerances["audio_soft_tokens"])
		}
		audio = append(audio, kept...)
		clips = append(clips, len(kept)/D)
	}
	if !slices.Equal(clips, []int{16, 10}) {
		t.Fatalf("the clips kept %v soft tokens, the fixture %v", clips, []int{16, 10})
	}

	// The fixture's prompt through the interface, against transformers.
	md := model.Media{Image: soft, Audio: audio, ImageTokens: []int{64}, AudioTokens: clips}
	logits := mediaLogits(t, m, meta.IDs, md)
	tol := meta.Tolerances["mm_logits"]
	for _, ref := range []string{"logits", "logits_f64"} {
		e := maxDiff32(logits, mx[ref].v)
		if e > tol {
			t.Errorf("%s: max error %.3g, tolerance %.3g", ref, e, tol)
		} else {
			t.Logf("prompt logits against %s: max error %.3g (tolerance %.3g)", ref, e, tol)
		}
	}
	// Perturbed: the clips in the other order (their counts swapped with
	// them) must fail the check.
	swapped := model.Media{Image: soft, Audio: append(slices.Clone(audio[16*D:]), audio[:16*D]...), ImageTokens: []int{64}, AudioTokens: []int{10, 16}}
	ids := slices.Clone(meta.IDs)
	if e := maxDiff32(mediaLogitsIDs(t, m, ids, swapped, []int{10, 16}), mx["logits"].v); e <= tol {
		t.Errorf("the clips swapped still match the fixture (max error %.3g)", e)
	}

	// The clips as samples: Gemma 4's feature extractor, then the tower;
	// the same kept soft tokens as from the fixture's features.
	var fromSamples []float32
	for b, name := range []string{"waveform0", "waveform1"} {
		wave := ax[name].v
		pcm := make([]float32, len(wave))
		for i, v := range wave {
			pcm[i] = float32(v)
		}
		soft, _, err := m.AudioTokens(context.Background(), pcm, nil)
		if err != nil {
			t.Fatalf("clip %d as samples: %v", b, err)
		}
		if n := len(soft) / D; n != clips[b] {
			t.Fatalf("clip %d as samples kept %d soft tokens, from the features %d", b, n, clips[b])
		}
		fromSamples = append(fromSamples, soft...)
	}
	var worst float64
	for i := range audio {
		worst = max(worst, math.Abs(float64(fromSamples[i]-audio[i])))
	}
	if at := meta.Tolerances["audio_soft_tokens"]; worst > at {
		t.Errorf("the clips' soft tokens from samples differ from those of the fixture's features by %.3g (tolerance %.3g)", worst, at)
	} else {
		t.Logf("clips from samples against the fixture's features: max soft-token difference %.3g (tolerance %.3g)", worst, at)
	}
	if _, _, err := m.AudioTokens(context.Background(), make([]float32, 100), nil); err == nil || !strings.Contains(err.Error(), "short") {
		t.Errorf("a 100-sample clip: %v, want it refused as too short", err)
	}
}

// mediaLogits runs ids with md through the model interface (AddMultimodal,
// one Forward) and returns every position's logits.
func mediaLogits(t testing.TB, m model.Model, ids []int32, md model.Media) []float32 {
	t.Helper()
	x, err := m.Acquire()
	if err != nil {
		t.Fatal(err)
	}
	defer x.Release()
	c := m.NewCache()
	defer c.Free()
	var b model.Batch
	if err := m.AddMultimodal(&b, c, ids, md, len(ids)); err != nil {
		t.Fatal(err)
	}
	h, err := x.Forward(&b)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]float32, len(ids)*m.Config().Vocab)
	if err := x.Logits(out, h); err != nil {
		t.Fatal(err)
	}
	return out
}

// mediaLogitsIDs is mediaLogits on ids whose audio runs are rewritten to
// the clip counts given (in order).
func mediaLogitsIDs(t testing.TB, m model.Model, ids []int32, md model.Media, clips []int) []float32 {
	t.Helper()
	sp := m.Chat().Media
	var out []int32
	k := 0
	for i := 0; i < len(ids); i++ {
		if ids[i] != int32(sp.Audio) {
			out = append(out, ids[i])
			continue
		}
		for i < len(ids) && ids[i] == int32(sp.Audio) {
			i++
		}
		i--
		for range clips[k] {
			out = append(out, int32(sp.Audio))
		}
		k++
	}
	return mediaLogits(t, m, out, md)
}

// TestGemma4MediaRefuses: a Gemma 4 model without towers (gemma4_text)
// names no media tokens and refuses an image and a clip, naming the
// missing tower; a checkpoint with bidirectional image attention takes
// images (the decoder masks their blocks); a processor config that is not
// JSON is refused by file.
func TestGemma4MediaRefuses(t *testing.T) {
	m, err := models.OpenWith(testmodel.Dir(t, "gemma4-synthetic-tiny.tar.gz"), models.Options{Weights: model.WeightsF32})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if sp := m.Chat().Media; sp != (model.Special{}) {
		t.Errorf("a text-only Gemma 4 names media tokens %+v", sp)
	}
	if img, aud := m.Inputs(); img || aud {
		t.Errorf("Inputs() = %v, %v for a text-only model", img, aud)
	}
	if _, _, err := m.ImageTokens(context.Background(), image.NewRGBA(image.Rect(0, 0, 8, 8)), nil); err == nil || !strings.Contains(err.Error(), "no vision tower") {
		t.Errorf("an image: %v, want the missing vision tower named", err)
	}
	if _, _, err := m.AudioTokens(context.Background(), make([]float32, 1600), nil); err == nil || !strings.Contains(err.Error(), "no audio tower") {
		t.Errorf("a clip: %v, want the missing audio tower named", err)
	}
	if _, err := m.VisionTower(); err == nil {
		t.Error("VisionTower gave a Gemma 3n tower for a Gemma 4 model")
	}

	dir := mmDir(t)
	cfg, _ := os.ReadFile(filepath.Join(dir, "config.json"))
	var c map[string]any
	if err := json.Unmarshal(cfg, &c); err != nil {
		t.Fatal(err)
	}
	c["text_config"].(map[string]any)["use_bidirectional_attention"] = "vision"
	bidi, _ := json.Marshal(c)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), bidi, 0o644); err != nil {
		t.Fatal(err)
	}
	mb, err := models.OpenWith(dir, models.Options{Weights: model.WeightsF32})
	if err != nil {
		t.Fatal(err)
	}
	if img, aud := mb.Inputs(); !img || !aud {
		t.Errorf("bidirectional vision: Inputs() = %v, %v, want images and audio on", img, aud)
	}
	if soft, _, err := mb.ImageTokens(context.Background(), image.NewRGBA(image.Rect(0, 0, 24, 24)), nil); err != nil {
		t.Errorf("bidirectional vision, an image: %v", err)
	} else {
		// Its prompt runs through the decoder, the block masked both ways.
		sp := mb.Chat().Media
		n := len(soft) / mb.Config().Hidden
		ids := append([]int32{2, int32(sp.BOI)}, slices.Repeat([]int32{int32(sp.Image)}, n)...)
		ids = append(ids, int32(sp.EOI), 7)
		for i, v := range mediaLogits(t, mb, ids, model.Media{Image: soft, ImageTokens: []int{n}}) {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				t.Fatalf("bidirectional vision: logit %d is %v", i, v)
			}
		}
	}
	mb.Close()

	for _, c := range []struct{ proc, want string }{
		{`{"image_processor": `, "processor_config.json"},
		{`{"feature_extractor": {"dither": 0.5}}`, "dither"},
		{`{"image_processor": {"max_soft_tokens": 100}}`, "max_soft_tokens 100"},
		{`{"image_seq_length": 256}`, "max_soft_tokens 256"},
	} {
		if err := os.WriteFile(filepath.Join(dir, "processor_config.json"), []byte(c.proc), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := models.OpenWith(dir, models.Options{Weights: model.WeightsF32}); err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "processor_config.json") {
			t.Errorf("processor_config.json %s: %v, want the file and %q named", c.proc, err, c.want)
		}
	}
}

// TestGemma4ImageSizes: an image of another size than the processor's
// target is resized (the vision fixture's 50×70 resize case: 567 patches,
// 63 soft tokens) and its soft tokens are those of the tower on the
// processor's own patches (resize_pixel_values_tv), within the fixture's
// soft-token tolerance.
func TestGemma4ImageSizes(t *testing.T) {
	dir := mmDir(t)
	m, err := models.OpenWith(dir, models.Options{Weights: model.WeightsF32})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	vx := tensors(t, filepath.Join(testmodel.Dir(t, "gemma4-synthetic-vision.tar.gz"), "expected.safetensors"))
	u8 := vx["resize_image_u8"]
	h, w := u8.shape[0], u8.shape[1]
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			p := u8.v[(y*w+x)*3:]
			img.SetNRGBA(x, y, color.NRGBA{uint8(p[0]), uint8(p[1]), uint8(p[2]), 255})
		}
	}
	soft, _, err := m.ImageTokens(context.Background(), img, nil)
	if err != nil {
		t.Fatal(err)
	}
	D := m.SoftTokenWidth()
	if n := len(soft) / D; n != 63 {
		t.Fatalf("the %dx%d image gave %d soft tokens, want 63", w, h, n)
	}
	// The tower on the processor's patches (torchvision's resize).
	cfg, _ := os.ReadFile(filepath.Join(dir, "config.json"))
	vc, err := gemma4.ParseVisionConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	st, err := weights.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	v, err := gemma4.LoadVision(vc, st)
	if err != nil {
		t.Fatal(err)
	}
	pv := make([]float32, len(vx["resize_pixel_values_tv"].v))
	for i, x := range vx["resize_pixel_values_tv"].v {
		pv[i] = float32(x)
	}
	ids := vx["resize_position_ids"].v
	pos := make([]gemma4.Patch, len(ids)/2)
	for i := range pos {
		pos[i] = gemma4.Patch{X: int(ids[2*i]), Y: int(ids[2*i+1])}
	}
	want, n, err := v.Encode(pv, pos, nil)
	if err != nil || n != 63 {
		t.Fatalf("the tower on the processor's patches: %d soft tokens, %v", n, err)
	}
	var e float64
	for i := range want {
		e = max(e, math.Abs(float64(soft[i]-want[i])))
	}
	if e > 1e-5 {
		t.Errorf("the resized image's soft tokens differ from the processor's by %.3g (tolerance 1e-5)", e)
	} else {
		t.Logf("resized image: soft tokens within %.3g of the tower on the processor's patches", e)
	}
}
