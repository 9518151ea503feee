package gguf_test

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"verdict/engine/fixture/testmodel"
	"verdict/engine/gemma4"
	"verdict/engine/gemma4/gguf"
	"verdict/engine/weights"
	"verdict/engine/weights/ggufwrite"
)

// parts reads a GGUF file back as ggufwrite's metadata and tensors (every
// value as the Go type of its GGUF type), so a test can change one thing
// and write it again.
func parts(t testing.TB, path string) ([]ggufwrite.KV, []ggufwrite.Tensor) {
	t.Helper()
	g, err := weights.OpenGGUFFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	var kvs []ggufwrite.KV
	for _, k := range g.Keys {
		if k == "general.alignment" {
			continue
		}
		kvs = append(kvs, ggufwrite.KV{Key: k, Value: goValue(t, k, g.KV[k])})
	}
	var ts []ggufwrite.Tensor
	for _, x := range g.Tensors {
		ts = append(ts, ggufwrite.Tensor{Name: x.Name, Dims: slices.Clone(x.Dims), Type: x.Type, Data: slices.Clone(x.Data())})
	}
	return kvs, ts
}

func goValue(t testing.TB, key string, v weights.GGUFValue) any {
	conv := func(typ weights.GGUFType, i int64, f float64) any {
		switch typ {
		case weights.GGUFUint8:
			return uint8(i)
		case weights.GGUFInt8:
			return int8(i)
		case weights.GGUFUint16:
			return uint16(i)
		case weights.GGUFInt16:
			return int16(i)
		case weights.GGUFUint32:
			return uint32(i)
		case weights.GGUFInt32:
			return int32(i)
		case weights.GGUFUint64:
			return uint64(i)
		case weights.GGUFInt64:
			return i
		case weights.GGUFFloat32:
			return float32(f)
		case weights.GGUFFloat64:
			return f
		case weights.GGUFBool:
			return i != 0
		}
		t.Fatalf("%s: type %s", key, typ)
		return nil
	}
	switch v.Type {
	case weights.GGUFString:
		s, _ := v.Str()
		return s
	case weights.GGUFBool:
		b, _ := v.Bool()
		return b
	case weights.GGUFFloat32, weights.GGUFFloat64:
		f, _ := v.Float()
		return conv(v.Type, 0, f)
	case weights.GGUFArray:
		switch v.Elem {
		case weights.GGUFString:
			s, _ := v.Strings()
			return s
		case weights.GGUFFloat32:
			fs, _ := v.Floats()
			out := make([]float32, len(fs))
			for i, f := range fs {
				out[i] = float32(f)
			}
			return out
		case weights.GGUFBool:
			is, _ := v.Ints()
			out := make([]bool, len(is))
			for i, x := range is {
				out[i] = x != 0
			}
			return out
		case weights.GGUFInt32:
			is, _ := v.Ints()
			out := make([]int32, len(is))
			for i, x := range is {
				out[i] = int32(x)
			}
			return out
		case weights.GGUFUint32:
			is, _ := v.Ints()
			out := make([]uint32, len(is))
			for i, x := range is {
				out[i] = uint32(x)
			}
			return out
		}
		t.Fatalf("%s: array of %s", key, v.Elem)
	}
	i, _ := v.Int()
	return conv(v.Type, i, 0)
}

func encode(t testing.TB, kvs []ggufwrite.KV, ts []ggufwrite.Tensor) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := ggufwrite.Write(&b, ggufwrite.Options{}, kvs, ts); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// openBytes parses GGUF bytes and serves them; the store, when made, is
// closed by the test's cleanup.
func openBytes(t testing.TB, data []byte) (*gguf.Store, error) {
	g, err := weights.ParseGGUF("test.gguf", data)
	if err != nil {
		return nil, err
	}
	s, err := gguf.New(g)
	if err == nil {
		t.Cleanup(func() { s.Close() })
	}
	return s, err
}

func setKV(kvs []ggufwrite.KV, key string, v any) []ggufwrite.KV {
	for i := range kvs {
		if kvs[i].Key == key {
			kvs[i].Value = v
			return kvs
		}
	}
	return append(kvs, ggufwrite.KV{Key: key, Value: v})
}

