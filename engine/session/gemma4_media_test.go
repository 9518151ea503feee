package session

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
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
	"verdict/engine/scorer"
	"verdict/engine/weights"
)

// g4Tokenizer is a tokenizer.json for the Gemma 4 fixtures' 256-token
// vocabulary (the real Gemma 4 tokenizer has 262144): the control tokens
// the session and Gemma 4's chat format write (<bos>, <|turn>, <turn|>,
// and the <start_of_turn>/<end_of_turn> a Gemma tokenizer must have), the
// fixture config's media tokens at their ids (249..255), and single
// characters; any other character is <unk>.
func g4Tokenizer() []byte {
	vocab := map[string]int{}
	special := []any{}
	add := func(s string, id int, sp bool) {
		vocab[s] = id
		if sp {
			special = append(special, map[string]any{"id": id, "content": s, "single_word": false, "lstrip": false,
				"rstrip": false, "normalized": false, "special": true})
		}
	}
	for i, s := range []string{"<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>", "<|turn>", "<turn|>"} {
		add(s, i, true)
	}
	for i, s := range []string{"<|video|>", "<|image>", "<image|>", "<|image|>", "<|audio|>", "<|audio>", "<audio|>"} {
		add(s, 249+i, true)
	}
	id := 8
	for _, r := range "▁\nabcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,:;!?\"'{}[]()-_/" {
		add(string(r), id, false)
		id++
	}
	str := func(s string) map[string]any { return map[string]any{"String": s} }
	b, _ := json.Marshal(map[string]any{
		"version": "1.0", "truncation": nil, "padding": nil, "added_tokens": special,
		"normalizer":    map[string]any{"type": "Replace", "pattern": str(" "), "content": "▁"},
		"pre_tokenizer": map[string]any{"type": "Split", "pattern": str(" "), "behavior": "MergedWithPrevious", "invert": false},
		"decoder": map[string]any{"type": "Sequence", "decoders": []any{
			map[string]any{"type": "Replace", "pattern": str("▁"), "content": " "}, map[string]any{"type": "Fuse"}}},
		"model": map[string]any{"type": "BPE", "dropout": nil, "unk_token": "<unk>", "continuing_subword_prefix": nil,
			"end_of_word_suffix": nil, "fuse_unk": true, "byte_fallback": false, "ignore_merges": false,
			"vocab": vocab, "merges": [][]string{}},
	})
	return b
}

// g4Folder copies a Gemma 4 fixture folder with g4Tokenizer and the vision
// fixture's image processor settings (processor_config.json).
func g4Folder(t *testing.T, fixture string) string {
	t.Helper()
	src := testmodel.Dir(t, fixture)
	dir := t.TempDir()
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	proc := `{"image_processor": {"patch_size": 4, "max_soft_tokens": 70, "pooling_kernel_size": 3}}`
	for name, b := range map[string][]byte{"tokenizer.json": g4Tokenizer(), "processor_config.json": []byte(proc)} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// expected reads a fixture's expected.safetensors F32 and I32 tensors as
// float64 values, with their shapes.
func expected(t *testing.T, dir string) map[string][2][]float64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "expected.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	n := binary.LittleEndian.Uint64(b)
	var hdr map[string]json.RawMessage
	if err := json.Unmarshal(b[8:8+n], &hdr); err != nil {
		t.Fatal(err)
	}
	out := map[string][2][]float64{}
	for name, raw := range hdr {
		var e struct {
			DType   string   `json:"dtype"`
			Shape   []int    `json:"shape"`
			Offsets [2]int64 `json:"data_offsets"`
		}
		if name == "__metadata__" || json.Unmarshal(raw, &e) != nil {
			continue
		}
		d := b[8+n+uint64(e.Offsets[0]) : 8+n+uint64(e.Offsets[1])]
		v := make([]float64, len(d)/4)
		for i := range v {
			u := binary.LittleEndian.Uint32(d[4*i:])
			if e.DType == "I32" {
				v[i] = float64(int32(u))
			} else {
				v[i] = float64(math.Float32frombits(u))
			}
		}
		shape := make([]float64, len(e.Shape))
		for i, s := range e.Shape {
			shape[i] = float64(s)
		}
		out[name] = [2][]float64{v, shape}
	}
	return out
}

// g4Media is the session's media for the multimodal fixture's model: the
// vision fixture's image through Session.ImageTokens and the audio
// fixture's first clip (10200 samples) through Session.AudioTokens, with
// their counts.
func g4Media(t *testing.T, s *Session) *scorer.Media {
	t.Helper()
	vx := expected(t, testmodel.Dir(t, "gemma4-synthetic-vision.tar.gz"))
	u8, shape := vx["image_u8"][0], vx["image_u8"][1]
	h, w := int(shape[0]), int(shape[1])
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			p := u8[(y*w+x)*3:]
			img.SetNRGBA(x, y, color.NRGBA{uint8(p[0]), uint8(p[1]), uint8(p[2]), 255})
		}
	}
	soft, _, err := s.ImageTokens(context.Background(), img, nil)
	if err != nil {
		t.Fatal(err)
	}
	ax := expected(t, testmodel.Dir(t, "gemma4-synthetic-audio.tar.gz"))
	pcm := make([]float32, len(ax["waveform0"][0]))
	for i, v := range ax["waveform0"][0] {
		pcm[i] = float32(v)
	}
	kept, _, err := s.AudioTokens(context.Background(), pcm, nil)
	if err != nil {
		t.Fatal(err)
	}
	D := s.SoftTokenWidth()
	return &scorer.Media{Media: model.Media{Image: soft, Audio: kept, ImageTokens: []int{len(soft) / D}, AudioTokens: []int{len(kept) / D}}, Captions: []string{""}}
}

