package gemma3n

import (
	"strings"
	"testing"
)

// TestKVFit: the default key/value pool stays whole in host memory and
// where a device has room, shrinks in whole blocks to 60% of a device's
// free memory, and is refused below minKVPositions.
func TestKVFit(t *testing.T) {
	const def, per = 1 << 17, 80 << 10 // E2B: 20 layers of own keys, 2·512 floats each
	for _, tc := range []struct {
		name string
		free int64
		want int
		err  string
	}{
		{"host memory", 0, def, ""},
		{"a device with room", 40 << 30, def, ""},
		{"an 8 GiB card with 6 GiB free", 6 << 30, int(int64(6<<30) / 10 * 6 / per / KVBlock * KVBlock), ""},
		{"too little", 200 << 20, 0, "fewer than the 8192"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := kvFit(def, tc.free, per)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("kvFit = %d, %v; want an error with %q", got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want || got%KVBlock != 0 {
				t.Fatalf("kvFit = %d, %v; want %d", got, err, tc.want)
			}
		})
	}
}
