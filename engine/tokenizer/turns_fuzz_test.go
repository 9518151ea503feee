package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParseTurns: Parse on any tokenizer.json gives an error or a tokenizer
// whose turn tokens are one family's pair (Gemma 4's "<|turn>"/"<turn|>"
// whenever the file has both, else Gemma 3's), two different ids whose
// TokenText is that pair, EndOfTurn among StopIDs. Seeds: the synthetic
// Gemma 3 file (miniSpec), the same with Gemma 4's turn tokens added, and
// the Gemma 4 fixtures' 512-entry tokenizer.json.
func FuzzParseTurns(f *testing.F) {
	seed := func(s spec) []byte {
		b, err := json.Marshal(s)
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	f.Add(seed(miniSpec()))
	g4 := miniSpec()
	vocab := g4.model()["vocab"].(map[string]int)
	added := g4["added_tokens"].([]any)
	for _, s := range []string{"<|turn>", "<turn|>"} {
		id := len(vocab)
		vocab[s] = id
		added = append(added, map[string]any{"id": id, "content": s, "single_word": false, "lstrip": false,
			"rstrip": false, "normalized": false, "special": true})
	}
	g4["added_tokens"] = added
	f.Add(seed(g4))
	if b, err := os.ReadFile(filepath.Join("..", "gemma4", "testdata", "tokenizer.json")); err == nil {
		f.Add(b)
	} else {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		tk, err := Parse(data)
		if err != nil {
			return
		}
		want := turnTokens[1]
		_, ok1 := tk.Lookup(turnTokens[0][0])
		_, ok2 := tk.Lookup(turnTokens[0][1])
		if ok1 && ok2 {
			want = turnTokens[0]
		}
		sot, eot := tk.StartOfTurn(), tk.EndOfTurn()
		if sot == eot || tk.TokenText(sot) != want[0] || tk.TokenText(eot) != want[1] {
			t.Fatalf("turn tokens %d %q, %d %q; want %q", sot, tk.TokenText(sot), eot, tk.TokenText(eot), want)
		}
		if stops := tk.StopIDs(); len(stops) != 2 || stops[0] != tk.EOS() || stops[1] != eot {
			t.Fatalf("StopIDs %v, want <eos> %d and end of turn %d", stops, tk.EOS(), eot)
		}
	})
}
