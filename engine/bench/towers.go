package bench

import (
	"context"
	"fmt"
	"image"
	"image/color"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"verdict/engine/audio"
	"verdict/engine/fixture"
	"verdict/engine/vision"
	"verdict/engine/weights"
	"verdict/native"
)

// TowersSharedBy names the models whose towers the figures stand for:
// Gemma 3n E2B and E4B have the same vision and audio towers, so one
// measurement serves both text shapes.
const TowersSharedBy = "Gemma 3n E2B and E4B"

// TowerReport is the media towers' section of the suite.
type TowerReport struct {
	SharedBy string        `json:"shared_by"`
	Runs     int           `json:"runs"` // timed runs of each tower after a warm-up; the figures are their median
	Vision   *VisionReport `json:"vision,omitempty"`
	Audio    *AudioReport  `json:"audio,omitempty"`
	// VisionSkipped and AudioSkipped say why a tower was not measured.
	VisionSkipped string `json:"vision_skipped,omitempty"`
	AudioSkipped  string `json:"audio_skipped,omitempty"`
}

// VisionReport is one image through the vision encoder and the embedder's
// soft path.
type VisionReport struct {
	Tower      string  `json:"tower"` // the encoder's architecture
	Image      string  `json:"image"` // the input, width x height
	Seconds    float64 `json:"seconds"`
	MS         float64 `json:"ms_per_image"`
	MinSeconds float64 `json:"min_seconds"`
	SoftTokens int     `json:"soft_tokens"`
	// FLOPs is an image's arithmetic by kind (vision.Tower.FLOPs), GFLOP
	// its total, GFLOPs the rate of the median run and PercentOfPeak that
	// rate over the FMA peak (0: no limits measured).
	FLOPs         vision.FLOPs `json:"flops"`
	GFLOP         float64      `json:"gflop"`
	GFLOPs        float64      `json:"gflop_per_s"`
	PercentOfPeak float64      `json:"percent_of_fma_peak,omitempty"`
	// Backend is where the encoder ran: the backend's name, with
	// " (fallback)" when it is not the one asked for (a GPU backend
	// without the tower's operations hands the tower to the CPU).
	Backend   string `json:"backend"`
	Requested string `json:"requested_backend"`
}

// AudioReport is a clip through the feature extractor, the audio encoder
// and the embedder.
type AudioReport struct {
	Tower        string  `json:"tower"`
	AudioSeconds float64 `json:"audio_seconds"` // the clip's length
	Seconds      float64 `json:"seconds"`       // the whole path
	MS           float64 `json:"ms"`
	MinSeconds   float64 `json:"min_seconds"`
	// FeaturesSeconds is the log-mel features' part of Seconds (on the
	// host whatever the backend).
	FeaturesSeconds float64 `json:"features_seconds"`
	// EncoderTokens are the encoder rows computed from real frames;
	// SoftTokens the rows a prompt gets (padded to the clip's placeholders).
	EncoderTokens int `json:"encoder_tokens"`
	SoftTokens    int `json:"soft_tokens"`
	// FLOPs is the clip's arithmetic by part (audio.Tower.FLOPs), GFLOP
	// its total; GFLOPs is the rate over TowerSeconds, the median of the
	// runs' time less their features', and PercentOfPeak that rate over
	// the FMA peak (0: no limits measured).
	FLOPs         audio.FLOPs `json:"flops"`
	GFLOP         float64     `json:"gflop"`
	TowerSeconds  float64     `json:"tower_seconds"`
	GFLOPs        float64     `json:"gflop_per_s"`
	PercentOfPeak float64     `json:"percent_of_fma_peak,omitempty"`
	Backend       string      `json:"backend"`
	Requested     string      `json:"requested_backend"`
}

// SetPeak fills the towers' percentages of the FMA peak from lim (nil:
// not measured, left 0).
func (r *TowerReport) SetPeak(lim *Limits) {
	if lim == nil || !(lim.FMAPeak > 0) {
		return
	}
	if v := r.Vision; v != nil {
		v.PercentOfPeak = 100 * v.GFLOPs / lim.FMAPeak
	}
	if a := r.Audio; a != nil {
		a.PercentOfPeak = 100 * a.GFLOPs / lim.FMAPeak
	}
}

// ranOn labels the backend a tower ran on against the one asked for (nil:
// the CPU).
func ranOn(ran, asked *native.Backend) string {
	if asked == nil {
		asked = native.Default()
	}
	if ran == asked || ran.Name() == asked.Name() {
		return ran.Name()
	}
	return ran.Name() + " (fallback)"
}

