package decode

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"verdict/media/internal/mediatest"
	"verdict/media/limits"
	"verdict/media/pcm"
)

func TestDecodeWAV(t *testing.T) {
	tests := []struct {
		format, bits, channels, rate int
		extensible                   bool
		tol                          float64 // of the 440 Hz level
	}{
		{1, 8, 1, 8000, false, 0.02},
		{1, 16, 1, 16000, false, 0.005},
		{1, 16, 2, 44100, false, 0.005},
		{1, 24, 2, 48000, false, 0.005},
		{1, 32, 1, 22050, false, 0.005},
		{3, 32, 2, 48000, false, 0.005},
		{3, 64, 1, 32000, false, 0.005},
		{1, 16, 6, 48000, true, 0.005},
		{3, 32, 4, 96000, true, 0.005},
		{1, 24, 3, 11025, true, 0.005},
	}
	for _, tt := range tests {
		samples := mediatest.Sine(tt.rate, tt.channels, 440, 0.5, time.Second)
		data := mediatest.WAV(samples, tt.channels, tt.rate, tt.format, tt.bits, tt.extensible)
		snd, err := DecodeAudio("tone.wav", data, limits.MaxAudio)
		if err != nil {
			t.Errorf("%+v: %v", tt, err)
			continue
		}
		if snd.Format != WAV || snd.Rate != tt.rate || snd.Channels != tt.channels {
			t.Errorf("%+v: got %s %d Hz %d channels", tt, snd.Format, snd.Rate, snd.Channels)
		}
		if snd.Clip.Rate != pcm.ModelRate || snd.Duration() != time.Second {
			t.Errorf("%+v: clip %d Hz %v, want 16 kHz 1s", tt, snd.Clip.Rate, snd.Duration())
		}
		if lvl := mediatest.Level(snd.Clip.Samples, pcm.ModelRate, 440); math.Abs(lvl-0.5) > tt.tol {
			t.Errorf("%+v: 440 Hz level %.4f, want 0.5", tt, lvl)
		}
	}
}

func TestDecodeWAVStereoDownmix(t *testing.T) {
	// Left +0.5, right -0.5 cancel; left 0.5, right 0 average to 0.25.
	s := []float32{0.5, -0.5, 0.5, -0.5, 0.5, 0, 0.5, 0}
	snd, err := DecodeAudio("st.wav", mediatest.WAV(s, 2, 16000, 3, 32, false), 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []float32{0, 0, 0.25, 0.25}
	for i, v := range want {
		if snd.Clip.Samples[i] != v {
			t.Fatalf("mono %v, want %v", snd.Clip.Samples, want)
		}
	}
}

func TestDecodeWAVErrors(t *testing.T) {
	good := mediatest.WAV(mediatest.Sine(16000, 1, 440, 0.5, 100*time.Millisecond), 1, 16000, 1, 16, false)
	bits12 := append([]byte{}, good...)
	patchFmt(bits12, func(f []byte) { f[14] = 12 })
	alaw := append([]byte{}, good...)
	patchFmt(alaw, func(f []byte) { f[0] = 6 })
	noChannels := append([]byte{}, good...)
	patchFmt(noChannels, func(f []byte) { f[2] = 0 })
	tests := []struct {
		name    string
		data    []byte
		problem error
		msg     string
	}{
		{"cut.wav", good[:len(good)-100], ErrTruncated, "data chunk declares"},
		{"header-only.wav", good[:20], ErrTruncated, "truncated"},
		{"12bit.wav", bits12, ErrUnsupported, "12-bit integer PCM"},
		{"alaw.wav", alaw, ErrUnsupported, "0x0006"},
		{"nochannels.wav", noChannels, ErrCorrupt, "0 channels"},
		{"empty.wav", []byte{}, ErrEmpty, "empty"},
		{"noise.wav", []byte(strings.Repeat("not audio ", 10)), ErrUnsupported, "not a recognised audio"},
		{"photo.wav", encode(t, PNG), ErrUnsupported, "an image, not audio"},
		{"voice.opus", []byte("OggS\x00\x02" + strings.Repeat("\x00", 22) + "OpusHead"), ErrUnsupported, "Ogg Opus files are not supported"},
	}
	for _, tt := range tests {
		_, err := DecodeAudio(tt.name, tt.data, limits.MaxAudio)
		var de *Error
		if !errors.As(err, &de) || !errors.Is(err, tt.problem) {
			t.Errorf("%s: %v, want %v", tt.name, err, tt.problem)
			continue
		}
		if !strings.Contains(err.Error(), tt.name) || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("%s: message %q should name the file and say %q", tt.name, err, tt.msg)
		}
	}
}

