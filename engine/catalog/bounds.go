package catalog

import (
	"errors"
	"fmt"
)

// MaxEntries and MaxBytes bound a catalog that arrives with a request (the
// API's tools, MCP's select_tools): its entries, and the bytes of their
// names and descriptions together. CheckBounds is cheap, so a request
// over them is refused before anything is tokenized.
const (
	MaxEntries = 4096
	MaxBytes   = 1 << 20
)

// ErrTooLarge marks a catalog over MaxEntries or MaxBytes.
var ErrTooLarge = errors.New("catalog too large")

// CheckBounds refuses (ErrTooLarge) a catalog of more than MaxEntries
// entries or more than MaxBytes bytes of names and descriptions.
func CheckBounds(entries []Entry) error {
	if len(entries) > MaxEntries {
		return fmt.Errorf("%w: %d entries, over the limit of %d", ErrTooLarge, len(entries), MaxEntries)
	}
	n := 0
	for _, e := range entries {
		n += len(e.Name) + len(e.Description)
	}
	if n > MaxBytes {
		return fmt.Errorf("%w: %d bytes of names and descriptions, over the limit of %d", ErrTooLarge, n, MaxBytes)
	}
	return nil
}