func dropKV(kvs []ggufwrite.KV, key string) []ggufwrite.KV {
	return slices.DeleteFunc(kvs, func(kv ggufwrite.KV) bool { return kv.Key == key })
}

func dropTensor(ts []ggufwrite.Tensor, name string) []ggufwrite.Tensor {
	return slices.DeleteFunc(ts, func(x ggufwrite.Tensor) bool { return x.Name == name })
}

func tensor(ts []ggufwrite.Tensor, name string) *ggufwrite.Tensor {
	for i := range ts {
		if ts[i].Name == name {
			return &ts[i]
		}
	}
	return nil
}

func tinyF32(t testing.TB) string {
	return filepath.Join(testmodel.Dir(t, "gguf-llamacpp/gemma4-tiny.tar.gz"), "gemma4-synthetic-tiny-F32.gguf")
}

// TestRoundTrip: the tiny file read back and written again by Verdict's
// GGUF writer opens with the same config and tensors.
func TestRoundTrip(t *testing.T) {
	path := tinyF32(t)
	orig, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	kvs, ts := parts(t, path)
	s, err := openBytes(t, encode(t, kvs, ts))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(s.ConfigJSON(), orig.ConfigJSON()) {
		t.Errorf("config %s, the original's %s", s.ConfigJSON(), orig.ConfigJSON())
	}
	for _, n := range orig.Names() {
		a, _ := orig.Float32(n)
		b, err := s.Float32(n)
		if err != nil || !slices.Equal(a, b) {
			t.Errorf("%s: %v", n, err)
		}
	}
}

