package decode

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/jfreymuth/oggvorbis"
	"github.com/mewkiz/flac"

	"verdict/media/pcm"
)

// decodeFLAC decodes FLAC of any bit depth and channel count.
func decodeFLAC(data []byte, b *budget) (pcm.Interleaved, error) {
	s, err := flac.New(bytes.NewReader(data))
	if err != nil {
		return pcm.Interleaved{}, err
	}
	info := s.Info
	if info == nil || info.SampleRate == 0 || info.NChannels == 0 || info.BitsPerSample == 0 {
		return pcm.Interleaved{}, errors.New("missing stream info")
	}
	rate, ch := int(info.SampleRate), int(info.NChannels)
	if info.NSamples > 0 {
		if err := b.check(int(info.NSamples), rate, false); err != nil {
			return pcm.Interleaved{}, err
		}
	}
	limit := b.maxFrames(rate)
	scale := 1 / float32(int64(1)<<(info.BitsPerSample-1))
	out := make([]float32, 0, int(info.NSamples)*ch)
	for {
		fr, err := s.ParseNext()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return pcm.Interleaved{}, err
		}
		if len(fr.Subframes) != ch {
			return pcm.Interleaved{}, fmt.Errorf("frame with %d channels in a %d-channel stream", len(fr.Subframes), ch)
		}
		n := int(fr.BlockSize)
		for i := range n {
			for c := range ch {
				sub := fr.Subframes[c].Samples
				if i >= len(sub) {
					return pcm.Interleaved{}, fmt.Errorf("short subframe: %w", io.ErrUnexpectedEOF)
				}
				out = append(out, float32(sub[i])*scale)
			}
		}
		if limit >= 0 && len(out)/ch > limit {
			return pcm.Interleaved{}, b.check(len(out)/ch, rate, true)
		}
	}
	if info.NSamples > 0 && uint64(len(out)/ch) < info.NSamples {
		return pcm.Interleaved{}, fmt.Errorf("%d of %d samples: %w", len(out)/ch, info.NSamples, io.ErrUnexpectedEOF)
	}
	return pcm.Interleaved{Samples: out, Channels: ch, Rate: rate}, nil
}

// decodeVorbis decodes Ogg Vorbis.
func decodeVorbis(data []byte, b *budget) (pcm.Interleaved, error) {
	r, err := oggvorbis.NewReader(bytes.NewReader(data))
	if err != nil {
		return pcm.Interleaved{}, err
	}
	rate, ch := r.SampleRate(), r.Channels()
	if rate <= 0 || ch <= 0 {
		return pcm.Interleaved{}, fmt.Errorf("%d channels at %d Hz", ch, rate)
	}
	if n := r.Length(); n > 0 {
		if err := b.check(int(n), rate, false); err != nil {
			return pcm.Interleaved{}, err
		}
	}
	limit := b.maxFrames(rate)
	var out []float32
	buf := make([]float32, 4096*ch)
	for {
		n, err := r.Read(buf)
		out = append(out, buf[:n]...)
		if limit >= 0 && len(out)/ch > limit {
			return pcm.Interleaved{}, b.check(len(out)/ch, rate, true)
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return pcm.Interleaved{}, err
		}
	}
	return pcm.Interleaved{Samples: out, Channels: ch, Rate: rate}, nil
}