// patchFmt edits the fmt chunk body of a WAV written by mediatest.WAV.
func patchFmt(wav []byte, edit func([]byte)) {
	i := strings.Index(string(wav), "fmt ")
	edit(wav[i+8:])
}

func TestDecodeAudioDurationLimit(t *testing.T) {
	long := mediatest.WAV(make([]float32, 31*8000), 1, 8000, 1, 16, false)
	_, err := DecodeAudio("long.wav", long, limits.MaxAudio)
	var le *limits.Error
	if !errors.As(err, &le) || le.Limit != limits.AudioDuration || le.Value != 31 || le.AtLeast {
		t.Fatalf("31 s WAV: %v, want an exact audio duration limit error", err)
	}
	if !strings.Contains(err.Error(), "long.wav") || !strings.Contains(err.Error(), "31 s exceeds the limit of 30 s") {
		t.Errorf("message %q", err)
	}
	if _, err := DecodeAudio("long.wav", long, 0); err != nil {
		t.Errorf("no limit: %v", err)
	}
	exact := mediatest.WAV(make([]float32, 30*8000), 1, 8000, 1, 16, false)
	if _, err := DecodeAudio("exact.wav", exact, limits.MaxAudio); err != nil {
		t.Errorf("30 s WAV: %v", err)
	}
}

// encodeWith converts a WAV to another format with ffmpeg.
func encodeWith(t *testing.T, wav []byte, ext string, args ...string) []byte {
	t.Helper()
	dir := t.TempDir()
	in, out := filepath.Join(dir, "in.wav"), filepath.Join(dir, "out."+ext)
	if err := os.WriteFile(in, wav, 0o644); err != nil {
		t.Fatal(err)
	}
	mediatest.Run(t, "ffmpeg", append(append([]string{"-nostdin", "-v", "error", "-y", "-i", in}, args...), out)...)
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestDecodeCompressedFormats(t *testing.T) {
	tests := []struct {
		ext, format string
		args        []string
		rate, ch    int
		lossless    bool
	}{
		{"flac", FLAC, nil, 44100, 2, true},
		{"flac", FLAC, []string{"-sample_fmt", "s32"}, 48000, 1, true},
		{"mp3", MP3, []string{"-c:a", "libmp3lame", "-b:a", "192k"}, 44100, 2, false},
		{"mp3", MP3, []string{"-c:a", "libmp3lame", "-b:a", "64k"}, 22050, 1, false}, // MPEG-2: through ffmpeg
		{"mp3", MP3, []string{"-c:a", "libmp3lame", "-b:a", "128k"}, 48000, 1, false},
		{"ogg", OggVorbis, []string{"-c:a", "libvorbis", "-q:a", "6"}, 48000, 2, false},
		{"ogg", OggVorbis, []string{"-c:a", "libvorbis"}, 16000, 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.format+"/"+strings.Join(tt.args, ""), func(t *testing.T) {
			wav := mediatest.WAV(mediatest.Sine(tt.rate, tt.ch, 440, 0.5, 2*time.Second), tt.ch, tt.rate, 1, 16, false)
			data := encodeWith(t, wav, tt.ext, tt.args...)
			snd, err := DecodeAudio("tone."+tt.ext, data, limits.MaxAudio)
			if err != nil {
				t.Fatal(err)
			}
			ref, err := DecodeAudio("tone.wav", wav, limits.MaxAudio)
			if err != nil {
				t.Fatal(err)
			}
			if snd.Format != tt.format || snd.Rate != tt.rate || snd.Clip.Rate != pcm.ModelRate {
				t.Errorf("got %s at %d Hz → %d Hz", snd.Format, snd.Rate, snd.Clip.Rate)
			}
			if d := snd.Duration() - 2*time.Second; d < -30*time.Millisecond || d > 80*time.Millisecond {
				t.Errorf("duration %v, want about 2s", snd.Duration())
			}
			if tt.lossless {
				if len(snd.Clip.Samples) != len(ref.Clip.Samples) {
					t.Fatalf("%d samples, WAV gives %d", len(snd.Clip.Samples), len(ref.Clip.Samples))
				}
				for i := range snd.Clip.Samples {
					if math.Abs(float64(snd.Clip.Samples[i]-ref.Clip.Samples[i])) > 1e-6 {
						t.Fatalf("sample %d: %v, WAV gives %v", i, snd.Clip.Samples[i], ref.Clip.Samples[i])
					}
				}
			}
			mid := snd.Clip.Samples[4000:28000]
			if lvl := mediatest.Level(mid, pcm.ModelRate, 440); math.Abs(lvl-0.5) > 0.03 { // lossy: within 0.5 dB
				t.Errorf("440 Hz level %.4f, want 0.5", lvl)
			}
			if lvl := mediatest.Level(mid, pcm.ModelRate, 1000); lvl > 0.01 {
				t.Errorf("1 kHz level %.4f, want none", lvl)
			}
		})
	}
}

func TestDecodeMP3LowRateNeedsFFmpeg(t *testing.T) {
	wav := mediatest.WAV(mediatest.Sine(22050, 1, 440, 0.5, time.Second), 1, 22050, 1, 16, false)
	data := encodeWith(t, wav, "mp3", "-c:a", "libmp3lame")
	t.Setenv("PATH", t.TempDir())
	_, err := DecodeAudio("low.mp3", data, limits.MaxAudio)
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "MPEG-2 layer III at 22050 Hz needs the ffmpeg tool (go-mp3 garbles it): ffmpeg was not found on PATH") {
		t.Errorf("without ffmpeg: %v", err)
	}
}

