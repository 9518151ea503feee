package weights

import (
	"encoding/json"
	"testing"
)

// unescape decodes a JSON string as encoding/json does, for valid UTF-8.
func TestUnescape(t *testing.T) {
	for _, lit := range []string{
		`"plain"`, `""`, `"a\"b\\c\/d"`, `"\b\f\n\r\t"`, `"\u0041\u00e9\u4e2d"`,
		`"\ud83d\ude00 smile"`, `"lone \ud83d end"`, `"lone \ude00"`, `"\ud83d\u0041"`,
		`"model.layers.0.self_attn.q_proj.weight\u0000"`, `"é\u00e9"`,
	} {
		var want string
		if err := json.Unmarshal([]byte(lit), &want); err != nil {
			t.Fatalf("%s: %v", lit, err)
		}
		got, err := unescape([]byte(lit))
		if err != nil || got != want {
			t.Errorf("unescape(%s) = %q, %v; want %q", lit, got, err, want)
		}
	}
	for _, bad := range []string{`"\x"`, `"\u12"`, `"\u12g4"`} {
		if _, err := unescape([]byte(bad)); err == nil {
			t.Errorf("unescape(%s): no error", bad)
		}
	}
}
