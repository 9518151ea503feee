// Command verdict is a calibrated decision engine over Gemma 3n. With a
// subcommand it runs headless (see `verdict help`).
package main

import (
	"os"

	"verdict/app/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}
