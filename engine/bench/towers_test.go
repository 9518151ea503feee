//go:build linux || darwin

package bench

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"verdict/engine/audio"
	"verdict/engine/fixture"
	"verdict/engine/vision"
	"verdict/engine/weights"
	"verdict/native"
	"verdict/native/nativetest"
)

const tinyFixture = "../../testdata/gemma3n-synthetic-tiny.tar.gz"

// A tower's backend is labelled a fallback when it is not the one asked for.
func TestRanOn(t *testing.T) {
	fake := nativetest.Unimplemented(t)
	cpu := native.Default()
	for _, tc := range []struct {
		name       string
		ran, asked *native.Backend
		want       string
	}{
		{"cpu, nothing asked", cpu, nil, "cpu"},
		{"cpu asked", cpu, cpu, "cpu"},
		{"gpu asked and used", fake, fake, "cuda"},
		{"gpu asked, cpu used", cpu, fake, "cpu (fallback)"},
	} {
		if got := ranOn(tc.ran, tc.asked); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// The test inputs are deterministic and in range.
func TestTowerInputs(t *testing.T) {
	a, b := TestClip(1.5), TestClip(1.5)
	if len(a) != 24000 || !slices.Equal(a, b) {
		t.Fatalf("clip: %d samples, repeatable %v", len(a), slices.Equal(a, b))
	}
	lo, hi := slices.Min(a), slices.Max(a)
	if lo < -1 || hi > 1 || hi-lo < 0.1 {
		t.Errorf("clip range [%g, %g]", lo, hi)
	}
	p, q := vision.Preprocess(TestImage()), vision.Preprocess(TestImage())
	if len(p) != 3*768*768 || !slices.Equal(p, q) {
		t.Fatalf("image: %d values, repeatable %v", len(p), slices.Equal(p, q))
	}
	if lo, hi := slices.Min(p), slices.Max(p); lo != 0 || hi != 1 {
		t.Errorf("pixels in [%g, %g], want [0, 1]", lo, hi)
	}
}

// MeasureAudio on the tiny audio tower, on the CPU and on a backend without
// the tower's operations: every figure is filled, and the second says the
// tower fell back to the CPU.
func TestMeasureAudio(t *testing.T) {
	fake := nativetest.Unimplemented(t)
	for _, tc := range []struct {
		name    string
		be      *native.Backend
		seconds float64
		runs    int
		backend string
	}{
		{"cpu", nil, 2, 1, "cpu"},
		{"cpu, 3 runs", native.Default(), 1, 3, "cpu"},
		{"no tower ops", fake, 2, 2, "cpu (fallback)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tw, closeTower, err := OpenAudioTower(tinyFixture, tc.be)
			if err != nil {
				t.Fatal(err)
			}
			defer closeTower()
			r, err := MeasureAudio(context.Background(), tw, tc.be, TestClip(tc.seconds), tc.runs)
			if err != nil {
				t.Fatal(err)
			}
			if r.Backend != tc.backend || r.AudioSeconds != tc.seconds || r.Seconds <= 0 || r.MinSeconds <= 0 || r.MinSeconds > r.Seconds ||
				r.MS != 1000*r.Seconds || r.FeaturesSeconds <= 0 || r.FeaturesSeconds >= r.Seconds || r.EncoderTokens <= 0 ||
				r.EncoderTokens > r.SoftTokens || r.SoftTokens != tw.Cfg.SoftTokens || !strings.Contains(r.Tower, "hidden 64, 2 layers") {
				t.Errorf("%+v", r)
			}
			_, frames := audio.Features(TestClip(tc.seconds))
			if want := tw.FLOPs(len(frames)).Total(); math.Abs(r.GFLOP*1e9-want) > 0.01*want || r.TowerSeconds <= 0 ||
				r.TowerSeconds >= r.Seconds || math.Abs(r.GFLOPs-r.GFLOP/r.TowerSeconds) > 1e-9*r.GFLOPs || r.PercentOfPeak != 0 {
				t.Errorf("GFLOP %g (FLOPs %g), tower %gs, %g GFLOP/s, %g%% of peak", r.GFLOP, want, r.TowerSeconds, r.GFLOPs, r.PercentOfPeak)
			}
			if tc.be == fake && r.Requested != "cuda" {
				t.Errorf("requested %q, want cuda", r.Requested)
			}
		})
	}
	tw, closeTower, err := OpenAudioTower(tinyFixture, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer closeTower()
	for _, tc := range []struct {
		clip []float32
		runs int
		want string
	}{{TestClip(1), 0, "0 runs"}, {nil, 1, "empty clip"}} {
		if _, err := MeasureAudio(context.Background(), tw, nil, tc.clip, tc.runs); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%d samples, %d runs: %v, want %q", len(tc.clip), tc.runs, err, tc.want)
		}
	}
}

// OpenAudioTower names the path in its errors.
func TestOpenAudioTowerErrors(t *testing.T) {
	dir := t.TempDir()
	noCfg := filepath.Join(dir, "empty")
	if err := os.Mkdir(noCfg, 0o755); err != nil {
		t.Fatal(err)
	}
	notAudio := filepath.Join(dir, "text")
	if err := os.Mkdir(notAudio, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(notAudio, "config.json"), []byte(`{"model_type": "gemma3n_text"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, want string }{
		{filepath.Join(dir, "missing.tar.gz"), "no such file"},
		{filepath.Join(dir, "file.txt"), "neither a folder nor a .tar.gz"},
		{noCfg, "config.json"},
		{notAudio, "no audio_config"},
	} {
		if strings.HasSuffix(tc.path, ".txt") {
			os.WriteFile(tc.path, []byte("x"), 0o644)
		}
		_, _, err := OpenAudioTower(tc.path, nil)
		if err == nil || !strings.Contains(err.Error(), tc.path) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want the path and %q", tc.path, err, tc.want)
		}
	}
}

// MeasureVision on the full-size MobileNetV5 of the tiny fixture, loaded
// on a backend without the tower's operations: the warm-up hands it to the
// CPU, the timed run is the CPU's, and the report says so.
func TestMeasureVisionFallback(t *testing.T) {
	if testing.Short() {
		t.Skip("two full-size vision forwards; skipped in -short")
	}
	fake := nativetest.Unimplemented(t)
	dir, cleanup, err := fixture.Open(tinyFixture)
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	store, err := weights.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	cfg, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	tw, err := vision.LoadTowerOn(context.Background(), store, cfg, fake, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tw.Release()
	if _, err := MeasureVision(context.Background(), tw, fake, nil, 0); err == nil {
		t.Error("0 runs: no error")
	}
	r, err := MeasureVision(context.Background(), tw, fake, nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", r)
	if r.Backend != "cpu (fallback)" || r.Requested != "cuda" || r.Tower != "MobileNetV5-300M" || r.Image != "768x768" ||
		r.SoftTokens != 256 || r.Seconds <= 0 || r.MinSeconds != r.Seconds || r.MS != 1000*r.Seconds ||
		r.GFLOP != tw.FLOPs().Total()/1e9 || r.GFLOP < 800 || r.GFLOPs != r.GFLOP/r.Seconds {
		t.Errorf("%+v", r)
	}
}

// The text report gives a line per tower, names the models sharing it and
// the backend it ran on; the JSON has a top-level "towers" object.
func TestTowerReportOutput(t *testing.T) {
	v := &VisionReport{Tower: "MobileNetV5-300M", Image: "768x768", Seconds: 0.0621, MS: 62.1, MinSeconds: 0.06, SoftTokens: 256, Backend: "cuda", Requested: "cuda",
		FLOPs: vision.FLOPs{Conv: 98.4e9, Depthwise: 1.9e9, Pointwise: 675.4e9, Attention: 95.8e9}, GFLOP: 871.5, GFLOPs: 14034}
	a := &AudioReport{Tower: "conformer, hidden 1536, 12 layers", AudioSeconds: 30, Seconds: 0.5, MS: 500, MinSeconds: 0.4,
		FeaturesSeconds: 0.1, EncoderTokens: 188, SoftTokens: 188, Backend: "cpu (fallback)", Requested: "cuda",
		FLOPs: audio.FLOPs{Subsample: 4e9, FeedForward: 650e9, Projections: 160e9, Attention: 10e9, LightConv: 125e9, Embed: 1e9}, GFLOP: 950,
		TowerSeconds: 0.4, GFLOPs: 2375}
	for _, tc := range []struct {
		name string
		r    TowerReport
		want []string
		not  []string
	}{
		{"both", TowerReport{SharedBy: TowersSharedBy, Runs: 3, Vision: v, Audio: a}, []string{
			"vision tower (MobileNetV5-300M, 768x768, shared by E2B and E4B): 62.1 ms an image on cuda",
			"audio tower (conformer, hidden 1536, 12 layers, shared by E2B and E4B): 500.0 ms for 30 s of audio on cpu (fallback)",
			"median of 3",
			"871.5 GFLOP an image (convolutions 98.4, depthwise 1.9, pointwise 675.4, attention 95.8): 14034.0 GFLOP/s\n",
			"950.0 GFLOP a clip (subsampling 4.0, feed-forward 650.0, attention projections 160.0, attention 10.0, light convolution 125.0, embedder 1.0) in 400.0 ms without the features: 2375.0 GFLOP/s\n",
		}, []string{"skipped", "FMA peak"}},
		{"audio skipped", TowerReport{Runs: 1, Vision: v, AudioSkipped: "no such file"}, []string{
			"62.1 ms an image on cuda", "audio tower: skipped (no such file)",
		}, []string{"audio tower ("}},
		{"vision skipped", TowerReport{Runs: 1, VisionSkipped: "not asked for", Audio: a}, []string{
			"vision tower: skipped (not asked for)", "for 30 s of audio",
		}, []string{"ms an image"}},
	} {
		s := SuiteReport{Towers: &tc.r}.String()
		for _, w := range tc.want {
			if !strings.Contains(s, w) {
				t.Errorf("%s: no %q in\n%s", tc.name, w, s)
			}
		}
		for _, w := range tc.not {
			if strings.Contains(s, w) {
				t.Errorf("%s: %q in\n%s", tc.name, w, s)
			}
		}
	}
	b, err := json.Marshal(SuiteReport{Towers: &TowerReport{SharedBy: TowersSharedBy, Runs: 3, Vision: v, Audio: a}})
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		Towers struct {
			SharedBy string `json:"shared_by"`
			Vision   struct {
				MS      float64 `json:"ms_per_image"`
				Backend string  `json:"backend"`
			} `json:"vision"`
			Audio struct {
				AudioSeconds float64 `json:"audio_seconds"`
				MS           float64 `json:"ms"`
			} `json:"audio"`
		} `json:"towers"`
	}
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if w := back.Towers; w.SharedBy != TowersSharedBy || w.Vision.MS != 62.1 || w.Vision.Backend != "cuda" || w.Audio.AudioSeconds != 30 || w.Audio.MS != 500 {
		t.Errorf("%s", b)
	}
	if s := (SuiteReport{}).String(); strings.Contains(s, "tower") {
		t.Errorf("no towers measured, report %q", s)
	}
}

// SetPeak turns the towers' rates into percentages of the FMA peak, which
// the text report then gives; no limits leave them out.
func TestTowerReportPeak(t *testing.T) {
	r := TowerReport{Runs: 1, Vision: &VisionReport{GFLOP: 800, GFLOPs: 40}, Audio: &AudioReport{GFLOP: 900, GFLOPs: 90}}
	r.SetPeak(nil)
	r.SetPeak(&Limits{})
	if r.Vision.PercentOfPeak != 0 || r.Audio.PercentOfPeak != 0 {
		t.Fatalf("no peak: %g%%, %g%%", r.Vision.PercentOfPeak, r.Audio.PercentOfPeak)
	}
	r.SetPeak(&Limits{FMAPeak: 200})
	if r.Vision.PercentOfPeak != 20 || r.Audio.PercentOfPeak != 45 {
		t.Fatalf("peak 200: %g%%, %g%%", r.Vision.PercentOfPeak, r.Audio.PercentOfPeak)
	}
	s := r.String()
	for _, w := range []string{"40.0 GFLOP/s = 20% of the FMA peak", "90.0 GFLOP/s = 45% of the FMA peak"} {
		if !strings.Contains(s, w) {
			t.Errorf("no %q in\n%s", w, s)
		}
	}
	r2 := TowerReport{Runs: 1, VisionSkipped: "none"}
	r2.SetPeak(&Limits{FMAPeak: 200}) // nothing measured: no panic
}
