package weights_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"verdict/engine/weights"
	"verdict/engine/weights/ggufwrite"
)

// hostileGGUF is a GGUF header of no tensors and one key "k" whose value
// body (after the key and its type) is body.
func hostileGGUF(nKV int, body func(b []byte) []byte) []byte {
	b := []byte("GGUF")
	b = binary.LittleEndian.AppendUint32(b, 3)
	b = binary.LittleEndian.AppendUint64(b, 0)
	b = binary.LittleEndian.AppendUint64(b, uint64(nKV))
	return body(b)
}

// emptyArrays appends an array (of arrays) of n empty uint32 arrays: 12
// bytes each.
func emptyArrays(b []byte, n int) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(weights.GGUFArray))
	b = binary.LittleEndian.AppendUint64(b, uint64(n))
	for range n {
		b = binary.LittleEndian.AppendUint32(b, uint32(weights.GGUFUint32))
		b = binary.LittleEndian.AppendUint64(b, 0)
	}
	return b
}

func ggufKey(b []byte, key string, typ weights.GGUFType) []byte {
	b = binary.LittleEndian.AppendUint64(b, uint64(len(key)))
	b = append(b, key...)
	return binary.LittleEndian.AppendUint32(b, uint32(typ))
}

// allocated is the bytes the Go heap gave out while fn ran (TotalAlloc
// counts them whether or not they are collected).
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// A GGUF whose metadata would parse into more than weights.HeaderBudget
// (arrays of empty arrays: 12 bytes on disk, over 100 in memory, many keys)
// is refused with a *BudgetError naming the key, and the parse allocates at
// most about the budget, however the file spends its bytes.
func TestGGUFMetadataBudget(t *testing.T) {
	const mb = 1 << 20
	for _, tc := range []struct {
		name     string
		data     []byte
		item     string // the error's item and name
		key      string
		maxAlloc uint64
	}{
		{"empty arrays", hostileGGUF(1, func(b []byte) []byte {
			return emptyArrays(ggufKey(b, "k", weights.GGUFArray), 3_000_000)
		}), "metadata key", "k", 16 * mb},
		{"nested empty arrays", hostileGGUF(1, func(b []byte) []byte {
			b = ggufKey(b, "nested", weights.GGUFArray)
			b = binary.LittleEndian.AppendUint32(b, uint32(weights.GGUFArray))
			b = binary.LittleEndian.AppendUint64(b, 2)
			return emptyArrays(emptyArrays(b, 1_500_000), 1_500_000)
		}), "metadata key", "nested", weights.HeaderBudget + 16*mb},
		{"too many keys", hostileGGUF(1_200_000, func(b []byte) []byte {
			for i := range 1_200_000 {
				b = append(ggufKey(b, fmt.Sprintf("%07d", i), weights.GGUFUint8), 1)
			}
			return b
		}), "metadata", "", 16 * mb},
		{"many keys and strings", hostileGGUF(760_000, func(b []byte) []byte {
			for i := range 760_000 {
				b = ggufKey(b, fmt.Sprintf("%07d", i), weights.GGUFString)
				b = append(binary.LittleEndian.AppendUint64(b, 24), "abcdefghijklmnopqrstuvwx"...)
			}
			return b
		}), "metadata key", "", weights.HeaderBudget + 16*mb},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			n := allocated(func() { _, err = weights.ParseGGUF("hostile.gguf", tc.data) })
			t.Logf("%d-byte file: %.1f MB allocated; %v", len(tc.data), float64(n)/mb, err)
			var be *weights.BudgetError
			if !errors.As(err, &be) {
				t.Fatalf("err = %v, want a *weights.BudgetError", err)
			}
			if be.Format != "gguf" || be.Item != tc.item || tc.key != "" && be.Name != tc.key || be.Budget != weights.HeaderBudget {
				t.Errorf("%+v, want gguf %s %q of budget %d", be, tc.item, tc.key, weights.HeaderBudget)
			}
			if msg := err.Error(); !strings.Contains(msg, "hostile.gguf") || !strings.Contains(msg, "over 256 MB") {
				t.Errorf("error %q does not name the file and the budget", msg)
			}
			if n > tc.maxAlloc {
				t.Errorf("parsing allocated %d bytes, over %d", n, tc.maxAlloc)
			}
		})
	}
	t.Run("file", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "empty-arrays.gguf")
		if err := os.WriteFile(p, hostileGGUF(1, func(b []byte) []byte {
			return emptyArrays(ggufKey(b, "k", weights.GGUFArray), 3_000_000)
		}), 0o644); err != nil {
			t.Fatal(err)
		}
		var err error
		n := allocated(func() { _, err = weights.OpenGGUFFile(p) })
		var be *weights.BudgetError
		if !errors.As(err, &be) || !strings.Contains(err.Error(), p) || n > 16*mb {
			t.Errorf("OpenGGUFFile: %v after %d bytes allocated, want a *weights.BudgetError naming the file", err, n)
		}
	})
}

