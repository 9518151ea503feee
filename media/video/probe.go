package video

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"

	"verdict/media/ffmpeg"
)

// Info is what ffprobe reports about a media file.
type Info struct {
	Format     string        // container, e.g. "mov,mp4,m4a,3gp,3g2,mj2"
	Duration   time.Duration // 0 when the container does not say
	HasVideo   bool          // a video stream that is not just cover art
	HasAudio   bool
	Width      int // displayed size (rotation applied)
	Height     int
	FrameRate  float64
	VideoCodec string
	AudioCodec string
	SampleRate int // of the first audio stream
	Channels   int
	rotation   int
}

type probeJSON struct {
	Format struct {
		FormatName string `json:"format_name"`
		Duration   string `json:"duration"`
	} `json:"format"`
	Streams []struct {
		CodecType    string `json:"codec_type"`
		CodecName    string `json:"codec_name"`
		Width        int    `json:"width"`
		Height       int    `json:"height"`
		SampleRate   string `json:"sample_rate"`
		Channels     int    `json:"channels"`
		Duration     string `json:"duration"`
		AvgFrameRate string `json:"avg_frame_rate"`
		Disposition  struct {
			AttachedPic int `json:"attached_pic"`
		} `json:"disposition"`
		Tags struct {
			Rotate string `json:"rotate"`
		} `json:"tags"`
		SideData []struct {
			Rotation float64 `json:"rotation"`
		} `json:"side_data_list"`
	} `json:"streams"`
}

// Probe runs ffprobe on a file.
func (r *Reader) Probe(ctx context.Context, path string) (Info, error) {
	out, err := r.tools.Output(ctx, r.tools.FFprobe, ffmpeg.Cmd{Args: []string{
		"-v", "error", "-print_format", "json", "-show_format", "-show_streams", "--", path}}, 1<<22)
	if err != nil {
		return Info{}, fmt.Errorf("probe %s: %w", path, err)
	}
	var p probeJSON
	if err := json.Unmarshal(out, &p); err != nil {
		return Info{}, fmt.Errorf("probe %s: ffprobe output: %w", path, err)
	}
	info := Info{Format: p.Format.FormatName, Duration: seconds(p.Format.Duration)}
	for _, s := range p.Streams {
		switch {
		case s.CodecType == "video" && s.Disposition.AttachedPic == 0 && !info.HasVideo:
			info.HasVideo = true
			info.VideoCodec = s.CodecName
			info.Width, info.Height = s.Width, s.Height
			info.FrameRate = ratio(s.AvgFrameRate)
			if v, err := strconv.Atoi(s.Tags.Rotate); err == nil {
				info.rotation = v
			}
			for _, sd := range s.SideData {
				if sd.Rotation != 0 {
					info.rotation = int(sd.Rotation)
				}
			}
			if r := ((info.rotation % 360) + 360) % 360; r == 90 || r == 270 {
				info.Width, info.Height = info.Height, info.Width
			}
			if info.Duration == 0 {
				info.Duration = seconds(s.Duration)
			}
		case s.CodecType == "audio" && !info.HasAudio:
			info.HasAudio = true
			info.AudioCodec = s.CodecName
			info.SampleRate, _ = strconv.Atoi(s.SampleRate)
			info.Channels = s.Channels
			if info.Duration == 0 {
				info.Duration = seconds(s.Duration)
			}
		}
	}
	if !info.HasVideo && !info.HasAudio {
		return info, fmt.Errorf("probe %s: no audio or video stream (format %q)", path, info.Format)
	}
	return info, nil
}

func parseFloat(s string) float64 {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0
	}
	return v
}

func seconds(s string) time.Duration {
	v := parseFloat(s)
	if v <= 0 {
		return 0
	}
	return time.Duration(v * float64(time.Second))
}

func ratio(s string) float64 {
	var n, d float64
	if _, err := fmt.Sscanf(s, "%g/%g", &n, &d); err != nil || d == 0 {
		return 0
	}
	return n / d
}
