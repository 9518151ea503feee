// The towers' speed on this machine: measured from runs, kept beside the
// settings, told before a run (each media item's expected tower time) and
// used during one for a steady estimate of the time left.

package app

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"verdict/app/inputs"
	"verdict/engine/safefile"
	"verdict/media"
)

// towerSpeedsName is the file beside the settings that keeps the towers'
// measured speeds.
const towerSpeedsName = "tower-speeds.json"

// TowerSpeed is what one tower took on one model and device.
type TowerSpeed struct {
	// Ms is an item's time in the tower, its load not counted: per image or
	// video frame (vision), per second of audio (audio).
	Ms float64 `json:"ms"`
	// N counts the items measured. Ms is their mean up to speedMemory
	// items, then each new one moves it by 1/speedMemory of the difference.
	N int `json:"n"`
	// Profile[b] is the share of an item's time done after its tower's
	// step b+1 (the last is 1).
	Profile []float64 `json:"profile,omitempty"`
}

// speedMemory is how many items the mean of TowerSpeed.Ms spans.
const speedMemory = 3

// towerKinds are the two towers' speeds of one model on one device.
type towerKinds struct {
	Vision *TowerSpeed `json:"vision,omitempty"`
	Audio  *TowerSpeed `json:"audio,omitempty"`
}

func (k *towerKinds) of(audio bool) **TowerSpeed {
	if audio {
		return &k.Audio
	}
	return &k.Vision
}

// towerSpeeds keeps the measured speeds by model and device, in a file
// ("" keeps them in memory).
type towerSpeeds struct {
	path string
	log  *logrus.Logger

	mu sync.Mutex
	m  map[string]*towerKinds
}

// towerSpeedsPathFor is the speeds' file beside the settings file.
func towerSpeedsPathFor(settingsPath string) string {
	if settingsPath == "" {
		return ""
	}
	return filepath.Join(filepath.Dir(settingsPath), towerSpeedsName)
}

func newTowerSpeeds(path string, log *logrus.Logger) *towerSpeeds {
	t := &towerSpeeds{path: path, log: log, m: map[string]*towerKinds{}}
	if path == "" {
		return t
	}
	b, err := safefile.ReadFile(path, 1<<20)
	if err != nil {
		if !os.IsNotExist(err) {
			log.WithError(err).Warn("towers: cannot read the measured speeds")
		}
		return t
	}
	if err := json.Unmarshal(b, &t.m); err != nil || t.m == nil {
		log.WithError(err).Warn("towers: the measured speeds are not valid JSON: starting afresh")
		t.m = map[string]*towerKinds{}
	}
	return t
}

// get returns a copy of the speed of key's vision (or audio) tower.
func (t *towerSpeeds) get(key string, audio bool) (TowerSpeed, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := t.m[key]
	if k == nil || *k.of(audio) == nil {
		return TowerSpeed{}, false
	}
	sp := **k.of(audio)
	sp.Profile = append([]float64(nil), sp.Profile...)
	return sp, true
}

// record adds one item's measured time (ms per image or per second of
// audio) and, when given, its profile over the tower's steps.
func (t *towerSpeeds) record(key string, audio bool, ms float64, profile []float64) {
	if !(ms > 0) || math.IsInf(ms, 0) {
		return
	}
	t.mu.Lock()
	k := t.m[key]
	if k == nil {
		k = &towerKinds{}
		t.m[key] = k
	}
	sp := *k.of(audio)
	if sp == nil {
		sp = &TowerSpeed{}
		*k.of(audio) = sp
	}
	sp.N++
	w := 1 / float64(min(sp.N, speedMemory))
	sp.Ms += w * (ms - sp.Ms)
	if len(profile) > 0 {
		if len(sp.Profile) != len(profile) { // a first profile, or a tower of other steps
			sp.Profile = append([]float64(nil), profile...)
		} else {
			for i, v := range profile {
				sp.Profile[i] += w * (v - sp.Profile[i])
			}
		}
	}
	b, err := json.MarshalIndent(t.m, "", "  ")
	t.mu.Unlock()
	if err != nil || t.path == "" {
		return
	}
	if err := writeFileAtomic(t.path, append(b, '\n')); err != nil {
		t.log.WithError(err).Warn("towers: cannot save the measured speeds")
	}
}

