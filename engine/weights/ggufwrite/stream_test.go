package ggufwrite

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"verdict/engine/tokenizer"
	"verdict/engine/weights"
)

// WriteStream writes the same bytes as Write for the same tensors, in
// every type, with tensors cut into many chunks (and rows that straddle
// none), and the file reads back through the GGUF reader.
func TestWriteStreamMatchesWrite(t *testing.T) {
	defer func(n int) { chunkValues = n }(chunkValues)
	chunkValues = 1000 // several chunks per tensor
	rng := rand.New(rand.NewPCG(1, 2))
	for _, typ := range []weights.GGMLType{weights.GGMLF32, weights.GGMLF16, weights.GGMLBF16, weights.GGMLQ8_0,
		weights.GGMLQ4_0, weights.GGMLQ4_K, weights.GGMLQ6_K} {
		var mem []Tensor
		var src []Source
		for i, dims := range [][]int{{256}, {256, 7}, {512, 3, 2}, {256, 33}} {
			n := 1
			for _, d := range dims {
				n *= d
			}
			x := make([]float32, n)
			for j := range x {
				x[j] = float32(rng.NormFloat64())
			}
			tt := typ
			if len(dims) == 1 {
				tt = weights.GGMLF32
			}
			data, err := Encode(tt, x)
			if err != nil {
				t.Fatal(err)
			}
			name := fmt.Sprintf("t%d.weight", i)
			mem = append(mem, Tensor{Name: name, Dims: dims, Type: tt, Data: data})
			src = append(src, Source{Name: name, Dims: dims, Type: tt, Rows: func(r0 int, dst []float32) error {
				copy(dst, x[r0*dims[0]:])
				return nil
			}})
		}
		kvs := KVs("general.architecture", "test", "a.list", []int32{1, 2, 3}, "a.flags", []bool{true, false})
		var want, got bytes.Buffer
		if err := Write(&want, Options{}, kvs, mem); err != nil {
			t.Fatal(err)
		}
		n, err := WriteStream(&got, kvs, src)
		if err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
		want.Write(make([]byte, (32-want.Len()%32)%32)) // WriteStream pads the last tensor too, as gguf-py does
		if n != int64(got.Len()) || !bytes.Equal(got.Bytes(), want.Bytes()) {
			t.Errorf("%s: %d bytes (reported %d) differ from Write's %d", typ, got.Len(), n, want.Len())
		}
		if _, err := weights.ParseGGUF("x.gguf", got.Bytes()); err != nil {
			t.Errorf("%s: %v", typ, err)
		}
	}
}

// WriteStream refuses tensors it cannot lay out and stops at a source's
// error, naming the tensor.
func TestWriteStreamErrors(t *testing.T) {
	defer func(n int) { chunkValues = n }(chunkValues)
	chunkValues = 64
	ok := func(int, []float32) error { return nil }
	boom := errors.New("boom")
	for _, tc := range []struct {
		ts   []Source
		want string
	}{
		{[]Source{{Name: "a", Dims: []int{48, 2}, Type: weights.GGMLQ4_0, Rows: ok}}, "rows of 48 values are not whole Q4_0 blocks"},
		{[]Source{{Name: "a", Dims: []int{32}, Type: weights.GGMLType(3), Rows: ok}}, "no encoder for Q4_1"},
		{[]Source{{Name: "a", Dims: nil, Type: weights.GGMLF32, Rows: ok}}, "a: needs dims"},
		{[]Source{{Name: "a", Dims: []int{4, 0}, Type: weights.GGMLF32, Rows: ok}}, "dims [4 0]"},
		{[]Source{{Name: "a", Dims: []int{64, 100}, Type: weights.GGMLF32, Rows: ok},
			{Name: "b", Dims: []int{64, 100}, Type: weights.GGMLF16, Rows: func(r0 int, _ []float32) error {
				if r0 >= 50 {
					return boom
				}
				return nil
			}}}, "b: boom"},
	} {
		var b bytes.Buffer
		_, err := WriteStream(&b, nil, tc.ts)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want %q", tc.ts[len(tc.ts)-1].Dims, err, tc.want)
		}
	}
}

// EncodeTo writes what Encode returns, and refuses a destination of the
// wrong size.
func TestEncodeTo(t *testing.T) {
	x := make([]float32, 512)
	for i := range x {
		x[i] = float32(i%37) - 18.5
	}
	for typ, b := range blockOf {
		want, err := Encode(typ, x)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(x)/b[0]*b[1])
		if err := EncodeTo(typ, x, got); err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: %v, bytes equal %v", typ, err, bytes.Equal(got, want))
		}
		if err := EncodeTo(typ, x, got[:len(got)-1]); err == nil {
			t.Errorf("%s: a short destination is accepted", typ)
		}
	}
}

