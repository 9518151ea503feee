package app

import (
	"context"
	"encoding/json"
	"image"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"verdict/app/inputs"
	"verdict/media"
	"verdict/media/pcm"
)

func TestTowerSpeedsAreKeptBesideTheSettings(t *testing.T) {
	path := towerSpeedsPathFor(filepath.Join(t.TempDir(), "settings.json"))
	sp := newTowerSpeeds(path, quietLogger())
	if _, ok := sp.get("m | cpu", false); ok {
		t.Fatal("a speed before any was measured")
	}
	prof := []float64{0.25, 1}
	sp.record("m | cpu", false, 1000, prof)
	sp.record("m | cpu", false, 2000, []float64{0.75, 1})
	sp.record("m | cpu", true, 40, nil)
	again := newTowerSpeeds(path, quietLogger())
	v, ok := again.get("m | cpu", false)
	if !ok || v.N != 2 || v.Ms != 1500 || len(v.Profile) != 2 || v.Profile[0] != 0.5 {
		t.Errorf("vision after two items, read back: %+v", v)
	}
	// Past speedMemory items, each new one moves the mean by a third.
	again.record("m | cpu", false, 1500, nil)
	again.record("m | cpu", false, 3000, nil)
	if v, _ := again.get("m | cpu", false); v.N != 4 || v.Ms != 2000 {
		t.Errorf("vision after four items: %+v", v)
	}
	if a, ok := again.get("m | cpu", true); !ok || a.Ms != 40 || a.Profile != nil {
		t.Errorf("audio %+v", a)
	}
	if _, ok := again.get("other | cpu", false); ok {
		t.Error("another model shares the speed")
	}
}

// pass is a fake tower pass of one image whose steps take the times of
// visionPrior's profile over total: the reports a tower gives, each with
// the time it arrives.
func pass(start time.Time, total time.Duration, loading time.Duration) (steps []inputs.Step, at []time.Time) {
	n := len(visionPrior)
	now := start
	add := func(st inputs.Step) {
		st.Total = 1
		steps, at = append(steps, st), append(at, now)
	}
	add(inputs.Step{What: "image 1"})
	if loading > 0 {
		for b := 1; b <= n; b++ {
			now = now.Add(loading / time.Duration(n))
			add(inputs.Step{What: "image 1", Loading: true, Block: b, Blocks: n})
		}
	}
	t0 := now
	for b := 1; b <= n; b++ {
		now = t0.Add(time.Duration(visionPrior[b-1] * float64(total)))
		add(inputs.Step{What: "image 1", Block: b, Blocks: n})
	}
	add(inputs.Step{Done: 1, Items: []inputs.Item{{What: "image 1", Duration: now.Sub(start)}}})
	return steps, at
}

func oneImage() *media.Input {
	return &media.Input{Images: []media.Image{{Source: "a.png", Image: image.NewRGBA(image.Rect(0, 0, 4, 4))}}}
}

// TestTowerClockIsSteady: the time left follows the work (not the steps)
// and does not swing with uneven steps, measured or not.
func TestTowerClockIsSteady(t *testing.T) {
	s, _ := readyServices(t)
	l := s.Models.loadedNow()
	const total = 16 * time.Second
	start := time.Unix(1000, 0)
	steps, at := pass(start, total, 0)

	// Measured here before: the estimate is right from the first step.
	st := &towerStore{speeds: newTowerSpeeds("", quietLogger())}
	st.speeds.record(towerKey(l), false, ms(total), visionPrior)
	c := newTowerClock(st, l, oneImage(), start)
	for i, s := range steps {
		frac, left := c.step(s, at[i])
		truth := ms(total) - ms(at[i].Sub(start))
		if math.Abs(left-truth) > 0.05*ms(total) || (i > 0 && left == 0 && truth > 0) {
			t.Fatalf("step %d (block %d): %.0f ms left, truly %.0f", i, s.Block, left, truth)
		}
		if want := ms(at[i].Sub(start)) / ms(total); math.Abs(frac-want) > 0.02 {
			t.Fatalf("step %d: %.3f done, truly %.3f", i, frac, want)
		}
	}

	// Never measured, and a tower load first: unknown during the load and
	// the first second of work, then within a quarter of the truth, never
	// rising by more than a tenth of the total between reports.
	steps, at = pass(start, total, 4*time.Second)
	c = newTowerClock(&towerStore{speeds: newTowerSpeeds("", quietLogger())}, l, oneImage(), start)
	var prev float64
	computeStart := at[len(visionPrior)+1]
	for i, s := range steps {
		_, left := c.step(s, at[i])
		if s.Loading || at[i].Sub(computeStart) < time.Second {
			if left != 0 {
				t.Fatalf("step %d: %.0f ms left while the speed is unknown", i, left)
			}
			continue
		}
		truth := ms(total) - ms(at[i].Sub(computeStart))
		if math.Abs(left-truth) > 0.25*ms(total) {
			t.Errorf("step %d (block %d): %.0f ms left, truly %.0f", i, s.Block, left, truth)
		}
		if prev > 0 && left > prev+0.1*ms(total) {
			t.Errorf("step %d (block %d): the estimate rose from %.0f to %.0f ms", i, s.Block, prev, left)
		}
		prev = left
	}
}