// TestRefuses: a file that lies (a missing, mistyped, absurd or
// inconsistent key; a tensor missing, foreign, misshapen or of an
// unreadable type) is refused, and the error names the key or tensor.
func TestRefuses(t *testing.T) {
	path := tinyF32(t)
	q5 := func(ts []ggufwrite.Tensor) []ggufwrite.Tensor {
		x := tensor(ts, "blk.0.attn_q.weight")
		x.Type, x.Data = 20, make([]byte, 64*64/32*18) // IQ4_NL
		return ts
	}
	for _, c := range []struct {
		name string
		kv   func([]ggufwrite.KV) []ggufwrite.KV
		ts   func([]ggufwrite.Tensor) []ggufwrite.Tensor
		want string
	}{
		{"no architecture", func(k []ggufwrite.KV) []ggufwrite.KV { return dropKV(k, "general.architecture") }, nil, "no general.architecture"},
		{"another architecture", func(k []ggufwrite.KV) []ggufwrite.KV { return setKV(k, "general.architecture", "gemma3") }, nil, `"gemma3", not "gemma4"`},
		{"no block count", func(k []ggufwrite.KV) []ggufwrite.KV { return dropKV(k, "gemma4.block_count") }, nil, "missing metadata gemma4.block_count"},
		{"block count a string", func(k []ggufwrite.KV) []ggufwrite.KV { return setKV(k, "gemma4.block_count", "six") }, nil, "gemma4.block_count is a string"},
		{"absurd block count", func(k []ggufwrite.KV) []ggufwrite.KV { return setKV(k, "gemma4.block_count", uint32(1<<30)) }, nil, "gemma4.block_count is 1073741824, outside"},
		{"absurd hidden size", func(k []ggufwrite.KV) []ggufwrite.KV { return setKV(k, "gemma4.embedding_length", uint64(1<<40)) }, nil, "gemma4.embedding_length is 1099511627776, outside"},
		{"hidden size unlike the embeddings", func(k []ggufwrite.KV) []ggufwrite.KV { return setKV(k, "gemma4.embedding_length", uint32(32)) }, nil, "token_embd.weight has shape [512 64]"},
		{"pattern too short", func(k []ggufwrite.KV) []ggufwrite.KV {
			return setKV(k, "gemma4.attention.sliding_window_pattern", []bool{true, true, false, true, false})
		}, nil, "gemma4.attention.sliding_window_pattern is a array of bool of 5"},
		{"pattern not bools", func(k []ggufwrite.KV) []ggufwrite.KV {
			return setKV(k, "gemma4.attention.sliding_window_pattern", uint32(5))
		}, nil, "gemma4.attention.sliding_window_pattern is a uint32"},
		{"an MLP width not expressible", func(k []ggufwrite.KV) []ggufwrite.KV {
			return setKV(k, "gemma4.feed_forward_length", []int32{128, 128, 96, 128, 256, 256})
		}, nil, "gemma4.feed_forward_length: layer 2 is 96 wide"},
		{"KV heads per layer, too few", func(k []ggufwrite.KV) []ggufwrite.KV {
			return setKV(k, "gemma4.attention.head_count_kv", []int32{1, 1, 1})
		}, nil, "gemma4.attention.head_count_kv has 3 values"},
		{"full layers' own KV heads without K=V", func(k []ggufwrite.KV) []ggufwrite.KV {
			return setKV(k, "gemma4.attention.head_count_kv", []int32{1, 1, 2, 1, 1, 2})
		}, nil, "full layers have 2 KV heads, sliding ones 1"},
		{"values narrower than keys", func(k []ggufwrite.KV) []ggufwrite.KV { return setKV(k, "gemma4.attention.value_length", uint32(32)) }, nil, "gemma4.attention.value_length is 32"},
		{"partial rotation on sliding layers", func(k []ggufwrite.KV) []ggufwrite.KV { return setKV(k, "gemma4.rope.dimension_count_swa", uint32(16)) }, nil, "gemma4.rope.dimension_count_swa is 16"},
		{"RoPE scaling", func(k []ggufwrite.KV) []ggufwrite.KV { return setKV(k, "gemma4.rope.scaling.type", "linear") }, nil, `gemma4.rope.scaling.type is "linear"`},
		{"NaN epsilon", func(k []ggufwrite.KV) []ggufwrite.KV {
			return setKV(k, "gemma4.attention.layer_norm_rms_epsilon", float32(math.NaN()))
		}, nil, "gemma4.attention.layer_norm_rms_epsilon is NaN"},
		{"no sliding window", func(k []ggufwrite.KV) []ggufwrite.KV { return dropKV(k, "gemma4.attention.sliding_window") }, nil, "missing metadata gemma4.attention.sliding_window"},
		{"shared layers past the count", func(k []ggufwrite.KV) []ggufwrite.KV { return setKV(k, "gemma4.attention.shared_kv_layers", uint32(6)) }, nil, "gemma4.attention.shared_kv_layers is 6, outside 0 to 5"},
		{"experts without routers", func(k []ggufwrite.KV) []ggufwrite.KV { return setKV(k, "gemma4.expert_count", uint32(8)) }, nil, "gemma4.expert_count is 8 but no block"},
		{"a vocabulary unlike the embeddings", func(k []ggufwrite.KV) []ggufwrite.KV {
			for _, kv := range k {
				if kv.Key == "tokenizer.ggml.tokens" {
					return setKV(k, kv.Key, kv.Value.([]string)[:500])
				}
			}
			return k
		}, nil, "tokenizer.ggml.tokens has 500 tokens, token_embd.weight 512 rows"},
		{"BOS past the vocabulary", func(k []ggufwrite.KV) []ggufwrite.KV { return setKV(k, "tokenizer.ggml.bos_token_id", uint32(600)) }, nil, "tokenizer.ggml.bos_token_id is 600, outside 0 to 511"},
		{"no rope_freqs", nil, func(ts []ggufwrite.Tensor) []ggufwrite.Tensor { return dropTensor(ts, "rope_freqs.weight") }, "missing tensor rope_freqs.weight"},
		{"rope_freqs not 1 then 1e30", nil, func(ts []ggufwrite.Tensor) []ggufwrite.Tensor {
			x := tensor(ts, "rope_freqs.weight")
			x.Data[4*3+3] = 0x40 // element 3 (1e30) becomes a small number
			x.Data[4*3+2] = 0
			return ts
		}, "rope_freqs.weight[3] is"},
		{"rope_freqs the wrong length", nil, func(ts []ggufwrite.Tensor) []ggufwrite.Tensor {
			x := tensor(ts, "rope_freqs.weight")
			x.Dims, x.Data = []int{16}, x.Data[:64]
			return ts
		}, "rope_freqs.weight has dimensions [16], want [32]"},
		{"a sliding layer without attn_v", nil, func(ts []ggufwrite.Tensor) []ggufwrite.Tensor { return dropTensor(ts, "blk.1.attn_v.weight") }, "missing tensor blk.1.attn_v.weight"},
		{"an untied output head", nil, func(ts []ggufwrite.Tensor) []ggufwrite.Tensor {
			x := *tensor(ts, "token_embd.weight")
			x.Name = "output.weight"
			return append(ts, x)
		}, "tensor output.weight"},
		{"a foreign tensor", nil, func(ts []ggufwrite.Tensor) []ggufwrite.Tensor {
			x := *tensor(ts, "blk.0.attn_q.weight")
			x.Name = "blk.0.attn_qkv.weight"
			return append(ts, x)
		}, "tensor blk.0.attn_qkv.weight is not part"},
		{"a split expert gate without its up", nil, func(ts []ggufwrite.Tensor) []ggufwrite.Tensor {
			x := *tensor(ts, "blk.0.attn_q.weight")
			x.Name = "blk.0.ffn_gate_exps.weight"
			return append(ts, x)
		}, "tensor blk.0.ffn_gate_exps.weight without blk.0.ffn_up_exps.weight"},
		{"a block past the count", nil, func(ts []ggufwrite.Tensor) []ggufwrite.Tensor {
			x := *tensor(ts, "blk.0.attn_q.weight")
			x.Name = "blk.9.attn_q.weight"
			return append(ts, x)
		}, "blk.9.attn_q.weight: block 9 beyond gemma4.block_count 6"},
		{"an unreadable type", nil, q5, "blk.0.attn_q.weight: type IQ4_NL cannot be read"},
		{"the embeddings transposed", nil, func(ts []ggufwrite.Tensor) []ggufwrite.Tensor {
			x := tensor(ts, "token_embd.weight")
			x.Dims = []int{512, 64}
			return ts
		}, "token_embd.weight has shape [64 512]"},
	} {
		kvs, ts := parts(t, path)
		if c.kv != nil {
			kvs = c.kv(kvs)
		}
		if c.ts != nil {
			ts = c.ts(ts)
		}
		_, err := openBytes(t, encode(t, kvs, ts))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %q", c.name, err, c.want)
		}
	}
}

