//go:build !unix

package packcache

import (
	"errors"
	"os"
)

// Mappable reports whether this platform maps files (else no cache file is
// used and arenas are Go memory).
const Mappable = false

func anonMem(size int) ([]byte, bool, error) { return make([]byte, size), false, nil }

var errNoMmap = errors.New("memory mapping is not available")

func mapFileRW(f *os.File, size int) ([]byte, error)   { return nil, errNoMmap }
func mapFileRead(f *os.File, size int) ([]byte, error) { return nil, errNoMmap }
func syncMem(b []byte) error                           { return nil }
func protectRead(b []byte)                             {}
func unmapMem(b []byte) error                          { return nil }

func lockFile(f *os.File)     {}
func tryLock(f *os.File) bool { return false } // without locks, nothing is pruned
