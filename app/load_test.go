package app

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"verdict/engine/models"
	"verdict/engine/session"
)

// TestOpenCancelsTheLoadInProgress: eight quick Opens run one load at a
// time, every replaced load is cancelled, only the last one's model is
// ready, and a load's progress reaches the model:state events.
func TestOpenCancelsTheLoadInProgress(t *testing.T) {
	needTokenizer(t)
	rec := NewRecorder()
	var mu sync.Mutex
	active, most, calls, cancelled := 0, 0, 0, 0
	final := false // every Open has been made: the load that starts now is the last
	open := func(ctx context.Context, spec string, _ *session.Backend, progress func(string, int64, int64)) (*session.Session, error) {
		mu.Lock()
		calls++
		active++
		most = max(most, active)
		last := final
		mu.Unlock()
		defer func() {
			mu.Lock()
			active--
			mu.Unlock()
		}()
		if last {
			m, err := session.Open(ctx, models.Builtin, models.Options{CacheDir: "off", Progress: progress})
			if errors.Is(err, context.Canceled) {
				mu.Lock()
				cancelled++
				mu.Unlock()
			}
			return m, err
		}
		progress("packing weights to 4 bits", 5, 10)
		select { // a packer that stops when told to
		case <-ctx.Done():
			mu.Lock()
			cancelled++
			mu.Unlock()
			return nil, ctx.Err()
		case <-time.After(20 * time.Second):
			return nil, errors.New("this load was never cancelled")
		}
	}
	s := New(Options{Emitter: rec, Logger: quietLogger(), Open: open})
	defer s.Shutdown()
	if _, err := s.Models.Open("builtin"); err != nil {
		t.Fatal(err)
	}
	if _, ok := rec.Wait(EventModel, 5*time.Second, func(b json.RawMessage) bool {
		var m ModelInfo
		json.Unmarshal(b, &m)
		return m.State == ModelLoading && m.Done == 5 && m.Total == 10 && strings.Contains(m.Stage, "packing")
	}); !ok {
		t.Error("no model:state event with the load's progress")
	}
	for i := range 7 {
		if i == 6 {
			mu.Lock()
			final = true
			mu.Unlock()
		}
		if _, err := s.Models.Open("builtin"); err != nil {
			t.Fatal(err)
		}
	}
	m := settledModel(t, rec)
	mu.Lock()
	defer mu.Unlock()
	if m.State != ModelReady {
		t.Errorf("final state %s: %s", m.State, m.Error)
	}
	// Opens that came while a load stopped may never have started theirs.
	if most != 1 || cancelled == 0 || calls < 2 || cancelled != calls-1 {
		t.Errorf("%d loads at once at most, %d of %d loads cancelled", most, cancelled, calls)
	}
	if s.Models.Info().State != ModelReady {
		t.Errorf("state %s after the last load", s.Models.Info().State)
	}
}

// TestCancelDuringTheVisionTower: stopping a run while the built-in
// model's vision tower encodes an image ends the run inside the tower: its
// last reported block is short of the tower's end and no image finished
// (the tower checks the cancel after every block). The time from the
// cancel to the run's end is a figure in the log, not a pass/fail bound: it
// is a block's time on this machine, however loaded.
func TestCancelDuringTheVisionTower(t *testing.T) {
	s, rec := readyServices(t)
	img := mustAdd(t, s.Media.Upload("photo.png", testPNG(t, 40, 30)))
	started, err := s.Runs.Start(RunRequest{Input: "What is this?", Schema: ticketSchema(t), Media: []string{img.ID}})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := rec.Wait(EventRunUpdate, 60*time.Second, func(b json.RawMessage) bool {
		var u RunUpdate
		json.Unmarshal(b, &u)
		return u.Media != nil && !u.Media.Loading && u.Media.Block >= 2 && u.Media.Blocks > u.Media.Block
	}); !ok {
		t.Fatal("no progress from inside the vision tower")
	}
	start := time.Now()
	if err := s.Runs.Cancel(started.ID, ""); err != nil {
		t.Fatal(err)
	}
	if _, ok := rec.Wait(EventRunDone, 30*time.Second, func(b json.RawMessage) bool { return strings.Contains(string(b), started.ID) }); !ok {
		t.Fatal("no run:done")
	}
	t.Logf("the run ended %v after the cancel", time.Since(start))
	// The last tower step any update reported, and the items finished.
	block, blocks, items := 0, 0, 0
	for _, e := range rec.Events(EventRunUpdate) {
		var u RunUpdate
		json.Unmarshal(e.JSON, &u)
		if u.Media != nil && !u.Media.Loading && u.Media.Blocks > 0 { // the encoder's steps, not its load's
			block, blocks = max(block, u.Media.Block), u.Media.Blocks
		}
		if u.Media != nil {
			items = max(items, len(u.Media.Items))
		}
	}
	if blocks == 0 || block >= blocks || items != 0 {
		t.Errorf("the tower was not stopped inside: block %d of %d reported, %d items done", block, blocks, items)
	}
	done, _ := s.Runs.Get(started.ID)
	if done.Media.Status != StatusCancelled || done.Scorer.Status != StatusCancelled || done.Generator.Status != StatusCancelled {
		t.Errorf("statuses: media %s, scorer %s, generator %s", done.Media.Status, done.Scorer.Status, done.Generator.Status)
	}
	if s.Runs.Active() != nil {
		t.Error("a run is still active")
	}
}

