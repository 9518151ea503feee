//go:build !unix

package hub

import "os"

// tryLock does not lock where flock is missing: one download at a time per
// blob is then the caller's to keep.
func tryLock(*os.File) (bool, error) { return true, nil }

func unlockFile(*os.File) {}
