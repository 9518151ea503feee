//go:build unix

package safefile

import (
	"os"
	"syscall"
)

// openFlags keeps open(2) from waiting for a FIFO's writer.
const openFlags = syscall.O_NONBLOCK

// blocking clears O_NONBLOCK on a regular file again.
func blocking(f *os.File) error {
	sc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := sc.Control(func(fd uintptr) { serr = syscall.SetNonblock(int(fd), false) }); err != nil {
		return err
	}
	return serr
}