// TestImage is a deterministic 768×768 RGB test pattern: colour ramps, a
// checkerboard and rings, so every block sees edges and smooth regions.
func TestImage() image.Image {
	const n = vision.ImageSize
	img := image.NewRGBA(image.Rect(0, 0, n, n))
	for y := range n {
		for x := range n {
			r := uint8(x * 255 / (n - 1))
			g := uint8(y * 255 / (n - 1))
			dx, dy := float64(x-n/2), float64(y-n/2)
			b := uint8(127.5 + 127.5*math.Cos(math.Hypot(dx, dy)/12))
			if (x/48+y/48)%2 == 1 {
				r, g = 255-r, 255-g
			}
			img.SetRGBA(x, y, color.RGBA{r, g, b, 255})
		}
	}
	return img
}

// TestClip is seconds of a deterministic 16 kHz mono signal: a chord of
// tones with a slow tremolo plus seeded noise, within [-1, 1].
func TestClip(seconds float64) []float32 {
	n := int(seconds * audio.SampleRate)
	rng := rand.New(rand.NewPCG(12, 30))
	tones := []float64{196, 440, 1250, 3100}
	out := make([]float32, max(n, 0))
	for i := range out {
		t := float64(i) / audio.SampleRate
		v := 0.0
		for k, f := range tones {
			v += 0.15 / float64(k+1) * math.Sin(2*math.Pi*f*t)
		}
		v *= 0.75 + 0.25*math.Sin(2*math.Pi*1.5*t)
		v += 0.02 * rng.NormFloat64()
		out[i] = float32(v)
	}
	return out
}

// median returns the median of xs (the mean of the middle two for an even
// count) and the smallest.
func median(xs []float64) (med, least float64) {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2], s[0]
	}
	return (s[n/2-1] + s[n/2]) / 2, s[0]
}

// MeasureVision runs pixels [3, 768, 768] (nil: TestImage preprocessed)
// through t once to warm up, then runs times, and reports the median time;
// asked is the backend the tower was loaded for (nil: the CPU).
func MeasureVision(ctx context.Context, t *vision.Tower, asked *native.Backend, pixels []float32, runs int) (VisionReport, error) {
	r := VisionReport{Tower: t.Config().Architecture, Image: fmt.Sprintf("%dx%d", vision.ImageSize, vision.ImageSize)}
	if r.Tower == vision.Architecture {
		r.Tower = "MobileNetV5-300M"
	}
	if asked == nil {
		asked = native.Default()
	}
	r.Requested = asked.Name()
	if runs < 1 {
		return r, fmt.Errorf("bench: vision tower: %d runs, want at least 1", runs)
	}
	if pixels == nil {
		pixels = vision.Preprocess(TestImage())
	}
	var secs []float64
	for i := -1; i < runs; i++ {
		start := time.Now()
		soft, err := t.SoftTokensContext(ctx, pixels, nil)
		if err != nil {
			return r, fmt.Errorf("bench: vision tower: %w", err)
		}
		if i >= 0 {
			secs = append(secs, time.Since(start).Seconds())
		}
		r.SoftTokens = len(soft) / t.TextHidden()
	}
	r.Seconds, r.MinSeconds = median(secs)
	r.MS = 1000 * r.Seconds
	r.FLOPs = t.FLOPs()
	r.GFLOP = r.FLOPs.Total() / 1e9
	r.GFLOPs = r.GFLOP / r.Seconds
	r.Backend = ranOn(t.Backend(), asked)
	return r, nil
}

// MeasureAudio runs clip (16 kHz mono) through the feature extractor and t
// once to warm up, then runs times, and reports the median time; asked is
// the backend the tower was loaded for (nil: the CPU).
func MeasureAudio(ctx context.Context, t *audio.Tower, asked *native.Backend, clip []float32, runs int) (AudioReport, error) {
	c := t.Cfg
	r := AudioReport{Tower: fmt.Sprintf("conformer, hidden %d, %d layers", c.HiddenSize, c.NumLayers),
		AudioSeconds: float64(len(clip)) / audio.SampleRate}
	if asked == nil {
		asked = native.Default()
	}
	r.Requested = asked.Name()
	if runs < 1 {
		return r, fmt.Errorf("bench: audio tower: %d runs, want at least 1", runs)
	}
	if len(clip) == 0 {
		return r, fmt.Errorf("bench: audio tower: an empty clip")
	}
	var secs, feat, tower []float64
	frames := 0
	for i := -1; i < runs; i++ {
		start := time.Now()
		feats, mask := audio.Features(clip)
		f := time.Since(start).Seconds()
		enc, encMask, err := t.EncodeContext(ctx, feats, mask, nil)
		if err != nil {
			return r, fmt.Errorf("bench: audio tower: %w", err)
		}
		soft, err := t.PadSoftTokens(enc, encMask)
		if err != nil {
			return r, fmt.Errorf("bench: audio tower: %w", err)
		}
		if i >= 0 {
			total := time.Since(start).Seconds()
			secs, feat, tower = append(secs, total), append(feat, f), append(tower, total-f)
		}
		frames = len(mask)
		r.EncoderTokens = 0
		for _, ok := range encMask {
			if ok {
				r.EncoderTokens++
			}
		}
		r.SoftTokens = len(soft) / t.TextHidden()
	}
	r.Seconds, r.MinSeconds = median(secs)
	r.FeaturesSeconds, _ = median(feat)
	r.TowerSeconds, _ = median(tower)
	r.MS = 1000 * r.Seconds
	r.FLOPs = t.FLOPs(frames)
	r.GFLOP = r.FLOPs.Total() / 1e9
	r.GFLOPs = r.GFLOP / r.TowerSeconds
	r.Backend = ranOn(t.Backend(), asked)
	return r, nil
}

