package models_test

import (
	"bytes"
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
	"verdict/engine/weights/ggufwrite"
	"verdict/native"
)

// ggufParts reads a GGUF file back as ggufwrite's metadata and tensors, so
// a test can change a few and write it again.
func ggufParts(t *testing.T, path string) ([]ggufwrite.KV, []ggufwrite.Tensor) {
	t.Helper()
	g, err := weights.OpenGGUFFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	var kvs []ggufwrite.KV
	for _, k := range g.Keys {
		if k == "general.alignment" {
			continue
		}
		kvs = append(kvs, ggufwrite.KV{Key: k, Value: ggufGoValue(t, k, g.KV[k])})
	}
	var ts []ggufwrite.Tensor
	for _, x := range g.Tensors {
		ts = append(ts, ggufwrite.Tensor{Name: x.Name, Dims: slices.Clone(x.Dims), Type: x.Type, Data: slices.Clone(x.Data())})
	}
	return kvs, ts
}

// ggufGoValue is v as the Go value ggufwrite writes back with v's type (the
// types the fixtures use).
func ggufGoValue(t *testing.T, key string, v weights.GGUFValue) any {
	t.Helper()
	switch v.Type {
	case weights.GGUFString:
		s, _ := v.Str()
		return s
	case weights.GGUFBool:
		b, _ := v.Bool()
		return b
	case weights.GGUFFloat32:
		f, _ := v.Float()
		return float32(f)
	case weights.GGUFUint32:
		i, _ := v.Int()
		return uint32(i)
	case weights.GGUFInt32:
		i, _ := v.Int()
		return int32(i)
	case weights.GGUFUint64:
		i, _ := v.Int()
		return uint64(i)
	case weights.GGUFArray:
		switch v.Elem {
		case weights.GGUFString:
			s, _ := v.Strings()
			return s
		case weights.GGUFFloat32:
			fs, _ := v.Floats()
			out := make([]float32, len(fs))
			for i, f := range fs {
				out[i] = float32(f)
			}
			return out
		case weights.GGUFInt32:
			is, _ := v.Ints()
			out := make([]int32, len(is))
			for i, x := range is {
				out[i] = int32(x)
			}
			return out
		case weights.GGUFBool:
			is, _ := v.Ints()
			out := make([]bool, len(is))
			for i, x := range is {
				out[i] = x != 0
			}
			return out
		}
	}
	t.Fatalf("%s: a value of type %s (elements %s) the test does not copy", key, v.Type, v.Elem)
	return nil
}

