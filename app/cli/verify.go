package cli

import (
	"context"
	"errors"
	"fmt"
	"image"
	"io"

	"verdict/engine/fixture"
	"verdict/engine/models"
	"verdict/media/decode"
)

var errChecksFailed = errors.New("checks failed")

func verifyFixture(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("verify-fixture", stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: verdict verify-fixture [--device cpu|cuda|auto] PATH\n\nPATH is a fixture folder or .tar.gz (synthetic recipe, or checkpoint with expected.safetensors).")
	}
	device := addDeviceFlag(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	be, err := openDevice(device, stderr)
	if err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageErr("want exactly one fixture PATH, got %d arguments", fs.NArg())
	}
	dir, cleanup, err := fixture.Open(fs.Arg(0))
	if err != nil {
		return err
	}
	defer cleanup()
	opt := fixture.Options{
		Report: func(r fixture.Result) { fmt.Fprintln(stdout, r) },
		DecodeImage: func(path string) (image.Image, error) {
			img, _, err := decode.ImageFile(path)
			return img, err
		},
		Backend: be,
	}
	if tok, err := models.LoadTokenizer(dir); err == nil {
		opt.Tokenizer = tok
	} else {
		opt.TokenizerErr = err
	}
	// Run picks the checks by the fixture's family (Gemma 4's: the
	// reference on the CPU, then the decoder on the device).
	rs, err := fixture.Run(dir, opt)
	if err != nil {
		return err
	}
	passed, failed, _ := fixture.Summary(rs)
	fmt.Fprintf(stdout, "%d passed, %d failed\n", passed, failed)
	if failed > 0 {
		return errChecksFailed
	}
	return nil
}