// g4Reference is the plain-Go reference decoder of dir with its media
// tokens: Model.ForwardMedia's logits of ids with md.
func g4Reference(t *testing.T, dir string, ids []int32, md *scorer.Media) []float32 {
	t.Helper()
	cfgJSON, _ := os.ReadFile(filepath.Join(dir, "config.json"))
	cfg, err := gemma4.ParseConfig(cfgJSON)
	if err != nil {
		t.Fatal(err)
	}
	st, err := weights.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ref, err := gemma4.Load(cfg, st)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := gemma4.ParseMediaTokens(cfgJSON)
	if err != nil {
		t.Fatal(err)
	}
	wide := make([]int, len(ids))
	for i, id := range ids {
		wide[i] = int(id)
	}
	logits, err := ref.ForwardMedia(wide, tok, md.Image, md.Audio, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return logits
}

func maxAbsDiff(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	var m float64
	for i := range a {
		m = max(m, math.Abs(float64(a[i])-float64(b[i])))
	}
	return m
}

// TestGemma4MediaSession: a Gemma 4 checkpoint with towers, opened by the
// session, takes an image and a clip as Gemma 3n does. The chat prompt
// carries <|image> + 64 × <|image|> + <image|> and <|audio> + 16 ×
// <|audio|> + <audio|>; its logits through the model interface match the
// plain-Go reference decoder's (ForwardMedia) within 1e-5, which a shifted
// audio row fails; generation's first token and its log-probabilities are
// the reference's; the scorer scores the schema prompt with the media.
func TestGemma4MediaSession(t *testing.T) {
	dir := g4Folder(t, "gemma4-synthetic-multimodal.tar.gz")
	s, err := Open(context.Background(), dir, models.Options{Weights: model.WeightsF32})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	info := s.Info()
	if info.Family != models.FamilyGemma4 || !info.Vision || !info.Audio {
		t.Fatalf("info: family %q, vision %v, audio %v", info.Family, info.Vision, info.Audio)
	}
	md := g4Media(t, s)
	if !slices.Equal(md.ImageTokens, []int{64}) || !slices.Equal(md.AudioTokens, []int{16}) {
		t.Fatalf("counts: image %v, audio %v; the fixtures have 64 and 16", md.ImageTokens, md.AudioTokens)
	}

	req := Request{Kind: PromptChat, Input: "What is in the picture?", Media: md,
		Sampling: Sampling{MaxTokens: 1, Logprobs: true, TopLogprobs: 5}}
	ids, err := s.Encode(req)
	if err != nil {
		t.Fatal(err)
	}
	sp := s.m.Chat().Media
	var runs []string
	for i := 0; i < len(ids); i++ {
		if id := ids[i]; id == int32(sp.BOI) || id == int32(sp.BOA) {
			j := i + 1
			for j < len(ids) && (ids[j] == int32(sp.Image) || ids[j] == int32(sp.Audio)) {
				j++
			}
			runs = append(runs, fmt.Sprintf("%d+%dx%d+%d", id, j-i-1, ids[i+1], ids[j]))
			i = j
		}
	}
	if want := []string{"250+64x252+251", "254+16x253+255"}; !slices.Equal(runs, want) {
		t.Fatalf("media runs %v, want %v", runs, want)
	}

	// The prompt through the interface against the reference decoder.
	want := g4Reference(t, dir, ids, md)
	x, err := s.m.Acquire()
	if err != nil {
		t.Fatal(err)
	}
	c := s.m.NewCache()
	var b model.Batch
	if err := s.m.AddMultimodal(&b, c, ids, md.Media, len(ids)); err != nil {
		t.Fatal(err)
	}
	h, err := x.Forward(&b)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]float32, len(ids)*info.Vocab)
	if err := x.Logits(got, h); err != nil {
		t.Fatal(err)
	}
	c.Free()
	x.Release()
	const tol = 1e-5 // docs/gemma4.md: AddMultimodal against the reference decoder
	e := maxAbsDiff(got, want)
	if e > tol {
		t.Errorf("prompt logits: max error %.3g against the reference, tolerance %g", e, tol)
	}
	t.Logf("session prompt (%d tokens) logits against ForwardMedia: max error %.3g (tolerance %g)", len(ids), e, tol)
	shifted := *md
	shifted.Audio = append(slices.Clone(md.Audio[info.Hidden:]), md.Audio[:info.Hidden]...)
	if e := maxAbsDiff(got, g4Reference(t, dir, ids, &shifted)); e <= tol {
		t.Errorf("the audio rows rotated by one still match (max error %.3g)", e)
	}

	// Generation: the first token and its log-probabilities.
	V := info.Vocab
	last := want[(len(ids)-1)*V:]
	lse := 0.0
	mx := slices.Max(last)
	for _, v := range last {
		lse += math.Exp(float64(v - mx))
	}
	lse = float64(mx) + math.Log(lse)
	var toks []Token
	if _, err := s.Generate(context.Background(), req, func(tk Token) error { toks = append(toks, tk); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(toks) != 1 || toks[0].Logprobs == nil {
		t.Fatalf("generated %+v", toks)
	}
	arg := int32(slices.Index(last, mx))
	sorted := slices.Clone(last)
	slices.Sort(sorted)
	if margin := float64(sorted[V-1] - sorted[V-2]); margin > 4*tol && toks[0].ID != arg {
		t.Errorf("first token %d, the reference's argmax %d (margin %.3g)", toks[0].ID, arg, margin)
	}
	lp := toks[0].Logprobs
	worst := math.Abs(lp.Logprob - (float64(last[toks[0].ID]) - lse))
	if len(lp.Top) != 5 {
		t.Errorf("%d top log-probabilities, want 5", len(lp.Top))
	}
	for _, a := range lp.Top {
		worst = max(worst, math.Abs(a.Logprob-(float64(last[a.ID])-lse)))
	}
	if worst > 2*tol {
		t.Errorf("generation's log-probabilities are up to %.3g off the reference's (tolerance %g)", worst, 2*tol)
	}
	t.Logf("generation's first token %d: log-probabilities within %.3g of the reference's (tolerance %g)", toks[0].ID, worst, 2*tol)

	// Scoring the schema prompt with the media, and without them: the
	// media reach the decision.
	sc := schema(t)
	with, err := s.Score(context.Background(), sc, "a photo", scorer.Options{Media: func() (*scorer.Media, error) { return md, nil }})
	if err != nil {
		t.Fatal(err)
	}
	without, err := s.Score(context.Background(), sc, "a photo", scorer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if d := with.PromptTokens - without.PromptTokens; d != 64+2+16+2 {
		t.Errorf("the media add %d prompt tokens, want %d", d, 64+2+16+2)
	}
	if with.Fields[0].Decisions[0].Candidates[0].LogLikelihood == without.Fields[0].Decisions[0].Candidates[0].LogLikelihood {
		t.Error("the media did not change the scored distribution")
	}
}

// TestGemma4MediaRefusals: inputs a Gemma 4 model cannot take are refused,
// each error naming the problem: an image for a model without a vision
// tower, counts that do not add up to the rows, a count list of the wrong
// length, several images without counts.
func TestGemma4MediaRefusals(t *testing.T) {
	tiny, err := Open(context.Background(), g4Folder(t, "gemma4-synthetic-tiny.tar.gz"), models.Options{Weights: model.WeightsF32})
	if err != nil {
		t.Fatal(err)
	}
	defer tiny.Close()
	D := tiny.SoftTokenWidth()
	one := &scorer.Media{Media: model.Media{Image: make([]float32, 4*D)}, Captions: []string{""}}
	if _, err := tiny.Encode(Request{Kind: PromptChat, Input: "x", Media: one}); err == nil || !strings.Contains(err.Error(), "takes no images") {
		t.Errorf("an image for a text-only Gemma 4: %v", err)
	}
	if _, err := tiny.Score(context.Background(), schema(t), "x", scorer.Options{Media: func() (*scorer.Media, error) { return one, nil }}); err == nil || !strings.Contains(err.Error(), "takes no images") {
		t.Errorf("scoring an image on a text-only Gemma 4: %v", err)
	}
	clip := &scorer.Media{Media: model.Media{Audio: make([]float32, 3*D)}}
	if _, err := tiny.Encode(Request{Kind: PromptChat, Input: "x", Media: clip}); err == nil || !strings.Contains(err.Error(), "takes no audio") {
		t.Errorf("a clip for a text-only Gemma 4: %v", err)
	}

	dir := g4Folder(t, "gemma4-synthetic-multimodal.tar.gz")
	s, err := Open(context.Background(), dir, models.Options{Weights: model.WeightsF32})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	D = s.SoftTokenWidth()
	for _, c := range []struct {
		name string
		md   model.Media
		caps int
		want string
	}{
		{"counts short of the rows", model.Media{Image: make([]float32, 64*D), ImageTokens: []int{63}}, 1, "counts [63]"},
		{"two counts for one image", model.Media{Image: make([]float32, 64*D), ImageTokens: []int{32, 32}}, 1, "2 image soft-token counts for 1 images"},
		{"two images without counts", model.Media{Image: make([]float32, 64*D)}, 2, "without their soft-token counts"},
		{"a zero count", model.Media{Audio: make([]float32, 0), AudioTokens: []int{0}}, 0, "0 soft tokens"},
	} {
		md := &scorer.Media{Media: c.md, Captions: make([]string, c.caps)}
		if _, err := s.Encode(Request{Kind: PromptChat, Input: "x", Media: md}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q named", c.name, err, c.want)
		}
	}
}
