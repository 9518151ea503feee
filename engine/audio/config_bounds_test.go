package audio_test

import (
	"runtime"
	"strings"
	"testing"

	"verdict/engine/audio"
)

// An audio config whose sizes are absurd or whose subsampling lists fill
// the 4 MB a config.json may take (encoding/json would allocate about 70
// times the file for lists of empty lists) is refused with an error naming
// the setting, after allocating little.
func TestParseConfigBounded(t *testing.T) {
	fill := func(pre, unit, post string) []byte {
		n := (4<<20 - len(pre) - len(post)) / len(unit)
		return []byte(pre + strings.TrimSuffix(strings.Repeat(unit, n), ",") + post)
	}
	for _, tc := range []struct {
		name string
		json []byte
		want string
	}{
		{"billion layers", []byte(`{"model_type":"gemma3n_audio","conf_num_hidden_layers":1000000000}`), "conf_num_hidden_layers 1000000000 is outside"},
		{"trillion-wide", []byte(`{"audio_config":{"hidden_size":1000000000000}}`), "hidden_size 1000000000000 is outside"},
		{"kernels", fill(`{"model_type":"gemma3n_audio","sscp_conv_kernel_size":[`, `[],`, `]}`), "sscp_conv_kernel_size is"},
		{"strides", fill(`{"audio_config":{"sscp_conv_stride_size":[`, `[],`, `]}}`), "sscp_conv_stride_size is"},
		{"channels", fill(`{"audio_config":{"sscp_conv_channel_size":[`, `0,`, `]}}`), "sscp_conv_channel_size is"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := audio.ParseConfig(tc.json)
			runtime.ReadMemStats(&after)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %.200v, want it to contain %q", err, tc.want)
			}
			if n, limit := after.TotalAlloc-before.TotalAlloc, uint64(len(tc.json))*2+1<<20; n > limit {
				t.Errorf("refusing it allocated %d bytes, over %d", n, limit)
			}
		})
	}
}
