// Package synthetic registers mediadevices' test drivers, VideoTest (640×480
// colour bars at 30 fps) and AudioTest (a 480 Hz tone at 48 kHz), for tests
// and demos without devices. Import it for its side effect and use
// capture.Open(capture.Synthetic).
package synthetic

import (
	_ "github.com/pion/mediadevices/pkg/driver/audiotest"
	_ "github.com/pion/mediadevices/pkg/driver/videotest"
)
