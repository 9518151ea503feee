package weights

import (
	"encoding/binary"
	"runtime"
	"strings"
	"testing"
)

// The per-layer arrays of a Gemma 3n GGUF's metadata are held to the layer
// count before they are decoded: a hostile file's array of 16M uint8s (16
// MB in the mapped file, 128 MB as int64s) is refused without allocating
// it.
func TestGGUFConfigArraysSizedByLayers(t *testing.T) {
	u32 := func(v uint32) GGUFValue {
		return GGUFValue{Type: GGUFUint32, raw: binary.LittleEndian.AppendUint32(nil, v)}
	}
	const huge = 16 << 20
	bytesArray := GGUFValue{Type: GGUFArray, Elem: GGUFUint8, raw: make([]byte, huge), n: huge}
	base := func() map[string]GGUFValue {
		kv := map[string]GGUFValue{"gemma3n.feed_forward_length": u32(256)}
		for _, k := range []string{"embedding_length", "embedding_length_per_layer_input", "attention.head_count",
			"attention.head_count_kv", "attention.sliding_window", "context_length", "attention.key_length",
			"attention.shared_kv_layers"} {
			kv["gemma3n."+k] = u32(1)
		}
		return kv
	}
	for _, key := range []string{"gemma3n.feed_forward_length", "gemma3n.attention.sliding_window_pattern", "gemma3n.activation_sparsity_scale"} {
		t.Run(key, func(t *testing.T) {
			kv := base()
			kv[key] = bytesArray
			s := &GGUFStore{G: &GGUF{KV: kv}}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			_, err := s.configJSON(2)
			runtime.ReadMemStats(&after)
			if err == nil || !strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), "2") {
				t.Errorf("err = %v, want one naming %s and the 2 layers", err, key)
			}
			if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
				t.Errorf("refusing it allocated %d bytes", n)
			}
		})
	}
}