// TestTowerClockWeighsItems: an item the model encoded before weighs
// nothing, audio weighs its seconds, and a cached answer drops its weight.
func TestTowerClockWeighsItems(t *testing.T) {
	s, _ := readyServices(t)
	l := s.Models.loadedNow()
	st := &towerStore{speeds: newTowerSpeeds("", quietLogger())}
	key := towerKey(l)
	st.speeds.record(key, false, 10000, nil)
	st.speeds.record(key, true, 500, nil)
	a := image.NewRGBA(image.Rect(0, 0, 4, 4))
	b := image.NewRGBA(image.Rect(0, 0, 4, 4))
	b.Pix[0] = 1
	clip := pcm.Clip{Rate: 16000, Samples: make([]float32, 32000)}
	in := &media.Input{Images: []media.Image{{Source: "a", Image: a}, {Source: "b", Image: b}}, Audio: &media.Audio{Source: "c", Clip: clip}}
	d, _ := imageDigest(a)
	st.markEncoded(l, [][32]byte{d})
	c := newTowerClock(st, l, in, time.Unix(0, 0))
	if got := c.total(); got != 10000+2*500 {
		t.Errorf("total work %.0f, want one image and 2 s of audio", got)
	}
	if _, left := c.step(inputs.Step{What: "image 1", Total: 3}, time.Unix(0, 0)); left != 11000 {
		t.Errorf("%.0f ms left at the start", left)
	}
	// The second image turns out to be cached too.
	frac, left := c.step(inputs.Step{What: "audio", Done: 2, Total: 3, Items: []inputs.Item{{What: "image 1", Cached: true}, {What: "image 2", Cached: true}}}, time.Unix(0, 0))
	if frac != 0 || left != 1000 {
		t.Errorf("after two cached images: %.2f done, %.0f ms left", frac, left)
	}
}

