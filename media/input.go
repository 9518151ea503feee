// Package media turns files and devices into what Verdict's engine takes:
// image.Image values and mono float32 PCM at 16 kHz, with timestamps and
// previews. Input collects one request's media and enforces its limits.
//
// Subpackages: decode (image and audio files), pcm (samples, resampling),
// video (ffmpeg), capture (camera and microphone), playback (speaker),
// preview (thumbnails, waveforms), limits (the numbers and their error),
// availability (which features work here, and why not),
// ffmpeg (running the tools). media never imports the engine: the app hands
// these values to engine/vision and engine/audio.
package media

import (
	"errors"
	"fmt"
	"image"
	"time"

	"verdict/media/limits"
	"verdict/media/pcm"
	"verdict/media/video"
)

// Image is an input image and where it came from (a file name, "camera").
type Image struct {
	Source string
	Image  image.Image
}

// Audio is an input audio clip, 16 kHz mono, and where it came from.
type Audio struct {
	Source string
	Clip   pcm.Clip
}

// Input is the media of one request: up to 8 images, one audio clip, one
// video (its frames, and its soundtrack as the request's audio). The Add and
// Set methods refuse what would break a limit; Validate checks everything,
// e.g. after the fields were filled directly.
type Input struct {
	Images []Image
	Audio  *Audio
	Video  *video.Video
}

// AddImage adds an image; a ninth is a *limits.Error.
func (in *Input) AddImage(source string, img image.Image) error {
	if img == nil {
		return fmt.Errorf("media: image %s is nil", source)
	}
	if len(in.Images)+1 > limits.MaxImages {
		e := limits.Count(limits.Images, len(in.Images)+1, limits.MaxImages)
		e.Source = source
		return e
	}
	in.Images = append(in.Images, Image{Source: source, Image: img})
	return nil
}

// SetAudio sets the audio clip (16 kHz mono, at most 30 s). A second audio
// source, another clip or a video with sound, is a *limits.Error.
func (in *Input) SetAudio(source string, clip pcm.Clip) error {
	a := &Audio{Source: source, Clip: clip}
	if err := checkAudio(a); err != nil {
		return err
	}
	if n := in.audioSources() + 1; n > limits.MaxAudioSources {
		e := limits.Count(limits.AudioSources, n, limits.MaxAudioSources)
		e.Source = source
		return e
	}
	in.Audio = a
	return nil
}

// SetVideo sets the video. A second video, a video over its duration limit
// (60 s silent, 30 s with sound), over 32 frames, or with sound when there
// is already an audio clip, is a *limits.Error.
func (in *Input) SetVideo(v *video.Video) error {
	if v == nil {
		return errors.New("media: nil video")
	}
	if in.Video != nil {
		e := limits.Count(limits.Videos, 2, limits.MaxVideos)
		e.Source = v.Source
		return e
	}
	if err := checkVideo(v); err != nil {
		return err
	}
	if v.HasSound() && in.Audio != nil {
		e := limits.Count(limits.AudioSources, 2, limits.MaxAudioSources)
		e.Source = v.Source + " (soundtrack, besides " + in.Audio.Source + ")"
		return e
	}
	in.Video = v
	return nil
}

// Sound returns the request's one audio source: the clip, or the video's
// soundtrack; ok is false when there is none.
func (in *Input) Sound() (source string, clip pcm.Clip, ok bool) {
	switch {
	case in.Audio != nil:
		return in.Audio.Source, in.Audio.Clip, true
	case in.Video != nil && in.Video.HasSound():
		return in.Video.Source, *in.Video.Soundtrack, true
	}
	return "", pcm.Clip{}, false
}

// Empty reports whether the input holds no media.
func (in *Input) Empty() bool {
	return len(in.Images) == 0 && in.Audio == nil && in.Video == nil
}

// Validate checks every limit and returns all breaches joined (each a
// *limits.Error, or an error for malformed media).
func (in *Input) Validate() error {
	var errs []error
	if n := len(in.Images); n > limits.MaxImages {
		errs = append(errs, limits.Count(limits.Images, n, limits.MaxImages))
	}
	for i, img := range in.Images {
		if img.Image == nil {
			errs = append(errs, fmt.Errorf("media: image %d (%s) is nil", i, img.Source))
		}
	}
	if in.Audio != nil {
		errs = append(errs, checkAudio(in.Audio))
	}
	if in.Video != nil {
		errs = append(errs, checkVideo(in.Video))
	}
	if n := in.audioSources(); n > limits.MaxAudioSources {
		errs = append(errs, limits.Count(limits.AudioSources, n, limits.MaxAudioSources))
	}
	return errors.Join(errs...)
}

func (in *Input) audioSources() int {
	n := 0
	if in.Audio != nil {
		n++
	}
	if in.Video != nil && in.Video.HasSound() {
		n++
	}
	return n
}

func checkAudio(a *Audio) error {
	if a.Clip.Rate != pcm.ModelRate {
		return fmt.Errorf("media: audio %s is at %d Hz, want %d Hz (decode or pcm.Resample it)", a.Source, a.Clip.Rate, pcm.ModelRate)
	}
	return withSource(limits.CheckAudio(a.Clip.Duration()), a.Source)
}

func checkVideo(v *video.Video) error {
	var errs []error
	errs = append(errs, withSource(limits.CheckVideo(videoDuration(v), v.HasSound()), v.Source))
	if n := len(v.Frames); n > limits.MaxVideoFrames {
		e := limits.Count(limits.VideoFrames, n, limits.MaxVideoFrames)
		e.Source = v.Source
		errs = append(errs, e)
	}
	if v.HasSound() && v.Soundtrack.Rate != pcm.ModelRate {
		errs = append(errs, fmt.Errorf("media: soundtrack of %s is at %d Hz, want %d Hz", v.Source, v.Soundtrack.Rate, pcm.ModelRate))
	}
	return errors.Join(errs...)
}

// videoDuration is the probed duration, or what the frames and soundtrack span.
func videoDuration(v *video.Video) time.Duration {
	d := v.Info.Duration
	if n := len(v.Frames); n > 0 {
		d = max(d, v.Frames[n-1].Time)
	}
	if v.HasSound() {
		d = max(d, v.Soundtrack.Duration())
	}
	return d
}

func withSource(err error, source string) error {
	var le *limits.Error
	if errors.As(err, &le) {
		le.Source = source
	}
	return err
}
