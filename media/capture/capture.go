// Package capture reads camera frames and microphone audio through
// github.com/pion/mediadevices, raw (no encoding): image.Image snapshots, a
// live feed of frames, and recordings converted to 16 kHz mono PCM.
//
// Drivers register themselves with mediadevices when their package is
// imported. This package imports none: the application imports
// verdict/media/capture/hardware (V4L2 cameras, miniaudio microphones) and
// tests import verdict/media/capture/synthetic (mediadevices' VideoTest and
// AudioTest). Open(Hardware) or Open(Synthetic) then picks which of the
// registered drivers a Devices uses, so no build tag is involved.
//
// Missing devices are errors that say why (ErrNoCamera, ErrNoMicrophone);
// driver panics (the ALSA "null" microphone panics on Read) are recovered and
// reported as *DriverPanicError; every wait is bounded, so nothing hangs.
package capture

import (
	"encoding/hex"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/pion/mediadevices/pkg/driver"
)

// Drivers selects which registered drivers a Devices uses.
type Drivers int

const (
	// Hardware uses real cameras and microphones (registered by importing
	// verdict/media/capture/hardware).
	Hardware Drivers = iota
	// Synthetic uses mediadevices' VideoTest (colour bars) and AudioTest
	// (a 480 Hz tone) drivers (registered by importing
	// verdict/media/capture/synthetic): for tests and demos.
	Synthetic
)

func (d Drivers) String() string {
	if d == Synthetic {
		return "synthetic"
	}
	return "hardware"
}

// Labels of mediadevices' test drivers.
const (
	videoTestLabel = "VideoTest"
	audioTestLabel = "AudioTest"
)

// Kind is a kind of capture device.
type Kind int

// Kinds of devices.
const (
	VideoInput Kind = iota // a camera
	AudioInput             // a microphone
)

func (k Kind) String() string {
	if k == AudioInput {
		return "microphone"
	}
	return "camera"
}

// Device is a camera or microphone that can be opened.
type Device struct {
	ID    string // the mediadevices driver ID, stable while the process runs
	Label string // a readable name
	Kind  Kind
}

// Errors matched with errors.Is.
var (
	ErrNoCamera     = errors.New("no camera")
	ErrNoMicrophone = errors.New("no microphone")
	ErrClosed       = errors.New("device closed")
)

// UnavailableError says that a kind of device cannot be used, and why.
type UnavailableError struct {
	Kind   Kind
	Reason string
	Err    error
}

func (e *UnavailableError) Error() string {
	return "no " + e.Kind.String() + ": " + e.Reason
}

// Is matches ErrNoCamera or ErrNoMicrophone by kind.
func (e *UnavailableError) Is(target error) bool {
	return (target == ErrNoCamera && e.Kind == VideoInput) || (target == ErrNoMicrophone && e.Kind == AudioInput)
}

// Unwrap returns the cause.
func (e *UnavailableError) Unwrap() error { return e.Err }

// DriverPanicError reports a driver that panicked; the panic was recovered.
type DriverPanicError struct {
	Device string
	Op     string // "open", "read", "close", ...
	Value  any
}

func (e *DriverPanicError) Error() string {
	return fmt.Sprintf("%s: driver panicked in %s: %v", e.Device, e.Op, e.Value)
}

// Devices lists and opens the devices of one set of drivers.
type Devices struct {
	drivers Drivers
	// ReadTimeout bounds the wait for one frame or audio chunk (default 5 s).
	ReadTimeout time.Duration
}

// Open returns the devices of the given drivers. Nothing is opened yet.
func Open(d Drivers) *Devices {
	return &Devices{drivers: d, ReadTimeout: 5 * time.Second}
}

func (d *Devices) readTimeout() time.Duration {
	if d.ReadTimeout <= 0 {
		return 5 * time.Second
	}
	return d.ReadTimeout
}

// Cameras lists the cameras, or returns an *UnavailableError (ErrNoCamera)
// saying why there is none.
func (d *Devices) Cameras() ([]Device, error) {
	devs, _ := d.list(VideoInput)
	if len(devs) == 0 {
		return nil, &UnavailableError{Kind: VideoInput, Reason: d.noneReason(VideoInput, 0)}
	}
	return devs, nil
}

