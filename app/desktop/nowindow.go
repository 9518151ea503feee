//go:build !production && !dev && !bindings

package desktop

import "context"

// HasWindow reports whether this build includes the window.
const HasWindow = false

// Run returns ErrNoWindow: this build has no window.
func Run(ctx context.Context, o Options) error { return ErrNoWindow }
