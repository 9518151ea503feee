package cli

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"verdict/engine/fixture/testmodel"
)

// benchTowers is the part of verdict bench's JSON the tower tests read.
type benchTowers struct {
	Towers *struct {
		SharedBy string `json:"shared_by"`
		Runs     int    `json:"runs"`
		Vision   *struct {
			MS      float64 `json:"ms_per_image"`
			Soft    int     `json:"soft_tokens"`
			Backend string  `json:"backend"`
		} `json:"vision"`
		Audio *struct {
			Tower        string  `json:"tower"`
			AudioSeconds float64 `json:"audio_seconds"`
			Seconds      float64 `json:"seconds"`
			MS           float64 `json:"ms"`
			Encoder      int     `json:"encoder_tokens"`
			Soft         int     `json:"soft_tokens"`
			Backend      string  `json:"backend"`
		} `json:"audio"`
		VisionSkipped string `json:"vision_skipped"`
		AudioSkipped  string `json:"audio_skipped"`
	} `json:"towers"`
}

// TestBenchTowers: verdict bench without text models times the towers it
// is given: the full-size audio tower found under testdata by default (a
// 1 s clip here), the tiny one by path, no section with --towers=false.
func TestBenchTowers(t *testing.T) {
	base := []string{"bench", "--model", "", "--limits=false", "--tower-runs", "1"}
	code, out, errOut := run(append(base, "--vision-model", "none", "--audio-seconds", "1", "--json")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep benchTowers
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	w := rep.Towers
	if w == nil || w.SharedBy != "Gemma 3n E2B and E4B" || w.Runs != 1 || w.Vision != nil || w.VisionSkipped == "" || w.AudioSkipped != "" {
		t.Fatalf("%s", out)
	}
	if a := w.Audio; a == nil || a.Tower != "conformer, hidden 1536, 12 layers" || a.AudioSeconds != 1 || a.Seconds <= 0 || a.MS <= 0 ||
		a.Encoder <= 0 || a.Soft != 188 || a.Backend != "cpu" {
		t.Errorf("audio: %+v", a)
	}

	tiny := filepath.Join("..", "..", "testdata", "gemma3n-synthetic-tiny.tar.gz")
	code, out, errOut = run(append(base, "--vision-model", "none", "--audio-tower", tiny, "--audio-seconds", "2.5")...)
	if code != 0 || !strings.Contains(out, "audio tower (conformer, hidden 64, 2 layers, shared by E2B and E4B): ") ||
		!strings.Contains(out, " ms for 2.5 s of audio on cpu (") || !strings.Contains(out, "vision tower: skipped (--vision-model none)") ||
		!strings.Contains(out, " GFLOP a clip (subsampling ") || strings.Contains(out, "FMA peak") {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}

	// With the limits measured, the rate is a share of the FMA peak.
	code, out, errOut = run("bench", "--model", "", "--tower-runs", "1", "--vision-model", "none", "--audio-tower", tiny, "--audio-seconds", "1", "--json")
	var peak struct {
		Limits struct {
			FMAPeak float64 `json:"fma_peak_gflop_per_s"`
		} `json:"limits"`
		Towers struct {
			Audio struct {
				GFLOP   float64 `json:"gflop"`
				GFLOPs  float64 `json:"gflop_per_s"`
				Percent float64 `json:"percent_of_fma_peak"`
			} `json:"audio"`
		} `json:"towers"`
	}
	if err := json.Unmarshal([]byte(out), &peak); code != 0 || err != nil {
		t.Fatalf("limits: exit %d, %v: %s %s", code, err, out, errOut)
	}
	if a := peak.Towers.Audio; a.GFLOP <= 0 || a.GFLOPs <= 0 || peak.Limits.FMAPeak <= 0 ||
		math.Abs(a.Percent-100*a.GFLOPs/peak.Limits.FMAPeak) > 1e-9*a.Percent {
		t.Errorf("limits: %s", out)
	}

	code, out, errOut = run("bench", "--model", "", "--limits=false", "--towers=false", "--json")
	if code != 0 || strings.Contains(out, `"towers"`) {
		t.Errorf("--towers=false: exit %d, stdout %q, stderr %q", code, out, errOut)
	}

}

// Bad tower flags are usage errors before anything loads; a path or model
// that does not hold the tower fails naming it.
func TestBenchTowerFlagErrors(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "audio.txt")
	if err := os.WriteFile(bad, []byte("not a model"), 0o644); err != nil {
		t.Fatal(err)
	}
	micro := testmodel.Dir(t, "gemma3n-micro-bf16.tar.gz")
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--tower-runs", "0"}, 2, "--tower-runs 0: want 1..100"},
		{[]string{"--tower-runs", "101"}, 2, "--tower-runs 101"},
		{[]string{"--audio-seconds", "0"}, 2, "--audio-seconds 0: want more than 0 and at most 30"},
		{[]string{"--audio-seconds", "31"}, 2, "--audio-seconds 31"},
		{[]string{"--audio-seconds", "NaN"}, 2, "--audio-seconds NaN"},
		{[]string{"--audio-tower", "/no/such/tower.tar.gz"}, 2, "--audio-tower /no/such/tower.tar.gz: no such file or directory"},
		{[]string{"--vision-model", " "}, 2, "--vision-model: empty"},
		{[]string{"--vision-model", "none", "--audio-tower", bad}, 1, "--audio-tower: audio tower " + bad + ": fixture: " + bad + " is neither a folder nor a .tar.gz"},
		{[]string{"--vision-model", "none", "--audio-tower", micro}, 1, "--audio-tower: audio tower " + micro + ": "},
		{[]string{"--vision-model", "/no/such/model", "--audio-tower", "none"}, 1, "--vision-model: open model /no/such/model"},
		{[]string{"--vision-model", micro, "--audio-tower", "none"}, 1, "has no usable vision tower"},
	} {
		code, _, errOut := run(append([]string{"bench", "--model", "", "--limits=false"}, tc.args...)...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, %q; want %d and %q", tc.args, code, errOut, tc.code, tc.want)
		}
	}
}

// The default audio tower is found under the folders given or above them.
func TestFindAudioTower(t *testing.T) {
	root := t.TempDir()
	deep := filepath.Join(root, "a", "b")
	other := t.TempDir()
	for _, d := range []string{filepath.Join(root, "testdata"), deep} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	want := filepath.Join(root, defaultAudioTower)
	if err := os.WriteFile(want, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		dirs []string
		want string
	}{
		{[]string{root}, want},
		{[]string{deep}, want},
		{[]string{other, deep}, want},
		{[]string{other}, ""},
		{[]string{"", other}, ""},
	} {
		if got := findAudioTower(tc.dirs...); got != tc.want {
			t.Errorf("%v: %q, want %q", tc.dirs, got, tc.want)
		}
	}
}