// Microphones lists the microphones, leaving out ALSA's "null" and "default"
// pseudo-devices, or returns an *UnavailableError (ErrNoMicrophone) saying
// why there is none.
func (d *Devices) Microphones() ([]Device, error) {
	devs, skipped := d.list(AudioInput)
	if len(devs) == 0 {
		return nil, &UnavailableError{Kind: AudioInput, Reason: d.noneReason(AudioInput, skipped)}
	}
	return devs, nil
}

// list returns the usable devices of a kind and how many pseudo-devices were
// left out.
func (d *Devices) list(k Kind) ([]Device, int) {
	var devs []Device
	skipped := 0
	for _, drv := range d.query(k) {
		if isPseudo(drv.Info()) {
			skipped++
			continue
		}
		devs = append(devs, Device{ID: drv.ID(), Label: label(drv.Info()), Kind: k})
	}
	sort.Slice(devs, func(i, j int) bool { return devs[i].Label < devs[j].Label })
	return devs, skipped
}

// query returns the registered drivers of a kind that belong to d.drivers.
func (d *Devices) query(k Kind) []driver.Driver {
	typ, test := driver.DeviceType(driver.Camera), videoTestLabel
	filter := driver.FilterVideoRecorder()
	if k == AudioInput {
		typ, test = driver.Microphone, audioTestLabel
		filter = driver.FilterAudioRecorder()
	}
	return driver.GetManager().Query(func(drv driver.Driver) bool {
		if !filter(drv) || drv.Info().DeviceType != typ {
			return false
		}
		return (drv.Info().Label == test) == (d.drivers == Synthetic)
	})
}

// find returns the driver of a device ID ("" for the first device).
func (d *Devices) find(k Kind, id string) (driver.Driver, error) {
	devs, skipped := d.list(k)
	if len(devs) == 0 {
		return nil, &UnavailableError{Kind: k, Reason: d.noneReason(k, skipped)}
	}
	if id == "" {
		id = devs[0].ID
	}
	for _, drv := range d.query(k) {
		if drv.ID() == id && !isPseudo(drv.Info()) {
			return drv, nil
		}
	}
	return nil, fmt.Errorf("%s %q: %w", k, id, errNotFound(k))
}

func errNotFound(k Kind) error {
	if k == AudioInput {
		return fmt.Errorf("not among the microphones: %w", ErrNoMicrophone)
	}
	return fmt.Errorf("not among the cameras: %w", ErrNoCamera)
}

func (d *Devices) noneReason(k Kind, skipped int) string {
	if d.drivers == Synthetic {
		return fmt.Sprintf("the synthetic %s driver is not registered (import verdict/media/capture/synthetic)", k)
	}
	switch {
	case k == VideoInput && runtime.GOOS == "linux":
		return "no video capture device (/dev/video*) was found"
	case k == VideoInput:
		return "no video capture device was found"
	case skipped > 0:
		return "the sound system offers only pseudo-devices (ALSA null/default), no sound card with a capture input"
	}
	return "no audio capture device was found"
}

// pseudoNames are ALSA devices that capture nothing real.
var pseudoNames = map[string]bool{"null": true, "default": true, "sysdefault": true}

// isPseudo reports an ALSA pseudo-device: mediadevices labels microphones
// with the hex of miniaudio's device ID ("6e756c6c" is "null").
func isPseudo(info driver.Info) bool {
	if info.DeviceType != driver.Microphone {
		return false
	}
	id := strings.ToLower(decodeLabel(info.Label))
	if pseudoNames[id] || strings.HasPrefix(id, "sysdefault:") {
		return true
	}
	return strings.Contains(info.Name, "Discard all samples")
}

func decodeLabel(l string) string {
	b, err := hex.DecodeString(l)
	if err != nil || len(b) == 0 {
		return l
	}
	for _, c := range b {
		if c < 0x20 || c > 0x7e {
			return l
		}
	}
	return string(b)
}

func label(info driver.Info) string {
	name, _, _ := strings.Cut(info.Name, ";") // cameras: "name;bus info"
	if name = strings.TrimSpace(name); name != "" {
		return name
	}
	return decodeLabel(info.Label)
}

// safely runs a driver call, turning a panic into a *DriverPanicError.
func safely(device, op string, f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &DriverPanicError{Device: device, Op: op, Value: r}
		}
	}()
	return f()
}
