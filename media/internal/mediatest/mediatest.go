// Package mediatest holds helpers for the media packages' tests: external
// tools (ffmpeg, espeak-ng, cwebp) that may be missing on a developer machine,
// and synthetic signals.
package mediatest

import (
	"bytes"
	"context"
	"encoding/binary"
	"math"
	"os"
	"os/exec"
	"testing"
	"time"
)

// RequireEnv names the variable that turns a missing tool from a skip into a
// failure; build/test.sh (and so CI) sets it.
const RequireEnv = "VERDICT_REQUIRE_MEDIA_TOOLS"

// Tool returns the path of an external program, skipping the test when it is
// missing, or failing it when VERDICT_REQUIRE_MEDIA_TOOLS=1.
func Tool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	if os.Getenv(RequireEnv) == "1" {
		t.Fatalf("%s is required (%s=1) but missing: %v; build/setup.sh installs it", name, RequireEnv, err)
	}
	t.Skipf("%s not installed (build/setup.sh installs it): %v", name, err)
	return ""
}

// Run runs a tool with a one-minute timeout and fails the test on error.
func Run(t testing.TB, name string, args ...string) {
	t.Helper()
	path := Tool(t, name)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, stderr.String())
	}
}

// Sine returns n frames of a sine of amplitude amp at freq Hz, the same in
// each of channels, interleaved.
func Sine(rate, channels int, freq, amp float64, d time.Duration) []float32 {
	n := int(d.Seconds() * float64(rate))
	s := make([]float32, n*channels)
	for i := range n {
		v := float32(amp * math.Sin(2*math.Pi*freq*float64(i)/float64(rate)))
		for c := range channels {
			s[i*channels+c] = v
		}
	}
	return s
}

// WAV encodes interleaved samples as a RIFF WAVE file: format 1 (integer PCM,
// 8/16/24/32 bits) or 3 (IEEE float, 32/64 bits); extensible writes
// WAVE_FORMAT_EXTENSIBLE.
func WAV(samples []float32, channels, rate, format, bits int, extensible bool) []byte {
	width := bits / 8
	var data bytes.Buffer
	le := binary.LittleEndian
	for _, v := range samples {
		x := math.Max(-1, math.Min(1, float64(v)))
		switch {
		case format == 3 && bits == 32:
			data.Write(le.AppendUint32(nil, math.Float32bits(float32(x))))
		case format == 3 && bits == 64:
			data.Write(le.AppendUint64(nil, math.Float64bits(x)))
		case bits == 8:
			data.WriteByte(byte(math.Round(x*127 + 128)))
		case bits == 16:
			data.Write(le.AppendUint16(nil, uint16(int16(math.Round(x*32767)))))
		case bits == 24:
			v := int32(math.Round(x * 8388607))
			data.Write([]byte{byte(v), byte(v >> 8), byte(v >> 16)})
		case bits == 32:
			data.Write(le.AppendUint32(nil, uint32(int32(math.Round(x*2147483647)))))
		}
	}
	var fmtChunk bytes.Buffer
	tag := uint16(format)
	if extensible {
		tag = 0xfffe
	}
	fmtChunk.Write(le.AppendUint16(nil, tag))
	fmtChunk.Write(le.AppendUint16(nil, uint16(channels)))
	fmtChunk.Write(le.AppendUint32(nil, uint32(rate)))
	fmtChunk.Write(le.AppendUint32(nil, uint32(rate*channels*width)))
	fmtChunk.Write(le.AppendUint16(nil, uint16(channels*width)))
	fmtChunk.Write(le.AppendUint16(nil, uint16(bits)))
	if extensible {
		fmtChunk.Write(le.AppendUint16(nil, 22))
		fmtChunk.Write(le.AppendUint16(nil, uint16(bits)))
		fmtChunk.Write(le.AppendUint32(nil, 0)) // channel mask
		guid := []byte{0, 0, 0, 0, 0x00, 0x00, 0x10, 0x00, 0x80, 0x00, 0x00, 0xaa, 0x00, 0x38, 0x9b, 0x71}
		le.PutUint16(guid, uint16(format))
		fmtChunk.Write(guid)
	}
	var out bytes.Buffer
	out.WriteString("RIFF")
	out.Write([]byte{0, 0, 0, 0}) // RIFF size, set below
	out.WriteString("WAVE")
	out.WriteString("LIST") // an unrelated chunk first, as many writers add one
	out.Write(le.AppendUint32(nil, 5))
	out.WriteString("INFOx\x00") // odd size, padded
	out.WriteString("fmt ")
	out.Write(le.AppendUint32(nil, uint32(fmtChunk.Len())))
	out.Write(fmtChunk.Bytes())
	out.WriteString("data")
	out.Write(le.AppendUint32(nil, uint32(data.Len())))
	out.Write(data.Bytes())
	if data.Len()&1 == 1 {
		out.WriteByte(0)
	}
	b := out.Bytes()
	le.PutUint32(b[4:], uint32(len(b)-8))
	return b
}

// RMS returns the root mean square of s.
func RMS(s []float32) float64 {
	if len(s) == 0 {
		return 0
	}
	var acc float64
	for _, v := range s {
		acc += float64(v) * float64(v)
	}
	return math.Sqrt(acc / float64(len(s)))
}

// Level returns the amplitude of the freq Hz component of s at rate Hz
// (Goertzel), 1 for a full-scale sine.
func Level(s []float32, rate int, freq float64) float64 {
	w := 2 * math.Pi * freq / float64(rate)
	c := 2 * math.Cos(w)
	var s1, s2 float64
	for _, v := range s {
		s0 := float64(v) + c*s1 - s2
		s2, s1 = s1, s0
	}
	re := s1 - s2*math.Cos(w)
	im := s2 * math.Sin(w)
	return 2 * math.Hypot(re, im) / float64(len(s))
}
