//go:build unix

package hub

import (
	"errors"
	"os"
	"syscall"

	"verdict/engine/safefile"
)

// openPartFile opens (or creates) a download's part for reading and writing
// without following a symbolic link at its path.
func openPartFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o644)
	if errors.Is(err, syscall.ELOOP) || errors.Is(err, syscall.EISDIR) || errors.Is(err, syscall.ENXIO) || errors.Is(err, syscall.EMLINK) {
		// A link (O_NOFOLLOW gives ELOOP, EMLINK on FreeBSD), a folder or a
		// socket: name it.
		if fi, lerr := os.Lstat(path); lerr == nil {
			if nerr := safefile.Check(path, fi); nerr != nil {
				return nil, nerr
			}
		}
	}
	return f, err
}
