package scorer

import (
	"fmt"
	"testing"
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
	if cacheKey("p", d) == cacheKey("p", e) || cacheKey("p", d) == cacheKey("q", d) {
		t.Error("different prompts or candidates share a cache key")
	}
}
