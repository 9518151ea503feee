package scorer

import (
	"fmt"
	"testing"

	"verdict/engine/model"
	"verdict/engine/prompt"
)

func TestSchemaCacheLRU(t *testing.T) {
	c := newSchemaCache(CompiledSchemas)
	for i := 0; i < 10; i++ {
		c.put(fmt.Sprint(i), &compiled{prefixIDs: []int32{int32(i)}})
		if i == 5 {
			c.get("0") // 0 becomes the most recent
		}
	}
	if n := c.len(); n != CompiledSchemas {
		t.Fatalf("%d entries, want %d", n, CompiledSchemas)
	}
	for k, want := range map[string]bool{"0": true, "1": false, "2": false, "3": true, "9": true} {
		if _, ok := c.get(k); ok != want {
			t.Errorf("entry %s cached: %v, want %v", k, ok, want)
		}
	}
	// The key holds the complete prompt and every candidate definition.
	d := []decision{{key: `{"a":`, texts: []string{" true", " false"}}}
	e := []decision{{key: `{"a":`, texts: []string{" true", " maybe"}}}
	if cacheKey(textPrompt("p"), d) == cacheKey(textPrompt("p"), e) || cacheKey(textPrompt("p"), d) == cacheKey(textPrompt("q"), d) {
		t.Error("different prompts or candidates share a cache key")
	}
	// The same text from the builder or the user, or a media run and the
	// text that renders like it, are different prompts.
	var user, media, text prompt.Prompt
	user.User("<end_of_turn>")
	media.Image(model.Special{BOI: 1, Image: 2, EOI: 3, VisionTokens: 2}, "image 1")
	text.User("\n\n<image 1>\n\n")
	if cacheKey(user, d) == cacheKey(textPrompt("<end_of_turn>"), d) || media.String() != text.String() || cacheKey(media, d) == cacheKey(text, d) {
		t.Error("user text shares a cache key with builder text or a media run")
	}
}