// TestLoadRefuses: a tensor whose shape disagrees with the metadata opens
// (the store serves what the file holds) and gemma4.Load refuses it,
// naming its Hugging Face name; gguf.GGUFName gives the file's.
func TestLoadRefuses(t *testing.T) {
	kvs, ts := parts(t, tinyF32(t))
	x := tensor(ts, "blk.2.attn_q.weight")
	x.Dims = []int{64, 64}
	x.Data = x.Data[:64*64*4]
	s, err := openBytes(t, encode(t, kvs, ts))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := gemma4.ParseConfig(s.ConfigJSON())
	if err != nil {
		t.Fatal(err)
	}
	_, err = gemma4.Load(cfg, s)
	const hf = "model.layers.2.self_attn.q_proj.weight"
	if err == nil || !strings.Contains(err.Error(), hf) {
		t.Fatalf("%v, want an error naming %s", err, hf)
	}
	if g, _ := gguf.GGUFName(hf); g != "blk.2.attn_q.weight" {
		t.Errorf("GGUFName(%s) = %s", hf, g)
	}
}

// TestTruncated: a file cut anywhere is refused by the parser before this
// package sees it, or (cut in the padding after the last tensor) opens
// with every tensor whole.
func TestTruncated(t *testing.T) {
	data, err := os.ReadFile(tinyF32(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, 3, 24, 100, 4096, 20000, len(data) / 2, len(data) - 1} {
		if _, err := openBytes(t, data[:n]); err == nil {
			t.Errorf("the file cut to %d of %d bytes opens", n, len(data))
		}
	}
}

// FuzzOpen holds the store and the config it rebuilds to what the parser
// lets through: no panic; when a file opens, its config parses, every
// tensor reads, and gemma4.Load either loads or names what is wrong. Seeds:
// the tiny Q8_0 file without its vocabulary, its header alone, and the MoE
// Q8_0 file with split experts without its vocabulary. Run by
// go test -fuzz FuzzOpen ./engine/gemma4/gguf/ (build/fuzz.sh's
// convention). Each run decodes a whole model (about 18 ms), so CI's count
// is capped: fuzz.sh: at most 4000x.
func FuzzOpen(f *testing.F) {
	path := filepath.Join(testmodel.Dir(f, "gguf-llamacpp/gemma4-tiny.tar.gz"), "gemma4-synthetic-tiny-Q8_0.gguf")
	kvs, ts := parts(f, path)
	kvs = slices.DeleteFunc(kvs, func(kv ggufwrite.KV) bool {
		return strings.HasPrefix(kv.Key, "tokenizer.ggml.token") || kv.Key == "tokenizer.ggml.scores"
	})
	seed := encode(f, kvs, ts)
	f.Add(seed)
	f.Add(seed[:4096])
	// The MoE file with split experts, without its vocabulary.
	skv, sts := parts(f, filepath.Join(testmodel.Dir(f, "gguf-llamacpp/gemma4-tiny-moe-split.tar.gz"), "gemma4-synthetic-tiny-moe-split-Q8_0.gguf"))
	skv = slices.DeleteFunc(skv, func(kv ggufwrite.KV) bool {
		return strings.HasPrefix(kv.Key, "tokenizer.ggml.token") || kv.Key == "tokenizer.ggml.scores"
	})
	f.Add(encode(f, skv, sts))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := openBytes(t, data)
		if err != nil {
			return
		}
		cfg, err := gemma4.ParseConfig(s.ConfigJSON())
		if err != nil {
			t.Fatalf("opened, but its config does not parse: %v", err)
		}
		for _, n := range s.Names() {
			sh, _, _ := s.Info(n)
			size := 1
			for _, d := range sh {
				size *= d
			}
			if size > 1<<22 {
				continue
			}
			if _, err := s.Float32(n); err != nil {
				t.Fatalf("%s: %v", n, err)
			}
		}
		if _, err := gemma4.Load(cfg, s); err != nil && !strings.Contains(err.Error(), "model.") {
			t.Fatalf("Load: %v does not name a tensor", err)
		}
	})
}