func writeFileAtomic(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// loadedNow is the ready model (nil when none is).
func (s *Models) loadedNow() *loaded {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}

// towerKey names a loaded model and the device its towers run on.
func towerKey(l *loaded) string {
	return l.info.Name + " | " + deviceLabel(l.info.Device)
}

// deviceLabel is "cpu AMD EPYC 7B13 (2 cores)", "cuda NVIDIA H100".
func deviceLabel(d *DeviceInfo) string {
	if d == nil {
		return "default device"
	}
	s := strings.TrimSpace(d.Backend + " " + d.Name)
	if d.Cores > 0 {
		s += fmt.Sprintf(" (%d cores)", d.Cores)
	}
	return s
}

// deviceWords names the device for the user: "CPU" or the GPU's name.
func deviceWords(d *DeviceInfo) string {
	switch {
	case d == nil || d.Backend == "" || d.Backend == "cpu":
		return "CPU"
	case d.Name != "":
		return d.Name
	}
	return strings.ToUpper(d.Backend)
}

// TowerEstimate is an item's expected time in its towers on this machine,
// from their speed measured in earlier runs.
type TowerEstimate struct {
	// Ms is the expected time (0 when Cached or not Measured).
	Ms float64 `json:"ms"`
	// Cached: the item went through the loaded model's towers already, so
	// its output comes from the tower cache.
	Cached bool `json:"cached,omitempty"`
	// Measured is false while no run on this machine has timed its tower.
	Measured bool `json:"measured"`
	// Loads: its tower is not loaded yet; the first item waits for the
	// load too (not in Ms).
	Loads bool `json:"loads,omitempty"`
	// Device is what the towers run on ("CPU", a GPU's name); Basis the
	// measurement ("16.5 s an image, 3 images timed").
	Device string `json:"device"`
	Basis  string `json:"basis,omitempty"`
}

// towerStore is what the media service knows of the towers: their speeds,
// and the items the loaded model has already encoded.
type towerStore struct {
	speeds *towerSpeeds

	mu      sync.Mutex
	model   *loaded // the model whose tower cache done describes
	encoded map[[32]byte]bool
}

// markEncoded records that l's towers encoded these inputs (their outputs
// are in its tower cache now).
func (t *towerStore) markEncoded(l *loaded, digests [][32]byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.model != l {
		t.model, t.encoded = l, map[[32]byte]bool{}
	}
	for _, d := range digests {
		t.encoded[d] = true
	}
}

func (t *towerStore) isEncoded(l *loaded, d [32]byte) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.model == l && t.encoded[d]
}

// estimate is e's expected tower time on l.
func (t *towerStore) estimate(l *loaded, e *mediaEntry) *TowerEstimate {
	est := &TowerEstimate{Device: deviceWords(l.info.Device), Measured: true}
	if t.isEncoded(l, e.digest) {
		est.Cached = true
		return est
	}
	vision, audio := l.s.Towers()
	key := towerKey(l)
	var basis []string
	add := func(isAudio bool, units float64) {
		sp, ok := t.speeds.get(key, isAudio)
		if !ok {
			est.Measured = false
			return
		}
		est.Ms += sp.Ms * units
		basis = append(basis, speedWords(sp, isAudio))
	}
	switch {
	case e.image != nil:
		add(false, 1)
		est.Loads = !vision
	case e.clip != nil:
		add(true, e.clip.Duration().Seconds())
		est.Loads = !audio
	case e.video != nil:
		add(false, float64(len(e.video.Frames)))
		est.Loads = !vision
		if e.video.Soundtrack != nil {
			add(true, e.video.Soundtrack.Duration().Seconds())
			est.Loads = est.Loads || !audio
		}
	}
	if !est.Measured {
		est.Ms = 0
	} else {
		est.Basis = strings.Join(basis, "; ")
	}
	return est
}

// speedWords is "16.5 s an image, 3 timed" or "0.9 s a second of audio, 2 timed".
func speedWords(sp TowerSpeed, audio bool) string {
	what := "an image"
	if audio {
		what = "a second of audio"
	}
	return fmt.Sprintf("%.1f s %s, %d timed", sp.Ms/1000, what, sp.N)
}

// Rough relative costs of the two towers, for the estimate's weights while
// one of them has no measurement (the first run on a machine).
const (
	priorImageMs       = 20000
	priorAudioMsPerSec = 500
)

