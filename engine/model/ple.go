package model

import (
	"fmt"
	"os"
)

// PLEPlace says where a model keeps its per-layer embedding table (a row
// of values for every token, each layer's slice: Gemma 3n's and Gemma 4's
// largest tensor, read a row per token) for device loops, which choose
// their tokens on the device and gather those rows there.
type PLEPlace string

const (
	// PLEAuto makes the table resident on a device backend when it takes
	// at most a quarter of the device's free memory, and on any backend
	// when it is small (at most PLESmall bytes as stored).
	PLEAuto PLEPlace = "auto"
	// PLEHost keeps it where it was read from only.
	PLEHost PLEPlace = "host"
	// PLEDevice makes it resident (an error when it cannot be).
	PLEDevice PLEPlace = "device"
)

// PLESmall is the table size PLEAuto makes resident on every backend.
const PLESmall = 128 << 20

// PLEChunk is the rows a table is uploaded in at a time.
const PLEChunk = 1024

// PLEPlaceOf is the place a load uses: p ("" is PLEAuto), unless
// VERDICT_PLE names another; an unknown place is refused, named, with
// family ("gemma3n") leading the error.
func PLEPlaceOf(family string, p PLEPlace) (PLEPlace, error) {
	if e := os.Getenv("VERDICT_PLE"); e != "" {
		p = PLEPlace(e)
	}
	switch p {
	case "", PLEAuto:
		return PLEAuto, nil
	case PLEHost, PLEDevice:
		return p, nil
	}
	return "", fmt.Errorf("%s: per-layer table place %q: want auto, host or device", family, p)
}
