//go:build !unix

package hub

import "errors"

// diskFree is not known here: the check is skipped.
func diskFree(string) (int64, error) { return 0, errors.ErrUnsupported }
