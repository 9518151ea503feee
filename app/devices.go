package app

import (
	"context"
	"errors"
	"fmt"
	"image"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"verdict/media/capture"
	"verdict/media/limits"
	"verdict/media/pcm"
	"verdict/media/playback"
	"verdict/media/preview"
)

// The camera's live feed: small JPEG previews at a low rate.
const (
	CameraInterval    = 333 * time.Millisecond // about 3 frames a second
	CameraPreviewSide = 320
	CameraMaxLive     = 10 * time.Minute // the feed stops by itself after this
	// CameraTimeout bounds opening the camera and waiting for a snapshot.
	CameraTimeout = 10 * time.Second
)

// RecordChoices are the recording lengths the page offers, in seconds
// (Record takes any length from 1 s up to the 30 s audio limit).
var RecordChoices = []int{5, 10, 30}

// RecordInterval is the shortest time between two mic:state events.
const RecordInterval = 100 * time.Millisecond

// SpeakerTimeout bounds the wait for the audio output device.
const SpeakerTimeout = 2 * time.Second

// CameraState is the camera's live feed (camera:state).
type CameraState struct {
	Live   bool   `json:"live"`
	Device string `json:"device,omitempty"`
	Seq    int64  `json:"seq"`
	Error  string `json:"error,omitempty"`
}

// CameraFrame announces a new live frame (camera:frame): the page loads URL.
type CameraFrame struct {
	Seq    int64  `json:"seq"`
	URL    string `json:"url"`
	Width  int    `json:"width"`
	Height int    `json:"height"`
}

// RecordingState is a microphone recording (mic:state): its countdown while
// it records, then the clip it became or why not.
type RecordingState struct {
	Recording  bool       `json:"recording"`
	Device     string     `json:"device,omitempty"`
	RecordedMs float64    `json:"recorded_ms"`
	TotalMs    float64    `json:"total_ms"`
	Stopped    bool       `json:"stopped,omitempty"` // stopped early
	Item       *MediaItem `json:"item,omitempty"`
	Error      string     `json:"error,omitempty"`
	Limit      *LimitInfo `json:"limit,omitempty"`
}

// PlaybackState is the audio playback (playback:state).
type PlaybackState struct {
	Playing bool   `json:"playing"`
	ID      string `json:"id,omitempty"`
	Error   string `json:"error,omitempty"`
}

// liveState holds the camera feed, the recording and the playback.
type liveState struct {
	mu        sync.Mutex
	cam       *capture.Camera
	camDev    string
	camCancel context.CancelFunc
	camDone   chan struct{}
	frame     []byte
	seq       int64

	rec       RecordingState
	recCancel context.CancelFunc
	recDone   chan struct{}

	playID     string
	playCancel context.CancelFunc
	playDone   chan struct{}
}

func openSpeaker(timeout time.Duration) (Speaker, error) {
	sp, err := playback.Open(timeout)
	if err != nil {
		return nil, err
	}
	return sp, nil
}

func (l *liveState) latestFrame() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.frame
}

func (l *liveState) cameraLocked() CameraState {
	return CameraState{Live: l.cam != nil, Device: l.camDev, Seq: l.seq}
}

// Camera returns the camera's live state.
func (s *Media) Camera() CameraState {
	s.live.mu.Lock()
	defer s.live.mu.Unlock()
	return s.live.cameraLocked()
}

// StartCamera opens a camera (id "" for the first) and streams small JPEG
// previews of it, about 3 a second, as camera:frame events until StopCamera
// (or CameraMaxLive).
func (s *Media) StartCamera(cameraID string) (CameraState, error) {
	l := &s.live
	l.mu.Lock()
	if l.cam != nil {
		st := l.cameraLocked()
		l.mu.Unlock()
		return st, nil
	}
	l.mu.Unlock()
	cam, err := s.devices.OpenCamera(cameraID, capture.CameraOptions{Width: 640, Height: 480})
	if err != nil {
		s.log.WithError(err).Warn("camera not started")
		return CameraState{Error: err.Error()}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), CameraMaxLive)
	done := make(chan struct{})
	l.mu.Lock()
	if l.cam != nil { // started meanwhile
		st := l.cameraLocked()
		l.mu.Unlock()
		cancel()
		cam.Close()
		return st, nil
	}
	l.cam, l.camDev, l.camCancel, l.camDone = cam, cam.Device().Label, cancel, done
	st := l.cameraLocked()
	l.mu.Unlock()
	s.log.WithField("camera", st.Device).Info("camera live")
	s.emit.Emit(EventCameraState, st)
	go s.feed(ctx, cam, done)
	return st, nil
}

