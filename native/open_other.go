//go:build !(linux || darwin)

package native

import "errors"

// CUDALibrary is the CUDA backend's file name.
const CUDALibrary = "libverdict_cuda.so"

func loadCUDA(dev int) (*Backend, error) {
	return nil, errors.New("cuda: not supported on this operating system")
}

func cudaCount() (int, error) {
	return 0, errors.New("cuda: not supported on this operating system")
}
