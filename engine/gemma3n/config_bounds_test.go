package gemma3n_test

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"verdict/engine/audio"
	"verdict/engine/fixture/testmodel"
	"verdict/engine/gemma3n"
	"verdict/engine/vision"
)

// heapAllocated is the bytes the Go heap gave out while fn ran.
func heapAllocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// repeated is a JSON document of about 4 MB (a config.json's limit): pre,
// then unit as many times as fit, then post.
func repeated(pre, unit, post string) []byte {
	n := (4<<20 - len(pre) - len(post)) / len(unit)
	return []byte(pre + strings.TrimSuffix(strings.Repeat(unit, n), ",") + post)
}

// A config.json whose sizes are absurd (a trillion-wide hidden state, a
// billion layers) or whose lists fill the 4 MB a config may take (layer
// types, sparsities, sizes, RoPE settings: encoding/json would allocate up
// to 30 times the file for them) is refused with an error naming the
// setting, after allocating little.
func TestParseConfigBounded(t *testing.T) {
	base := `"vocab_size":10,"vocab_size_per_layer_input":10,"hidden_size":8,"hidden_size_per_layer_input":2,
		"num_attention_heads":2,"num_key_value_heads":1,"head_dim":4,"laurel_rank":2,"hidden_activation":"gelu_pytorch_tanh",
		"intermediate_size":16,"rope_parameters":{"full_attention":{"rope_theta":1e6},"sliding_attention":{"rope_theta":1e4}}`
	text := func(extra string) []byte { return []byte(`{"model_type":"gemma3n_text",` + base + `,` + extra + `}`) }
	for _, tc := range []struct {
		name string
		json []byte
		want string
	}{
		{"billion layers", text(`"num_hidden_layers":1000000000`), "num_hidden_layers 1000000000 is over the limit of 1024"},
		{"trillion-wide", text(`"num_hidden_layers":2,"hidden_size":1000000000000`), "hidden_size 1000000000000 is over the limit"},
		{"1e12 written as a float", text(`"num_hidden_layers":2,"hidden_size":1e12`), "hidden_size"},
		{"huge vocabulary", text(`"num_hidden_layers":2,"vocab_size":1099511627776`), "vocab_size 1099511627776 is over the limit"},
		{"layer types", repeated(`{"model_type":"gemma3n_text","num_hidden_layers":2,"layer_types":[`, `"",`, `]}`), "layer_types is"},
		{"sparsities", repeated(`{"model_type":"gemma3n_text","activation_sparsity_pattern":[`, `0,`, `]}`), "activation_sparsity_pattern is"},
		{"sizes", repeated(`{"text_config":{"model_type":"gemma3n_text","intermediate_size":[`, `1,`, `]}}`), "intermediate_size is"},
		{"rope settings", repeated(`{"model_type":"gemma3n_text","rope_parameters":{`, `"":{},`, `}}`), "rope_parameters is"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			n := heapAllocated(func() { _, _, err = gemma3n.ParseConfig(tc.json) })
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %.200v, want it to contain %q", err, tc.want)
			}
			if limit := uint64(len(tc.json))*2 + 1<<20; n > limit {
				t.Errorf("refusing it allocated %d bytes, over %d", n, limit)
			}
		})
	}
}

// FuzzConfig: any bytes given as a config.json make the text, audio and
// vision parsers give a configuration or an error, never panic, and
// allocate a bounded amount (a small multiple of the input); a text config
// that parses is consistent enough to count parameters and map every
// layer's KV source, an audio one to count its tokens. Seeds are the
// config.json files of the repository's fixtures.
func FuzzConfig(f *testing.F) {
	for _, name := range []string{"gemma3n-micro-bf16.tar.gz", "gemma3n-synthetic-tiny.tar.gz", "gemma3n-synthetic-audiofull.tar.gz", "gguf-llamacpp/micro.tar.gz"} {
		b, err := os.ReadFile(filepath.Join(testmodel.Dir(f, name), "config.json"))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var (
			c        gemma3n.Config
			err      error
			ac       audio.Config
			audioErr error
		)
		n := heapAllocated(func() {
			c, _, err = gemma3n.ParseConfig(data)
			ac, audioErr = audio.ParseConfig(data)
			vision.ParseConfig(data)
		})
		if limit := 32*uint64(len(data)) + 1<<20; n > limit {
			t.Fatalf("parsing %d bytes allocated %d, over %d", len(data), n, limit)
		}
		if err == nil {
			c.Params()
			for i := range c.NumLayers {
				if j := c.KVSource(i); j < 0 || j > i {
					t.Fatalf("layer %d takes its KV from layer %d", i, j)
				}
			}
		}
		if audioErr == nil && ac.NumTokens(1000) < 0 {
			t.Fatalf("%d tokens for 1000 frames", ac.NumTokens(1000))
		}
	})
}
