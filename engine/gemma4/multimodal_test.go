package gemma4

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"verdict/engine/model"
	"verdict/engine/weights"
)

// mmFixture is testdata/gemma4-synthetic-multimodal.tar.gz: the whole
// Gemma4ForConditionalGeneration (recipe.json), a prompt with one image's
// and two clips' placeholders, and transformers' merged inputs, per-layer
// inputs, hidden states and logits. Its image and audio inputs are the
// vision and audio fixtures'.
type mmFixture struct {
	cfgJSON []byte
	exp     map[string]refTensor
	meta    struct {
		Tolerances  map[string]float64 `json:"tolerances"`
		IDs         []int              `json:"input_ids"`
		ImageTokens int                `json:"num_image_tokens"`
		AudioTokens []int              `json:"num_audio_tokens"`
	}
	m      *Model
	tok    MediaTokens
	image  []float32 // the Go vision tower's soft tokens
	audio  []float32 // the Go audio tower's kept soft tokens, clip 0 then 1
	clips  []int     // kept soft tokens per clip
	images []int     // soft tokens per image
}

func loadMMFixture(t testing.TB) *mmFixture {
	t.Helper()
	dir := fixtureDir(t, "gemma4-synthetic-multimodal")
	fx := &mmFixture{}
	var err error
	if fx.cfgJSON, err = os.ReadFile(filepath.Join(dir, "config.json")); err != nil {
		t.Fatal(err)
	}
	mj, err := os.ReadFile(filepath.Join(dir, "meta.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(mj, &fx.meta); err != nil {
		t.Fatal(err)
	}
	if fx.exp, err = readExpected(filepath.Join(dir, "expected.safetensors")); err != nil {
		t.Fatal(err)
	}
	st, err := weights.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cfg, err := ParseConfig(fx.cfgJSON)
	if err != nil {
		t.Fatal(err)
	}
	if fx.m, err = Load(cfg, st); err != nil {
		t.Fatal(err)
	}
	if fx.tok, err = ParseMediaTokens(fx.cfgJSON); err != nil {
		t.Fatal(err)
	}
	vc, err := ParseVisionConfig(fx.cfgJSON)
	if err != nil {
		t.Fatal(err)
	}
	v, err := LoadVision(vc, st)
	if err != nil {
		t.Fatal(err)
	}
	ac, err := ParseAudioConfig(fx.cfgJSON)
	if err != nil {
		t.Fatal(err)
	}
	a, err := LoadAudio(ac, st)
	if err != nil {
		t.Fatal(err)
	}

	// The towers on the other fixtures' inputs.
	vfx := openTowerFixture(t, "gemma4-synthetic-vision")
	pv, pos := visionPatches(t, vfx)
	var n int
	if fx.image, n, err = v.Encode(pv, pos, nil); err != nil {
		t.Fatal(err)
	}
	fx.images = []int{n}
	afx := openTowerFixture(t, "gemma4-synthetic-audio")
	_, shape := afx.ints(t, "input_features_mask")
	for b := range shape[0] {
		feats, mask := audioClip(t, afx, b)
		soft, om, err := a.Encode(feats, mask, nil)
		if err != nil {
			t.Fatal(err)
		}
		kept, err := KeptAudio(soft, om, cfg.Hidden)
		if err != nil {
			t.Fatal(err)
		}
		fx.audio = append(fx.audio, kept...)
		fx.clips = append(fx.clips, len(kept)/cfg.Hidden)
	}
	if n != fx.meta.ImageTokens || !slices.Equal(fx.clips, fx.meta.AudioTokens) {
		t.Fatalf("the towers gave %d image and %v audio soft tokens, the fixture has %d and %v",
			n, fx.clips, fx.meta.ImageTokens, fx.meta.AudioTokens)
	}
	return fx
}

func (fx *mmFixture) f32(t testing.TB, name string) []float32 {
	t.Helper()
	r, ok := fx.exp[name]
	if !ok || r.f == nil {
		t.Fatalf("expected.safetensors has no F32 %s", name)
	}
	return r.f
}

func (fx *mmFixture) tol(t testing.TB, name string) float64 {
	t.Helper()
	v, ok := fx.meta.Tolerances[name]
	if !ok || !(v > 0) {
		t.Fatalf("meta.json has no tolerance %s", name)
	}
	return v
}

// mmChecks compares a run of the reference decoder from the inputs e and
// per-layer ids pl with the fixture: the inputs, the per-layer inputs, every
// layer's output (scaled per layer, as the fixture measured them) and the
// logits, each against transformers' float32 and float64 answers.
func mmChecks(t testing.TB, fx *mmFixture, e []float32, pl []int) []towerCheck {
	t.Helper()
	var tr Trace
	logits, err := fx.m.ForwardEmbeds(e, pl, nil, &tr)
	if err != nil {
		t.Fatal(err)
	}
	n, D := len(pl), fx.m.Cfg.Hidden
	var out []towerCheck
	abs := func(name string, got, want []float32, tol float64) {
		e, err := maxAbs(got, want)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out = append(out, towerCheck{name, e, tol})
	}
	abs("inputs_embeds", e, fx.f32(t, "inputs_embeds"), fx.tol(t, "mm_inputs_embeds"))
	// The per-layer inputs (a norm's output plus a table row, scaled by
	// max(1, their largest magnitude)) come from the inputs alone, through
	// one projection and norm: held to the inputs' tolerance.
	out = append(out, towerCheck{"per_layer_inputs", scaledErr(tr.PerLayerInputs, fx.f32(t, "per_layer_inputs"), len(tr.PerLayerInputs)),
		fx.tol(t, "mm_inputs_embeds")})
	ht := fx.tol(t, "mm_hidden_states_scaled")
	for _, ref := range []string{"hidden_states", "hidden_states_f64"} {
		hs := fx.f32(t, ref)
		if len(tr.Hidden)*n*D != len(hs) {
			t.Fatalf("%d hidden states, %s holds %d values", len(tr.Hidden), ref, len(hs))
		}
		out = append(out, towerCheck{ref, scaledErr(slices.Concat(tr.Hidden...), hs, n*D), ht})
	}
	abs("logits", logits, fx.f32(t, "logits"), fx.tol(t, "mm_logits"))
	abs("logits_f64", logits, fx.f32(t, "logits_f64"), fx.tol(t, "mm_logits"))
	return out
}

// TestMultimodalReference merges the Go towers' soft tokens into the
// fixture's prompt and runs the reference decoder from those inputs: the
// merged embeddings, per-layer inputs, hidden states and logits must be
// transformers' within meta.json's tolerances. The logits are compared,
// not their argmax: the prompt's smallest top-2 margin is 1.4e-5; the
// argmax must agree only on rows whose margin exceeds twice the error.
func TestMultimodalReference(t *testing.T) {
	fx := loadMMFixture(t)
	e, pl, err := fx.m.MergeMedia(fx.meta.IDs, fx.tok, fx.image, fx.audio)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range mmChecks(t, fx, e, pl) {
		t.Logf("%-18s max err %.3g (tolerance %.3g)", c.name, c.err, c.tol)
		if !c.ok() {
			t.Errorf("%s: error %.3g over the tolerance %.3g", c.name, c.err, c.tol)
		}
	}
	logits, err := fx.m.ForwardMedia(fx.meta.IDs, fx.tok, fx.image, fx.audio, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := fx.f32(t, "logits")
	V := fx.m.Cfg.Vocab
	lim, _ := maxAbs(logits, want)
	wantArg := fx.exp["argmax_all"].i
	for i, a := range argmaxRows(logits, V) {
		row := want[i*V : (i+1)*V]
		if a != wantArg[i] && margin(row) > 2*lim {
			t.Errorf("position %d: argmax %d, transformers' %d (margin %.3g)", i, a, wantArg[i], margin(row))
		}
	}
}

// margin is a row's gap between its two largest values.
func margin(row []float32) float64 {
	a, b := math.Inf(-1), math.Inf(-1)
	for _, v := range row {
		switch x := float64(v); {
		case x > a:
			a, b = x, a
		case x > b:
			b = x
		}
	}
	return a - b
}

// TestMultimodalChecksCanFail merges wrongly, one way at a time, and
// requires a check to fail: the per-layer table reading the placeholders'
// own ids, the clips swapped, the image's soft tokens shifted by a row, a
// placeholder taking its own token embedding.
func TestMultimodalChecksCanFail(t *testing.T) {
	fx := loadMMFixture(t)
	D := fx.m.Cfg.Hidden
	e0, pl0, err := fx.m.MergeMedia(fx.meta.IDs, fx.tok, fx.image, fx.audio)
	if err != nil {
		t.Fatal(err)
	}
	c0 := fx.clips[0] * D
	for _, tc := range []struct {
		name  string
		merge func() ([]float32, []int, error)
	}{
		{"per-layer ids of the placeholders", func() ([]float32, []int, error) {
			return e0, fx.meta.IDs, nil
		}},
		{"clips swapped", func() ([]float32, []int, error) {
			return fx.m.MergeMedia(fx.meta.IDs, fx.tok, fx.image, slices.Concat(fx.audio[c0:], fx.audio[:c0]))
		}},
		{"image shifted a row", func() ([]float32, []int, error) {
			return fx.m.MergeMedia(fx.meta.IDs, fx.tok, slices.Concat(fx.image[D:], fx.image[:D]), fx.audio)
		}},
		{"one placeholder its own embedding", func() ([]float32, []int, error) {
			e := slices.Clone(e0)
			i := slices.Index(fx.meta.IDs, fx.tok.Audio)
			id := fx.meta.IDs[i]
			for j := range D {
				e[i*D+j] = fx.m.Embed[id*D+j] * fx.m.embScale
			}
			return e, pl0, nil
		}},
	} {
		e, pl, err := tc.merge()
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var failed []string
		for _, c := range mmChecks(t, fx, e, pl) {
			if !c.ok() {
				failed = append(failed, c.name)
			}
		}
		if len(failed) == 0 {
			t.Errorf("%s: every check passed", tc.name)
		}
		t.Logf("%-34s fails %v", tc.name, failed)
	}
}

// TestMultimodalDecoder runs the merge through the model interface on the
// CPU backend (AddMultimodal, Exec.Forward, the head): the logits must be
// the fixture's within its tolerance and the reference decoder's within
// 1e-5 (both float32 over the same weights, summing in other orders);
// every layer (a Hook) the fixture's. The prompt twice in one batch (the
// second's media rows after the first's), in chunks of 40 rows, and with
// the per-item counts (ImageTokens, AudioTokens) gives the same bits.
func TestMultimodalDecoder(t *testing.T) {
	fx := loadMMFixture(t)
	V, D, L := fx.m.Cfg.Vocab, fx.m.Cfg.Hidden, fx.m.Cfg.Layers
	ids := ids32(fx.meta.IDs)
	n := len(ids)
	md := model.Media{Image: fx.image, Audio: fx.audio}

	newDecoder := func(rows int) *Decoder {
		d, err := NewDecoder(fx.m, Options{KVPositions: 1024, BatchRows: rows})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		if err := d.SetMediaTokens(fx.tok); err != nil {
			t.Fatal(err)
		}
		return d
	}
	d := newDecoder(0)
	x, err := d.Acquire()
	if err != nil {
		t.Fatal(err)
	}
	defer x.Release()
	logitsOf := func(h []float32) []float32 {
		t.Helper()
		lg, err := d.Logits(h, len(h)/D)
		if err != nil {
			t.Fatal(err)
		}
		return lg
	}

	// One sequence, every layer hooked.
	c := d.NewCache()
	var b model.Batch
	if err := d.AddMultimodal(&b, c, ids, md, n); err != nil {
		t.Fatal(err)
	}
	var hidden []float32
	b.Hook = func(_ int, h []float32) { hidden = append(hidden, h...) }
	h, err := x.Prefill(&b)
	if err != nil {
		t.Fatal(err)
	}
	c.Free()
	logits := logitsOf(h)
	ref, err := fx.m.ForwardMedia(fx.meta.IDs, fx.tok, fx.image, fx.audio, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, ck := range []towerCheck{
		{"logits", must(maxAbs(logits, fx.f32(t, "logits"))), fx.tol(t, "mm_logits")},
		{"logits_f64", must(maxAbs(logits, fx.f32(t, "logits_f64"))), fx.tol(t, "mm_logits")},
		{"logits vs reference", must(maxAbs(logits, ref)), 1e-5},
		{"hidden_states", scaledErr(hidden, fx.f32(t, "hidden_states"), n*D), fx.tol(t, "mm_hidden_states_scaled")},
	} {
		t.Logf("%-20s max err %.3g (tolerance %.3g)", ck.name, ck.err, ck.tol)
		if !ck.ok() {
			t.Errorf("%s: error %.3g over the tolerance %.3g", ck.name, ck.err, ck.tol)
		}
	}
	if len(hidden) != (L+1)*n*D {
		t.Errorf("the hook saw %d values, want %d layers' of %d rows", len(hidden), L+1, n)
	}

	same := func(what string, got []float32) {
		t.Helper()
		if e := must(maxAbs(got, logits)); e != 0 {
			t.Errorf("%s: the logits differ from the single run by %.3g (want the same bits)", what, e)
		}
	}
	// Twice in one batch, the second with the per-item counts.
	c1, c2 := d.NewCache(), d.NewCache()
	b = model.Batch{}
	if err := d.AddMultimodal(&b, c1, ids, md, n); err != nil {
		t.Fatal(err)
	}
	md2 := md
	md2.ImageTokens, md2.AudioTokens = fx.images, fx.clips
	if err := d.AddMultimodal(&b, c2, ids, md2, n); err != nil {
		t.Fatal(err)
	}
	h2, err := x.Prefill(&b)
	if err != nil {
		t.Fatal(err)
	}
	c1.Free()
	c2.Free()
	lg2 := logitsOf(h2)
	same("first of two", lg2[:n*V])
	same("second of two", lg2[n*V:])

	// In chunks of 40 rows, then a text token decoded after it.
	dc := newDecoder(40)
	xc, err := dc.Acquire()
	if err != nil {
		t.Fatal(err)
	}
	defer xc.Release()
	cc := dc.NewCache()
	defer cc.Free()
	b = model.Batch{}
	if err := dc.AddMultimodal(&b, cc, ids, md, n); err != nil {
		t.Fatal(err)
	}
	hc, err := xc.Prefill(&b)
	if err != nil {
		t.Fatal(err)
	}
	same("in chunks of 40", logitsOf(hc))
	next := int32(argmax(logits[(n-1)*V:]))
	b = model.Batch{}
	if err := dc.AddMultimodal(&b, cc, []int32{next}, model.Media{}, 1); err != nil {
		t.Fatal(err)
	}
	hn, err := xc.Prefill(&b)
	if err != nil {
		t.Fatal(err)
	}
	refCache := fx.m.NewCache()
	if _, err := fx.m.ForwardMedia(fx.meta.IDs, fx.tok, fx.image, fx.audio, refCache, nil); err != nil {
		t.Fatal(err)
	}
	refNext, err := fx.m.Forward([]int{int(next)}, refCache, nil)
	if err != nil {
		t.Fatal(err)
	}
	if e := must(maxAbs(logitsOf(hn), refNext)); e > 1e-5 {
		t.Errorf("the token after the prompt: logits differ from the reference's by %.3g (tolerance 1e-5)", e)
	}
}

func must(e float64, err error) float64 {
	if err != nil {
		return math.Inf(1)
	}
	return e
}

// TestMultimodalRefuses covers bad input to the merge, the model
// interface's and the reference's, and bad media token ids; b stays as it
// was after a refusal.
func TestMultimodalRefuses(t *testing.T) {
	fx := loadMMFixture(t)
	D := fx.m.Cfg.Hidden
	ids := ids32(fx.meta.IDs)
	md := model.Media{Image: fx.image, Audio: fx.audio}
	d, err := NewDecoder(fx.m, Options{KVPositions: 1024})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	c := d.NewCache()
	defer c.Free()
	var b model.Batch
	if err := d.AddMultimodal(&b, c, ids, md, 1); err == nil || !strings.Contains(err.Error(), "media token ids") {
		t.Errorf("media before SetMediaTokens: err %v", err)
	}
	if err := d.SetMediaTokens(fx.tok); err != nil {
		t.Fatal(err)
	}
	video := slices.Clone(ids)
	video[5] = int32(fx.tok.Video)
	bad := slices.Clone(fx.image)
	bad[7] = float32(math.NaN())
	vis := fx.tok
	vis.VisionBidirectional = true
	for _, tc := range []struct {
		name string
		ids  []int32
		md   model.Media
		want string
	}{
		{"an image row short", ids, model.Media{Image: fx.image[D:], Audio: fx.audio}, "more image placeholders"},
		{"an audio row over", ids, model.Media{Image: fx.image, Audio: append(slices.Clone(fx.audio), fx.audio[:D]...)}, "placeholders"},
		{"a partial row", ids, model.Media{Image: fx.image[1:], Audio: fx.audio}, "not whole rows"},
		{"a NaN soft token", ids, model.Media{Image: bad, Audio: fx.audio}, "image soft token 0 has value NaN"},
		{"a video placeholder", video, md, "video is not supported"},
		{"an id past the vocabulary", append(slices.Clone(ids), int32(fx.m.Cfg.Vocab)), md, "outside the vocabulary"},
		{"wrong clip counts", ids, model.Media{Image: fx.image, Audio: fx.audio, AudioTokens: []int{fx.clips[1], fx.clips[0]}}, "audio run 0 has 16 placeholders, the audio has 10"},
		{"counts of another total", ids, model.Media{Image: fx.image, Audio: fx.audio, ImageTokens: []int{fx.images[0] - 1}}, "add up to"},
		{"one count for two clips", ids, model.Media{Image: fx.image, Audio: fx.audio, AudioTokens: []int{len(fx.audio) / D}}, "2 runs of audio placeholders for 1"},
	} {
		err := d.AddMultimodal(&b, c, tc.ids, tc.md, 1)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want one containing %q", tc.name, err, tc.want)
		}
		if len(b.Rows) != 0 || len(b.Embeds) != 0 {
			t.Fatalf("%s: the batch took %d rows and %d values on a refusal", tc.name, len(b.Rows), len(b.Embeds))
		}
	}
	// Bidirectional image blocks merge as causal ones do (the mask is the
	// pass's); key limits outside the call's positions are refused.
	if _, _, err := fx.m.MergeMedia(fx.meta.IDs, vis, fx.image, fx.audio); err != nil {
		t.Errorf("an image under bidirectional vision attention: err %v", err)
	}
	if ve, vpl, err := fx.m.MergeMedia(fx.meta.IDs, vis, fx.image, fx.audio); err == nil {
		lim := blockLimits(fx.meta.IDs, &vis, 0)
		for _, bad := range []struct {
			name string
			lim  []int
		}{{"short", lim[1:]}, {"before the position", append([]int{-1}, lim[1:]...)}, {"past the call", append(slices.Clone(lim[:len(lim)-1]), len(lim))}} {
			if _, err := fx.m.forwardEmbeds(ve, vpl, bad.lim, nil, nil); err == nil || !strings.Contains(err.Error(), "key limit") {
				t.Errorf("key limits %s: err %v", bad.name, err)
			}
		}
	}
	if _, _, err := fx.m.MergeMedia(fx.meta.IDs, fx.tok, fx.image, nil); err == nil || !strings.Contains(err.Error(), "more audio placeholders") {
		t.Errorf("the reference merge without audio: err %v", err)
	}
	e, pl, err := fx.m.MergeMedia(fx.meta.IDs, fx.tok, fx.image, fx.audio)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fx.m.ForwardEmbeds(e[:len(e)-1], pl, nil, nil); err == nil || !strings.Contains(err.Error(), "embedding values") {
		t.Errorf("ForwardEmbeds with a short input: err %v", err)
	}
	pl[3] = -1
	if _, err := fx.m.ForwardEmbeds(e, pl, nil, nil); err == nil || !strings.Contains(err.Error(), "per-layer id -1") {
		t.Errorf("ForwardEmbeds with a negative id: err %v", err)
	}
	if _, err := KeptAudio(fx.audio[1:], make([]bool, len(fx.audio)/D), D); err == nil {
		t.Error("KeptAudio of a partial row: no error")
	}
}

// TestParseMediaTokens reads the fixture's ids, the defaults and refuses
// bad configs, naming the field.
func TestParseMediaTokens(t *testing.T) {
	fx := loadMMFixture(t)
	want := MediaTokens{BOI: 250, EOI: 251, Image: 252, Video: 249, BOA: 254, EOA: 255, Audio: 253}
	if fx.tok != want {
		t.Errorf("the fixture's media tokens: %+v, want %+v", fx.tok, want)
	}
	if sp := fx.tok.Special(); sp.Image != 252 || sp.Audio != 253 || sp.BOA != 254 || sp.EOI != 251 {
		t.Errorf("Special: %+v", sp)
	}
	big := `{"model_type": "gemma4", "text_config": {"vocab_size": 262144, "use_bidirectional_attention": "vision"}}`
	got, err := ParseMediaTokens([]byte(big))
	if err != nil {
		t.Fatal(err)
	}
	if dflt := DefaultMediaTokens; got.Image != dflt.Image || got.EOA != dflt.EOA || !got.VisionBidirectional {
		t.Errorf("defaults: %+v", got)
	}
	for _, tc := range []struct{ cfg, want string }{
		{`{"model_type": "gemma4_text", "vocab_size": 256}`, "gemma4_text"},
		{`{"model_type": "gemma4"}`, "text_config.vocab_size"},
		{`{"model_type": "gemma4", "text_config": {"vocab_size": 256}}`, "boi_token_id 255999 is outside the vocabulary of 256"},
		{`{"model_type": "gemma4", "image_token_id": 253, "audio_token_id": 253, "text_config": {"vocab_size": 262144}}`, "must differ"},
		{`{"model_type": "gemma4", "eoa_token_index": 5, "eoa_token_id": 6, "text_config": {"vocab_size": 262144}}`, "eoa_token_index 5 and eoa_token_id 6"},
		{`{"model_type": "gemma4", "audio_token_id": -1, "text_config": {"vocab_size": 262144}}`, "audio_token_id -1"},
		{`[`, "config.json"},
		// FuzzParseMediaTokens's testdata/fuzz/FuzzParseMediaTokens/vocab-absurd.
		{`{"model_type": "gemma4", "image_token_id": 4000000000, "text_config": {"vocab_size": 9000000000000000000}}`, "vocab_size 9000000000000000000 is outside [1, 2097152]"},
		{`{"model_type": "gemma4", "text_config": {"vocab_size": 0}}`, "vocab_size 0 is outside"},
	} {
		if _, err := ParseMediaTokens([]byte(tc.cfg)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want one containing %q", tc.cfg, err, tc.want)
		}
	}
}