func TestSizeLabel(t *testing.T) {
	for n, want := range map[int64]string{541312: "541K", 999: "1.0K", 1234: "1.2K", 12_345_678: "12M", 5_439_438_336: "5.4B", 123_456_789_012: "123B", 2e12: "2.0T"} {
		if got := SizeLabel(n); got != want {
			t.Errorf("SizeLabel(%d) = %s, want %s", n, got, want)
		}
	}
}

// GemmaVocab types and scores each kind of token as the converter does,
// pads to the model's vocabulary and refuses a tokenizer larger than it;
// ByteVocab places the specials at the config's ids.
func TestVocabs(t *testing.T) {
	vocab := map[string]int{"<pad>": 0, "<eos>": 1, "<bos>": 2, "<unk>": 3, "<0x0A>": 4, "▁a": 5, "b": 6, "<unused0>": 7, "▁▁": 8, "<start_of_turn>": 9, "<end_of_turn>": 10}
	added := func(id int, s string, special bool) map[string]any {
		return map[string]any{"id": id, "content": s, "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": special}
	}
	js, _ := json.Marshal(map[string]any{
		"version": "1.0", "truncation": nil, "padding": nil,
		"added_tokens": []any{added(0, "<pad>", true), added(1, "<eos>", true), added(2, "<bos>", true), added(3, "<unk>", true),
			added(7, "<unused0>", false), added(8, "▁▁", false), added(9, "<start_of_turn>", true), added(10, "<end_of_turn>", true)},
		"normalizer":     map[string]any{"type": "Replace", "pattern": map[string]any{"String": " "}, "content": "▁"},
		"pre_tokenizer":  map[string]any{"type": "Split", "pattern": map[string]any{"String": " "}, "behavior": "MergedWithPrevious", "invert": false},
		"post_processor": nil,
		"decoder": map[string]any{"type": "Sequence", "decoders": []any{
			map[string]any{"type": "Replace", "pattern": map[string]any{"String": "▁"}, "content": " "},
			map[string]any{"type": "ByteFallback"}, map[string]any{"type": "Fuse"}}},
		"model": map[string]any{"type": "BPE", "dropout": nil, "unk_token": "<unk>", "continuing_subword_prefix": nil,
			"end_of_word_suffix": nil, "fuse_unk": true, "byte_fallback": true, "ignore_merges": false,
			"vocab": vocab, "merges": [][]string{}},
	})
	tok, err := tokenizer.Parse(js)
	if err != nil {
		t.Fatal(err)
	}
	v, err := GemmaVocab(tok, 13)
	if err != nil {
		t.Fatal(err)
	}
	wantTok := []string{"<pad>", "<eos>", "<bos>", "<unk>", "<0x0A>", "▁a", "b", "<unused0>", "  ", "<start_of_turn>", "<end_of_turn>", "[PAD11]", "[PAD12]"}
	wantType := []int32{3, 3, 3, 3, 6, 1, 1, 3, 4, 3, 3, 5, 5}
	wantScore := []float32{-1000, -1000, -1000, -1000, 0, -5, -6, -1000, -1000, -1000, -1000, -10000, -10000}
	for id := range 13 {
		if v.Tokens[id] != wantTok[id] || v.Types[id] != wantType[id] || v.Scores[id] != wantScore[id] {
			t.Errorf("id %d: %q type %d score %g, want %q %d %g", id, v.Tokens[id], v.Types[id], v.Scores[id], wantTok[id], wantType[id], wantScore[id])
		}
	}
	if v.UNK != 3 || v.AddBOS == nil || !*v.AddBOS || v.AddEOS == nil || *v.AddEOS {
		t.Errorf("unk %d, add_bos %v, add_eos %v", v.UNK, v.AddBOS, v.AddEOS)
	}
	if _, err := GemmaVocab(tok, 8); err == nil || !strings.Contains(err.Error(), "11 tokens, more than the model's vocabulary of 8") {
		t.Errorf("a vocabulary smaller than the tokenizer: %v", err)
	}

	b, err := ByteVocab(300, 0, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	if b.Tokens[0] != "<pad>" || b.Tokens[1] != "<eos>" || b.Tokens[2] != "<bos>" || b.Tokens[3] != "<unk>" || b.Types[3] != TokenUnknown ||
		b.Tokens[4] != "<0x00>" || b.Tokens[4+10] != "<0x0A>" || b.Types[259] != TokenByte || b.Tokens[260] != "[PAD260]" || b.Types[299] != TokenUnused {
		t.Errorf("byte vocabulary: %q … %q", b.Tokens[:6], b.Tokens[258:262])
	}
	if _, err := ByteVocab(300, 0, 0, 2); err == nil || !strings.Contains(err.Error(), "<eos> id 0") {
		t.Errorf("two specials at one id: %v", err)
	}
}
