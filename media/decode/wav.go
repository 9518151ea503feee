package decode

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"

	"verdict/media/pcm"
)

const (
	wavPCM        = 1
	wavFloat      = 3
	wavExtensible = 0xfffe
)

// decodeWAV reads a RIFF WAVE file (little-endian "RIFF" or big-endian
// "RIFX"): integer PCM of 8 (unsigned), 16, 24 or 32 bits and IEEE float of
// 32 or 64 bits, plain or WAVE_FORMAT_EXTENSIBLE.
func decodeWAV(data []byte, b *budget) (pcm.Interleaved, error) {
	var bo binary.ByteOrder = binary.LittleEndian
	if string(data[:4]) == "RIFX" {
		bo = binary.BigEndian
	}
	if len(data) < 12 {
		return pcm.Interleaved{}, io.ErrUnexpectedEOF
	}
	var (
		format, channels, bits, align int
		rate                          int
		haveFmt                       bool
	)
	p := 12
	for {
		if p+8 > len(data) {
			if haveFmt {
				return pcm.Interleaved{}, fmt.Errorf("no data chunk: %w", io.ErrUnexpectedEOF)
			}
			return pcm.Interleaved{}, fmt.Errorf("no fmt chunk: %w", io.ErrUnexpectedEOF)
		}
		id := string(data[p : p+4])
		size := int64(bo.Uint32(data[p+4 : p+8]))
		body := data[p+8:]
		switch id {
		case "fmt ":
			if size < 16 || int64(len(body)) < size {
				return pcm.Interleaved{}, fmt.Errorf("fmt chunk of %d bytes: %w", size, io.ErrUnexpectedEOF)
			}
			format = int(bo.Uint16(body[0:]))
			channels = int(bo.Uint16(body[2:]))
			rate = int(bo.Uint32(body[4:]))
			align = int(bo.Uint16(body[12:]))
			bits = int(bo.Uint16(body[14:]))
			if format == wavExtensible {
				if size < 40 {
					return pcm.Interleaved{}, fmt.Errorf("extensible fmt chunk of %d bytes", size)
				}
				format = int(bo.Uint16(body[24:])) // first two bytes of the subformat GUID
			}
			haveFmt = true
		case "data":
			if !haveFmt {
				return pcm.Interleaved{}, errors.New("data chunk before the fmt chunk")
			}
			if err := checkWAVFormat(format, channels, rate, bits, align); err != nil {
				return pcm.Interleaved{}, err
			}
			avail := int64(len(body))
			if size == 0xffffffff || (size == 0 && avail > 0) { // streamed writers leave the size open
				size = avail
			}
			if size > avail {
				return pcm.Interleaved{}, fmt.Errorf("data chunk declares %d bytes, file holds %d: %w", size, avail, io.ErrUnexpectedEOF)
			}
			frames := int(size) / align
			if err := b.check(frames, rate, false); err != nil {
				return pcm.Interleaved{}, err
			}
			return pcm.Interleaved{Samples: wavSamples(body[:frames*align], format, bits, bo), Channels: channels, Rate: rate}, nil
		}
		next := int64(p) + 8 + size + size&1 // chunks are word-aligned
		if next > int64(len(data)) {
			return pcm.Interleaved{}, fmt.Errorf("%q chunk of %d bytes: %w", id, size, io.ErrUnexpectedEOF)
		}
		p = int(next)
	}
}

func checkWAVFormat(format, channels, rate, bits, align int) error {
	switch {
	case channels < 1:
		return fmt.Errorf("%d channels", channels)
	case rate < 1000 || rate > 768000:
		return fmt.Errorf("sample rate %d Hz", rate)
	case align != channels*((bits+7)/8):
		return fmt.Errorf("block align %d for %d channels of %d bits", align, channels, bits)
	}
	switch format {
	case wavPCM:
		if bits == 8 || bits == 16 || bits == 24 || bits == 32 {
			return nil
		}
		return unsupportedf("%d-bit integer PCM", bits)
	case wavFloat:
		if bits == 32 || bits == 64 {
			return nil
		}
		return unsupportedf("%d-bit float PCM", bits)
	}
	return unsupportedf("WAV encoding 0x%04x (only integer PCM and IEEE float are)", format)
}

func wavSamples(raw []byte, format, bits int, bo binary.ByteOrder) []float32 {
	width := bits / 8
	out := make([]float32, len(raw)/width)
	for i := range out {
		s := raw[i*width : (i+1)*width]
		switch {
		case format == wavFloat && bits == 32:
			out[i] = math.Float32frombits(bo.Uint32(s))
		case format == wavFloat && bits == 64:
			out[i] = float32(math.Float64frombits(bo.Uint64(s)))
		case bits == 8:
			out[i] = (float32(s[0]) - 128) / 128
		case bits == 16:
			out[i] = float32(int16(bo.Uint16(s))) / (1 << 15)
		case bits == 24:
			var v int32
			if bo == binary.LittleEndian {
				v = int32(s[0]) | int32(s[1])<<8 | int32(s[2])<<16
			} else {
				v = int32(s[2]) | int32(s[1])<<8 | int32(s[0])<<16
			}
			v = v << 8 >> 8 // sign-extend
			out[i] = float32(v) / (1 << 23)
		case bits == 32:
			out[i] = float32(float64(int32(bo.Uint32(s))) / (1 << 31))
		}
	}
	return out
}