// feed turns the camera's frames into previews until ctx ends or the camera
// stops.
func (s *Media) feed(ctx context.Context, cam *capture.Camera, done chan struct{}) {
	l := &s.live
	defer close(done)
	for f := range cam.Feed(ctx, CameraInterval) {
		b, err := preview.JPEG(f.Image, CameraPreviewSide, 70)
		if err != nil {
			continue
		}
		th := preview.Thumbnail(f.Image, CameraPreviewSide).Rect
		l.mu.Lock()
		l.frame = b
		l.seq++
		seq := l.seq
		l.mu.Unlock()
		s.emit.Emit(EventCameraFrame, CameraFrame{Seq: seq, URL: fmt.Sprintf("/media/camera/live.jpg?seq=%d", seq), Width: th.Dx(), Height: th.Dy()})
	}
	var reason string
	switch {
	case cam.Err() != nil:
		reason = cam.Err().Error()
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		reason = fmt.Sprintf("the live feed stops after %v: start it again", CameraMaxLive)
	}
	cam.Close()
	l.mu.Lock()
	if l.cam == cam {
		l.cam, l.camCancel, l.camDone, l.frame = nil, nil, nil, nil
	}
	st := l.cameraLocked()
	l.mu.Unlock()
	st.Error = reason
	s.log.WithField("reason", reason).Info("camera stopped")
	s.emit.Emit(EventCameraState, st)
}

// StopCamera stops the live feed and releases the camera.
func (s *Media) StopCamera() CameraState {
	l := &s.live
	l.mu.Lock()
	cancel, done := l.camCancel, l.camDone
	l.mu.Unlock()
	s.stopAndWait(cancel, done, "camera")
	return s.Camera()
}

// Snapshot takes a picture with the camera (the live one, or camera id, ""
// for the first) and adds it to the input as an image.
func (s *Media) Snapshot(cameraID string) MediaResult {
	name := "camera " + time.Now().Format("15:04:05")
	img, dev, err := s.snapshot(cameraID)
	if err != nil {
		s.log.WithError(err).Warn("no snapshot")
		return failed(name, err)
	}
	e, err := newImageEntry(img, name, SourceCamera)
	if err != nil {
		return failed(name, err)
	}
	e.item.Format = dev
	if err := s.insert(e, nil); err != nil {
		return failed(name, err)
	}
	it := s.itemOf(e)
	s.log.WithFields(logrus.Fields{"camera": dev, "width": it.Width, "height": it.Height}).Info("snapshot added")
	s.changed()
	return MediaResult{Name: name, Item: &it}
}

func (s *Media) snapshot(cameraID string) (img *image.RGBA, device string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), CameraTimeout)
	defer cancel()
	l := &s.live
	l.mu.Lock()
	cam := l.cam
	l.mu.Unlock()
	if cam != nil && (cameraID == "" || cameraID == cam.Device().ID) {
		img, err := cam.Snapshot(ctx)
		return img, cam.Device().Label, err
	}
	cam, err = s.devices.OpenCamera(cameraID, capture.CameraOptions{})
	if err != nil {
		return nil, "", err
	}
	defer cam.Close()
	img, err = cam.Snapshot(ctx)
	return img, cam.Device().Label, err
}

// Recording returns the microphone's state: the recording in progress or
// the last one.
func (s *Media) Recording() RecordingState {
	s.live.mu.Lock()
	defer s.live.mu.Unlock()
	return s.live.rec
}

