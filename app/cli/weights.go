package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"verdict/engine/models"
	"verdict/engine/session"
	"verdict/engine/tokenizer"
)

const weightsHelp = "weight format: q4 (packed to 4 bits at load, cached on disk; the default) or f32 (as the checkpoint stores them, exact)"

// weightFlags are the --weights and --group flags of the commands that run
// a model.
type weightFlags struct {
	weights *string
	group   *int
	device  *string
	devices *string       // --devices: a replica on each (see openSession)
	fs      *flag.FlagSet // to tell a --device given from its default
}

func addWeightFlags(fs interface {
	String(string, string, string) *string
	Int(string, int, string) *int
}) weightFlags {
	return weightFlags{
		weights: fs.String("weights", string(models.DefaultWeights), weightsHelp),
		group:   fs.Int("group", 0, "q4 group size: columns sharing a scale and offset (32, 64, 128, ...; 0: the default, 64)"),
		device:  addDeviceFlag(fs),
		devices: fs.String("devices", "", devicesHelp),
		fs:      flagSet(fs),
	}
}

// options turns the flags into model options.
func (w weightFlags) options() (models.Options, error) {
	o, err := w.formatOptions()
	if err != nil {
		return o, err
	}
	d, err := w.oneDevice(os.Stderr)
	if err != nil {
		return models.Options{}, err
	}
	if o.Backend, err = w.backend(d, os.Stderr); err != nil {
		return models.Options{}, err
	}
	return o, nil
}

// formatOptions are the model options of --weights and --group alone (the
// app picks the backend of each load from its device setting).
func (w weightFlags) formatOptions() (models.Options, error) {
	f, err := session.ParseWeights(*w.weights)
	if err != nil {
		return models.Options{}, usageErr("--weights: %v", err)
	}
	if g := *w.group; g != 0 && (g < 32 || g > 512 || g&(g-1) != 0) {
		return models.Options{}, usageErr("--group %d: want a power of two from 32 to 512", g)
	}
	return models.Options{Weights: f, Group: *w.group, Log: func(s string) { fmt.Fprintln(os.Stderr, "verdict: "+s) }}, nil
}

// appDeviceHelp is --device's help in the app's commands (serve, window).
const appDeviceHelp = "compute device, kept as the app's device setting: " + session.Devices +
	"; a GPU that does not open is the CPU, with the reason in the model bar (default: the saved setting, auto at first)"

// addDeviceFlag adds --device, the compute backend.
func addDeviceFlag(fs interface {
	String(string, string, string) *string
}) *string {
	return fs.String("device", "cpu", "compute device: "+session.Devices)
}

// openDevice opens the backend named by --device (nil flag: the CPU); an
// "auto" that falls back to the CPU says why on stderr.
func openDevice(device *string, stderr io.Writer) (*session.Backend, error) {
	if device == nil {
		return nil, nil
	}
	be, err := session.OpenBackend(*device)
	if err != nil {
		return nil, usageErr("--device %s: %v", *device, err)
	}
	if n := be.Note(); n != "" {
		fmt.Fprintln(stderr, "verdict: --device "+*device+": "+n)
	}
	return be, nil
}

// open opens spec with the flags' weight format, stopped by ctx, with a
// progress bar on stderr when it is a terminal.
func (w weightFlags) open(ctx context.Context, spec string, stderr io.Writer) (*models.Model, error) {
	opt, err := w.options()
	if err != nil {
		return nil, err
	}
	return openModel(ctx, spec, opt, stderr)
}

// openTok opens spec with the flags' weight format and its tokenizer.
func (w weightFlags) openTok(ctx context.Context, spec string, stderr io.Writer) (*models.Model, *tokenizer.Tokenizer, error) {
	m, err := w.open(ctx, spec, stderr)
	if err != nil {
		return nil, nil, err
	}
	tok, err := m.Tokenizer()
	if err != nil {
		m.Close()
		return nil, nil, err
	}
	return m, tok, nil
}
