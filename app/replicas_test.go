package app

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"verdict/engine/models"
	"verdict/engine/scorer"
	"verdict/engine/session"
)

// TestDevicesReplicas: with Options.Devices a load opens one replica on
// each device (a device whose load fails is left out), the model info
// lists them, and runs spread over them; the device setting no longer
// reloads the model.
func TestDevicesReplicas(t *testing.T) {
	needTokenizer(t)
	rec := NewRecorder()
	var mu sync.Mutex
	loads := 0
	open := func(ctx context.Context, spec string, be *session.Backend, progress func(string, int64, int64)) (*session.Session, error) {
		mu.Lock()
		loads++
		n := loads
		mu.Unlock()
		if n == 3 {
			return nil, errors.New("cuda: out of memory: 3.1 GB asked, 2.0 GB free")
		}
		return OpenWith(models.Options{CacheDir: "off"})(ctx, spec, be, progress)
	}
	s := New(Options{Emitter: rec, Logger: quietLogger(), Open: open, Devices: []string{"cuda:0", "cuda:1", "cuda:2"}})
	defer s.Shutdown()
	// Stand-ins for GPUs that open: the CPU's table reported as cuda.
	s.Models.backend = func(device string) (*session.Backend, DeviceInfo) {
		return session.DefaultBackend(), DeviceInfo{Requested: device, Backend: "cuda", Name: "fake GPU " + device}
	}
	if _, err := s.Models.Open("builtin"); err != nil {
		t.Fatal(err)
	}
	m := settledModel(t, rec)
	if m.State != ModelReady {
		t.Fatalf("model %s: %s", m.State, m.Error)
	}
	if len(m.Replicas) != 2 || m.Replicas[0].Device.Requested != "cuda:0" || m.Replicas[1].Device.Requested != "cuda:1" ||
		!m.Replicas[0].Up || m.Device == nil || m.Device.Requested != "cuda:0" {
		t.Fatalf("replicas %+v, device %+v", m.Replicas, m.Device)
	}
	l, release, err := s.Models.acquire()
	if err != nil {
		t.Fatal(err)
	}
	sc, err := scorer.ParseSchema(ticketSchema(t))
	if err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if _, err := l.s.Score(context.Background(), sc, ticketText, scorer.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	release()
	reps := s.Models.Info().Replicas
	if len(reps) != 2 || reps[0].Requests != 2 || reps[1].Requests != 2 {
		t.Errorf("replicas after 4 requests: %+v", reps)
	}
	before := len(rec.Events(EventModel))
	if _, err := s.Settings.SetDevice("cpu"); err != nil {
		t.Fatal(err)
	}
	if n := len(rec.Events(EventModel)); n != before {
		t.Errorf("the device setting reloaded the model on devices: %d events", n-before)
	}
	mu.Lock()
	defer mu.Unlock()
	if loads != 3 {
		t.Errorf("%d loads, want one a device", loads)
	}
	// None loads: the model's error names the devices.
	rec2 := NewRecorder()
	s2 := New(Options{Emitter: rec2, Logger: quietLogger(), Devices: []string{"cuda:0", "cuda:1"},
		Open: func(context.Context, string, *session.Backend, func(string, int64, int64)) (*session.Session, error) {
			return nil, errors.New("cuda: out of memory")
		}})
	defer s2.Shutdown()
	s2.Models.backend = s.Models.backend
	if _, err := s2.Models.Open("builtin"); err != nil {
		t.Fatal(err)
	}
	if m := settledModel(t, rec2); m.State != ModelError || !strings.Contains(m.Error, "none of the devices cuda:0, cuda:1") ||
		!strings.Contains(m.Error, "cuda:1: cuda: out of memory") {
		t.Errorf("no device loads: %s: %s", m.State, m.Error)
	}
}