// OpenAudioTower loads the audio tower of a checkpoint or weight recipe:
// a model folder or a .tar.gz of one (testdata's fixtures), its encoder
// bound to be (nil: the CPU). close releases the store and any unpacked
// folder once the tower is no longer used.
func OpenAudioTower(path string, be *native.Backend) (t *audio.Tower, close func(), err error) {
	dir, cleanup, err := fixture.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("audio tower %s: %w", path, err)
	}
	fail := func(err error) (*audio.Tower, func(), error) {
		cleanup()
		return nil, nil, fmt.Errorf("audio tower %s: %w", path, err)
	}
	cfg, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return fail(err)
	}
	if _, err := audio.ParseConfig(cfg); err != nil {
		return fail(err)
	}
	store, err := weights.Open(dir)
	if err != nil {
		return fail(err)
	}
	if t, err = audio.LoadTowerOn(store, cfg, be); err != nil {
		store.Close()
		return fail(err)
	}
	return t, func() { store.Close(); cleanup() }, nil
}

// String is the section's lines of the suite's text report.
func (r TowerReport) String() string {
	var b strings.Builder
	shared := "shared by E2B and E4B"
	rate := func(rate, pct float64) string {
		s := fmt.Sprintf("%.1f GFLOP/s", rate)
		if pct > 0 {
			s += fmt.Sprintf(" = %.0f%% of the FMA peak", pct)
		}
		return s
	}
	if v := r.Vision; v != nil {
		fmt.Fprintf(&b, "vision tower (%s, %s, %s): %.1f ms an image on %s (%d soft tokens; median of %d, best %.1f ms)\n",
			v.Tower, v.Image, shared, v.MS, v.Backend, v.SoftTokens, r.Runs, 1000*v.MinSeconds)
		f := v.FLOPs
		fmt.Fprintf(&b, "  %.1f GFLOP an image (convolutions %.1f, depthwise %.1f, pointwise %.1f, attention %.1f): %s\n",
			v.GFLOP, f.Conv/1e9, f.Depthwise/1e9, f.Pointwise/1e9, f.Attention/1e9, rate(v.GFLOPs, v.PercentOfPeak))
	} else if r.VisionSkipped != "" {
		fmt.Fprintf(&b, "vision tower: skipped (%s)\n", r.VisionSkipped)
	}
	if a := r.Audio; a != nil {
		fmt.Fprintf(&b, "audio tower (%s, %s): %.1f ms for %g s of audio on %s (features %.1f ms; %d encoder rows, %d soft tokens; median of %d, best %.1f ms)\n",
			a.Tower, shared, a.MS, a.AudioSeconds, a.Backend, 1000*a.FeaturesSeconds, a.EncoderTokens, a.SoftTokens, r.Runs, 1000*a.MinSeconds)
		f := a.FLOPs
		fmt.Fprintf(&b, "  %.1f GFLOP a clip (subsampling %.1f, feed-forward %.1f, attention projections %.1f, attention %.1f, light convolution %.1f, embedder %.1f) in %.1f ms without the features: %s\n",
			a.GFLOP, f.Subsample/1e9, f.FeedForward/1e9, f.Projections/1e9, f.Attention/1e9, f.LightConv/1e9, f.Embed/1e9,
			1000*a.TowerSeconds, rate(a.GFLOPs, a.PercentOfPeak))
	} else if r.AudioSkipped != "" {
		fmt.Fprintf(&b, "audio tower: skipped (%s)\n", r.AudioSkipped)
	}
	return b.String()
}
