package app

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"verdict/engine/models"
	"verdict/engine/session"
)

func TestCheckDevice(t *testing.T) {
	for _, tc := range []struct {
		device string
		ok     bool
	}{
		{"auto", true}, {"cpu", true}, {"cuda", true}, {"cuda:0", true}, {"cuda:3", true},
		{"", false}, {"gpu", false}, {"CUDA", false}, {"cuda:", false}, {"cuda:x", false},
		{"cuda:-1", false}, {"cuda:01", false}, {" cpu", false},
	} {
		if err := CheckDevice(tc.device); (err == nil) != tc.ok {
			t.Errorf("CheckDevice(%q) = %v, want ok %v", tc.device, err, tc.ok)
		}
	}
}

// TestDeviceSetting: the device is validated (a SettingsError naming it),
// saved with the other settings, read back, and auto by default.
func TestDeviceSetting(t *testing.T) {
	path := filepath.Join(t.TempDir(), "settings.json")
	for _, tc := range []struct {
		device string
		want   string // the device in effect after Set
		err    bool
	}{
		{"cpu", "cpu", false},
		{"cuda:1", "cuda:1", false},
		{"", "auto", false}, // empty means auto
		{"gpu", "auto", true},
		{"cuda:x", "auto", true},
	} {
		t.Run(tc.device, func(t *testing.T) {
			s := NewSettings(path, NewLogs(quietLogger(), NewRecorder()), quietLogger(), NewRecorder())
			if _, err := s.Reset(); err != nil {
				t.Fatal(err)
			}
			if got := s.Get().Device; got != DeviceAuto {
				t.Fatalf("default device %q, want auto", got)
			}
			p := s.Get()
			p.Device = tc.device
			_, err := s.Set(p)
			var se *SettingsError
			switch {
			case tc.err && (!errors.As(err, &se) || se.Setting != "device" || !strings.Contains(err.Error(), tc.device)):
				t.Fatalf("Set(device %q) = %v, want a SettingsError for device naming the value", tc.device, err)
			case !tc.err && err != nil:
				t.Fatalf("Set(device %q): %v", tc.device, err)
			}
			again := NewSettings(path, NewLogs(quietLogger(), NewRecorder()), quietLogger(), NewRecorder())
			if got := again.Get().Device; got != tc.want {
				t.Errorf("device read back %q, want %q", got, tc.want)
			}
		})
	}
	// A file naming an unknown device is refused whole, like any bad value.
	if err := os.WriteFile(path, []byte(`{"run":{"generation":{"max_tokens":5,"top_p":1,"prompt":"chat"},"scorer":{"branch_batch":2,"temperature":1}},"log_level":"info","device":"tpu"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	s := NewSettings(path, NewLogs(quietLogger(), NewRecorder()), quietLogger(), NewRecorder())
	if p := s.Get(); p.Device != DeviceAuto || p.Run.Generation.MaxTokens != DefaultPreferences().Run.Generation.MaxTokens {
		t.Errorf("a file with device tpu gave %+v, want the defaults", p)
	}
}

func TestAfterFailedLoad(t *testing.T) {
	oom := errors.New("cuda: out of memory allocating 3 GB")
	gpu := DeviceInfo{Requested: "cuda", Backend: "cuda"}
	cpu := DeviceInfo{Requested: "cpu", Backend: "cpu"}
	for _, tc := range []struct {
		name      string
		dev       DeviceInfo
		cancelled bool
		retry     bool
	}{
		{"gpu out of memory", gpu, false, true},
		{"gpu, cancelled", gpu, true, false},
		{"cpu failed", cpu, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, retry := afterFailedLoad(tc.dev, oom, tc.cancelled)
			if retry != tc.retry {
				t.Fatalf("retry %v, want %v", retry, tc.retry)
			}
			if !retry {
				if d != tc.dev {
					t.Errorf("device %+v changed to %+v", tc.dev, d)
				}
				return
			}
			if d.Backend != "cpu" || !d.Fallback || d.Requested != "cuda" || !strings.Contains(d.Note, "loading on cuda failed: cuda: out of memory") || d.Cores < 1 {
				t.Errorf("after the failure: %+v", d)
			}
		})
	}
}

// TestOpenBackendFallsBack: a GPU that cannot be opened gives the CPU and
// says why; cpu never falls back.
func TestOpenBackendFallsBack(t *testing.T) {
	missing := filepath.Join(t.TempDir(), session.CUDALibrary)
	t.Setenv("VERDICT_CUDA_LIB", missing)
	for _, tc := range []struct {
		device   string
		fallback bool
		note     string
	}{
		{"cpu", false, ""},
		{"auto", true, "no usable libverdict_cuda.so"},
		{"cuda", true, "no usable libverdict_cuda.so"},
		{"cuda:2", true, missing + ": no such file"},
	} {
		t.Run(tc.device, func(t *testing.T) {
			be, d := openBackend(tc.device)
			if be.Name() != "cpu" || d.Backend != "cpu" || d.Requested != tc.device || d.Fallback != tc.fallback {
				t.Fatalf("openBackend(%q) = %s, %+v", tc.device, be.Name(), d)
			}
			if !strings.Contains(d.Note, tc.note) || (tc.note == "" && d.Note != "") || (tc.fallback && !strings.HasPrefix(d.Note, "using the CPU: ")) {
				t.Errorf("note %q, want one with %q", d.Note, tc.note)
			}
			if d.Cores != session.HostCores() || d.SIMD == "" || d.Name == "" {
				t.Errorf("the CPU is not described: %+v", d)
			}
		})
	}
}

// TestDeviceChangeReloads: changing the device loads the model again on
// it; cuda without its library is the CPU with the reason, and the model is
// ready, its resident memory reported.
func TestDeviceChangeReloads(t *testing.T) {
	needTokenizer(t)
	t.Setenv("VERDICT_CUDA_LIB", filepath.Join(t.TempDir(), session.CUDALibrary))
	rec := NewRecorder()
	var mu sync.Mutex
	var backends []string
	open := func(ctx context.Context, spec string, be *session.Backend, progress func(string, int64, int64)) (*session.Session, error) {
		mu.Lock()
		backends = append(backends, be.Name())
		mu.Unlock()
		return OpenWith(models.Options{CacheDir: "off"})(ctx, spec, be, progress)
	}
	s := New(Options{Emitter: rec, Logger: quietLogger(), Open: open})
	defer s.Shutdown()
	if _, err := s.Settings.SetDevice("cpu"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Models.Open("builtin"); err != nil {
		t.Fatal(err)
	}
	ready := func(requested string) ModelInfo {
		t.Helper()
		ev, ok := rec.Wait(EventModel, 60*time.Second, func(b json.RawMessage) bool {
			var m ModelInfo
			json.Unmarshal(b, &m)
			return (m.State == ModelReady || m.State == ModelError) && m.Device != nil && m.Device.Requested == requested
		})
		if !ok {
			t.Fatalf("no model loaded on device %s within 60 s", requested)
		}
		var m ModelInfo
		json.Unmarshal(ev.JSON, &m)
		if m.State != ModelReady {
			t.Fatalf("model on %s: %s", requested, m.Error)
		}
		return m
	}
	m := ready("cpu")
	if m.Device.Backend != "cpu" || m.Device.Fallback || m.Device.Note != "" {
		t.Errorf("on cpu: %+v", *m.Device)
	}
	if r := m.Resident; r == nil || r.Weights != "q4" || r.WeightBytes <= 0 || r.KVBytes <= 0 || len(r.Towers) != 0 {
		t.Errorf("resident %+v", r)
	}
	loads := len(rec.Events(EventModel))
	if _, err := s.Settings.SetDevice("cuda"); err != nil {
		t.Fatal(err)
	}
	m = ready("cuda")
	if m.Device.Backend != "cpu" || !m.Device.Fallback || !strings.Contains(m.Device.Note, "using the CPU: cuda: no usable libverdict_cuda.so") {
		t.Errorf("cuda without its library: %+v", *m.Device)
	}
	sawLoading := false
	for _, e := range rec.Events(EventModel)[loads:] {
		var m ModelInfo
		json.Unmarshal(e.JSON, &m)
		sawLoading = sawLoading || m.State == ModelLoading
	}
	if !sawLoading {
		t.Error("the device change showed no load")
	}
	// The same device again loads nothing.
	if _, err := s.Settings.SetDevice("cuda"); err != nil {
		t.Fatal(err)
	}
	if got := s.Settings.Get().Device; got != "cuda" {
		t.Errorf("device setting %q", got)
	}
	if _, err := s.Settings.SetDevice("vulkan"); err == nil {
		t.Error("device vulkan was accepted")
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(backends, ",") != "cpu,cpu" {
		t.Errorf("loads ran on %v, want cpu twice", backends)
	}
}

// TestLoadFailureOnGPUFallsBack: a load that fails on a GPU (too little
// memory) is made again on the CPU, and the model bar's report says why.
func TestLoadFailureOnGPUFallsBack(t *testing.T) {
	needTokenizer(t)
	rec := NewRecorder()
	var mu sync.Mutex
	loads := 0
	open := func(ctx context.Context, spec string, be *session.Backend, progress func(string, int64, int64)) (*session.Session, error) {
		mu.Lock()
		loads++
		first := loads == 1
		mu.Unlock()
		if first {
			return nil, errors.New("cuda: out of memory: 3.1 GB asked, 2.0 GB free")
		}
		return OpenWith(models.Options{CacheDir: "off"})(ctx, spec, be, progress)
	}
	s := New(Options{Emitter: rec, Logger: quietLogger(), Open: open})
	defer s.Shutdown()
	// A stand-in for a GPU that opens: the CPU's table reported as cuda.
	s.Models.backend = func(device string) (*session.Backend, DeviceInfo) {
		return session.DefaultBackend(), DeviceInfo{Requested: device, Backend: "cuda", Name: "fake GPU"}
	}
	if _, err := s.Settings.SetDevice("cuda"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Models.Open("builtin"); err != nil {
		t.Fatal(err)
	}
	m := settledModel(t, rec)
	if m.State != ModelReady {
		t.Fatalf("model %s: %s", m.State, m.Error)
	}
	d := m.Device
	if d == nil || d.Backend != "cpu" || !d.Fallback || d.Requested != "cuda" || !strings.Contains(d.Note, "using the CPU: loading on cuda failed: cuda: out of memory") {
		t.Errorf("device after the failed load: %+v", d)
	}
	mu.Lock()
	defer mu.Unlock()
	if loads != 2 {
		t.Errorf("%d loads, want two (the GPU's, then the CPU's)", loads)
	}
}