// A tokenizer's metadata as big as real ones get (Gemma's 262,144 tokens
// with their scores and types, and 300,000 merges as a BPE vocabulary of
// Llama 3's size has) parses well within the budget.
func TestGGUFVocabularyFitsBudget(t *testing.T) {
	const n, merges = 262_144, 300_000
	tokens := make([]string, n)
	scores := make([]float32, n)
	types := make([]int32, n)
	for i := range tokens {
		tokens[i] = fmt.Sprintf("▁tok%d", i)
		scores[i], types[i] = -float32(i), 1
	}
	ms := make([]string, merges)
	for i := range ms {
		ms[i] = fmt.Sprintf("t%d ok%d", i%5000, i)
	}
	data := gguf(t, ggufwrite.Options{}, ggufwrite.KVs("general.architecture", "gemma3n",
		"tokenizer.ggml.tokens", tokens, "tokenizer.ggml.scores", scores,
		"tokenizer.ggml.token_type", types, "tokenizer.ggml.merges", ms), nil)
	var g *weights.GGUF
	var err error
	a := allocated(func() { g, err = weights.ParseGGUF("vocab.gguf", data) })
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d-byte header: %.1f MB allocated (budget %d MB)", len(data), float64(a)/(1<<20), weights.HeaderBudget>>20)
	if got, _ := g.KV["tokenizer.ggml.tokens"].Strings(); len(got) != n || got[n-1] != tokens[n-1] {
		t.Errorf("%d tokens read back", len(got))
	}
	if a > weights.HeaderBudget/4 {
		t.Errorf("the vocabulary took %d bytes, over a quarter of the budget", a)
	}
}

// The cost model bounds what parsing allocates: for headers of every kind
// of part (metadata scalars, strings and arrays, tensor infos, safetensors
// entries, index entries), the heap bytes a parse gives out stay within
// what it charged (plus a few KB of fixed structures and errors), a budget
// of exactly the charge suffices and one byte less is refused with a
// *BudgetError.
func TestBudgetBoundsAllocation(t *testing.T) {
	const slack = 16 << 10
	var kvs []ggufwrite.KV
	for i := range 2000 {
		kvs = append(kvs, ggufwrite.KV{Key: fmt.Sprintf("key.%d", i), Value: uint32(i)})
	}
	var toks []string
	for i := range 5000 {
		toks = append(toks, strings.Repeat("x", i%40))
	}
	kvs = append(kvs, ggufwrite.KVs("tokens", toks, "nested", [][]int32{{1, 2}, {}, {3}}, "s", strings.Repeat("y", 5000),
		"scores", make([]float32, 5000))...)
	var ts []ggufwrite.Tensor
	for i := range 2000 {
		ts = append(ts, ggufwrite.Tensor{Name: fmt.Sprintf("blk.%d.weight", i), Dims: []int{2, 1, 1}, Type: weights.GGMLF32, Data: make([]byte, 8)})
	}
	var st, index bytes.Buffer
	st.WriteString(`{"__metadata__":{"format":"pt"}`)
	index.WriteString(`{"metadata":{"total_size":1},"weight_map":{`)
	for i := range 3000 {
		fmt.Fprintf(&st, `,"model.layers.%d.weight":{"dtype":"BF16","shape":[1,2,1],"data_offsets":[%d,%d]}`, i, 4*i, 4*i+4)
		if i > 0 {
			index.WriteByte(',')
		}
		fmt.Fprintf(&index, `"model.layers.%d.weight":"model-%05d-of-00010.safetensors"`, i, i%10)
	}
	st.WriteString("}")
	index.WriteString("}}")
	stFile := binary.LittleEndian.AppendUint64(nil, uint64(st.Len()))
	stFile = append(append(stFile, st.Bytes()...), make([]byte, 4*3000)...)
	ggufFile := gguf(t, ggufwrite.Options{}, kvs, ts)

	for _, tc := range []struct {
		name  string
		parse func(limit int64) (int64, error)
	}{
		{"gguf", func(limit int64) (int64, error) {
			_, c, err := weights.ParseGGUFWithin(ggufFile, limit)
			return c, err
		}},
		{"safetensors", func(limit int64) (int64, error) {
			_, c, err := weights.ParseSafetensorsWithin(stFile, limit)
			return c, err
		}},
		{"index", func(limit int64) (int64, error) {
			_, _, c, err := weights.ParseIndexWithin(index.Bytes(), limit)
			return c, err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.parse(weights.HeaderBudget) // warm up what the first call sets up
			var charged int64
			var err error
			n := allocated(func() { charged, err = tc.parse(weights.HeaderBudget) })
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("charged %d bytes, allocated %d", charged, n)
			if int64(n) > charged+slack {
				t.Errorf("allocated %d bytes, over the %d charged", n, charged)
			}
			if _, err := tc.parse(charged); err != nil {
				t.Errorf("a budget of the %d bytes charged: %v", charged, err)
			}
			var be *weights.BudgetError
			if _, err := tc.parse(charged - 1); !errors.As(err, &be) || be.Format != tc.name {
				t.Errorf("a budget of %d bytes: %v, want a %s *BudgetError", charged-1, err, tc.name)
			}
		})
	}
}
