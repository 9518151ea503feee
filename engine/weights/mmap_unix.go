//go:build unix

package weights

import (
	"os"
	"syscall"
)

// mapFile maps size bytes of f read-only; mapped reports a real mapping that
// unmap must release.
func mapFile(f *os.File, size int) (data []byte, mapped bool, err error) {
	data, err = syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, false, err
	}
	return data, true, nil
}

func unmap(data []byte) error {
	return syscall.Munmap(data)
}
