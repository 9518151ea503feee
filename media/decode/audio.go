package decode

import (
	"errors"
	"fmt"
	"time"

	"verdict/media/limits"
	"verdict/media/pcm"
)

// Sound is a decoded audio file: the model's input and what the file held.
type Sound struct {
	Format   string   // WAV, MP3, FLAC or Ogg Vorbis
	Rate     int      // the file's sample rate, Hz
	Channels int      // the file's channel count
	Clip     pcm.Clip // downmixed to mono and resampled to 16 kHz
}

// Duration returns the length of the sound.
func (s *Sound) Duration() time.Duration { return s.Clip.Duration() }

// AudioFile decodes the audio file at path; see DecodeAudio.
func AudioFile(path string, maxDuration time.Duration) (*Sound, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, err
	}
	return DecodeAudio(path, data, maxDuration)
}

// DecodeAudio decodes WAV (8/16/24/32-bit integer, 32/64-bit float PCM, any
// channel count), MP3, FLAC and Ogg Vorbis, detected from the content, and
// converts the result to 16 kHz mono (averaged channels, band-limited
// resampling). name is used in errors only. Audio longer than maxDuration
// (limits.MaxAudio for a request's clip; ≤ 0 for no limit) is refused with a
// *limits.Error, before decoding when the header tells the length.
func DecodeAudio(name string, data []byte, maxDuration time.Duration) (snd *Sound, err error) {
	if len(data) == 0 {
		return nil, &Error{Name: name, Problem: ErrEmpty}
	}
	f := Sniff(data[:min(len(data), SniffLen)])
	var dec func([]byte, *budget) (pcm.Interleaved, error)
	switch f.Name {
	case WAV:
		dec = decodeWAV
	case MP3:
		dec = decodeMP3
	case FLAC:
		dec = decodeFLAC
	case OggVorbis:
		dec = decodeVorbis
	default:
		return nil, unsupported(name, f, Audio)
	}
	defer guard(name, f.Name, &err)
	b := &budget{max: maxDuration, name: name}
	raw, err := dec(data, b)
	var le *limits.Error
	if errors.As(err, &le) {
		return nil, le
	}
	if err != nil {
		return nil, fail(name, f.Name, err)
	}
	if raw.Frames() == 0 {
		return nil, &Error{Name: name, Format: f.Name, Problem: ErrCorrupt, Err: fmt.Errorf("no audio samples")}
	}
	if err := b.check(raw.Frames(), raw.Rate, false); err != nil {
		return nil, err
	}
	clip, err := raw.ForModel()
	if err != nil {
		return nil, fail(name, f.Name, err)
	}
	return &Sound{Format: f.Name, Rate: raw.Rate, Channels: raw.Channels, Clip: clip}, nil
}

// budget stops decoding audio that is longer than the duration limit.
type budget struct {
	max  time.Duration
	name string
}

// check returns a *limits.Error when frames at rate exceed the limit; atLeast
// marks a count taken before the end of the stream.
func (b *budget) check(frames, rate int, atLeast bool) error {
	if b.max <= 0 || rate <= 0 {
		return nil
	}
	d := time.Duration(float64(frames) / float64(rate) * float64(time.Second))
	if d <= b.max {
		return nil
	}
	e := limits.Duration(limits.AudioDuration, d, b.max)
	e.AtLeast, e.Source = atLeast, b.name
	return e
}

// maxFrames is how many frames at rate stay within the limit (or -1).
func (b *budget) maxFrames(rate int) int {
	if b.max <= 0 {
		return -1
	}
	return int(b.max.Seconds()*float64(rate)) + 1
}
