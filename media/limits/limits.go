// Package limits holds the media limits of the serving configuration and the
// typed error that reports a breach of one of them.
//
// The numbers are those of the product (one request: up to 8 images, one audio
// clip up to 30 s, one silent video up to 60 s or a video with sound up to
// 30 s, sampled at 1 fps and at most 32 frames, a single audio source), not the
// maxima of the Gemma 3n checkpoint.
package limits

import (
	"fmt"
	"math"
	"strconv"
	"time"
)

// The limits of one request.
const (
	MaxImages         = 8                // images per request
	MaxAudio          = 30 * time.Second // one audio clip (file or microphone)
	MaxSilentVideo    = 60 * time.Second // a video without an audio stream
	MaxVideoWithSound = 30 * time.Second // a video whose soundtrack is included
	MaxVideoFrames    = 32               // frames sampled from one video
	VideoFPS          = 1.0              // frame sampling rate of videos
	MaxVideos         = 1                // videos per request
	MaxAudioSources   = 1                // audio clips plus videos with sound
	MaxImagePixels    = 64 << 20         // width × height of one decoded image
	MaxFileBytes      = 512 << 20        // bytes read from one image or audio file
)

// Names of the limits, as Error.Limit reports them.
const (
	Images         = "images"
	AudioDuration  = "audio clip duration"
	SilentVideo    = "silent video duration"
	VideoWithSound = "video with sound duration"
	VideoFrames    = "video frames"
	Videos         = "videos"
	AudioSources   = "audio sources"
	ImagePixels    = "image size"
	FileSize       = "file size"
	unitCount      = ""
	unitSeconds    = "s"
	unitPixels     = "pixels"
	unitBytes      = "bytes"
)

// Error reports that an input exceeds one limit. Value is what the input has
// (a lower bound when AtLeast is set, e.g. for a stream stopped early), Max is
// the limit, both in Unit ("" for counts, "s", "pixels" or "bytes").
type Error struct {
	Limit   string
	Value   float64
	Max     float64
	Unit    string
	AtLeast bool
	Source  string // the file or device, when known
}

func (e *Error) Error() string {
	val := format(e.Value, e.Unit)
	if e.AtLeast {
		val = "more than " + val
	}
	msg := fmt.Sprintf("%s %s exceeds the limit of %s", e.Limit, val, format(e.Max, e.Unit))
	if e.Source != "" {
		msg = e.Source + ": " + msg
	}
	return msg
}

func format(v float64, unit string) string {
	switch unit {
	case unitSeconds:
		// Milliseconds, so that 30.02 s never prints as the 30 s it exceeds.
		return strconv.FormatFloat(math.Round(v*1000)/1000, 'f', -1, 64) + " s"
	case unitCount:
		return strconv.FormatFloat(v, 'f', -1, 64)
	default:
		return strconv.FormatFloat(v, 'f', -1, 64) + " " + unit
	}
}

// Count returns an Error for a count limit (images, frames, videos, audio sources).
func Count(limit string, value, max int) *Error {
	return &Error{Limit: limit, Value: float64(value), Max: float64(max), Unit: unitCount}
}

// Duration returns an Error for a duration limit.
func Duration(limit string, value, max time.Duration) *Error {
	return &Error{Limit: limit, Value: value.Seconds(), Max: max.Seconds(), Unit: unitSeconds}
}

// Pixels returns an Error for an image whose width × height exceeds MaxImagePixels.
func Pixels(width, height int) *Error {
	return &Error{Limit: ImagePixels, Value: float64(width) * float64(height), Max: MaxImagePixels, Unit: unitPixels}
}

// Bytes returns an Error for a file larger than max bytes.
func Bytes(value, max int64) *Error {
	return &Error{Limit: FileSize, Value: float64(value), Max: float64(max), Unit: unitBytes}
}

// CheckAudio reports whether an audio clip of duration d is within MaxAudio.
func CheckAudio(d time.Duration) error {
	if d > MaxAudio {
		return Duration(AudioDuration, d, MaxAudio)
	}
	return nil
}

// CheckVideo reports whether a video of duration d, with or without sound, is
// within its duration limit.
func CheckVideo(d time.Duration, hasSound bool) error {
	if hasSound {
		if d > MaxVideoWithSound {
			return Duration(VideoWithSound, d, MaxVideoWithSound)
		}
		return nil
	}
	if d > MaxSilentVideo {
		return Duration(SilentVideo, d, MaxSilentVideo)
	}
	return nil
}