// TestChecksCanFail: a file that names one tensor wrongly, or rotates one
// pair too many, opens, and the fixture's checks catch it.
func TestChecksCanFail(t *testing.T) {
	fx, err := gemma4.OpenFixture(testmodel.Dir(t, "gemma4-synthetic-tiny.tar.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer fx.Close()
	for _, c := range []struct {
		name string
		edit func([]ggufwrite.Tensor)
	}{
		{"blk.0's ffn_gate and ffn_up swapped", func(ts []ggufwrite.Tensor) {
			g, u := tensor(ts, "blk.0.ffn_gate.weight"), tensor(ts, "blk.0.ffn_up.weight")
			g.Name, u.Name = u.Name, g.Name
		}},
		{"one more rotated pair", func(ts []ggufwrite.Tensor) {
			x := tensor(ts, "rope_freqs.weight")
			n := 0
			for math.Float32frombits(uint32(x.Data[4*n])|uint32(x.Data[4*n+1])<<8|uint32(x.Data[4*n+2])<<16|uint32(x.Data[4*n+3])<<24) == 1 {
				n++
			}
			copy(x.Data[4*n:], x.Data[:4])
		}},
	} {
		kvs, ts := parts(t, tinyF32(t))
		c.edit(ts)
		s, err := openBytes(t, encode(t, kvs, ts))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		cfg, err := gemma4.ParseConfig(s.ConfigJSON())
		if err != nil {
			t.Fatal(err)
		}
		m, err := gemma4.Load(cfg, s)
		if err != nil {
			t.Fatal(err)
		}
		checks, err := fx.Run(m)
		if err != nil {
			t.Fatal(err)
		}
		failed := 0
		for _, ch := range checks {
			if !ch.OK() {
				failed++
			}
		}
		if failed == 0 {
			t.Errorf("%s: every check passes", c.name)
		}
		t.Logf("%s: %d of %d checks fail", c.name, failed, len(checks))
	}
}
