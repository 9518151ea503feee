package models_test

import (
	"context"
	"encoding/json"
	"errors"
	"image"
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
	"verdict/native"
	"verdict/native/nativetest"
)

// mmInputs are the multimodal fixture's media as the loader's model takes
// them: the vision fixture's image and the audio fixture's two clips as
// 16 kHz samples.
type mmInputs struct {
	img  *image.NRGBA
	pcms [][]float32
}

func loadMMInputs(t testing.TB) mmInputs {
	t.Helper()
	vx := tensors(t, filepath.Join(testmodel.Dir(t, "gemma4-synthetic-vision.tar.gz"), "expected.safetensors"))
	ax := tensors(t, filepath.Join(testmodel.Dir(t, "gemma4-synthetic-audio.tar.gz"), "expected.safetensors"))
	in := mmInputs{img: fixtureImage(t, vx)}
	for _, name := range []string{"waveform0", "waveform1"} {
		w := ax[name].v
		pcm := make([]float32, len(w))
		for i, v := range w {
			pcm[i] = float32(v)
		}
		in.pcms = append(in.pcms, pcm)
	}
	return in
}

// TestGemma4TowersOnOps: the loader's towers run on the model's backend
// (gemma4.VisionOps, AudioOps); their soft tokens for the fixture's image
// (resized by the processor) and clips (as samples) are held against the
// plain-Go towers (Vision.Encode, Audio.Encode) on the same inputs, within
// the fixtures' soft-token tolerances, the largest differences logged.
// A changed tower weight in the plain-Go reference fails the check.
func TestGemma4TowersOnOps(t *testing.T) {
	dir := mmDir(t)
	m, err := models.OpenWith(dir, models.Options{Weights: model.WeightsF32})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	in := loadMMInputs(t)
	D := m.SoftTokenWidth()
	cfg, _ := os.ReadFile(filepath.Join(dir, "config.json"))
	var meta struct {
		Tolerances map[string]float64 `json:"tolerances"`
	}
	mj, _ := os.ReadFile(filepath.Join(dir, "meta.json"))
	if err := json.Unmarshal(mj, &meta); err != nil {
		t.Fatal(err)
	}
	st, err := weights.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()

	// The image: the processor's patches through the plain-Go tower.
	vc, err := gemma4.ParseVisionConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	v, err := gemma4.LoadVision(vc, st)
	if err != nil {
		t.Fatal(err)
	}
	proc := gemma4.ImageProcessorConfig{PatchSize: vc.PatchSize, MaxSoftTokens: 70, PoolingKernel: vc.PoolingKernel}
	b := in.img.Bounds()
	rgb := make([]uint8, 0, 3*b.Dx()*b.Dy())
	for i := 0; i < len(in.img.Pix); i += 4 {
		rgb = append(rgb, in.img.Pix[i:i+3]...)
	}
	pixels, pos, n, err := proc.Preprocess(rgb, b.Dy(), b.Dx())
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := m.ImageTokens(context.Background(), in.img, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != n*D {
		t.Fatalf("the image gave %d values, the processor counts %d soft tokens of %d", len(got), n, D)
	}
	imageErr := func() float64 {
		want, _, err := v.Encode(pixels, pos, nil)
		if err != nil {
			t.Fatal(err)
		}
		return maxAbs32(got, want)
	}
	vt := meta.Tolerances["vision_soft_tokens"]
	e := imageErr()
	t.Logf("image (%d soft tokens): ops path against the plain-Go tower: max difference %.3g (tolerance %.3g)", n, e, vt)
	if e > vt {
		t.Errorf("image: the ops path differs from the plain-Go tower by %.3g, over %.3g", e, vt)
	}
	ly := &v.Layers[len(v.Layers)-1]
	ly.PostFFNorm[0] += 0.5
	if e := imageErr(); e <= vt {
		t.Errorf("a changed post_feedforward_layernorm in the reference: difference %.3g still within %.3g", e, vt)
	}
	ly.PostFFNorm[0] -= 0.5

	// The clips: Gemma 4's features through the plain-Go tower, kept rows.
	ac, err := gemma4.ParseAudioConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	a, err := gemma4.LoadAudio(ac, st)
	if err != nil {
		t.Fatal(err)
	}
	at := meta.Tolerances["audio_soft_tokens"]
	for i, pcm := range in.pcms {
		feats, _, mask, err := gemma4.ExtractAudioFeatures(gemma4.DefaultAudioFeatureConfig(), pcm, 16000)
		if err != nil {
			t.Fatal(err)
		}
		soft, om, err := a.Encode(feats, mask, nil)
		if err != nil {
			t.Fatal(err)
		}
		want, err := gemma4.KeptAudio(soft, om, D)
		if err != nil {
			t.Fatal(err)
		}
		got, _, err := m.AudioTokens(context.Background(), pcm, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("clip %d: %d values on the ops path, %d on the plain-Go tower", i, len(got), len(want))
		}
		e := maxAbs32(got, want)
		t.Logf("clip %d (%d soft tokens): ops path against the plain-Go tower: max difference %.3g (tolerance %.3g)", i, len(got)/D, e, at)
		if e > at {
			t.Errorf("clip %d: the ops path differs from the plain-Go tower by %.3g, over %.3g", i, e, at)
		}
	}
}

func maxAbs32(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	var m float64
	for i := range a {
		m = max(m, math.Abs(float64(a[i])-float64(b[i])))
	}
	return m
}

// mediaRun is the fixture's prompt with its media on model m: the logits
// and the last layer's hidden states of every position.
func mediaRun(t testing.TB, m *models.Model, ids []int32, md model.Media) (logits, hidden []float32) {
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
	last := m.Config().Layers - 1
	b.Hook = func(layer int, h []float32) {
		if layer == last {
			hidden = slices.Clone(h)
		}
	}
	h, err := x.Forward(&b)
	if err != nil {
		t.Fatal(err)
	}
	logits = make([]float32, len(ids)*m.Config().Vocab)
	if err := x.Logits(logits, h); err != nil {
		t.Fatal(err)
	}
	return logits, hidden
}

// q4Compare measures a q4 run against the float32 run of the same prompt:
// the relative L2 error of the last hidden states, the mean and largest
// KL(f32 ‖ q4) of a position's next token from the first media position
// on, and the mean KL between neighbouring positions' float32
// distributions there (unrelated distributions: the scale the KL is held
// against).
func q4Compare(lf, hf, lq, hq []float32, vocab, from int) (hidden, kl, klMax, klNext float64) {
	var e, n float64
	for i := range hf {
		d := float64(hq[i] - hf[i])
		e += d * d
		n += float64(hf[i]) * float64(hf[i])
	}
	hidden = math.Sqrt(e / n)
	rows := len(lf) / vocab
	var prev []float64
	for r := from; r < rows; r++ {
		pf, pq := softmax64(lf[r*vocab:(r+1)*vocab]), softmax64(lq[r*vocab:(r+1)*vocab])
		k := kl64(pf, pq)
		kl += k
		klMax = max(klMax, k)
		if prev != nil {
			klNext += kl64(prev, pf)
		}
		prev = pf
	}
	return hidden, kl / float64(rows-from), klMax, klNext / float64(rows-from-1)
}

func softmax64(lg []float32) []float64 {
	m := float64(slices.Max(lg))
	p := make([]float64, len(lg))
	var s float64
	for i, v := range lg {
		p[i] = math.Exp(float64(v) - m)
		s += p[i]
	}
	for i := range p {
		p[i] /= s
	}
	return p
}

func kl64(p, q []float64) float64 {
	var s float64
	for i := range p {
		s += p[i] * math.Log(p[i]/q[i])
	}
	return s
}

// Bounds of TestGemma4Q4Media: the q4 model's last hidden states' relative
// error, and its next-token KL as a share of the KL between neighbouring
// positions' float32 distributions (unrelated ones), from the first media
// token on.
//
// The fixture is q4's worst case as TestQ4Logits' are (random Gaussian
// weights, rows of one or two groups), with four layers, not six, and most
// positions' inputs exact (the towers' soft tokens are float32 in both
// models). One packed product's rounding error is about 0.09 of its
// output (TestQ4Logits: a group's 4-bit step ≈ 4.9σ/15, rounding error
// step/√12 ≈ 0.09σ); the errors of the layers' few packed products on the
// residual stream add in quadrature to a few tenths. Measured at group 32,
// where every matrix packs: 0.21 and 4%; at the loader's default group 64
// the fixture's 32-wide rows stay float32 and the error is 0.019 and under
// 0.1%. The bounds, 0.35 and 15%, sit above those and below what a wrong
// input gives (the clips swapped: 0.69 and 45%), which the test checks
// fails them.
const (
	q4MediaMaxHidden  = 0.35
	q4MediaMaxKLShare = 0.15
)

// TestGemma4Q4Media: q4 weights, the loader's default, run the multimodal
// fixture's prompt with an image and both clips, and its outputs stay
// within the bounds above of the float32 model's, at the default group
// size and at 32 (where the fixture's every matrix packs).
func TestGemma4Q4Media(t *testing.T) {
	dir := mmDir(t)
	f32, err := models.OpenWith(dir, models.Options{Weights: model.WeightsF32})
	if err != nil {
		t.Fatal(err)
	}
	defer f32.Close()
	var meta struct {
		IDs []int32 `json:"input_ids"`
	}
	mj, _ := os.ReadFile(filepath.Join(dir, "meta.json"))
	if err := json.Unmarshal(mj, &meta); err != nil {
		t.Fatal(err)
	}
	in := loadMMInputs(t)
	media := func(m *models.Model) model.Media {
		md, err := m.Media([]image.Image{in.img}, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, pcm := range in.pcms {
			soft, _, err := m.AudioTokens(context.Background(), pcm, nil)
			if err != nil {
				t.Fatal(err)
			}
			md.Audio = append(md.Audio, soft...)
			md.AudioTokens = append(md.AudioTokens, len(soft)/m.SoftTokenWidth())
		}
		return *md
	}
	mf := media(f32)
	sp := f32.Chat().Media
	from := slices.Index(meta.IDs, int32(sp.BOI))
	if a := slices.Index(meta.IDs, int32(sp.BOA)); a >= 0 && (from < 0 || a < from) {
		from = a
	}
	if from < 0 || len(mf.ImageTokens) != 1 || len(mf.AudioTokens) != 2 {
		t.Fatalf("the fixture's prompt has no media (from %d), or the media are not one image and two clips (%v, %v)", from, mf.ImageTokens, mf.AudioTokens)
	}
	V := f32.Config().Vocab
	lf, hf := mediaRun(t, f32, meta.IDs, mf)
	for _, group := range []int{0, 32} {
		q4, err := models.OpenWith(dir, models.Options{CacheDir: "off", Group: group})
		if err != nil {
			t.Fatal(err)
		}
		defer q4.Close()
		if w := q4.Weights(); w != model.WeightsQ4 {
			t.Fatalf("the loader's default opened %q weights, want q4", w)
		}
		mq := media(q4)
		if !slices.Equal(mf.Image, mq.Image) || !slices.Equal(mf.Audio, mq.Audio) {
			t.Fatalf("group %d: the q4 model's towers gave other soft tokens than the float32 model's (the towers are not quantized)", group)
		}
		lq, hq := mediaRun(t, q4, meta.IDs, mq)
		hid, kl, klMax, klNext := q4Compare(lf, hf, lq, hq, V, from)
		t.Logf("group %d (%d of %d weight bytes): q4 against f32 over %d positions from the first media token: hidden relative error %.3f; KL mean %.2e max %.2e (%.1f%% of neighbours' %.2e)",
			group, q4.WeightBytes(), f32.WeightBytes(), len(meta.IDs)-from, hid, kl, klMax, 100*kl/klNext, klNext)
		if hid > q4MediaMaxHidden || kl > q4MediaMaxKLShare*klNext {
			t.Errorf("group %d: hidden relative error %.3g (bound %g), KL %.0f%% of the neighbours' (bound %.0f%%)", group, hid, q4MediaMaxHidden, 100*kl/klNext, 100*q4MediaMaxKLShare)
		}
		// Perturbed: the clips swapped (their counts with them) must fail.
		swapped := mq
		n0 := mq.AudioTokens[0] * q4.SoftTokenWidth()
		swapped.Audio = append(slices.Clone(mq.Audio[n0:]), mq.Audio[:n0]...)
		swapped.AudioTokens = []int{mq.AudioTokens[1], mq.AudioTokens[0]}
		ls, hs := mediaRun(t, q4, mediaLogitsIDsOnly(meta.IDs, sp.Audio, swapped.AudioTokens), swapped)
		sh, skl, _, _ := q4Compare(lf, hf, ls, hs, V, from)
		t.Logf("group %d, the clips swapped: hidden relative error %.3f; KL %.0f%% of the neighbours'", group, sh, 100*skl/klNext)
		if sh <= q4MediaMaxHidden && skl <= q4MediaMaxKLShare*klNext {
			t.Errorf("group %d: the clips swapped pass the bounds (hidden %.3g, KL %.0f%% of the neighbours')", group, sh, 100*skl/klNext)
		}
	}
}

// mediaLogitsIDsOnly is ids with its audio runs rewritten to the counts
// given, in order.
func mediaLogitsIDsOnly(ids []int32, audio int, counts []int) []int32 {
	var out []int32
	k := 0
	for i := 0; i < len(ids); i++ {
		if ids[i] != int32(audio) {
			out = append(out, ids[i])
			continue
		}
		for i < len(ids) && ids[i] == int32(audio) {
			i++
		}
		i--
		for range counts[k] {
			out = append(out, int32(audio))
		}
		k++
	}
	return out
}

// g4Fixture opens the multimodal fixture's folder (mmDir), store and
// config.
func g4Fixture(t *testing.T) (string, weights.Store, []byte, int) {
	t.Helper()
	dir := mmDir(t)
	cfg, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := gemma4.ParseConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	st, err := weights.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return dir, st, cfg, c.Hidden
}

// TestGemma4TowersFallBack: on a backend whose every pass fails with
// native.ErrUnimplemented, each tower's first input moves it to the CPU
// backend, and its soft tokens are the CPU backend's bit for bit; Close
// unbinds every binding made on that backend (the retired ones too), and
// closed towers refuse input.
func TestGemma4TowersFallBack(t *testing.T) {
	dir, st, cfg, hidden := g4Fixture(t)
	cpu, err := models.NewG4Towers(dir, st, cfg, hidden, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cpu.Close()
	be := nativetest.Unimplemented(t)
	binds0, allocs0 := nativetest.Live(be)
	u, err := models.NewG4Towers(dir, st, cfg, hidden, be)
	if err != nil {
		t.Fatal(err)
	}
	img := image.NewNRGBA(image.Rect(0, 0, 37, 23))
	for i := range img.Pix {
		img.Pix[i] = uint8(i * 7)
	}
	pcm := make([]float32, 9000)
	for i := range pcm {
		pcm[i] = float32(0.3 * math.Sin(float64(i)*0.05))
	}
	for _, c := range []struct {
		kind string
		enc  func(*models.G4Towers) ([]float32, error)
	}{{"image", func(g *models.G4Towers) ([]float32, error) { return g.Image(img) }},
		{"clip", func(g *models.G4Towers) ([]float32, error) { return g.Audio(pcm) }}} {
		want, err := c.enc(cpu)
		if err != nil {
			t.Fatalf("%s on the CPU backend: %v", c.kind, err)
		}
		got, err := c.enc(u)
		if err != nil {
			t.Fatalf("%s on the unimplemented backend: %v", c.kind, err)
		}
		if len(want) == 0 || !slices.Equal(got, want) {
			t.Errorf("%s: the fallback's %d soft-token values are not the CPU backend's %d", c.kind, len(got), len(want))
		}
	}
	if v, a, retired := u.On(); v != native.Default() || a != native.Default() || retired != 2 {
		t.Errorf("the towers run on %v and %v with %d encoders retired, want the CPU backend and 2", v, a, retired)
	}
	if b, _ := nativetest.Live(be); b == binds0 {
		t.Error("no binding alive on the unimplemented backend before Close (the towers never bound there)")
	}
	u.Close()
	if b, a := nativetest.Live(be); b != binds0 || a != allocs0 {
		t.Errorf("after Close: %d bindings and %d allocations alive on the backend, %d and %d before", b, a, binds0, allocs0)
	}
	if _, err := u.Image(img); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("an image after Close: %v", err)
	}
}

// TestBindTowerFallsBack: a tower the device cannot bind is bound on the
// CPU backend; when neither can, both errors are given.
func TestBindTowerFallsBack(t *testing.T) {
	_, st, cfg, _ := g4Fixture(t)
	vc, err := gemma4.ParseVisionConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	v, err := gemma4.LoadVision(vc, st)
	if err != nil {
		t.Fatal(err)
	}
	be := nativetest.Unimplemented(t)
	full := errors.New("out of device memory")
	on, closeTower, err := models.BindVisionTower(be, func(x *native.Backend) (*gemma4.VisionOps, error) {
		if x != native.Default() {
			return nil, full
		}
		return gemma4.NewVisionOps(v, x)
	})
	if err != nil {
		t.Fatal(err)
	}
	closeTower()
	if on != native.Default() {
		t.Errorf("bound on %s, want the CPU backend", on.Name())
	}
	_, _, err = models.BindVisionTower(be, func(*native.Backend) (*gemma4.VisionOps, error) { return nil, full })
	if err == nil || !errors.Is(err, full) || !strings.Contains(err.Error(), "on the CPU backend") {
		t.Errorf("neither backend binds: %v, want both failures named", err)
	}
}
