package decode

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"

	"github.com/hajimehoshi/go-mp3"

	"verdict/media/ffmpeg"
	"verdict/media/pcm"
)

// mp3Header is what the first MPEG audio frame header says.
type mp3Header struct {
	version  string // "1", "2" or "2.5"
	rate     int
	channels int
}

// firstMP3Frame finds the first frame header after any ID3v2 tags.
func firstMP3Frame(data []byte) (mp3Header, bool) {
	p := 0
	for p+10 <= len(data) && string(data[p:p+3]) == "ID3" {
		size := int(data[p+6]&0x7f)<<21 | int(data[p+7]&0x7f)<<14 | int(data[p+8]&0x7f)<<7 | int(data[p+9]&0x7f)
		footer := data[p+5]&0x10 != 0
		p += 10 + size
		if footer {
			p += 10
		}
	}
	for ; p+4 <= len(data); p++ {
		b1, b2, b3 := data[p+1], data[p+2], data[p+3]
		if data[p] != 0xff || b1&0xe0 != 0xe0 || (b1>>1)&3 != 1 {
			continue
		}
		ri := int(b2>>2) & 3
		if ri == 3 || b2>>4 == 0xf {
			continue
		}
		h := mp3Header{channels: 2}
		switch (b1 >> 3) & 3 {
		case 3:
			h.version, h.rate = "1", []int{44100, 48000, 32000}[ri]
		case 2:
			h.version, h.rate = "2", []int{22050, 24000, 16000}[ri]
		case 0:
			h.version, h.rate = "2.5", []int{11025, 12000, 8000}[ri]
		default:
			continue
		}
		if b3>>6 == 3 {
			h.channels = 1
		}
		return h, true
	}
	return mp3Header{}, false
}

// decodeMP3 decodes MPEG-1 layer III in pure Go (go-mp3, which always yields
// 16-bit stereo: mono files come out as two equal channels). go-mp3 garbles
// MPEG-2 and 2.5 streams (sample rates below 32 kHz) without an error, so
// those go through the ffmpeg tool when it is installed, and are refused
// with the reason when it is not.
func decodeMP3(data []byte, b *budget) (pcm.Interleaved, error) {
	h, ok := firstMP3Frame(data)
	if !ok {
		return pcm.Interleaved{}, fmt.Errorf("no MPEG audio frame found: %w", io.ErrUnexpectedEOF)
	}
	if h.version != "1" {
		return decodeMP3WithFFmpeg(data, h, b)
	}
	d, err := mp3.NewDecoder(bytes.NewReader(data))
	if err != nil {
		return pcm.Interleaved{}, err
	}
	rate := d.SampleRate()
	if n := d.Length(); n > 0 {
		if err := b.check(int(n/4), rate, false); err != nil {
			return pcm.Interleaved{}, err
		}
	}
	limit := b.maxFrames(rate)
	var out []float32
	buf := make([]byte, 4*4096)
	for {
		n, err := d.Read(buf)
		for i := 0; i+1 < n; i += 2 {
			out = append(out, float32(int16(binary.LittleEndian.Uint16(buf[i:])))/(1<<15))
		}
		if limit >= 0 && len(out)/2 > limit {
			return pcm.Interleaved{}, b.check(len(out)/2, rate, true)
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return pcm.Interleaved{}, fmt.Errorf("after %d samples: %w", len(out)/2, err)
		}
	}
	return pcm.Interleaved{Samples: out[:len(out)/2*2], Channels: 2, Rate: rate}, nil
}

func decodeMP3WithFFmpeg(data []byte, h mp3Header, b *budget) (pcm.Interleaved, error) {
	what := fmt.Sprintf("MPEG-%s layer III at %d Hz", h.version, h.rate)
	tools, err := ffmpeg.Find()
	if err != nil {
		reason := err.Error()
		var ue *ffmpeg.UnavailableError
		if errors.As(err, &ue) {
			reason = ue.Reason
		}
		return pcm.Interleaved{}, unsupportedf("%s needs the ffmpeg tool (go-mp3 garbles it): %s", what, reason)
	}
	maxOut := int64(math.MaxInt32)
	args := []string{"-nostdin", "-v", "error", "-f", "mp3", "-i", "pipe:0"}
	if b.max > 0 {
		// Decode a little past the limit, enough to tell the file is too long.
		args = append(args, "-t", strconv.FormatFloat(b.max.Seconds()+1, 'f', 3, 64))
	}
	args = append(args, "-f", "f32le", "-acodec", "pcm_f32le",
		"-ac", strconv.Itoa(h.channels), "-ar", strconv.Itoa(h.rate), "pipe:1")
	raw, err := tools.Output(context.Background(), tools.FFmpeg, ffmpeg.Cmd{Args: args, Stdin: bytes.NewReader(data)}, maxOut)
	if err != nil {
		return pcm.Interleaved{}, fmt.Errorf("%s through ffmpeg: %w", what, err)
	}
	out := make([]float32, len(raw)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	frames := len(out) / h.channels
	if err := b.check(frames, h.rate, b.max > 0 && frames > b.maxFrames(h.rate)); err != nil {
		return pcm.Interleaved{}, err
	}
	return pcm.Interleaved{Samples: out[:frames*h.channels], Channels: h.channels, Rate: h.rate}, nil
}