// visionPrior is how a Gemma 3n vision tower pass (MobileNetV5, 86 steps)
// spreads its time over its steps, measured on a 2-core CPU: the share done
// after each step. A machine's own profile replaces it after its first
// image; a tower of other steps counts its steps alike.
var visionPrior = []float64{
	0.003, 0.018, 0.080, 0.143, 0.159, 0.170, 0.179, 0.189, 0.207, 0.220, 0.243, 0.261, 0.282, 0.304, 0.325, 0.339, 0.362,
	0.365, 0.374, 0.384, 0.397, 0.405, 0.414, 0.422, 0.432, 0.438, 0.452, 0.463, 0.472, 0.477, 0.488, 0.492, 0.498, 0.505,
	0.513, 0.525, 0.531, 0.540, 0.549, 0.563, 0.569, 0.576, 0.583, 0.589, 0.596, 0.602, 0.615, 0.621, 0.627, 0.631, 0.636,
	0.641, 0.646, 0.651, 0.656, 0.660, 0.666, 0.672, 0.684, 0.692, 0.702, 0.709, 0.718, 0.726, 0.736, 0.744, 0.752, 0.762,
	0.772, 0.780, 0.788, 0.795, 0.802, 0.814, 0.825, 0.833, 0.841, 0.856, 0.867, 0.877, 0.887, 0.893, 0.905, 0.913, 0.923,
	1,
}

// rateSmoothing is the time constant of the towers' smoothed rate.
const rateSmoothing = 5 * time.Second

// towerClock follows a run's tower pass: the work done against the whole
// (each item weighted by its expected time, each step by its share of the
// item), at a rate smoothed over a few seconds, so that the time left moves
// steadily instead of following each uneven step.
type towerClock struct {
	items []clockItem
	// rate is the work (expected ms) done per wall millisecond: 1 at the
	// start when every weight is a measured time, else unknown (0) until a
	// second of work has been seen.
	rate      float64
	last      time.Time
	lastDone  float64
	computing time.Duration // time outside the towers' loads
}

type clockItem struct {
	weight  float64   // expected ms
	profile []float64 // share done after each step (nil: steps alike)
}

// newTowerClock plans in's items in the order the towers take them
// (images, video frames, the audio), weighted by t's speeds for key; items
// whose digest l has encoded weigh nothing.
func newTowerClock(t *towerStore, l *loaded, in *media.Input, start time.Time) *towerClock {
	c := &towerClock{last: start}
	key := towerKey(l)
	vs, vok := t.speeds.get(key, false)
	as, aok := t.speeds.get(key, true)
	img := clockItem{weight: priorImageMs, profile: visionPrior}
	if vok {
		img.weight = vs.Ms
		if len(vs.Profile) > 0 {
			img.profile = vs.Profile
		}
	}
	measured := true
	for _, im := range in.Images {
		it := img
		if d, ok := imageDigest(im.Image); ok && t.isEncoded(l, d) {
			it.weight = 0
		} else if !vok {
			measured = false
		}
		c.items = append(c.items, it)
	}
	if in.Video != nil {
		cached := t.isEncoded(l, videoDigest(in.Video))
		for range in.Video.Frames {
			it := img
			if cached {
				it.weight = 0
			} else if !vok {
				measured = false
			}
			c.items = append(c.items, it)
		}
	}
	if _, clip, ok := in.Sound(); ok {
		it := clockItem{weight: priorAudioMsPerSec * clip.Duration().Seconds()}
		if aok {
			it.weight, it.profile = as.Ms*clip.Duration().Seconds(), as.Profile
		}
		cached := (in.Audio != nil && t.isEncoded(l, clipDigest(&in.Audio.Clip))) || (in.Audio == nil && in.Video != nil && t.isEncoded(l, videoDigest(in.Video)))
		switch {
		case cached:
			it.weight = 0
		case !aok:
			measured = false
		}
		c.items = append(c.items, it)
	}
	if measured {
		c.rate = 1
	}
	return c
}

// total is the whole pass's work.
func (c *towerClock) total() float64 {
	var w float64
	for _, it := range c.items {
		w += it.weight
	}
	return w
}

