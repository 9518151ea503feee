// Package playback plays 16 kHz mono float32 PCM (what the model hears)
// through github.com/ebitengine/oto/v3, and degrades to a clear "no speaker"
// error where there is no output device.
//
// oto allows one audio context per process, so the first Open creates it and
// later calls share it. On Linux without a sound card oto's NewContext does
// not fail: the failure shows in the context's Err after the ready channel
// closes, and players then report "playing" forever. Open therefore checks
// Err after a bounded wait, and Play bounds its wait by the clip's length.
package playback

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"time"

	"github.com/ebitengine/oto/v3"

	"verdict/media/pcm"
)

// ErrNoSpeaker is matched (errors.Is) by every *UnavailableError.
var ErrNoSpeaker = errors.New("no speaker")

// UnavailableError says that audio output is unavailable, and why.
type UnavailableError struct {
	Reason string
	Err    error
}

func (e *UnavailableError) Error() string { return "no speaker: " + e.Reason }

// Is reports whether target is ErrNoSpeaker.
func (e *UnavailableError) Is(target error) bool { return target == ErrNoSpeaker }

// Unwrap returns the cause.
func (e *UnavailableError) Unwrap() error { return e.Err }

// backend is the part of *oto.Context that playback uses.
type backend interface {
	NewPlayer(io.Reader) player
	Err() error
}

// player is the part of *oto.Player that playback uses.
type player interface {
	Play()
	Pause()
	IsPlaying() bool
	Err() error
	Close() error
}

// opener creates the backend once; ready closes when the device is set up.
type opener func() (backend, <-chan struct{}, error)

// Speaker plays PCM on the default output device.
type Speaker struct {
	b    backend
	rate int
	mu   sync.Mutex // one clip at a time
}

// shared holds the process's one oto context.
var shared = &lazy{open: openOto}

// Open returns the speaker, creating the audio context on first use and
// waiting at most timeout for the device. Its error is an *UnavailableError
// (ErrNoSpeaker) with the reason, e.g. the ALSA error on a machine without a
// sound card.
func Open(timeout time.Duration) (*Speaker, error) {
	return shared.get(timeout)
}

type lazy struct {
	open  opener
	once  sync.Once
	b     backend
	ready <-chan struct{}
	err   error
}

func (l *lazy) get(timeout time.Duration) (*Speaker, error) {
	l.once.Do(func() {
		defer func() {
			if r := recover(); r != nil {
				l.err = fmt.Errorf("audio driver panicked: %v", r)
			}
		}()
		l.b, l.ready, l.err = l.open()
	})
	if l.err != nil {
		return nil, &UnavailableError{Reason: l.err.Error(), Err: l.err}
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-l.ready:
	case <-t.C:
		return nil, &UnavailableError{Reason: fmt.Sprintf("the audio device did not become ready within %v", timeout)}
	}
	if err := l.b.Err(); err != nil {
		return nil, &UnavailableError{Reason: err.Error(), Err: err}
	}
	return &Speaker{b: l.b, rate: pcm.ModelRate}, nil
}

func openOto() (backend, <-chan struct{}, error) {
	ctx, ready, err := oto.NewContext(&oto.NewContextOptions{
		SampleRate:   pcm.ModelRate,
		ChannelCount: 1,
		Format:       oto.FormatFloat32LE,
	})
	if err != nil {
		return nil, nil, err
	}
	return otoBackend{ctx}, ready, nil
}

type otoBackend struct{ c *oto.Context }

func (o otoBackend) NewPlayer(r io.Reader) player { return o.c.NewPlayer(r) }
func (o otoBackend) Err() error                   { return o.c.Err() }

// stallSlack is how long past a clip's length Play waits before it calls the
// output stalled.
const stallSlack = 2 * time.Second

// Play plays a clip (resampled to 16 kHz if needed) and returns when it has
// played, when ctx ends (playback stops, ctx's error is returned) or when the
// device stalls (it has not finished 2 s after the clip's length).
func (s *Speaker) Play(ctx context.Context, clip pcm.Clip) error {
	if clip.Rate != s.rate {
		var err error
		if clip, err = clip.Resample(s.rate); err != nil {
			return fmt.Errorf("play: %w", err)
		}
	}
	if len(clip.Samples) == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.b.Err(); err != nil {
		return &UnavailableError{Reason: err.Error(), Err: err}
	}
	buf := make([]byte, 4*len(clip.Samples))
	for i, v := range clip.Samples {
		v = float32(math.Max(-1, math.Min(1, float64(v))))
		binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(v))
	}
	p := s.b.NewPlayer(bytes.NewReader(buf))
	defer p.Close()
	p.Play()
	deadline := time.NewTimer(clip.Duration() + stallSlack)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			p.Pause()
			return fmt.Errorf("play: %w", ctx.Err())
		case <-deadline.C:
			p.Pause()
			if err := s.b.Err(); err != nil {
				return &UnavailableError{Reason: err.Error(), Err: err}
			}
			return fmt.Errorf("play: the audio output stalled (%v clip not finished after %v)", clip.Duration(), clip.Duration()+stallSlack)
		case <-tick.C:
			if err := p.Err(); err != nil {
				return fmt.Errorf("play: %w", err)
			}
			if err := s.b.Err(); err != nil {
				p.Pause()
				return &UnavailableError{Reason: err.Error(), Err: err}
			}
			if !p.IsPlaying() {
				return nil
			}
		}
	}
}