func TestDecodeSpeech(t *testing.T) {
	mediatest.Tool(t, "espeak-ng")
	dir := t.TempDir()
	wavPath := filepath.Join(dir, "speech.wav")
	mediatest.Run(t, "espeak-ng", "-w", wavPath, "Is a person visible in this picture? Priority high.")
	snd, err := AudioFile(wavPath, limits.MaxAudio)
	if err != nil {
		t.Fatal(err)
	}
	if snd.Format != WAV || snd.Duration() < time.Second || snd.Duration() > 10*time.Second {
		t.Fatalf("speech: %s %v", snd.Format, snd.Duration())
	}
	if rms := mediatest.RMS(snd.Clip.Samples); rms < 0.01 {
		t.Errorf("speech RMS %.4f: silent?", rms)
	}
	wav, err := os.ReadFile(wavPath)
	if err != nil {
		t.Fatal(err)
	}
	// The same speech through every compressed format.
	for _, c := range []struct{ ext, format string }{{"flac", FLAC}, {"mp3", MP3}, {"ogg", OggVorbis}} {
		other, err := DecodeAudio("speech."+c.ext, encodeWith(t, wav, c.ext), limits.MaxAudio)
		if err != nil {
			t.Errorf("%s: %v", c.ext, err)
			continue
		}
		ratio := mediatest.RMS(other.Clip.Samples) / mediatest.RMS(snd.Clip.Samples)
		if other.Format != c.format || ratio < 0.85 || ratio > 1.15 {
			t.Errorf("%s: format %s, RMS ratio to WAV %.3f", c.ext, other.Format, ratio)
		}
	}
}

