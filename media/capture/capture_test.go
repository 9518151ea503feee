package capture

import (
	"context"
	"errors"
	"image"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pion/mediadevices/pkg/driver"
	"github.com/pion/mediadevices/pkg/frame"
	"github.com/pion/mediadevices/pkg/io/audio"
	"github.com/pion/mediadevices/pkg/io/video"
	"github.com/pion/mediadevices/pkg/prop"
	"github.com/pion/mediadevices/pkg/wave"

	_ "verdict/media/capture/synthetic"
	"verdict/media/internal/mediatest"
	"verdict/media/limits"
	"verdict/media/pcm"
)

func TestListing(t *testing.T) {
	syn := Open(Synthetic)
	cams, err := syn.Cameras()
	if err != nil || len(cams) != 1 || cams[0].Label != "VideoTest" || cams[0].Kind != VideoInput {
		t.Errorf("synthetic cameras %+v, %v", cams, err)
	}
	mics, err := syn.Microphones()
	if err != nil || len(mics) != 1 || mics[0].Label != "AudioTest" || mics[0].Kind != AudioInput {
		t.Errorf("synthetic microphones %+v, %v", mics, err)
	}
	// No real driver is registered in this test binary.
	hw := Open(Hardware)
	if _, err := hw.Cameras(); !errors.Is(err, ErrNoCamera) || !strings.Contains(err.Error(), "no camera: no video capture device") {
		t.Errorf("hardware cameras: %v", err)
	}
	if _, err := hw.Microphones(); !errors.Is(err, ErrNoMicrophone) || errors.Is(err, ErrNoCamera) {
		t.Errorf("hardware microphones: %v", err)
	}
	if _, err := hw.OpenCamera("", CameraOptions{}); !errors.Is(err, ErrNoCamera) {
		t.Errorf("open hardware camera: %v", err)
	}
	if _, err := syn.OpenCamera("no-such-id", CameraOptions{}); !errors.Is(err, ErrNoCamera) {
		t.Errorf("open unknown camera: %v", err)
	}
}

