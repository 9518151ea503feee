//go:build linux || darwin

package cli

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"verdict/engine/session/sessiontest"
)

// TestBenchTowersFallback: under --device naming a GPU backend without the
// towers' operations, both towers hand themselves to the CPU at the
// warm-up, and the report says so rather than claiming the GPU.
func TestBenchTowersFallback(t *testing.T) {
	if testing.Short() {
		t.Skip("two full-size vision forwards; skipped in -short")
	}
	sessiontest.UnimplementedGPU(t) // opened as cuda:3
	tiny := filepath.Join("..", "..", "testdata", "gemma3n-synthetic-tiny.tar.gz")
	code, out, errOut := run("bench", "--model", "", "--limits=false", "--device", "cuda:3", "--tower-runs", "1",
		"--audio-tower", tiny, "--audio-seconds", "1", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep struct {
		Device string `json:"device"`
		Towers struct {
			Vision struct {
				Tower     string  `json:"tower"`
				Image     string  `json:"image"`
				MS        float64 `json:"ms_per_image"`
				Soft      int     `json:"soft_tokens"`
				Backend   string  `json:"backend"`
				Requested string  `json:"requested_backend"`
			} `json:"vision"`
			Audio struct {
				MS        float64 `json:"ms"`
				Backend   string  `json:"backend"`
				Requested string  `json:"requested_backend"`
			} `json:"audio"`
		} `json:"towers"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	v, a := rep.Towers.Vision, rep.Towers.Audio
	if rep.Device != "cuda" || v.Tower != "MobileNetV5-300M" || v.Image != "768x768" || v.MS <= 0 || v.Soft != 256 ||
		v.Backend != "cpu (fallback)" || v.Requested != "cuda" || a.MS <= 0 || a.Backend != "cpu (fallback)" || a.Requested != "cuda" {
		t.Errorf("%s", out)
	}
}
