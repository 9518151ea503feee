//go:build linux || darwin

package audio_test

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"

	"verdict/engine/audio"
	"verdict/engine/weights"
	"verdict/native"
	"verdict/native/nativetest"
)

// TestEncodeFallsBackToCPU: a tower loaded on a backend that lacks its
// operations (sync fails with VD_EUNIMPL) rebinds its weights to the CPU
// on the first pass and gives the host path's bits.
func TestEncodeFallsBackToCPU(t *testing.T) {
	be := nativetest.Unimplemented(t)

	fx := unpack(t, "gemma3n-synthetic-tiny")
	store, err := weights.OpenRecipe(fx)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	cfg, err := os.ReadFile(filepath.Join(fx, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	tw, err := audio.LoadTowerOn(store, cfg, be)
	if err != nil {
		t.Fatal(err)
	}
	if tw.Backend() != be {
		t.Fatalf("loaded on %s, want the fake backend", tw.Backend().Name())
	}
	in := readSafetensors(t, filepath.Join(fx, "expected.safetensors"))["audio_input_features"]
	mask := make([]bool, in.shape[1])
	for i := range mask {
		mask[i] = true
	}
	got, _, err := tw.Encode(in.data, mask)
	if err != nil {
		t.Fatalf("Encode on a backend without the operations: %v", err)
	}
	if tw.Backend() != native.Default() {
		t.Errorf("after the pass the tower runs on %s, want the CPU", tw.Backend().Name())
	}
	want, _, err := tw.EncodeHost(in.data, mask)
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("value %d is %g, host's %g", i, got[i], want[i])
		}
	}
}

// TestCloseFreesBoundWeights: Close unbinds the weights of the backend the
// tower was loaded on, also after it handed the encoder to the CPU, and
// later passes fail with ErrClosed.
func TestCloseFreesBoundWeights(t *testing.T) {
	be := nativetest.Unimplemented(t)
	fx := unpack(t, "gemma3n-synthetic-tiny")
	store, err := weights.OpenRecipe(fx)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	cfg, err := os.ReadFile(filepath.Join(fx, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	in := readSafetensors(t, filepath.Join(fx, "expected.safetensors"))["audio_input_features"]
	mask := make([]bool, in.shape[1])
	for i := range mask {
		mask[i] = true
	}
	for _, encode := range []bool{false, true} {
		binds0, _ := nativetest.Live(be)
		tw, err := audio.LoadTowerOn(store, cfg, be)
		if err != nil {
			t.Fatal(err)
		}
		if binds, _ := nativetest.Live(be); binds <= binds0 {
			t.Fatalf("loading bound %d buffers on the fake backend, want some", binds-binds0)
		}
		if encode { // falls back to the CPU, leaving the fake's binding retired
			if _, _, err := tw.Encode(in.data, mask); err != nil {
				t.Fatal(err)
			}
		}
		tw.Close()
		if binds, _ := nativetest.Live(be); binds != binds0 {
			t.Errorf("encode %v: after Close %d bindings are left on the backend", encode, binds-binds0)
		}
		tw.Close()
		if _, _, err := tw.Encode(in.data, mask); !errors.Is(err, audio.ErrClosed) {
			t.Errorf("encode %v: Encode after Close: %v, want ErrClosed", encode, err)
		}
		if tw.Backend() != nil {
			t.Errorf("encode %v: Backend after Close is %s, want nil", encode, tw.Backend().Name())
		}
	}
}