// TestTowerEstimatesFromARun: a run times the vision tower here; the media
// then say what a new image will take, and that the one run is cached.
func TestTowerEstimatesFromARun(t *testing.T) {
	s, rec := readyServices(t)
	img := mustAdd(t, s.Media.Upload("photo.png", testPNG(t, 40, 30)))
	if img.Tower == nil || img.Tower.Measured || img.Tower.Cached || !img.Tower.Loads || img.Tower.Device != "CPU" {
		t.Errorf("before any run: %+v", img.Tower)
	}
	set := DefaultPreferences().Run
	set.Generation.MaxTokens = 2
	n := len(rec.Events(EventMedia))
	done := runWith(t, s, rec, RunRequest{Input: "x", Schema: ticketSchema(t), Media: []string{img.ID}, Settings: &set})
	if done.Media.Status != StatusDone || done.Media.Fraction != 1 {
		t.Fatalf("media %+v", done.Media)
	}
	sp, ok := s.Media.towers.speeds.get(towerKey(s.Models.loadedNow()), false)
	if !ok || sp.N != 1 || len(sp.Profile) == 0 || sp.Profile[len(sp.Profile)-1] != 1 || sp.Ms <= 0 || sp.Ms > done.Media.TowerMs {
		t.Fatalf("vision speed %+v after a pass of %.0f ms", sp, done.Media.TowerMs)
	}
	// The run's updates carried a share of the work and, once known, the time left.
	sawLeft := false
	last := -1.0
	for _, e := range rec.Events(EventRunUpdate) {
		var u struct{ Media *RunMedia }
		json.Unmarshal(e.JSON, &u)
		if u.Media == nil {
			continue
		}
		if u.Media.Fraction < last {
			t.Errorf("the share done went back from %.3f to %.3f", last, u.Media.Fraction)
		}
		last = u.Media.Fraction
		sawLeft = sawLeft || u.Media.LeftMs > 0
	}
	if !sawLeft {
		t.Error("no update said the time left")
	}
	if len(rec.Events(EventMedia)) == n {
		t.Error("no media:changed after the towers were timed")
	}
	items := s.Media.Items()
	if tw := items[0].Tower; tw == nil || !tw.Cached || tw.Ms != 0 {
		t.Errorf("the image just encoded: %+v", tw)
	}
	other := mustAdd(t, s.Media.Upload("other.png", testPNG(t, 30, 40)))
	if tw := other.Tower; tw == nil || !tw.Measured || tw.Cached || tw.Loads || tw.Ms != sp.Ms || !strings.Contains(tw.Basis, "an image, 1 timed") {
		t.Errorf("a new image: %+v (speed %+v)", tw, sp)
	}
}

// TestTowerEstimateSteadyInARun drives prepareMedia with a fake tower whose
// steps are uneven (the vision tower's own profile) and checks the time
// left it reports against the truth.
func TestTowerEstimateSteadyInARun(t *testing.T) {
	s, rec := readyServices(t)
	const total = 3 * time.Second
	l := s.Models.loadedNow()
	s.Media.towers.speeds.record(towerKey(l), false, ms(total), visionPrior)
	var t0, t1 time.Time
	s.Runs.prepare = func(ctx context.Context, m inputs.Towers, in *media.Input, p inputs.Progress) (*inputs.Prepared, error) {
		n := len(visionPrior)
		p(inputs.Step{Total: 1, What: "image 1"})
		t0 = time.Now()
		for b := 1; b <= n; b++ {
			time.Sleep(time.Until(t0.Add(time.Duration(visionPrior[b-1] * float64(total)))))
			p(inputs.Step{Total: 1, What: "image 1", Block: b, Blocks: n})
		}
		t1 = time.Now() // the pass's true end (later than t0 + total on a loaded machine)
		p(inputs.Step{Total: 1, Done: 1, Items: []inputs.Item{{What: "image 1", Duration: time.Since(t0)}}})
		return inputs.PrepareContext(ctx, m, &media.Input{}, nil)
	}
	s.Runs.interval = time.Millisecond
	img := mustAdd(t, s.Media.Upload("photo.png", testPNG(t, 40, 30)))
	set := DefaultPreferences().Run
	set.Generation.MaxTokens = 1
	runWith(t, s, rec, RunRequest{Input: "x", Schema: ticketSchema(t), Media: []string{img.ID}, Settings: &set})
	checked, unknown := 0, 0
	for _, e := range rec.Events(EventRunUpdate) {
		var u struct{ Media *RunMedia }
		json.Unmarshal(e.JSON, &u)
		if u.Media == nil || u.Media.Status != StatusPreparing || u.Media.Block == 0 {
			continue
		}
		if u.Media.LeftMs == 0 { // not known: shown as nothing, not as a jump
			unknown++
			continue
		}
		truth := ms(t1.Sub(e.At))
		if math.Abs(u.Media.LeftMs-truth) > 0.25*ms(total) {
			t.Errorf("block %d: %.0f ms left, truly about %.0f", u.Media.Block, u.Media.LeftMs, truth)
		}
		checked++
	}
	if checked < 10 || unknown > checked/10 {
		t.Fatalf("%d updates during the pass with an estimate, %d without", checked, unknown)
	}
}
