package audio_test

import (
	"crypto/sha256"
	"encoding/binary"
	"math"
	"path/filepath"
	"slices"
	"testing"

	"verdict/native"
)

// TestEncodeMatchesHost: the encoder on the built-in backend gives the bits
// of EncodeHost (the slice kernels on host memory, as before the backend)
// on the fixtures' features, with every frame real, with the last third
// padding, and with a gap of padding inside (whose cleared rows the later
// frames' causal convolution reads), and a second call gives them again.
func TestEncodeMatchesHost(t *testing.T) {
	for _, c := range []struct {
		fixture, feats string
		long           bool
	}{
		{"gemma3n-synthetic-tiny", "audio_input_features", false},
		{"gemma3n-synthetic-audiofull", "input_features", true},
	} {
		t.Run(c.fixture, func(t *testing.T) {
			if c.long && testing.Short() {
				t.Skip("full-size tower: skipped in -short mode")
			}
			tw, dir := loadFixtureTower(t, c.fixture)
			if tw.Backend() != native.Default() {
				t.Fatalf("LoadTower's backend is %s, want the built-in one", tw.Backend().Name())
			}
			in := readSafetensors(t, filepath.Join(dir, "expected.safetensors"))[c.feats]
			T := in.shape[1]
			for _, gap := range [][2]int{{T, T}, {2 * T / 3, T}, {T / 3, T / 2}} {
				mask := make([]bool, T)
				real := 0
				for i := range mask {
					if mask[i] = i < gap[0] || i >= gap[1]; mask[i] {
						real++
					}
				}
				want, wantMask, err := tw.EncodeHost(in.data, mask)
				if err != nil {
					t.Fatal(err)
				}
				for pass := range 2 {
					got, gotMask, err := tw.Encode(in.data, mask)
					if err != nil {
						t.Fatal(err)
					}
					if !slices.Equal(gotMask, wantMask) || len(got) != len(want) {
						t.Fatalf("%d real frames, pass %d: mask %v, host's %v", real, pass, gotMask, wantMask)
					}
					for i := range want {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Fatalf("%d real frames, pass %d: value %d is %g (%#x), host's %g (%#x): not bit-identical", real, pass, i,
								got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
						}
					}
				}
				h := sha256.New()
				var b [4]byte
				for _, v := range want {
					binary.LittleEndian.PutUint32(b[:], math.Float32bits(v))
					h.Write(b[:])
				}
				t.Logf("%d of %d frames real: %d values bit-identical; sha256 %x", real, T, len(want), h.Sum(nil))
			}
		})
	}
}
