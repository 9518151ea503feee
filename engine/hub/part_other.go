//go:build !unix

package hub

import (
	"os"

	"verdict/engine/safefile"
)

// openPartFile opens (or creates) a download's part for reading and writing;
// where O_NOFOLLOW is missing, a link at its path is refused before the open
// and openPart compares the opened file with the path's entry after it.
func openPartFile(path string) (*os.File, error) {
	if fi, err := os.Lstat(path); err == nil {
		if err := safefile.Check(path, fi); err != nil {
			return nil, err
		}
	}
	return os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
}
