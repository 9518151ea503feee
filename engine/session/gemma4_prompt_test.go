package session

import (
	"context"
	"strings"
	"testing"

	"verdict/engine/gemma4"
	"verdict/engine/model"
	"verdict/engine/models"
)

// TestGemma4SchemaPrompt: for a Gemma 4 model the prompt preview is in its
// own chat format with each item's count: ImageTokenCount and
// AudioTokenCount (before encoding) are the counts the towers give, and
// SchemaPromptSized with them has the token count of the schema prompt the
// scorer encodes with the encoded media; another count gives another
// total; without counts the preview is refused, naming why.
func TestGemma4SchemaPrompt(t *testing.T) {
	dir := g4Folder(t, "gemma4-synthetic-multimodal.tar.gz")
	s, err := Open(context.Background(), dir, models.Options{Weights: model.WeightsF32})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	md := g4Media(t, s) // the 96×96 image and a clip of 10200 samples
	img, err := s.ImageTokenCount(96, 96)
	if err != nil || img != md.ImageTokens[0] {
		t.Fatalf("ImageTokenCount(96, 96) = %d (%v), the tower gave %d", img, err, md.ImageTokens[0])
	}
	aud, err := s.AudioTokenCount(10200)
	if err != nil || aud != md.AudioTokens[0] {
		t.Fatalf("AudioTokenCount(10200) = %d (%v), the tower gave %d", aud, err, md.AudioTokens[0])
	}
	sc := schema(t)
	text, n, err := s.SchemaPromptSized(sc, "fine", []string{""}, true, []int{img}, aud)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := s.Encode(Request{Kind: PromptSchema, Schema: sc, Input: "fine", Media: md})
	if err != nil {
		t.Fatal(err)
	}
	if n != len(ids) {
		t.Errorf("SchemaPromptSized: %d tokens, the scorer's prompt with the media has %d", n, len(ids))
	}
	if !strings.Contains(text, gemma4.TurnStartToken) || strings.Contains(text, "<start_of_turn>") || !strings.Contains(text, "<image 1>") || !strings.Contains(text, "<audio>") {
		t.Errorf("SchemaPromptSized's text is not in Gemma 4's format with its media: %q", text)
	}
	if _, m, err := s.SchemaPromptSized(sc, "fine", []string{""}, true, []int{img - 1}, aud); err != nil || m != n-1 {
		t.Errorf("one image token fewer: %d tokens (%v), want %d", m, err, n-1)
	}
	for _, c := range []struct {
		name     string
		captions []string
		audio    bool
		want     string
	}{{"an image", []string{""}, false, "each image's count"}, {"a clip", nil, true, "the clip's count"}} {
		if _, _, err := s.SchemaPrompt(sc, "fine", c.captions, c.audio); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("SchemaPrompt with %s and no counts: %v, want %q named", c.name, err, c.want)
		}
	}
	if _, _, err := s.SchemaPromptSized(sc, "fine", []string{"", ""}, false, []int{img}, 0); err == nil {
		t.Error("one count for two images was accepted")
	}
}

// TestSchemaPromptSizedGemma3n: for Gemma 3n the counts ImageTokenCount
// and AudioTokenCount give are the chat format's, and SchemaPromptSized
// with them writes SchemaPrompt's text and count.
func TestSchemaPromptSizedGemma3n(t *testing.T) {
	s := open(t)
	sc := schema(t)
	text, n, err := s.SchemaPrompt(sc, "fine", []string{"", "x"}, true)
	if err != nil {
		t.Fatal(err)
	}
	img, err := s.ImageTokenCount(1000, 10)
	if err != nil {
		t.Fatal(err)
	}
	aud, err := s.AudioTokenCount(16000)
	if err != nil {
		t.Fatal(err)
	}
	sp := s.m.Chat().Media
	if img != sp.VisionTokens || aud != sp.AudioTokens {
		t.Errorf("counts %d, %d; the chat format's %d, %d", img, aud, sp.VisionTokens, sp.AudioTokens)
	}
	st, sn, err := s.SchemaPromptSized(sc, "fine", []string{"", "x"}, true, []int{img, img}, aud)
	if err != nil || st != text || sn != n {
		t.Errorf("SchemaPromptSized: %d tokens (%v), SchemaPrompt %d; texts equal %v", sn, err, n, st == text)
	}
}
