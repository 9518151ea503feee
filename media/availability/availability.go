// Package availability reports which media features work on this machine
// (camera, microphone, speaker, video files) and, for each missing one, why:
// what the UI shows as "unavailable (reason)".
package availability

import (
	"context"
	"time"

	"verdict/media/capture"
	"verdict/media/ffmpeg"
	"verdict/media/playback"
)

// Feature is one media feature's state.
type Feature struct {
	Available bool     `json:"available"`
	Reason    string   `json:"reason,omitempty"`  // why it is unavailable
	Devices   []string `json:"devices,omitempty"` // device labels, or the ffmpeg version
}

// Report is the state of every media feature.
type Report struct {
	Camera     Feature `json:"camera"`
	Microphone Feature `json:"microphone"`
	Speaker    Feature `json:"speaker"`
	Video      Feature `json:"video"`
}

// Check looks at the devices of d, the speaker (waiting at most
// speakerTimeout for it) and the ffmpeg tools; ctx bounds the ffmpeg check.
// It never fails: problems become reasons.
func Check(ctx context.Context, d *capture.Devices, speakerTimeout time.Duration) Report {
	var r Report
	r.Camera = devices(d.Cameras())
	r.Microphone = devices(d.Microphones())
	if _, err := playback.Open(speakerTimeout); err != nil {
		r.Speaker = Feature{Reason: err.Error()}
	} else {
		r.Speaker = Feature{Available: true}
	}
	r.Video = video(ctx)
	return r
}

func devices(devs []capture.Device, err error) Feature {
	if err != nil {
		return Feature{Reason: err.Error()}
	}
	f := Feature{Available: true}
	for _, dev := range devs {
		f.Devices = append(f.Devices, dev.Label)
	}
	return f
}

func video(ctx context.Context) Feature {
	tools, err := ffmpeg.Find()
	if err != nil {
		return Feature{Reason: err.Error()}
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	v, err := tools.Version(ctx)
	if err != nil {
		return Feature{Reason: "video input is unavailable: ffmpeg does not run: " + err.Error()}
	}
	return Feature{Available: true, Devices: []string{v}}
}