func TestDecodeCompressedErrors(t *testing.T) {
	wav := mediatest.WAV(mediatest.Sine(44100, 2, 440, 0.5, time.Second), 2, 44100, 1, 16, false)
	flac := encodeWith(t, wav, "flac")
	ogg := encodeWith(t, wav, "ogg", "-c:a", "libvorbis")
	mp3 := encodeWith(t, wav, "mp3", "-c:a", "libmp3lame")
	corruptFLAC := append([]byte{}, flac...)
	for i := len(flac) / 2; i < len(flac)/2+200; i++ {
		corruptFLAC[i] ^= 0xa5
	}
	corruptOgg := append([]byte{}, ogg...)
	for i := 200; i < len(ogg)-100; i += 7 {
		corruptOgg[i] ^= 0xa5
	}
	tests := []struct {
		name     string
		data     []byte
		problems []error
	}{
		{"cut.flac", flac[:len(flac)/2], []error{ErrTruncated}},
		{"head.flac", flac[:30], []error{ErrTruncated}},
		{"corrupt.flac", corruptFLAC, []error{ErrCorrupt, ErrTruncated}},
		{"head.ogg", ogg[:60], []error{ErrTruncated}},
		{"corrupt.ogg", corruptOgg, []error{ErrCorrupt, ErrTruncated}},
		{"head.mp3", mp3[:3], []error{ErrTruncated, ErrUnsupported, ErrCorrupt}},
		{"noframes.mp3", append([]byte("ID3\x03\x00\x00\x00\x00\x00\x00"), make([]byte, 400)...), []error{ErrCorrupt, ErrTruncated}},
	}
	for _, tt := range tests {
		_, err := DecodeAudio(tt.name, tt.data, limits.MaxAudio)
		var de *Error
		if !errors.As(err, &de) {
			t.Errorf("%s: %v, want *Error", tt.name, err)
			continue
		}
		ok := false
		for _, p := range tt.problems {
			ok = ok || errors.Is(err, p)
		}
		if !ok || !strings.Contains(err.Error(), tt.name) {
			t.Errorf("%s: %v, want one of %v naming the file", tt.name, err, tt.problems)
		}
	}
	// A long compressed file is refused from its header, before decoding.
	long := encodeWith(t, mediatest.WAV(make([]float32, 40*8000), 1, 8000, 1, 16, false), "flac")
	_, err := DecodeAudio("long.flac", long, limits.MaxAudio)
	var le *limits.Error
	if !errors.As(err, &le) || le.Value != 40 {
		t.Errorf("40 s FLAC: %v", err)
	}
	longMP3 := encodeWith(t, mediatest.WAV(make([]float32, 40*8000), 1, 8000, 1, 16, false), "mp3", "-c:a", "libmp3lame")
	// MPEG-2.5 at 8 kHz goes through ffmpeg, which stops a second past the limit.
	if _, err := DecodeAudio("long.mp3", longMP3, limits.MaxAudio); !errors.As(err, &le) || le.Value <= 30 || !le.AtLeast {
		t.Errorf("40 s MP3: %v", err)
	}
	longMP3 = encodeWith(t, mediatest.WAV(make([]float32, 40*44100), 1, 44100, 1, 16, false), "mp3", "-c:a", "libmp3lame")
	if _, err := DecodeAudio("long.mp3", longMP3, limits.MaxAudio); !errors.As(err, &le) || le.Value < 40 || le.AtLeast {
		t.Errorf("40 s MPEG-1 MP3: %v", err)
	}
	// A cut MP3 has no length to contradict: it decodes shorter, or fails as truncated.
	if snd, err := DecodeAudio("cut.mp3", mp3[:len(mp3)/2], limits.MaxAudio); err != nil && !errors.Is(err, ErrTruncated) {
		t.Errorf("cut MP3: %v", err)
	} else if err == nil && (snd.Duration() < 300*time.Millisecond || snd.Duration() > 700*time.Millisecond) {
		t.Errorf("cut MP3 decoded to %v", snd.Duration())
	}
	longOgg := encodeWith(t, mediatest.WAV(make([]float32, 40*8000), 1, 8000, 1, 16, false), "ogg", "-c:a", "libvorbis")
	if _, err := DecodeAudio("long.ogg", longOgg, limits.MaxAudio); !errors.As(err, &le) || le.Value < 40 {
		t.Errorf("40 s Ogg: %v", err)
	}
}
