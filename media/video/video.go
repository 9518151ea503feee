// Package video reads video files through the ffmpeg command-line tools:
// it probes the duration and streams (ffprobe), samples frames at 1 fps (at
// most 32, with their timestamps) and extracts the soundtrack as 16 kHz mono
// PCM. Every run is bound to a context and a timeout; without ffmpeg every
// call fails with an *ffmpeg.UnavailableError that says why.
package video

import (
	"context"
	"errors"
	"fmt"
	"image"
	"math"
	"sync"
	"time"

	"verdict/media/ffmpeg"
	"verdict/media/limits"
	"verdict/media/pcm"
)

// ErrNoVideo reports a file that ffprobe reads but that has no video stream
// (an audio file, or audio with only cover art).
var ErrNoVideo = errors.New("no video stream")

// Frame is one sampled frame and its time from the start of the video.
type Frame struct {
	Time  time.Duration
	Image *image.RGBA
}

// Video is what the model receives from a video file.
type Video struct {
	Source string
	Info   Info
	// Interval is the spacing of the sampled frames: 1 s (limits.VideoFPS),
	// or the duration / 32 for videos longer than 32 s, so that the frames
	// span the whole video.
	Interval time.Duration
	Frames   []Frame
	// Soundtrack is the first audio stream at 16 kHz mono; nil for a silent
	// video.
	Soundtrack *pcm.Clip
}

// HasSound reports whether the video has a soundtrack.
func (v *Video) HasSound() bool { return v.Soundtrack != nil }

// Options tune frame sampling; zero fields take the defaults.
type Options struct {
	FPS       float64 // frames per second, default limits.VideoFPS
	MaxFrames int     // default limits.MaxVideoFrames
	// MaxSide caps the longer side of frames (default 1920); larger videos
	// are scaled down keeping the aspect ratio.
	MaxSide int
}

func (o Options) withDefaults() Options {
	if o.FPS <= 0 {
		o.FPS = limits.VideoFPS
	}
	if o.MaxFrames <= 0 {
		o.MaxFrames = limits.MaxVideoFrames
	}
	if o.MaxSide <= 0 {
		o.MaxSide = 1920
	}
	return o
}

// Reader reads videos with one set of ffmpeg tools.
type Reader struct {
	tools *ffmpeg.Tools
}

// NewReader locates ffmpeg and ffprobe on PATH. Its error is an
// *ffmpeg.UnavailableError ("video input is unavailable: ffmpeg was not found
// on PATH ..."): the UI shows video input as unavailable with that reason.
func NewReader() (*Reader, error) {
	t, err := ffmpeg.Find()
	if err != nil {
		return nil, err
	}
	return &Reader{tools: t}, nil
}

// NewReaderWith uses the given tools (their Timeout bounds each run).
func NewReaderWith(t *ffmpeg.Tools) *Reader { return &Reader{tools: t} }

// Load probes a video file, checks it against the request limits (a silent
// video up to 60 s, one with sound up to 30 s: a *limits.Error otherwise),
// then samples its frames and extracts its soundtrack concurrently.
func (r *Reader) Load(ctx context.Context, path string, opt Options) (*Video, error) {
	info, err := r.Probe(ctx, path)
	if err != nil {
		return nil, err
	}
	if !info.HasVideo {
		return nil, fmt.Errorf("video %s: %w (use it as an audio file)", path, ErrNoVideo)
	}
	max := limits.MaxSilentVideo
	if info.HasAudio {
		max = limits.MaxVideoWithSound
	}
	if info.Duration > 0 {
		if err := limits.CheckVideo(info.Duration, info.HasAudio); err != nil {
			var le *limits.Error
			if errors.As(err, &le) {
				le.Source = path
			}
			return nil, err
		}
	}
	v := &Video{Source: path, Info: info}
	var wg sync.WaitGroup
	var frameErr, soundErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		v.Frames, v.Interval, frameErr = r.frames(ctx, path, info, opt.withDefaults(), max)
	}()
	if info.HasAudio {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var clip pcm.Clip
			clip, soundErr = r.soundtrack(ctx, path, info, max, limits.VideoWithSound)
			if soundErr == nil {
				v.Soundtrack = &clip
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(frameErr, soundErr); err != nil {
		return nil, err
	}
	if len(v.Frames) == 0 {
		return nil, fmt.Errorf("video %s: no frame could be decoded", path)
	}
	if info.Duration <= 0 { // unknown from the container: judge by what was read
		d := v.Frames[len(v.Frames)-1].Time
		if v.Soundtrack != nil {
			d = max2(d, v.Soundtrack.Duration())
		}
		if err := limits.CheckVideo(d, info.HasAudio); err != nil {
			var le *limits.Error
			if errors.As(err, &le) {
				le.Source = path
			}
			return nil, err
		}
		v.Info.Duration = d
	}
	return v, nil
}

// Soundtrack extracts the first audio stream of a media file (a video or an
// audio file ffmpeg reads) as 16 kHz mono PCM: the native samples are
// downmixed and resampled in Go, as for audio files. Audio longer than
// maxDuration (≤ 0: no limit) is refused with a *limits.Error.
func (r *Reader) Soundtrack(ctx context.Context, path string, maxDuration time.Duration) (pcm.Clip, error) {
	info, err := r.Probe(ctx, path)
	if err != nil {
		return pcm.Clip{}, err
	}
	if !info.HasAudio {
		return pcm.Clip{}, fmt.Errorf("video %s: no audio stream", path)
	}
	if maxDuration > 0 && info.Duration > maxDuration {
		e := limits.Duration(limits.AudioDuration, info.Duration, maxDuration)
		e.Source = path
		return pcm.Clip{}, e
	}
	return r.soundtrack(ctx, path, info, maxDuration, limits.AudioDuration)
}

// interval spaces frames at 1/fps, or wider so that at most maxFrames span
// the whole duration.
func interval(d time.Duration, opt Options) time.Duration {
	iv := time.Duration(float64(time.Second) / opt.FPS)
	if d > 0 {
		if even := time.Duration(math.Ceil(float64(d) / float64(opt.MaxFrames))); even > iv {
			iv = even
		}
	}
	return iv
}

func max2(a, b time.Duration) time.Duration {
	if a > b {
		return a
	}
	return b
}
