package app

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/sirupsen/logrus"

	"verdict/engine/session"
)

// ReplicaInfo is one replica of a model loaded on several devices: its
// device, whether it is in service and its share of the requests.
type ReplicaInfo struct {
	Device DeviceInfo `json:"device"`
	// Up is false once its device failed: Error says how, and its requests
	// ran again on the others.
	Up    bool   `json:"up"`
	Error string `json:"error,omitempty"`
	// Requests are the requests it answered; Running those it runs now.
	Requests int64 `json:"requests"`
	Running  int   `json:"running"`
}

// devicesBackends opens the backend of each device of s.devices, with its
// report; a GPU that does not open is the CPU, as for the device setting
// (openReplicas leaves such a device out when others open).
func (s *Models) devicesBackends() ([]*session.Backend, []DeviceInfo) {
	bes := make([]*session.Backend, len(s.devices))
	devs := make([]DeviceInfo, len(s.devices))
	for i, d := range s.devices {
		bes[i], devs[i] = s.backend(d)
	}
	return bes, devs
}

// openReplicas opens spec once on each backend and joins the sessions: one
// replica a device, requests spread over them (session.Join). A device
// that gave the CPU in place of its GPU, or whose load failed, is left
// out with a warning while another one loads; the replicas loaded and
// their devices are returned.
func (s *Models) openReplicas(ctx context.Context, spec string, bes []*session.Backend, devs []DeviceInfo, progress func(string, int64, int64)) (*session.Session, []DeviceInfo, error) {
	var parts []*session.Session
	var names []string
	var loaded []DeviceInfo
	var errs []error
	for i, be := range bes {
		d := devs[i]
		if d.Fallback && len(bes) > 1 {
			s.log.WithField("device", d.Requested).Warn("left out of the replicas: " + d.Note)
			errs = append(errs, fmt.Errorf("%s: %s", d.Requested, d.Note))
			continue
		}
		p, err := s.open(ctx, spec, be, progress)
		if err != nil {
			if ctx.Err() != nil {
				for _, q := range parts {
					q.Close()
				}
				return nil, nil, err
			}
			s.log.WithError(err).WithField("device", d.Requested).Warn("the model failed to load on this device: left out of the replicas")
			errs = append(errs, fmt.Errorf("%s: %w", d.Requested, err))
			continue
		}
		parts, names, loaded = append(parts, p), append(names, d.Requested), append(loaded, d)
	}
	if len(parts) == 0 {
		return nil, nil, fmt.Errorf("the model loaded on none of the devices %s: %w", strings.Join(s.devices, ", "), errors.Join(errs...))
	}
	j, err := session.Join(parts, names, func(line string) { s.log.Warn(line) })
	if err != nil {
		for _, q := range parts {
			q.Close()
		}
		return nil, nil, err
	}
	if len(parts) > 1 {
		s.log.WithFields(logrus.Fields{"devices": strings.Join(names, ",")}).Info("one replica of the model on each device")
	}
	return j, loaded, nil
}

// replicasOf reports l's replicas now; nil for a model on one device.
func replicasOf(l *loaded) []ReplicaInfo {
	reps := l.s.Replicas()
	if reps == nil || len(reps) != len(l.devs) {
		return nil
	}
	out := make([]ReplicaInfo, len(reps))
	for i, r := range reps {
		out[i] = ReplicaInfo{Device: l.devs[i], Up: r.Up, Error: r.Error, Requests: r.Requests, Running: r.Sched.Running}
	}
	return out
}
