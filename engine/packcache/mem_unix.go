//go:build unix

package packcache

import (
	"os"
	"syscall"
	"unsafe"
)

// Mappable reports whether this platform maps files (else no cache file is
// used and arenas are Go memory).
const Mappable = true

// anonMem returns size bytes of zeroed memory outside the Go heap.
func anonMem(size int) ([]byte, bool, error) {
	if size == 0 {
		return nil, false, nil
	}
	b, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil, false, err
	}
	return b, true, nil
}

func mapFileRW(f *os.File, size int) ([]byte, error) {
	return syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
}

func mapFileRead(f *os.File, size int) ([]byte, error) {
	return syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ, syscall.MAP_SHARED)
}

func syncMem(b []byte) error {
	// msync(MS_ASYNC): the kernel writes the pages back in its own time;
	// readers of the file see them at once.
	_, _, e := syscall.Syscall(syscall.SYS_MSYNC, uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)), syscall.MS_ASYNC)
	if e != 0 {
		return e
	}
	return nil
}

func protectRead(b []byte) { syscall.Mprotect(b, syscall.PROT_READ) }

func unmapMem(b []byte) error { return syscall.Munmap(b) }

// lockFile takes an exclusive advisory lock on f, held until f is closed.
func lockFile(f *os.File) { syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) }

// tryLock reports whether f could be locked: no process holds it.
func tryLock(f *os.File) bool {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil
}
