// Package pcm holds decoded audio as float32 samples and turns any of it into
// what Gemma 3n's audio feature extractor takes: mono PCM at 16 kHz.
package pcm

import (
	"fmt"
	"time"
)

// ModelRate is the sample rate of the model's audio input, in Hz.
const ModelRate = 16000

// Clip is mono PCM: samples in [-1, 1] at Rate Hz.
type Clip struct {
	Samples []float32
	Rate    int
}

// Duration returns the length of the clip.
func (c Clip) Duration() time.Duration {
	return samplesDuration(len(c.Samples), c.Rate)
}

// Interleaved is multi-channel PCM, channel samples interleaved frame by frame.
type Interleaved struct {
	Samples  []float32
	Channels int
	Rate     int
}

// Frames returns the number of sample frames (samples per channel).
func (a Interleaved) Frames() int {
	if a.Channels <= 0 {
		return 0
	}
	return len(a.Samples) / a.Channels
}

// Duration returns the length of the audio.
func (a Interleaved) Duration() time.Duration {
	return samplesDuration(a.Frames(), a.Rate)
}

// Mono downmixes to one channel by averaging the channels of each frame.
func (a Interleaved) Mono() Clip {
	if a.Channels == 1 {
		return Clip{Samples: a.Samples, Rate: a.Rate}
	}
	n := a.Frames()
	out := make([]float32, n)
	inv := 1 / float32(a.Channels)
	for i := range out {
		var s float32
		for _, v := range a.Samples[i*a.Channels : (i+1)*a.Channels] {
			s += v
		}
		out[i] = s * inv
	}
	return Clip{Samples: out, Rate: a.Rate}
}

// ForModel downmixes and resamples to 16 kHz mono.
func (a Interleaved) ForModel() (Clip, error) {
	if a.Channels <= 0 {
		return Clip{}, fmt.Errorf("pcm: %d channels", a.Channels)
	}
	if len(a.Samples)%a.Channels != 0 {
		return Clip{}, fmt.Errorf("pcm: %d samples do not divide into %d channels", len(a.Samples), a.Channels)
	}
	return a.Mono().Resample(ModelRate)
}

func samplesDuration(n, rate int) time.Duration {
	if rate <= 0 {
		return 0
	}
	return time.Duration(int64(n) * int64(time.Second) / int64(rate))
}
