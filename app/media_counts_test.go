package app

import (
	"context"
	"encoding/json"
	"image"
	"math"
	"os"
	"path/filepath"
	"testing"

	"verdict/engine/fixture/testmodel"
	"verdict/engine/models"
	"verdict/engine/session"
	"verdict/media"
	"verdict/media/pcm"
)

// tinyGemma4Tokenizer is a tokenizer.json within the Gemma 4 fixtures'
// 256-token vocabulary: the control tokens, the fixture's media tokens at
// their ids (249..255) and a few characters.
func tinyGemma4Tokenizer() []byte {
	vocab := map[string]int{}
	var special []any
	for i, s := range []string{"<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>", "<|turn>", "<turn|>",
		"<|video|>", "<|image>", "<image|>", "<|image|>", "<|audio|>", "<|audio>", "<audio|>"} {
		id := i
		if i >= 8 {
			id = 249 + i - 8
		}
		vocab[s] = id
		special = append(special, map[string]any{"id": id, "content": s, "special": true, "single_word": false,
			"lstrip": false, "rstrip": false, "normalized": false})
	}
	for i, r := range "▁\nabcdefghijklmnopqrstuvwxyz:.-\"{}[],ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789" {
		vocab[string(r)] = 8 + i
	}
	b, _ := json.Marshal(map[string]any{"version": "1.0", "added_tokens": special,
		"normalizer":    map[string]any{"type": "Replace", "pattern": map[string]any{"String": " "}, "content": "▁"},
		"pre_tokenizer": map[string]any{"type": "Split", "pattern": map[string]any{"String": " "}, "behavior": "MergedWithPrevious", "invert": false},
		"decoder": map[string]any{"type": "Sequence", "decoders": []any{
			map[string]any{"type": "Replace", "pattern": map[string]any{"String": "▁"}, "content": " "}, map[string]any{"type": "Fuse"}}},
		"model": map[string]any{"type": "BPE", "unk_token": "<unk>", "fuse_unk": true, "vocab": vocab, "merges": [][]string{}}})
	return b
}

// TestGemma4MediaCounts: with a Gemma 4 model the app counts each item's
// soft tokens on its own, as the towers give them for what the model
// receives (the image's model view, the clip), in an item's Tokens and a
// run's total; with no model, Gemma 3n's 256 and 188.
func TestGemma4MediaCounts(t *testing.T) {
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
	s, err := session.Open(context.Background(), dir, models.Options{Weights: session.WeightsF32})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	mc := countsOf(s)
	D := s.SoftTokenWidth()

	img := image.NewRGBA(image.Rect(0, 0, 120, 80))
	for i := range img.Pix {
		img.Pix[i] = uint8(i * 11)
	}
	ie, err := newImageEntry(img, "a.png", SourceFile)
	if err != nil {
		t.Fatal(err)
	}
	soft, _, err := s.ImageTokens(context.Background(), ie.image, nil)
	if err != nil {
		t.Fatal(err)
	}
	samples := make([]float32, 10200)
	for i := range samples {
		samples[i] = float32(0.2 * math.Sin(float64(i)*0.03))
	}
	ae := newAudioEntry(pcm.Clip{Samples: samples, Rate: pcm.ModelRate}, "a.wav", SourceFile)
	kept, _, err := s.AudioTokens(context.Background(), samples, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantImg, wantClip := len(soft)/D, len(kept)/D
	if got := ie.withTokens(mc).Tokens; got != wantImg {
		t.Errorf("image item: %d soft tokens, the tower gives %d", got, wantImg)
	}
	if got := ae.withTokens(mc).Tokens; got != wantClip {
		t.Errorf("clip item: %d soft tokens, the tower gives %d", got, wantClip)
	}
	short := newAudioEntry(pcm.Clip{Samples: samples[:4000], Rate: pcm.ModelRate}, "b.wav", SourceFile)
	if a, b := short.withTokens(mc).Tokens, ae.withTokens(mc).Tokens; a >= b {
		t.Errorf("a clip of 4000 samples counts %d soft tokens, one of 10200 %d: the count does not follow the length", a, b)
	}
	in := &media.Input{}
	in.AddImage("a.png", ie.image)
	in.AddImage("a.png", ie.image)
	in.SetAudio("a.wav", *ae.clip)
	if got := mc.inputTokens(in); got != 2*wantImg+wantClip {
		t.Errorf("a run's media: %d soft tokens, want %d", got, 2*wantImg+wantClip)
	}

	none := countsOf(nil)
	if ie.withTokens(none).Tokens != DefaultImageTokens || ae.withTokens(none).Tokens != DefaultAudioTokens {
		t.Errorf("no model: %d and %d soft tokens, want Gemma 3n's %d and %d", ie.withTokens(none).Tokens, ae.withTokens(none).Tokens, DefaultImageTokens, DefaultAudioTokens)
	}
}
