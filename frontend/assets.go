// Package frontend holds Verdict's built user interface (Vite's output in
// dist/), embedded into the binary for the window and the browser mode.
//
// dist/ is built by `npm run build` (build/run.sh and build/test.sh do it
// first). Only dist/.gitkeep is committed, so a plain `go build` works before
// the frontend is built; Built then reports false and the browser mode shows a
// page saying how to build it.
package frontend

import (
	"embed"
	"io/fs"
)

//go:embed all:dist
var dist embed.FS

// Assets is the built frontend (index.html at its root when built).
func Assets() fs.FS {
	sub, err := fs.Sub(dist, "dist")
	if err != nil {
		panic(err) // dist is embedded: Sub cannot fail
	}
	return sub
}

// Built reports whether the frontend was built into this binary.
func Built() bool {
	_, err := fs.Stat(Assets(), "index.html")
	return err == nil
}
