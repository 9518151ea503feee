package playback

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"verdict/media/pcm"
)

// fakeBackend plays by reading its input at real time speed, or never
// finishes (stuck), like oto without a device.
type fakeBackend struct {
	mu    sync.Mutex
	err   error
	stuck bool
	read  int
}

func (f *fakeBackend) Err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

func (f *fakeBackend) NewPlayer(r io.Reader) player { return &fakePlayer{b: f, r: r} }

type fakePlayer struct {
	b       *fakeBackend
	r       io.Reader
	mu      sync.Mutex
	playing bool
	paused  bool
}

func (p *fakePlayer) Play() {
	p.mu.Lock()
	p.playing = true
	p.mu.Unlock()
	if p.b.stuck {
		return
	}
	go func() {
		buf := make([]byte, 4*160) // 10 ms at 16 kHz
		for {
			p.mu.Lock()
			paused := p.paused
			p.mu.Unlock()
			if paused {
				return
			}
			n, err := p.r.Read(buf)
			p.b.mu.Lock()
			p.b.read += n
			p.b.mu.Unlock()
			if err != nil {
				p.mu.Lock()
				p.playing = false
				p.mu.Unlock()
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
}

func (p *fakePlayer) Pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.paused, p.playing = true, false
}

func (p *fakePlayer) IsPlaying() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.playing
}

func (p *fakePlayer) Err() error   { return nil }
func (p *fakePlayer) Close() error { return nil }

func opened(b *fakeBackend, ready chan struct{}, err error) *lazy {
	return &lazy{open: func() (backend, <-chan struct{}, error) { return b, ready, err }}
}

func closedChan() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

func TestOpenFallbacks(t *testing.T) {
	alsa := errors.New(`oto: ALSA error at snd_pcm_open: "default": No such file or directory`)
	tests := []struct {
		name string
		l    *lazy
		msg  string
	}{
		{"context error", opened(&fakeBackend{err: alsa}, closedChan(), nil), "no speaker: oto: ALSA error at snd_pcm_open"},
		{"never ready", opened(&fakeBackend{}, make(chan struct{}), nil), "no speaker: the audio device did not become ready within 100ms"},
		{"create error", opened(nil, nil, errors.New("oto: context is already created")), "no speaker: oto: context is already created"},
		{"driver panic", &lazy{open: func() (backend, <-chan struct{}, error) { panic("dlopen failed") }}, "no speaker: audio driver panicked: dlopen failed"},
	}
	for _, tt := range tests {
		start := time.Now()
		s, err := tt.l.get(100 * time.Millisecond)
		if s != nil || !errors.Is(err, ErrNoSpeaker) || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("%s: %v, want %q", tt.name, err, tt.msg)
		}
		if time.Since(start) > time.Second {
			t.Errorf("%s: took %v", tt.name, time.Since(start))
		}
		// A second call gives the same answer (the context is created once).
		if _, err2 := tt.l.get(10 * time.Millisecond); !errors.Is(err2, ErrNoSpeaker) {
			t.Errorf("%s: second call %v", tt.name, err2)
		}
	}
}

func TestPlay(t *testing.T) {
	b := &fakeBackend{}
	s, err := opened(b, closedChan(), nil).get(time.Second)
	if err != nil {
		t.Fatal(err)
	}
	clip := pcm.Clip{Samples: make([]float32, 1600), Rate: pcm.ModelRate} // 100 ms
	start := time.Now()
	if err := s.Play(context.Background(), clip); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < 80*time.Millisecond || el > time.Second {
		t.Errorf("100 ms clip played in %v", el)
	}
	if b.read != 4*1600 {
		t.Errorf("player read %d bytes, want %d", b.read, 4*1600)
	}
	// Other rates are resampled to 16 kHz.
	b.read = 0
	if err := s.Play(context.Background(), pcm.Clip{Samples: make([]float32, 4800), Rate: 48000}); err != nil || b.read != 4*1600 {
		t.Errorf("48 kHz clip: %v, %d bytes", err, b.read)
	}
	if err := s.Play(context.Background(), pcm.Clip{Rate: pcm.ModelRate}); err != nil {
		t.Errorf("empty clip: %v", err)
	}
	// Cancelling stops playback.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	long := pcm.Clip{Samples: make([]float32, 10*pcm.ModelRate), Rate: pcm.ModelRate}
	start = time.Now()
	if err := s.Play(ctx, long); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > time.Second {
		t.Errorf("cancelled play: %v after %v", err, time.Since(start))
	}
}

func TestPlayNeverHangs(t *testing.T) {
	// oto without a device: players stay "playing" forever.
	b := &fakeBackend{stuck: true}
	s, err := opened(b, closedChan(), nil).get(time.Second)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = s.Play(context.Background(), pcm.Clip{Samples: make([]float32, 160), Rate: pcm.ModelRate})
	if err == nil || !strings.Contains(err.Error(), "stalled") {
		t.Errorf("stuck player: %v", err)
	}
	if el := time.Since(start); el > stallSlack+time.Second {
		t.Errorf("took %v", el)
	}
	// The device failing while playing is "no speaker".
	b.mu.Lock()
	b.err = errors.New("device unplugged")
	b.mu.Unlock()
	if err := s.Play(context.Background(), pcm.Clip{Samples: make([]float32, 160), Rate: pcm.ModelRate}); !errors.Is(err, ErrNoSpeaker) {
		t.Errorf("failed device: %v", err)
	}
}

func TestOpenRealDevice(t *testing.T) {
	// On a machine without a sound card (CI) this is "no speaker" with ALSA's
	// reason; with one, a short silence plays. Either way it returns quickly.
	start := time.Now()
	s, err := Open(3 * time.Second)
	if err != nil {
		if !errors.Is(err, ErrNoSpeaker) {
			t.Fatalf("Open: %v, want ErrNoSpeaker", err)
		}
		t.Logf("no output device here: %v", err)
	} else {
		err := s.Play(context.Background(), pcm.Clip{Samples: make([]float32, 1600), Rate: pcm.ModelRate})
		if err != nil && !errors.Is(err, ErrNoSpeaker) && !strings.Contains(err.Error(), "stalled") {
			t.Errorf("Play: %v", err)
		}
	}
	if el := time.Since(start); el > 10*time.Second {
		t.Errorf("took %v", el)
	}
}
