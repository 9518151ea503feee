package tokenizer

import (
	"fmt"
	"os"
	"testing"
)

func FuzzTmp(f *testing.F) {
	f.Add("hello")
	tk := realTokenizer(f)
	f.Fuzz(func(t *testing.T, s string) {
		os.WriteFile(fmt.Sprintf("/tmp/fuzzlast.%d", os.Getpid()), []byte(s), 0o644)
		checkRoundTrip(tk, s)
	})
}
