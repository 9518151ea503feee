package capture

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/pion/mediadevices/pkg/driver"
	"github.com/pion/mediadevices/pkg/io/audio"
	"github.com/pion/mediadevices/pkg/prop"
	"github.com/pion/mediadevices/pkg/wave"

	"verdict/media/limits"
	"verdict/media/pcm"
)

// Microphone is a selected microphone; each Record opens and closes it.
type Microphone struct {
	dev     Device
	drv     driver.Driver
	timeout time.Duration
}

// OpenMicrophone selects a microphone (id "" for the first one). The device
// itself is opened by Record.
func (d *Devices) OpenMicrophone(id string) (*Microphone, error) {
	drv, err := d.find(AudioInput, id)
	if err != nil {
		return nil, err
	}
	return &Microphone{dev: Device{ID: drv.ID(), Label: label(drv.Info()), Kind: AudioInput}, drv: drv, timeout: d.readTimeout()}, nil
}

// Device returns the microphone's device.
func (m *Microphone) Device() Device { return m.dev }

// Record captures d of audio (at most limits.MaxAudio) and returns it as
// 16 kHz mono. progress, when not nil, is called after each chunk with the
// duration recorded so far (for a countdown). When ctx ends first, Record
// returns what was recorded until then together with ctx's error, so a Stop
// button can cancel ctx and keep the partial clip.
func (m *Microphone) Record(ctx context.Context, d time.Duration, progress func(recorded time.Duration)) (pcm.Clip, error) {
	if d <= 0 {
		return pcm.Clip{}, fmt.Errorf("record: duration %v", d)
	}
	if d > limits.MaxAudio {
		e := limits.Duration(limits.AudioDuration, d, limits.MaxAudio)
		e.Source = m.dev.Label
		return pcm.Clip{}, e
	}
	name := m.dev.Label
	if err := safely(name, "open", m.drv.Open); err != nil {
		return pcm.Clip{}, &UnavailableError{Kind: AudioInput, Reason: fmt.Sprintf("%s could not be opened: %v", name, err), Err: err}
	}
	var r audio.Reader
	err := safely(name, "start", func() error {
		p, ok := pickAudio(m.drv.Properties())
		if !ok {
			return errors.New("no supported sample format")
		}
		var e error
		r, e = m.drv.(driver.AudioRecorder).AudioRecord(p)
		return e
	})
	if err != nil {
		_ = safely(name, "close", m.drv.Close)
		return pcm.Clip{}, &UnavailableError{Kind: AudioInput, Reason: fmt.Sprintf("%s could not start: %v", name, err), Err: err}
	}

	chunks := make(chan chunk, 16)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		readAudio(name, r, chunks, stop)
	}()
	rec, err := collect(ctx, chunks, d, m.timeout, name, progress)
	close(stop)
	// Let the reader finish its current chunk (a blocked driver is closed
	// anyway after the timeout), then release the device.
	select {
	case <-done:
	case <-time.After(m.timeout):
	}
	if cerr := safely(name, "close", m.drv.Close); cerr != nil && err == nil {
		err = cerr
	}
	if rec.Frames() == 0 {
		if err == nil {
			err = fmt.Errorf("record %s: no audio", name)
		}
		return pcm.Clip{}, err
	}
	clip, cerr := rec.ForModel()
	if cerr != nil {
		return pcm.Clip{}, fmt.Errorf("record %s: %w", name, cerr)
	}
	return clip, err
}

type chunk struct {
	samples  []float32
	channels int
	rate     int
	err      error
}

// readAudio reads chunks until stop, an error or a panic (recovered).
func readAudio(name string, r audio.Reader, out chan<- chunk, stop <-chan struct{}) {
	send := func(c chunk) bool {
		select {
		case out <- c:
			return true
		case <-stop:
			return false
		}
	}
	for {
		select {
		case <-stop:
			return
		default:
		}
		var c chunk
		err := safely(name, "read", func() error {
			a, release, e := r.Read()
			if e != nil {
				return e
			}
			c = toFloat(a)
			if release != nil {
				release()
			}
			return nil
		})
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = fmt.Errorf("%s: stream ended: %w", name, ErrClosed)
			}
			send(chunk{err: err})
			return
		}
		if !send(c) {
			return
		}
	}
}

// collect gathers chunks until d is recorded, ctx ends, a read fails or no
// chunk comes within timeout.
func collect(ctx context.Context, chunks <-chan chunk, d, timeout time.Duration, name string, progress func(time.Duration)) (pcm.Interleaved, error) {
	var rec pcm.Interleaved
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return rec, fmt.Errorf("record %s: %w", name, ctx.Err())
		case <-t.C:
			return rec, fmt.Errorf("record %s: no audio for %v", name, timeout)
		case c := <-chunks:
			if c.err != nil {
				return rec, fmt.Errorf("record: %w", c.err)
			}
			if rec.Rate == 0 {
				rec.Rate, rec.Channels = c.rate, c.channels
			}
			if c.rate != rec.Rate || c.channels != rec.Channels || c.rate <= 0 || c.channels <= 0 {
				return rec, fmt.Errorf("record %s: chunk of %d channels at %d Hz in a stream of %d at %d Hz",
					name, c.channels, c.rate, rec.Channels, rec.Rate)
			}
			want := int(d.Seconds()*float64(rec.Rate)) * rec.Channels
			rec.Samples = append(rec.Samples, c.samples...)
			if len(rec.Samples) >= want {
				rec.Samples = rec.Samples[:want]
				if progress != nil {
					progress(rec.Duration())
				}
				return rec, nil
			}
			if progress != nil {
				progress(rec.Duration())
			}
			t.Reset(timeout)
		}
	}
}

// pickAudio prefers mono, then float samples, then 48 kHz.
func pickAudio(props []prop.Media) (prop.Media, bool) {
	best, bestScore := prop.Media{}, -1
	for _, p := range props {
		if p.ChannelCount <= 0 || p.SampleRate <= 0 {
			continue
		}
		score := 0
		if p.ChannelCount == 1 {
			score += 4
		}
		if p.IsFloat {
			score += 2
		}
		if p.SampleRate == 48000 {
			score++
		}
		if score > bestScore {
			best, bestScore = p, score
		}
	}
	if bestScore >= 0 && best.Latency <= 0 {
		best.Latency = 20 * time.Millisecond
	}
	return best, bestScore >= 0
}

// toFloat converts a chunk to interleaved float32 in [-1, 1].
func toFloat(a wave.Audio) chunk {
	info := a.ChunkInfo()
	c := chunk{channels: info.Channels, rate: info.SamplingRate}
	switch a := a.(type) {
	case *wave.Float32Interleaved:
		c.samples = append([]float32(nil), a.Data[:info.Len*info.Channels]...)
	case *wave.Int16Interleaved:
		c.samples = make([]float32, info.Len*info.Channels)
		for i := range c.samples {
			c.samples[i] = float32(a.Data[i]) / (1 << 15)
		}
	default:
		c.samples = make([]float32, 0, info.Len*info.Channels)
		for i := range info.Len {
			for ch := range info.Channels {
				s := a.At(i, ch)
				var v float32
				switch s := s.(type) {
				case wave.Float32Sample:
					v = float32(s)
				case wave.Int16Sample:
					v = float32(s) / (1 << 15)
				default:
					v = float32(float64(s.Int()) / (1 << 31))
				}
				c.samples = append(c.samples, v)
			}
		}
	}
	return c
}