// Record records seconds (1..30) from a microphone (id "" for the first) and
// returns at once: mic:state events count down (at most 10 a second), and
// the clip then replaces the input's audio. StopRecording ends it early and
// keeps what was recorded.
func (s *Media) Record(micID string, seconds int) (RecordingState, error) {
	d := time.Duration(seconds) * time.Second
	if seconds < 1 {
		return RecordingState{}, fmt.Errorf("record: %d s is too short (1 to %v)", seconds, limits.MaxAudio)
	}
	if d > limits.MaxAudio {
		err := limits.Duration(limits.AudioDuration, d, limits.MaxAudio)
		return RecordingState{Error: err.Error(), Limit: limitInfo(err)}, err
	}
	l := &s.live
	l.mu.Lock()
	busy := l.rec.Recording
	l.mu.Unlock()
	if busy {
		return s.Recording(), errors.New("a recording is in progress: stop it first")
	}
	mic, err := s.devices.OpenMicrophone(micID)
	if err != nil {
		s.log.WithError(err).Warn("no recording")
		return RecordingState{Error: err.Error()}, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	l.mu.Lock()
	if l.rec.Recording {
		l.mu.Unlock()
		cancel()
		return s.Recording(), errors.New("a recording is in progress: stop it first")
	}
	l.rec = RecordingState{Recording: true, Device: mic.Device().Label, TotalMs: ms(d)}
	l.recCancel, l.recDone = cancel, done
	st := l.rec
	l.mu.Unlock()
	s.log.WithFields(logrus.Fields{"microphone": st.Device, "seconds": seconds}).Info("recording")
	s.emit.Emit(EventMicState, st)
	go s.record(ctx, cancel, mic, d, done)
	return st, nil
}

func (s *Media) record(ctx context.Context, cancel context.CancelFunc, mic *capture.Microphone, d time.Duration, done chan struct{}) {
	l := &s.live
	defer close(done)
	th := newThrottle(RecordInterval, func() {
		l.mu.Lock()
		st := l.rec
		l.mu.Unlock()
		s.emit.Emit(EventMicState, st)
	})
	clip, err := mic.Record(ctx, d, func(got time.Duration) {
		l.mu.Lock()
		l.rec.RecordedMs = ms(got)
		l.mu.Unlock()
		th.poke()
	})
	stopped := ctx.Err() != nil
	cancel()
	final := RecordingState{Device: mic.Device().Label, TotalMs: ms(d), RecordedMs: ms(clip.Duration()), Stopped: stopped}
	switch {
	case len(clip.Samples) > 0 && (err == nil || stopped && errors.Is(err, context.Canceled)):
		e := newAudioEntry(clip, "microphone "+time.Now().Format("15:04:05"), SourceMicrophone)
		e.item.Format = mic.Device().Label
		e.item.Note = fmt.Sprintf("recorded from %s, converted to 16 kHz mono", mic.Device().Label)
		if ierr := s.insert(e, s.soundIDs()); ierr != nil { // the recording replaces the audio source
			final.Error, final.Limit = ierr.Error(), limitInfo(ierr)
		} else {
			it := s.itemOf(e)
			final.Item = &it
		}
	case err != nil:
		final.Error, final.Limit = err.Error(), limitInfo(err)
	default:
		final.Error = "the microphone gave no audio"
	}
	l.mu.Lock()
	l.rec, l.recCancel = final, nil
	l.mu.Unlock()
	th.now()
	s.log.WithFields(logrus.Fields{"recorded_ms": int(final.RecordedMs), "stopped": stopped, "error": final.Error}).Info("recording ended")
	if final.Item != nil {
		s.changed()
	}
}

// StopRecording ends the recording early; what was recorded becomes the
// input's audio. It returns the final state.
func (s *Media) StopRecording() RecordingState {
	l := &s.live
	l.mu.Lock()
	cancel, done := l.recCancel, l.recDone
	l.mu.Unlock()
	s.stopAndWait(cancel, done, "recording")
	return s.Recording()
}

// Play plays an audio item (or a video's soundtrack) on the speaker, as the
// model hears it (16 kHz mono), and returns at once; playback:state events
// say when it ends. Without a speaker the error says why ("no speaker: ...").
func (s *Media) Play(id string) (PlaybackState, error) {
	e := s.entry(id)
	if e == nil {
		return PlaybackState{}, fmt.Errorf("no media %q in the input", id)
	}
	var clip pcm.Clip
	switch {
	case e.clip != nil:
		clip = *e.clip
	case e.video != nil && e.video.HasSound():
		clip = *e.video.Soundtrack
	default:
		return PlaybackState{}, fmt.Errorf("%s has no sound", e.item.Name)
	}
	sp, err := s.speaker(SpeakerTimeout)
	if err != nil {
		if !errors.Is(err, playback.ErrNoSpeaker) {
			err = &playback.UnavailableError{Reason: err.Error(), Err: err}
		}
		s.log.WithError(err).Info("no playback")
		return PlaybackState{ID: id, Error: err.Error()}, err
	}
	s.StopPlayback()
	l := &s.live
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	l.mu.Lock()
	l.playID, l.playCancel, l.playDone = id, cancel, done
	l.mu.Unlock()
	st := PlaybackState{Playing: true, ID: id}
	s.emit.Emit(EventPlayback, st)
	go func() {
		defer close(done)
		err := sp.Play(ctx, clip)
		end := PlaybackState{ID: id}
		if err != nil && ctx.Err() == nil {
			end.Error = err.Error()
			s.log.WithError(err).Warn("playback failed")
		}
		cancel()
		l.mu.Lock()
		if l.playDone == done {
			l.playID, l.playCancel, l.playDone = "", nil, nil
		}
		l.mu.Unlock()
		s.emit.Emit(EventPlayback, end)
	}()
	return st, nil
}

// StopPlayback stops the audio being played.
func (s *Media) StopPlayback() PlaybackState {
	s.live.stopPlaybackOf("")
	return PlaybackState{}
}

// stopPlaybackOf stops the playback of item id ("" for any) and waits for it.
func (l *liveState) stopPlaybackOf(id string) {
	l.mu.Lock()
	cancel, done, playing := l.playCancel, l.playDone, l.playID
	l.mu.Unlock()
	if cancel == nil || (id != "" && id != playing) {
		return
	}
	cancel()
	select {
	case <-done:
	case <-time.After(SpeakerTimeout + time.Second):
	}
}

// shutdown stops the camera, the recording and the playback.
func (s *Media) shutdown() {
	s.StopCamera()
	s.live.mu.Lock()
	cancel, done := s.live.recCancel, s.live.recDone
	s.live.mu.Unlock()
	if cancel != nil {
		cancel()
		select {
		case <-done:
		case <-time.After(CameraTimeout):
		}
	}
	s.live.stopPlaybackOf("")
}

// stopAndWait cancels a device task (if one runs) and waits, at most
// CameraTimeout, for it to end.
func (s *Media) stopAndWait(cancel func(), done <-chan struct{}, what string) {
	if cancel == nil {
		return
	}
	cancel()
	select {
	case <-done:
	case <-time.After(CameraTimeout):
		s.log.Warn("the " + what + " did not stop in time")
	}
}
