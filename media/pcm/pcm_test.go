package pcm

import (
	"math"
	"testing"
	"time"
)

func tone(rate int, freq float64, d time.Duration) Clip {
	n := int(d.Seconds() * float64(rate))
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(0.5 * math.Sin(2*math.Pi*freq*float64(i)/float64(rate)))
	}
	return Clip{Samples: s, Rate: rate}
}

// rms of the middle of s, away from the filter's edge transients.
func rms(s []float32) float64 {
	lo, hi := len(s)/4, len(s)*3/4
	var acc float64
	for _, v := range s[lo:hi] {
		acc += float64(v) * float64(v)
	}
	return math.Sqrt(acc / float64(hi-lo))
}

func gainDB(t *testing.T, in Clip, rate int) float64 {
	t.Helper()
	out, err := in.Resample(rate)
	if err != nil {
		t.Fatal(err)
	}
	return 20 * math.Log10(rms(out.Samples)/rms(in.Samples))
}

func TestResampleToModelRate(t *testing.T) {
	tests := []struct {
		inRate int
		freq   float64
		// pass: within ±0.5 dB; otherwise attenuated by more than 40 dB
		pass bool
	}{
		{48000, 440, true},
		{48000, 1000, true},
		{48000, 4000, true},
		{48000, 6500, true},
		{48000, 8500, false},
		{48000, 9000, false},
		{48000, 12000, false},
		{48000, 20000, false},
		{44100, 1000, true},
		{44100, 6000, true},
		{44100, 9000, false},
		{44100, 15000, false},
		{22050, 3000, true},
		{22050, 10000, false},
		{32000, 5000, true},
		{32000, 11000, false},
		{8000, 1000, true},
		{8000, 3000, true},
		{11025, 2000, true},
		{44056, 1000, true}, // gcd 8: more phases than the table holds
		{44056, 9500, false},
	}
	for _, tt := range tests {
		g := gainDB(t, tone(tt.inRate, tt.freq, time.Second), ModelRate)
		if tt.pass && math.Abs(g) > 0.5 {
			t.Errorf("%d Hz tone at %d Hz: gain %.3f dB, want within ±0.5 dB", int(tt.freq), tt.inRate, g)
		}
		if !tt.pass && g > -40 {
			t.Errorf("%d Hz tone at %d Hz: gain %.1f dB, want below -40 dB", int(tt.freq), tt.inRate, g)
		}
	}
}

func TestResampleLengthAndDC(t *testing.T) {
	for _, tt := range []struct{ in, out, n, want int }{
		{48000, 16000, 48000, 16000},
		{48000, 16000, 48001, 16001},
		{44100, 16000, 44100, 16000},
		{8000, 16000, 8000, 16000},
		{16000, 16000, 123, 123},
		{22050, 16000, 0, 0},
	} {
		c := Clip{Samples: make([]float32, tt.n), Rate: tt.in}
		for i := range c.Samples {
			c.Samples[i] = 0.25
		}
		out, err := c.Resample(tt.out)
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Samples) != tt.want || out.Rate != tt.out {
			t.Errorf("%d samples %d→%d Hz: got %d at %d Hz, want %d", tt.n, tt.in, tt.out, len(out.Samples), out.Rate, tt.want)
		}
		if tt.n > 1000 {
			mid := out.Samples[len(out.Samples)/2]
			if math.Abs(float64(mid)-0.25) > 1e-4 {
				t.Errorf("%d→%d Hz: DC 0.25 became %v", tt.in, tt.out, mid)
			}
		}
	}
}

func TestResampleKeepsTiming(t *testing.T) {
	// An impulse at 0.5 s stays at 0.5 s.
	c := Clip{Samples: make([]float32, 44100), Rate: 44100}
	c.Samples[22050] = 1
	out, err := c.Resample(ModelRate)
	if err != nil {
		t.Fatal(err)
	}
	peak := 0
	for i, v := range out.Samples {
		if v > out.Samples[peak] {
			peak = i
		}
	}
	if peak != 8000 {
		t.Errorf("impulse at sample 8000 of 16 kHz moved to %d", peak)
	}
}

func TestResampleRejectsBadRates(t *testing.T) {
	for _, r := range [][2]int{{0, 16000}, {16000, 0}, {-1, 16000}} {
		if _, err := (Clip{Samples: []float32{1}, Rate: r[0]}).Resample(r[1]); err == nil {
			t.Errorf("resample %d→%d: no error", r[0], r[1])
		}
	}
}

func TestMonoAndForModel(t *testing.T) {
	a := Interleaved{Samples: []float32{1, 0, 0.5, 0.5, -1, 1}, Channels: 2, Rate: 16000}
	m := a.Mono()
	want := []float32{0.5, 0.5, 0}
	for i := range want {
		if m.Samples[i] != want[i] {
			t.Fatalf("mono = %v, want %v", m.Samples, want)
		}
	}
	if a.Frames() != 3 || a.Duration() != 3*time.Second/16000 {
		t.Errorf("frames %d duration %v", a.Frames(), a.Duration())
	}
	st := Interleaved{Samples: make([]float32, 2*48000), Channels: 2, Rate: 48000}
	c, err := st.ForModel()
	if err != nil {
		t.Fatal(err)
	}
	if c.Rate != ModelRate || len(c.Samples) != ModelRate || c.Duration() != time.Second {
		t.Errorf("ForModel: %d samples at %d Hz", len(c.Samples), c.Rate)
	}
	if _, err := (Interleaved{Samples: []float32{1, 2, 3}, Channels: 2, Rate: 8000}).ForModel(); err == nil {
		t.Error("odd sample count for 2 channels: no error")
	}
	if _, err := (Interleaved{Samples: []float32{1}, Channels: 0, Rate: 8000}).ForModel(); err == nil {
		t.Error("0 channels: no error")
	}
}

func BenchmarkResample48k30s(b *testing.B) {
	c := tone(48000, 440, 30*time.Second)
	for b.Loop() {
		if _, err := c.Resample(ModelRate); err != nil {
			b.Fatal(err)
		}
	}
}
