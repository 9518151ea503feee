package video

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"image"
	"io"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"verdict/media/ffmpeg"
	"verdict/media/limits"
	"verdict/media/pcm"
)

// frames samples frames with ffmpeg: the select filter takes the first frame
// at or after each multiple of the interval (no duplicated frames), showinfo
// reports their timestamps, and frames come back as binary PPM.
func (r *Reader) frames(ctx context.Context, path string, info Info, opt Options, max time.Duration) ([]Frame, time.Duration, error) {
	iv := interval(info.Duration, opt)
	filter := fmt.Sprintf("select='gte(t,%s*selected_n)',"+
		"scale=w='if(gte(iw,ih),min(iw,%d),-2)':h='if(gte(iw,ih),-2,min(ih,%d))',showinfo",
		strconv.FormatFloat(iv.Seconds(), 'f', 6, 64), opt.MaxSide, opt.MaxSide)
	args := []string{"-nostdin", "-hide_banner", "-v", "info", "-i", path,
		"-t", secondsArg(max + time.Second), // stop a little past the limit whatever the container says
		"-map", "0:v:0", "-an", "-sn", "-dn", "-vf", filter, "-fps_mode", "passthrough",
		"-frames:v", strconv.Itoa(opt.MaxFrames), "-c:v", "ppm", "-f", "image2pipe", "pipe:1"}
	times := &showinfo{}
	var frames []Frame
	err := r.tools.Stream(ctx, r.tools.FFmpeg, ffmpeg.Cmd{Args: args, Stderr: times}, func(stdout io.Reader) error {
		br := bufio.NewReaderSize(stdout, 1<<20)
		for {
			img, err := readPPM(br)
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return err
			}
			frames = append(frames, Frame{Image: img})
		}
	})
	if err != nil {
		return nil, 0, fmt.Errorf("video %s: sample frames: %w", path, err)
	}
	ts := times.list()
	if len(ts) < len(frames) {
		return nil, 0, fmt.Errorf("video %s: %d frames but %d timestamps from ffmpeg", path, len(frames), len(ts))
	}
	// ffmpeg shifts input timestamps to start at 0 (no -copyts), so these
	// are times from the start of the file.
	for i := range frames {
		frames[i].Time = time.Duration(math.Max(0, ts[i]) * float64(time.Second)).Round(time.Millisecond)
	}
	return frames, iv, nil
}

// soundtrack extracts the first audio stream as float32 at its native rate
// and channel count, then downmixes and resamples in Go.
func (r *Reader) soundtrack(ctx context.Context, path string, info Info, max time.Duration, limit string) (pcm.Clip, error) {
	rate, ch := info.SampleRate, info.Channels
	args := []string{"-nostdin", "-v", "error", "-i", path, "-map", "0:a:0", "-vn", "-sn", "-dn"}
	if max > 0 {
		args = append(args, "-t", secondsArg(max+time.Second))
	}
	if rate <= 0 || ch <= 0 { // unknown: let ffmpeg convert
		rate, ch = pcm.ModelRate, 1
		args = append(args, "-ar", strconv.Itoa(rate), "-ac", "1")
	}
	args = append(args, "-f", "f32le", "-acodec", "pcm_f32le", "pipe:1")
	maxBytes := int64(math.MaxInt32)
	if max > 0 {
		maxBytes = int64((max+2*time.Second).Seconds()*float64(rate)) * int64(ch) * 4
	}
	raw, err := r.tools.Output(ctx, r.tools.FFmpeg, ffmpeg.Cmd{Args: args}, maxBytes)
	if err != nil {
		return pcm.Clip{}, fmt.Errorf("video %s: extract soundtrack: %w", path, err)
	}
	s := make([]float32, len(raw)/4/ch*ch)
	for i := range s {
		s[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	a := pcm.Interleaved{Samples: s, Channels: ch, Rate: rate}
	if max > 0 && a.Duration() > max {
		e := limits.Duration(limit, a.Duration(), max)
		e.Source, e.AtLeast = path, a.Duration() >= max+time.Second-100*time.Millisecond // cut at -t
		return pcm.Clip{}, e
	}
	clip, err := a.ForModel()
	if err != nil {
		return pcm.Clip{}, fmt.Errorf("video %s: soundtrack: %w", path, err)
	}
	return clip, nil
}

// readPPM reads one binary PPM (P6, maxval 255) image.
func readPPM(br *bufio.Reader) (*image.RGBA, error) {
	var fields []int
	magic := make([]byte, 2)
	if _, err := io.ReadFull(br, magic); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("frame header: %w", err)
		}
		return nil, err // io.EOF between frames: done
	}
	if string(magic) != "P6" {
		return nil, fmt.Errorf("frame is not a PPM image (%q)", magic)
	}
	for len(fields) < 3 {
		tok, err := ppmToken(br)
		if err != nil {
			return nil, fmt.Errorf("frame header: %w", err)
		}
		v, err := strconv.Atoi(tok)
		if err != nil || v <= 0 || v > 1<<15 {
			return nil, fmt.Errorf("frame header value %q", tok)
		}
		fields = append(fields, v)
	}
	w, h := fields[0], fields[1]
	if fields[2] != 255 {
		return nil, fmt.Errorf("frame maxval %d", fields[2])
	}
	rgb := make([]byte, w*h*3)
	if _, err := io.ReadFull(br, rgb); err != nil {
		return nil, fmt.Errorf("frame data: %w", err)
	}
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for i, j := 0, 0; i < len(rgb); i, j = i+3, j+4 {
		img.Pix[j], img.Pix[j+1], img.Pix[j+2], img.Pix[j+3] = rgb[i], rgb[i+1], rgb[i+2], 255
	}
	return img, nil
}

// ppmToken reads one whitespace-separated header token (skipping comments)
// and the single whitespace byte after it.
func ppmToken(br *bufio.Reader) (string, error) {
	var tok []byte
	for {
		c, err := br.ReadByte()
		if err != nil {
			return "", err
		}
		switch {
		case c == '#':
			if _, err := br.ReadString('\n'); err != nil {
				return "", err
			}
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			if len(tok) > 0 {
				return string(tok), nil
			}
		default:
			tok = append(tok, c)
		}
	}
}

// showinfo collects pts_time values from ffmpeg's showinfo filter log lines.
type showinfo struct {
	mu    sync.Mutex
	line  []byte
	times []float64
}

func (s *showinfo) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.line = append(s.line, p...)
	for {
		i := bytes.IndexByte(s.line, '\n')
		if i < 0 {
			return len(p), nil
		}
		l := string(s.line[:i])
		s.line = s.line[i+1:]
		if !strings.Contains(l, "showinfo") {
			continue
		}
		if _, rest, ok := strings.Cut(l, "pts_time:"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				if v, err := strconv.ParseFloat(f[0], 64); err == nil {
					s.times = append(s.times, v)
				}
			}
		}
	}
}

func (s *showinfo) list() []float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]float64(nil), s.times...)
}

func secondsArg(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', 3, 64)
}
