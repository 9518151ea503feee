package session

import (
	"image"

	"verdict/engine/model"
	"verdict/engine/models"
	"verdict/engine/sched"
	"verdict/engine/vision"
	"verdict/native"
)

// What the app names of the compute core and the model beside a session:
// the backend a model runs on and the host's processor, the weight format
// and load stages of a model's options, the scheduler's priorities and
// refusals, the vision tower's input. The app imports neither native nor a
// model package (build/layering_test.go holds it to that); these are
// those packages' own types, values and calls under the session's names, so
// that a value crosses the boundary unchanged (errors.Is and errors.As see
// the same errors).

// Backend is a compute backend: the CPU or a GPU (native.Backend).
type Backend = native.Backend

const (
	// Devices are the names OpenBackend takes, for flag help.
	Devices = native.Devices
	// DevicesHelp describes the lists ParseDevices takes, for flag help.
	DevicesHelp = native.DevicesHelp
	// CUDALibrary is the CUDA backend's file name.
	CUDALibrary = native.CUDALibrary
)

// OpenBackend opens the backend of a device name: cpu, cuda, cuda:N or
// auto (see native.Open).
func OpenBackend(device string) (*Backend, error) { return native.Open(device) }

// DefaultBackend is the backend compiled into the binary (native.Default):
// the one a model runs on unless given another.
func DefaultBackend() *Backend { return native.Default() }

// ParseDevices reads a list of devices, one model replica each (see
// native.ParseDevices).
func ParseDevices(list string) (devices []string, note string, err error) {
	return native.ParseDevices(list)
}

// HostCores reports the host's logical cores.
func HostCores() int { return native.HostCores() }

// HostProcessor reports the host processor's model name ("unknown" where
// the system does not say).
func HostProcessor() string { return native.HostProcessor() }

// SIMD names the active kernel set: portable, avx2, neon or avx512.
func SIMD() string { return native.SIMD() }

// SetThreads sets the number of worker threads the kernels use (n <= 0:
// one per CPU core). Results are identical for every thread count.
func SetThreads(n int) { native.SetThreads(n) }

// Weights is a model's weight format (model.Weights): WeightsQ4 or
// WeightsF32.
type Weights = model.Weights

const (
	// WeightsQ4 packs the weights to 4 bits at load.
	WeightsQ4 = model.WeightsQ4
	// WeightsF32 keeps them as the checkpoint stores them, exact.
	WeightsF32 = model.WeightsF32
)

// ParseWeights reads a --weights value: "f32" or "q4".
func ParseWeights(s string) (Weights, error) { return model.ParseWeights(s) }

// Stages of a model's load that its Progress hears, besides
// models.StageTokenizer.
const (
	StagePacking  = models.StagePacking
	StageChecking = models.StageChecking
)

// Priority orders a session's requests (see WithPriority).
type Priority = sched.Priority

const (
	// Interactive is the app's own runs and API calls: the default.
	Interactive = sched.Interactive
	// Bulk is dataset work (score-file, the app's datasets).
	Bulk = sched.Bulk
)

// ErrQueueFull refuses a request when too many already wait for
// admission: the caller may try again later.
var ErrQueueFull = sched.ErrQueueFull

// ErrTooLong marks the refusal of a sequence longer than the model's
// positions (model.ErrTooLong): the request's fault, not the engine's.
// Match it with errors.Is.
var ErrTooLong = model.ErrTooLong

// NeverFitsError refuses a request whose blocks exceed the whole key/value
// pool, with the sizes named (its KV is a *KVError).
type NeverFitsError = sched.NeverFitsError

// KVError reports that the key/value pool has no room for a sequence.
type KVError = model.KVError

// ImageSize is the side of the square input the vision tower takes.
const ImageSize = vision.ImageSize

// PreprocessImage is Gemma 3n's image processor (vision.Preprocess): the
// image stretched to ImageSize×ImageSize, [3, ImageSize, ImageSize]
// channel-major values k/255.
func PreprocessImage(img image.Image) []float32 { return vision.Preprocess(img) }