// TestTowerOutputsAreCached: a clip's second run takes its audio soft
// tokens from the tower cache, says so per item, and a new model starts
// with an empty cache.
func TestTowerOutputsAreCached(t *testing.T) {
	s, rec := readyServices(t)
	aud := mustAdd(t, s.Media.Upload("tone.wav", testWAV(1)))
	set := DefaultPreferences().Run
	set.Generation.MaxTokens = 2
	req := RunRequest{Input: "Is this a tone?", Schema: ticketSchema(t), Media: []string{aud.ID}, Settings: &set}
	item := func(what string) RunMediaItem {
		t.Helper()
		done := runWith(t, s, rec, req)
		md := done.Media
		if md == nil || md.Status != StatusDone || len(md.Items) != 1 || md.Items[0].What != "audio" || md.Items[0].Ms <= 0 {
			t.Fatalf("%s: media %+v", what, md)
		}
		if done.Scorer.Status != StatusDone || done.Generator.Status != StatusDone {
			t.Fatalf("%s: scorer %s %s, generator %s %s", what, done.Scorer.Status, done.Scorer.Error, done.Generator.Status, done.Generator.Error)
		}
		return md.Items[0]
	}
	if it := item("first run"); it.Cached {
		t.Error("the first run's audio came from the cache")
	}
	if it := item("second run"); !it.Cached {
		t.Error("the second run encoded the same clip again")
	}
	if _, err := s.Models.Open("builtin"); err != nil {
		t.Fatal(err)
	}
	if _, ok := rec.Wait(EventModel, 60*time.Second, func(b json.RawMessage) bool { return strings.Contains(string(b), `"state":"ready"`) }); !ok {
		t.Fatal("the model did not load again")
	}
	for s.Models.Info().State != ModelReady {
		time.Sleep(10 * time.Millisecond)
	}
	if it := item("after a model change"); it.Cached {
		t.Error("a new model answered from the old model's cache")
	}
}

// TestPrefillProgressIsStreamed: both sides' updates carry the decoder
// layers their prefill has run.
func TestPrefillProgressIsStreamed(t *testing.T) {
	s, rec := readyServices(t)
	set := DefaultPreferences().Run
	set.Generation.MaxTokens = 2
	done := runWith(t, s, rec, RunRequest{Input: ticketText, Schema: ticketSchema(t), Settings: &set})
	saw := map[string]bool{}
	for _, e := range rec.Events(EventRunUpdate) {
		var u struct {
			ID        string
			Scorer    *struct{ Timing *SideTiming }
			Generator *struct{ Timing *SideTiming }
		}
		json.Unmarshal(e.JSON, &u)
		if u.ID != done.ID {
			continue
		}
		live := func(side string, x *SideTiming) {
			if x != nil && x.PrefillLayers > 0 && x.PrefillDone > 0 && x.PrefillDone <= x.PrefillLayers {
				saw[side] = true
			}
		}
		if u.Scorer != nil {
			live("scorer", u.Scorer.Timing)
		}
		if u.Generator != nil {
			live("generator", u.Generator.Timing)
		}
	}
	if !saw["scorer"] || !saw["generator"] {
		t.Errorf("prefill progress seen: %v", saw)
	}
}
