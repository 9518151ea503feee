// Package availability reports which media features work on this machine
// (camera, microphone, speaker, video files) and, for each missing one, why:
// what the UI shows as "unavailable (reason)".
package availability

import (
	"context"
	"errors"
	"time"

	"verdict/media/capture"
	"verdict/media/ffmpeg"
	"verdict/media/playback"
)

// Feature is one media feature's state.
type Feature struct {
	Available bool     `json:"available"`
	Reason    string   `json:"reason,omitempty"`  // why it is unavailable, in plain words
	Detail    string   `json:"detail,omitempty"`  // the system's own message behind Reason (e.g. ALSA's)
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
	_, err := playback.Open(speakerTimeout)
	r.Speaker = speaker(err)
	r.Video = video(ctx)
	return r
}

// speaker says in plain words why there is no speaker; the driver's text
// (e.g. "oto: ALSA error at snd_pcm_open: No such file or directory")
// becomes the detail.
func speaker(err error) Feature {
	if err == nil {
		return Feature{Available: true}
	}
	var ue *playback.UnavailableError
	if !errors.As(err, &ue) {
		return Feature{Reason: "no speaker: the sound output could not be opened", Detail: err.Error()}
	}
	if ue.Err == nil { // the device did not become ready: the reason is already plain
		return Feature{Reason: err.Error()}
	}
	return Feature{Reason: "no speaker: no sound output device was found", Detail: ue.Err.Error()}
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