func writeParts(t *testing.T, path string, kvs []ggufwrite.KV, ts []ggufwrite.Tensor) {
	t.Helper()
	var b bytes.Buffer
	if err := ggufwrite.Write(&b, ggufwrite.Options{}, kvs, ts); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// mediaStrings are the media tokens the test vocabulary holds, at ids 505
// to 511 of the tiny model's 512 (boi, eoi, image, video, boa, eoa, audio).
var mediaStrings = []string{"<|image>", "<image|>", "<|image|>", "<|video|>", "<|audio>", "<audio|>", "<|audio|>"}

const mediaID0 = 505

// tinyMediaGGUF writes the tiny gemma4 F32 GGUF into dir with the media
// strings in its vocabulary (media true; the fixture's vocabulary of
// "<tokN>" has none) or as it is.
func tinyMediaGGUF(t *testing.T, dir string, media bool) string {
	t.Helper()
	kvs, ts := ggufParts(t, gemma4GGUF(t, "gemma4-tiny.tar.gz", "gemma4-synthetic-tiny-F32.gguf"))
	if media {
		for i := range kvs {
			if kvs[i].Key == "tokenizer.ggml.tokens" {
				toks := slices.Clone(kvs[i].Value.([]string))
				copy(toks[mediaID0:], mediaStrings)
				kvs[i].Value = toks
			}
		}
	}
	path := filepath.Join(dir, "gemma4-tiny-F32.gguf")
	writeParts(t, path, kvs, ts)
	return path
}

// mmprojF32 is the mmproj fixture's F32 file (both towers, soft tokens 32
// wide: the vision and audio fixtures' text hidden size).
func mmprojF32(t *testing.T) string {
	return filepath.Join(testmodel.Dir(t, "gguf-llamacpp/mmproj-gemma4-synthetic.tar.gz"), "mmproj-gemma4-synthetic-F32.gguf")
}

// wideProjection is the test's projection of a tower to the tiny model's
// 64-wide soft tokens, from the fixture's 32 rows w of width n: those rows,
// then each again reversed and scaled by 0.75.
func wideProjection(w []float32, n int) []float32 {
	out := slices.Clone(w)
	for r := range len(w) / n {
		row := slices.Clone(w[r*n : (r+1)*n])
		slices.Reverse(row)
		for i := range row {
			row[i] *= 0.75
		}
		out = append(out, row...)
	}
	return out
}

func f32Bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func bytesF32(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

// The mmproj's projections of the towers' outputs to the text model's
// width (llama.cpp's names) and the Hugging Face names they serve.
var mmProjections = map[string]string{
	"mm.input_projection.weight":   gemma4.EmbedVisionPrefix + "embedding_projection.weight",
	"mm.a.input_projection.weight": gemma4.EmbedAudioPrefix + "embedding_projection.weight",
}

// wideMMProj writes the mmproj fixture to path with its projections made
// 64 wide (wideProjection; clip.*.projection_dim 64), which pairs its
// towers with the tiny text model, and returns the new projections by
// Hugging Face name.
func wideMMProj(t *testing.T, path string) map[string][]float32 {
	t.Helper()
	kvs, ts := ggufParts(t, mmprojF32(t))
	for i := range kvs {
		if kvs[i].Key == "clip.vision.projection_dim" || kvs[i].Key == "clip.audio.projection_dim" {
			if kvs[i].Value != uint32(32) {
				t.Fatalf("%s is %v, want the fixture's 32", kvs[i].Key, kvs[i].Value)
			}
			kvs[i].Value = uint32(64)
		}
	}
	out := map[string][]float32{}
	for i := range ts {
		hf, ok := mmProjections[ts[i].Name]
		if !ok {
			continue
		}
		if ts[i].Type != weights.GGMLF32 || len(ts[i].Dims) != 2 || ts[i].Dims[1] != 32 {
			t.Fatalf("%s: type %v dims %v, want F32 [n, 32]", ts[i].Name, ts[i].Type, ts[i].Dims)
		}
		n := int(ts[i].Dims[0])
		w := wideProjection(bytesF32(ts[i].Data), n)
		ts[i].Dims[1] = 64
		ts[i].Data = f32Bytes(w)
		out[hf] = w
	}
	if len(out) != 2 {
		t.Fatalf("found %d of the 2 projections", len(out))
	}
	writeParts(t, path, kvs, ts)
	return out
}

// projected serves a safetensors tower fixture with its projection
// replaced.
type projected struct {
	weights.Store
	name string
	w    []float32
}

func (p projected) Float32(name string) ([]float32, error) {
	if name == p.name {
		return slices.Clone(p.w), nil
	}
	return p.Store.Float32(name)
}

func (p projected) Info(name string) ([]int, string, bool) {
	sh, dt, ok := p.Store.Info(name)
	if name == p.name && ok {
		sh = []int{len(p.w) / sh[1], sh[1]}
	}
	return sh, dt, ok
}

// refConfig is a safetensors tower fixture's config.json with the tiny text
// model's width and llama.cpp's audio logit cap (50: an mmproj file cannot
// carry the fixture's 0.2; docs/gemma4.md, GGUF).
func refConfig(t *testing.T, dir string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var top map[string]any
	if err := json.Unmarshal(b, &top); err != nil {
		t.Fatal(err)
	}
	top["text_config"].(map[string]any)["hidden_size"] = 64
	top["audio_config"].(map[string]any)["attention_logit_cap"] = 50
	out, err := json.Marshal(top)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// refImage is the vision fixture's safetensors tower (projection w) on the
// CPU backend over the processor's patches of img (max_soft_tokens 70).
func refImage(t *testing.T, img *image.NRGBA, w []float32) []float32 {
	t.Helper()
	dir := testmodel.Dir(t, "gemma4-synthetic-vision.tar.gz")
	vc, err := gemma4.ParseVisionConfig(refConfig(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	st, err := weights.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	v, err := gemma4.LoadVision(vc, projected{st, gemma4.EmbedVisionPrefix + "embedding_projection.weight", w})
	if err != nil {
		t.Fatal(err)
	}
	o, err := gemma4.NewVisionOps(v, native.Default())
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	b := img.Bounds()
	px := make([]uint8, 0, 3*b.Dx()*b.Dy())
	for i := 0; i < len(img.Pix); i += 4 {
		px = append(px, img.Pix[i:i+3]...)
	}
	proc := gemma4.ImageProcessorConfig{PatchSize: vc.PatchSize, MaxSoftTokens: 70, PoolingKernel: vc.PoolingKernel}
	pixels, pos, n, err := proc.Preprocess(px, b.Dy(), b.Dx())
	if err != nil {
		t.Fatal(err)
	}
	soft, got, err := o.Encode(pixels, pos, nil)
	if err != nil || got != n {
		t.Fatalf("reference vision tower: %d soft tokens of %d, %v", got, n, err)
	}
	return soft
}

// refAudio is the audio fixture's safetensors tower (projection w) on the
// CPU backend over the default extractor's features of pcm: the kept rows.
func refAudio(t *testing.T, pcm []float32, w []float32) []float32 {
	t.Helper()
	dir := testmodel.Dir(t, "gemma4-synthetic-audio.tar.gz")
	ac, err := gemma4.ParseAudioConfig(refConfig(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	st, err := weights.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	a, err := gemma4.LoadAudio(ac, projected{st, gemma4.EmbedAudioPrefix + "embedding_projection.weight", w})
	if err != nil {
		t.Fatal(err)
	}
	o, err := gemma4.NewAudioOps(a, native.Default())
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	feats, _, mask, err := gemma4.ExtractAudioFeatures(gemma4.DefaultAudioFeatureConfig(), pcm, 16000)
	if err != nil {
		t.Fatal(err)
	}
	soft, om, err := o.Encode(feats, mask, nil)
	if err != nil {
		t.Fatal(err)
	}
	kept, err := gemma4.KeptAudio(soft, om, 64)
	if err != nil {
		t.Fatal(err)
	}
	return kept
}

func testImage() *image.NRGBA {
	img := image.NewNRGBA(image.Rect(0, 0, 40, 28))
	for y := range 28 {
		for x := range 40 {
			img.SetNRGBA(x, y, color.NRGBA{uint8(6 * x), uint8(9 * y), uint8(37*x + 11*y), 255})
		}
	}
	return img
}

func testClip() []float32 {
	pcm := make([]float32, 6000)
	for i := range pcm {
		pcm[i] = float32(0.3*math.Sin(float64(i)*0.05) + 0.1*math.Sin(float64(i)*0.31))
	}
	return pcm
}

// TestGemma4GGUFMMProj: a gemma4 GGUF with one mmproj file beside it opens
// through OpenWith with both towers: an image and a clip, through
// ImageTokens, AudioTokens and MediaContext, give the safetensors towers'
// soft tokens bit for bit (same projections, the config rebuilt from the
// file's metadata, the processor's defaults); the counts match; the media
// token ids are those of the GGUF's vocabulary; the decoder takes a prompt
// with the soft tokens. A perturbed reference differs (the check can fail).
func TestGemma4GGUFMMProj(t *testing.T) {
	dir := t.TempDir()
	path := tinyMediaGGUF(t, dir, true)
	proj := wideMMProj(t, filepath.Join(dir, "mmproj-gemma4-tiny-F32.gguf"))
	// Without a processor_config.json: the processor's defaults, up to 280
	// soft tokens an image (more patches than the tiny tower's position
	// table of 32×32 holds, so the image is only counted here).
	m, err := models.OpenWith(path, models.Options{Weights: model.WeightsF32})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := m.ImageTokenCount(40, 28); err != nil || n <= 70 || n > models.DefaultImageSoftTokens {
		t.Errorf("ImageTokenCount(40, 28) with the default processor: %d, %v; want 71 to %d", n, err, models.DefaultImageSoftTokens)
	}
	// Results are attributed to the towers' file too.
	text, err := models.OpenWith(tinyMediaGGUF(t, t.TempDir(), true), models.Options{Weights: model.WeightsF32})
	if err != nil {
		t.Fatal(err)
	}
	h1, err1 := m.ContentHash()
	h2, err2 := text.ContentHash()
	if err1 != nil || err2 != nil || h1 == h2 {
		t.Errorf("ContentHash with the mmproj file %s (%v), without %s (%v): want them to differ", h1, err1, h2, err2)
	}
	text.Close()
	m.Close()
	// With the vision fixture's max_soft_tokens (70) beside the GGUF.
	if err := os.WriteFile(filepath.Join(dir, "processor_config.json"), []byte(`{"image_processor": {"max_soft_tokens": 70}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err = models.OpenWith(path, models.Options{Weights: model.WeightsF32})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if img, aud := m.Inputs(); !img || !aud {
		t.Fatalf("Inputs() = %v, %v, want both towers", img, aud)
	}
	if img, aud := models.MMProjInputs(path); !img || !aud {
		t.Errorf("discovery: MMProjInputs = %v, %v, want both towers", img, aud)
	}
	sp := m.Chat().Media
	want := model.Special{BOI: mediaID0, EOI: mediaID0 + 1, Image: mediaID0 + 2, BOA: mediaID0 + 4, EOA: mediaID0 + 5, Audio: mediaID0 + 6}
	if sp.BOI != want.BOI || sp.EOI != want.EOI || sp.Image != want.Image || sp.BOA != want.BOA || sp.EOA != want.EOA || sp.Audio != want.Audio {
		t.Errorf("media tokens %+v, want the vocabulary's %+v", sp, want)
	}

	ctx := context.Background()
	img, pcm := testImage(), testClip()
	vw, aw := proj[gemma4.EmbedVisionPrefix+"embedding_projection.weight"], proj[gemma4.EmbedAudioPrefix+"embedding_projection.weight"]
	soft, _, err := m.ImageTokens(ctx, img, nil)
	if err != nil {
		t.Fatal(err)
	}
	ref := refImage(t, img, vw)
	if !slices.Equal(soft, ref) {
		t.Errorf("image: %d soft values, the safetensors tower's %d; max |diff| %g", len(soft), len(ref), maxAbsDiff(soft, ref))
	}
	n, err := m.ImageTokenCount(40, 28)
	if err != nil || n*64 != len(soft) {
		t.Errorf("ImageTokenCount(40, 28) = %d, %v; ImageTokens gave %d", n, err, len(soft)/64)
	}
	bad := slices.Clone(vw)
	bad[len(bad)-1] += 0.25
	if slices.Equal(soft, refImage(t, img, bad)) {
		t.Error("a perturbed projection gives the same image soft tokens: the check cannot fail")
	}

	asoft, _, err := m.AudioTokens(ctx, pcm, nil)
	if err != nil {
		t.Fatal(err)
	}
	aref := refAudio(t, pcm, aw)
	if !slices.Equal(asoft, aref) {
		t.Errorf("audio: %d soft values, the safetensors tower's %d; max |diff| %g", len(asoft), len(aref), maxAbsDiff(asoft, aref))
	}
	abad := slices.Clone(aw)
	abad[0] -= 0.25
	if slices.Equal(asoft, refAudio(t, pcm, abad)) {
		t.Error("a perturbed projection gives the same audio soft tokens: the check cannot fail")
	}
	t.Logf("image 40x28: %d soft tokens, clip of %d samples: %d, both equal to the safetensors towers'", len(soft)/64, len(pcm), len(asoft)/64)
	if n, err := m.AudioTokenCount(len(pcm)); err != nil || n*64 != len(asoft) {
		t.Errorf("AudioTokenCount(%d) = %d, %v; AudioTokens gave %d", len(pcm), n, err, len(asoft)/64)
	}

	m.ClearTowerCache()
	md, err := m.MediaContext(ctx, []image.Image{img}, pcm)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(md.Image, ref) || !slices.Equal(md.Audio, aref) {
		t.Errorf("MediaContext: image equal %v, audio equal %v to the safetensors towers'", slices.Equal(md.Image, ref), slices.Equal(md.Audio, aref))
	}

	// The decoder places them: boi, the image's placeholders, eoi, boa,
	// the clip's, eoa.
	ids := []int32{2, mediaID0}
	for range len(ref) / 64 {
		ids = append(ids, mediaID0+2)
	}
	ids = append(ids, mediaID0+1, mediaID0+4)
	for range len(aref) / 64 {
		ids = append(ids, mediaID0+6)
	}
	ids = append(ids, mediaID0+5)
	d, ok := m.Model.(*gemma4.Decoder)
	if !ok {
		t.Fatalf("the model is a %T", m.Model)
	}
	x, err := m.Acquire()
	if err != nil {
		t.Fatal(err)
	}
	defer x.Release()
	c := m.NewCache()
	defer c.Free()
	var b model.Batch
	if err := d.AddMultimodal(&b, c, ids, *md, 1); err != nil {
		t.Fatal(err)
	}
	h, err := x.Forward(&b)
	if err != nil {
		t.Fatal(err)
	}
	tok := []int32{0}
	if err := x.Greedy(tok, h); err != nil {
		t.Fatal(err)
	}
}

// TestGemma4GGUFMMProjRefuses: several mmproj files, one for another hidden
// size, and a vocabulary without the media tokens are refused by name;
// without an mmproj file the model takes text only, as before.
func TestGemma4GGUFMMProjRefuses(t *testing.T) {
	mmData, err := os.ReadFile(mmprojF32(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Run("none", func(t *testing.T) {
		path := tinyMediaGGUF(t, t.TempDir(), true)
		m, err := models.OpenWith(path, models.Options{Weights: model.WeightsF32})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		if img, aud := m.Inputs(); img || aud {
			t.Errorf("Inputs() = %v, %v without an mmproj file", img, aud)
		}
		if img, aud := models.MMProjInputs(path); img || aud {
			t.Errorf("discovery: MMProjInputs = %v, %v without an mmproj file", img, aud)
		}
		if _, _, err := m.ImageTokens(context.Background(), testImage(), nil); err == nil || !strings.Contains(err.Error(), "no vision tower") {
			t.Errorf("ImageTokens: %v, want no vision tower", err)
		}
	})
	for _, c := range []struct {
		name  string
		setup func(t *testing.T, dir string) string // writes the files, returns the GGUF
		want  []string
	}{
		{"several", func(t *testing.T, dir string) string {
			wideMMProj(t, filepath.Join(dir, "mmproj-a.gguf"))
			os.WriteFile(filepath.Join(dir, "MMPROJ-b.gguf"), mmData, 0o644)
			return tinyMediaGGUF(t, dir, true)
		}, []string{"2 mmproj files", "mmproj-a.gguf", "MMPROJ-b.gguf"}},
		{"another hidden size", func(t *testing.T, dir string) string {
			os.WriteFile(filepath.Join(dir, "mmproj-other.gguf"), mmData, 0o644)
			return tinyMediaGGUF(t, dir, true)
		}, []string{"mmproj-other.gguf", "soft tokens of 32", "hidden size is 64"}},
		{"no media tokens", func(t *testing.T, dir string) string {
			wideMMProj(t, filepath.Join(dir, "mmproj-tiny.gguf"))
			return tinyMediaGGUF(t, dir, false)
		}, []string{"mmproj-tiny.gguf", `no "<|image>" token`, "boi_token_id"}},
		{"truncated", func(t *testing.T, dir string) string {
			os.WriteFile(filepath.Join(dir, "mmproj-cut.gguf"), mmData[:len(mmData)/2], 0o644)
			return tinyMediaGGUF(t, dir, true)
		}, []string{"mmproj-cut.gguf"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := c.setup(t, t.TempDir())
			m, err := models.OpenWith(path, models.Options{Weights: model.WeightsF32})
			if err == nil {
				m.Close()
				t.Fatal("opened")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}
