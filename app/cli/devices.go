package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"verdict/engine/scorer"
	"verdict/engine/session"
)

// devicesHelp is --devices' help.
const devicesHelp = "run one model replica on each device, requests spread over them (serve, score-file and bench serve; the other commands take one): " + session.DevicesHelp

// multiDevice names the commands that spread requests over several
// devices, for the refusal of the others.
const multiDevice = "serve, score-file and bench serve"

// deviceList is the devices of --devices, or --device's one. A note on
// stderr says why "all" runs on the CPU.
func (w weightFlags) deviceList(stderr io.Writer) ([]string, error) {
	if w.devices == nil || strings.TrimSpace(*w.devices) == "" {
		if w.device == nil {
			return []string{"cpu"}, nil
		}
		return []string{*w.device}, nil
	}
	if w.fs != nil && isSet(w.fs, "device") {
		return nil, usageErr("give --device or --devices, not both")
	}
	ds, note, err := session.ParseDevices(*w.devices)
	if err != nil {
		return nil, usageErr("--devices: %v", err)
	}
	if note != "" {
		fmt.Fprintln(stderr, "verdict: --devices "+*w.devices+": "+note)
	}
	return ds, nil
}

// oneDevice is the device of a command that runs one replica: --device,
// or --devices naming one.
func (w weightFlags) oneDevice(stderr io.Writer) (string, error) {
	ds, err := w.deviceList(stderr)
	if err != nil {
		return "", err
	}
	if len(ds) > 1 {
		return "", usageErr("--devices %s names %d devices: this command runs one model replica (%s spread their requests over several)", *w.devices, len(ds), multiDevice)
	}
	return ds[0], nil
}

// backend opens device d of --devices, or of --device when --devices is
// not given; an "auto" that falls back to the CPU says why on stderr.
func (w weightFlags) backend(d string, stderr io.Writer) (*session.Backend, error) {
	name := "--devices"
	if w.devices == nil || strings.TrimSpace(*w.devices) == "" {
		name = "--device"
	}
	be, err := session.OpenBackend(d)
	if err != nil {
		return nil, usageErr("%s %s: %v", name, d, err)
	}
	if n := be.Note(); n != "" {
		fmt.Fprintln(stderr, "verdict: "+name+" "+d+": "+n)
	}
	return be, nil
}

// openSession opens spec as a session: on --device, or one replica on each
// device of --devices, joined (requests go to the replica with the
// shortest queue; a replica whose device fails is taken out, said on
// stderr). The progress bar shows each load.
func (w weightFlags) openSession(ctx context.Context, spec string, stderr io.Writer) (*session.Session, error) {
	ds, err := w.deviceList(stderr)
	if err != nil {
		return nil, err
	}
	opt, err := w.formatOptions()
	if err != nil {
		return nil, err
	}
	backends := make([]*session.Backend, len(ds))
	for i, d := range ds {
		if backends[i], err = w.backend(d, stderr); err != nil {
			return nil, err
		}
	}
	b := newBar(stderr)
	opt.Progress = loadProgress(b)
	s, err := session.OpenDevices(ctx, spec, opt, backends, ds, func(line string) { fmt.Fprintln(stderr, "verdict: "+line) })
	b.clear()
	if err != nil {
		return nil, err
	}
	if len(ds) > 1 {
		fmt.Fprintf(stderr, "verdict: %d replicas of %s: %s\n", len(ds), s.Info().Name, strings.Join(ds, ", "))
	}
	return s, nil
}

// checkScoring refuses an unknown --backend or --normalize (as f.open
// does).
func (f scoreFlags) checkScoring() error {
	if scorer.CheckBackend(*f.backend) != nil || *f.backend == "" {
		return usageErr("backend %q is not available (available: %s)", *f.backend, strings.Join(scorer.Backends, ", "))
	}
	if scorer.CheckNormalize(*f.normalize) != nil {
		return usageErr("--normalize %q is not one of %s", *f.normalize, strings.Join(scorer.Normalizations, ", "))
	}
	return nil
}

// flagSet is fs as a *flag.FlagSet, nil when it is another kind.
func flagSet(fs any) *flag.FlagSet {
	f, _ := fs.(*flag.FlagSet)
	return f
}

// deviceName is the one device the flags name (for reports): --devices'
// one, else --device.
func (w weightFlags) deviceName() string {
	if d, err := w.oneDevice(io.Discard); err == nil {
		return d
	}
	return *w.device
}

// sessionConcurrency is score-file's default records in flight for s:
// DefaultConcurrency of its key/value pool, added up over its replicas.
func sessionConcurrency(s *session.Session) int {
	reps := s.Replicas()
	if reps == nil {
		return DefaultConcurrency(s.Info().Resident.KVPositions)
	}
	n := 0
	for _, r := range reps {
		n += DefaultConcurrency(r.KVPositions)
	}
	return n
}

// replicaSummary says on stderr how a joined session's requests were
// spread over its replicas, and which were taken out; nothing for one
// device.
func replicaSummary(stderr io.Writer, s *session.Session) {
	reps := s.Replicas()
	total := int64(0)
	for _, r := range reps {
		total += r.Requests
	}
	for _, r := range reps {
		state := ""
		if !r.Up {
			state = fmt.Sprintf(", taken out (%s), %d requests run again elsewhere", r.Error, r.Retried)
		}
		fmt.Fprintf(stderr, "verdict: replica %d (%s): %d requests (%.1f%%)%s\n", r.Index, r.Device, r.Requests, 100*float64(r.Requests)/float64(max(total, 1)), state)
	}
}
