// Command verdict is a calibrated decision engine over Gemma 3n. With no
// command (or only flags) it opens the desktop window; with a command it runs
// headless (see `verdict help`).
package main

import (
	"os"
	"strings"

	"verdict/app/cli"
)

func main() {
	args := os.Args[1:]
	if len(args) == 0 || (strings.HasPrefix(args[0], "-") && !isHelp(args[0])) {
		args = append([]string{"window"}, args...)
	}
	os.Exit(cli.Main(args, os.Stdout, os.Stderr))
}

func isHelp(a string) bool { return a == "-h" || a == "-help" || a == "--help" }