// step takes one progress report at now and returns the share of the work
// done (0..1) and the time left (0: not known yet).
func (c *towerClock) step(st inputs.Step, now time.Time) (fraction, leftMs float64) {
	for j, it := range st.Items { // an item the tower cache answered took no work
		if it.Cached && j < len(c.items) {
			c.items[j].weight = 0
		}
	}
	done := 0.0
	for j := 0; j < min(st.Done, len(c.items)); j++ {
		done += c.items[j].weight
	}
	if i := st.Done; i < len(c.items) && !st.Loading && st.Blocks > 0 && st.Block > 0 {
		it := c.items[i]
		share := float64(min(st.Block, st.Blocks)) / float64(st.Blocks)
		if len(it.profile) == st.Blocks {
			share = it.profile[min(st.Block, st.Blocks)-1]
		}
		done += it.weight * share
	}
	total := c.total()
	if st.What == "" && st.Done >= len(c.items) {
		done = total
	}
	dt := now.Sub(c.last)
	if !st.Loading && dt > 0 {
		c.computing += dt
		sample := (done - c.lastDone) / ms(dt)
		switch {
		case c.rate > 0:
			a := 1 - math.Exp(-float64(dt)/float64(rateSmoothing))
			c.rate += a * (sample - c.rate)
		case c.computing >= time.Second && done > 0:
			c.rate = done / ms(c.computing)
		}
	}
	c.last, c.lastDone = now, done
	if total <= 0 {
		return 1, 0
	}
	fraction = min(1, done/total)
	if c.rate > 0 && done < total {
		leftMs = (total - done) / c.rate
	}
	return fraction, leftMs
}

// towerMeter times each item's pass through its tower (its load left out)
// and the share of it after each step, for the speeds.
type towerMeter struct {
	index   int // the item (Step.Done) being timed; -1 none
	start   time.Time
	steps   []time.Time
	blocks  int
	skip    bool // its tower was loading unseen (the audio tower's first use)
	units   float64
	audio   bool
	results []meterResult
}

type meterResult struct {
	audio   bool
	ms      float64 // per image, or per second of audio
	profile []float64
}

// newTowerMeter times a pass; audioLoaded says whether the audio tower has
// run before (its load is not reported, so a first pass is not timed).
func newTowerMeter(audioLoaded bool) *towerMeter {
	return &towerMeter{index: -1, skip: !audioLoaded}
}

// see takes one progress report at now; audio[i] and units[i] describe
// item i (planUnits).
func (m *towerMeter) see(st inputs.Step, now time.Time, audio []bool, units []float64) {
	if st.Done != m.index || st.What == "" {
		m.finish(st)
		m.index, m.start, m.steps, m.blocks = st.Done, now, nil, 0
		if st.What == "" || st.Done >= len(audio) {
			m.index = -1
			return
		}
		m.audio, m.units = audio[st.Done], units[st.Done]
	}
	if st.Loading {
		m.start, m.steps = now, nil // the pass starts after the load
		return
	}
	if st.Block > 0 {
		m.steps, m.blocks = append(m.steps, now), st.Blocks
	}
}

// finish ends the item being timed with what st says of it.
func (m *towerMeter) finish(st inputs.Step) {
	i := m.index
	if i < 0 || i >= len(st.Items) || st.Items[i].Cached || len(m.steps) == 0 || m.blocks == 0 || len(m.steps) != m.blocks {
		return
	}
	if m.audio && m.skip { // the audio tower's first pass includes its unreported load
		m.skip = false
		return
	}
	end := m.steps[len(m.steps)-1]
	total := ms(end.Sub(m.start))
	if total <= 0 || m.units <= 0 {
		return
	}
	prof := make([]float64, len(m.steps))
	for k, t := range m.steps {
		prof[k] = ms(t.Sub(m.start)) / total
	}
	m.results = append(m.results, meterResult{audio: m.audio, ms: total / m.units, profile: prof})
}

// planUnits lists in's items as the towers take them: whether each is
// audio, and its units (1 an image or frame, the seconds of audio).
func planUnits(in *media.Input) (audio []bool, units []float64) {
	n := len(in.Images)
	if in.Video != nil {
		n += len(in.Video.Frames)
	}
	for range n {
		audio, units = append(audio, false), append(units, 1)
	}
	if _, clip, ok := in.Sound(); ok {
		audio, units = append(audio, true), append(units, clip.Duration().Seconds())
	}
	return audio, units
}

// inputDigests are the digests of in's items, as their media entries have
// them.
func inputDigests(in *media.Input) [][32]byte {
	var out [][32]byte
	for _, im := range in.Images {
		if d, ok := imageDigest(im.Image); ok {
			out = append(out, d)
		}
	}
	if in.Video != nil {
		out = append(out, videoDigest(in.Video))
	}
	if in.Audio != nil {
		out = append(out, clipDigest(&in.Audio.Clip))
	}
	return out
}
