// Package hardware registers mediadevices' real capture drivers: V4L2 cameras
// (cgo, kernel headers only) and miniaudio microphones (cgo; sound backends
// are loaded at run time). Import it for its side effect in the application:
//
//	import _ "verdict/media/capture/hardware"
//
// then use capture.Open(capture.Hardware). On a machine without a sound card
// the microphone driver registers ALSA pseudo-devices that panic on Read;
// media/capture leaves them out of its lists and recovers such panics.
package hardware

import (
	_ "github.com/pion/mediadevices/pkg/driver/camera"     // V4L2 (Linux), AVFoundation, DirectShow
	_ "github.com/pion/mediadevices/pkg/driver/microphone" // miniaudio
)