func TestCameraSnapshotAndFeed(t *testing.T) {
	cam, err := Open(Synthetic).OpenCamera("", CameraOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer cam.Close()
	ctx := context.Background()
	img, err := cam.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if img.Bounds() != image.Rect(0, 0, 640, 480) {
		t.Fatalf("snapshot %v", img.Bounds())
	}
	// VideoTest's first bar is 75% white, its second 75% yellow (no blue).
	if r, g, b, _ := img.At(10, 10).RGBA(); r>>8 < 150 || g>>8 < 150 || b>>8 < 150 {
		t.Errorf("first bar %d,%d,%d, want light grey", r>>8, g>>8, b>>8)
	}
	if r, g, b, _ := img.At(640/7+10, 10).RGBA(); r>>8 < 150 || g>>8 < 150 || b>>8 > 60 {
		t.Errorf("second bar %d,%d,%d, want yellow", r>>8, g>>8, b>>8)
	}
	// Snapshots are copies: the driver reuses its buffers.
	img2, err := cam.Snapshot(ctx)
	if err != nil || &img2.Pix[0] == &img.Pix[0] {
		t.Errorf("second snapshot shares memory or failed: %v", err)
	}

	fctx, cancel := context.WithCancel(ctx)
	feed := cam.Feed(fctx, 100*time.Millisecond)
	var times []time.Time
	for f := range feed {
		times = append(times, f.Time)
		if len(times) == 3 {
			cancel()
			break
		}
	}
	cancel()
	for i := 1; i < len(times); i++ {
		if gap := times[i].Sub(times[i-1]); gap < 90*time.Millisecond {
			t.Errorf("feed frames %v apart, want ≥ 100ms", gap)
		}
	}
	// The feed channel closes after cancel.
	deadline := time.After(2 * time.Second)
	for open := true; open; {
		select {
		case _, open = <-feed:
		case <-deadline:
			t.Fatal("feed not closed after cancel")
		}
	}

	live := cam.Feed(ctx, 0)
	if _, ok := <-live; !ok {
		t.Fatal("live feed closed early")
	}
	if err := cam.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	for range live { // closed by Close
	}
	if _, err := cam.Snapshot(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("snapshot after close: %v", err)
	}
	if err := cam.Close(); err != nil {
		t.Errorf("second close: %v", err)
	}
	// The driver can be opened again.
	again, err := Open(Synthetic).OpenCamera("", CameraOptions{Width: 640, Height: 480})
	if err != nil {
		t.Fatal(err)
	}
	again.Close()
}

func TestMicrophoneRecord(t *testing.T) {
	mic, err := Open(Synthetic).OpenMicrophone("")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var progress []time.Duration
	clip, err := mic.Record(context.Background(), 400*time.Millisecond, func(d time.Duration) {
		mu.Lock()
		progress = append(progress, d)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	if clip.Rate != pcm.ModelRate || clip.Duration() != 400*time.Millisecond {
		t.Errorf("clip %d Hz %v, want 16 kHz 400ms", clip.Rate, clip.Duration())
	}
	// AudioTest plays 480 Hz at amplitude 0.25.
	mid := clip.Samples[800 : len(clip.Samples)-800]
	if lvl := mediatest.Level(mid, pcm.ModelRate, 480); math.Abs(lvl-0.25) > 0.01 {
		t.Errorf("480 Hz level %.4f, want 0.25", lvl)
	}
	if len(progress) < 5 || progress[len(progress)-1] != 400*time.Millisecond {
		t.Errorf("progress %v", progress)
	}
	for i := 1; i < len(progress); i++ {
		if progress[i] <= progress[i-1] {
			t.Errorf("progress not increasing: %v", progress)
		}
	}

	// Stopping early keeps what was recorded.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	clip, err = mic.Record(ctx, 10*time.Second, nil)
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 2*time.Second {
		t.Errorf("cancelled record: %v after %v", err, time.Since(start))
	}
	if d := clip.Duration(); d < 100*time.Millisecond || d > 400*time.Millisecond {
		t.Errorf("partial clip %v, want about 200ms", d)
	}

	var le *limits.Error
	if _, err := mic.Record(context.Background(), 31*time.Second, nil); !errors.As(err, &le) || le.Limit != limits.AudioDuration {
		t.Errorf("31 s recording: %v", err)
	}
	if _, err := mic.Record(context.Background(), 0, nil); err == nil {
		t.Error("0 s recording: no error")
	}
}

// fakeMic is a microphone driver whose reader panics like mediadevices'
// microphone on ALSA's null device, or hangs.
type fakeMic struct {
	panics, hangs bool
	release       chan struct{}
}

func (f *fakeMic) Open() error  { return nil }
func (f *fakeMic) Close() error { return nil }
func (f *fakeMic) Properties() []prop.Media {
	return []prop.Media{{Audio: prop.Audio{ChannelCount: 2, SampleRate: 48000, SampleSize: 4, IsFloat: true, IsInterleaved: true}}}
}

func (f *fakeMic) AudioRecord(p prop.Media) (audio.Reader, error) {
	return audio.ReaderFunc(func() (wave.Audio, func(), error) {
		switch {
		case f.panics:
			panic("unsupported format")
		case f.hangs:
			<-f.release
		}
		return wave.NewFloat32Interleaved(wave.ChunkInfo{Len: 960, Channels: 2, SamplingRate: 48000}), func() {}, nil
	}), nil
}

// fakeCam is a camera driver whose reader blocks until released.
type fakeCam struct{ release chan struct{} }

func (f *fakeCam) Open() error  { return nil }
func (f *fakeCam) Close() error { return nil }
func (f *fakeCam) Properties() []prop.Media {
	return []prop.Media{
		{Video: prop.Video{Width: 640, Height: 480, FrameFormat: frame.FormatZ16, FrameRate: 30}},
		{Video: prop.Video{Width: 64, Height: 48, FrameFormat: frame.FormatI420, FrameRate: 30}},
	}
}

func (f *fakeCam) VideoRecord(p prop.Media) (video.Reader, error) {
	if p.FrameFormat != frame.FormatI420 {
		panic("depth format chosen")
	}
	return video.ReaderFunc(func() (image.Image, func(), error) {
		<-f.release
		return image.NewYCbCr(image.Rect(0, 0, 64, 48), image.YCbCrSubsampleRatio420), func() {}, nil
	}), nil
}

// register adds a fake driver for the length of a test.
func register(t *testing.T, a driver.Adapter, info driver.Info) {
	t.Helper()
	m := driver.GetManager()
	before := map[string]bool{}
	for _, d := range m.Query(func(driver.Driver) bool { return true }) {
		before[d.ID()] = true
	}
	if err := m.Register(a, info); err != nil {
		t.Fatal(err)
	}
	for _, d := range m.Query(func(driver.Driver) bool { return true }) {
		if !before[d.ID()] {
			id := d.ID()
			t.Cleanup(func() { m.Delete(id) })
		}
	}
}

func TestNullMicrophoneIsNotListed(t *testing.T) {
	register(t, &fakeMic{panics: true}, driver.Info{Label: "6e756c6c", DeviceType: driver.Microphone,
		Name: "Discard all samples (playback) or generate zero samples (capture)"})
	register(t, &fakeMic{panics: true}, driver.Info{Label: "64656661756c74", DeviceType: driver.Microphone, Name: "Default"})
	_, err := Open(Hardware).Microphones()
	if !errors.Is(err, ErrNoMicrophone) || !strings.Contains(err.Error(), "pseudo-devices") {
		t.Errorf("only null/default microphones: %v", err)
	}
	if _, err := Open(Hardware).OpenMicrophone(""); !errors.Is(err, ErrNoMicrophone) {
		t.Errorf("open: %v", err)
	}
}

func TestMicrophoneDriverPanicIsRecovered(t *testing.T) {
	register(t, &fakeMic{panics: true}, driver.Info{Label: "broken", DeviceType: driver.Microphone, Name: "Broken Mic"})
	mics, err := Open(Hardware).Microphones()
	if err != nil || len(mics) != 1 || mics[0].Label != "Broken Mic" {
		t.Fatalf("microphones %+v, %v", mics, err)
	}
	mic, err := Open(Hardware).OpenMicrophone(mics[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	_, err = mic.Record(context.Background(), time.Second, nil)
	var pe *DriverPanicError
	if !errors.As(err, &pe) || pe.Op != "read" || !strings.Contains(err.Error(), "Broken Mic: driver panicked in read: unsupported format") {
		t.Errorf("record: %v", err)
	}
}

func TestHungDevicesTimeOut(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	register(t, &fakeMic{hangs: true, release: release}, driver.Info{Label: "hung", DeviceType: driver.Microphone})
	register(t, &fakeCam{release: release}, driver.Info{Label: "video9;video9", DeviceType: driver.Camera, Name: "Stuck Cam;usb-1"})
	devs := Open(Hardware)
	devs.ReadTimeout = 200 * time.Millisecond

	mic, err := devs.OpenMicrophone("")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := mic.Record(context.Background(), time.Second, nil); err == nil || !strings.Contains(err.Error(), "no audio for 200ms") {
		t.Errorf("hung microphone: %v", err)
	}
	if time.Since(start) > 2*time.Second {
		t.Errorf("hung microphone took %v", time.Since(start))
	}

	cam, err := devs.OpenCamera("", CameraOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cam.Device().Label != "Stuck Cam" {
		t.Errorf("label %q", cam.Device().Label)
	}
	start = time.Now()
	if _, err := cam.Snapshot(context.Background()); err == nil || !strings.Contains(err.Error(), "gave no frame in 200ms") {
		t.Errorf("hung camera: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := cam.Snapshot(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("cancelled snapshot: %v", err)
	}
	if err := cam.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	if time.Since(start) > 2*time.Second {
		t.Errorf("hung camera took %v", time.Since(start))
	}
}
