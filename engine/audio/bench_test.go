package audio_test

import (
	"path/filepath"
	"testing"

	"verdict/engine/audio"
)

// speechClip returns the first n samples (all when n <= 0) of speech16k.wav.
func speechClip(b *testing.B, n int) []float32 {
	s := readWAV(b, filepath.Join(unpack(b, "gemma3n-audio-preprocess"), "speech16k.wav"))
	if n > 0 {
		s = s[:n]
	}
	return s
}

// BenchmarkFeatures: log-mel features of a 5 s clip.
func BenchmarkFeatures(b *testing.B) {
	s := speechClip(b, 5*audio.SampleRate)
	b.ResetTimer()
	for b.Loop() {
		audio.Features(s)
	}
}

// BenchmarkTower: the full-size tower (hidden 1536, 12 layers) and the
// embedder on a 5 s clip and on the whole 5.55 s speech clip, features
// included.
func BenchmarkTower(b *testing.B) {
	tw, _ := loadFixtureTower(b, "gemma3n-synthetic-audiofull")
	for _, c := range []struct {
		name string
		n    int
	}{{"5s", 5 * audio.SampleRate}, {"5.55s", 0}} {
		s := speechClip(b, c.n)
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := tw.SoftTokens(s); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
