// A run's media: prepared once, shared by both sides.

package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"verdict/app/inputs"
	"verdict/media"
)

// sharedPrep is a run's media preparation, computed once for both sides.
type sharedPrep struct {
	done chan struct{} // closed when p or err is set
	p    *inputs.Prepared
	err  error
}

// wait returns the prepared media once they are ready, or ctx's error.
func (sp *sharedPrep) wait(ctx context.Context) (*inputs.Prepared, error) {
	select {
	case <-sp.done:
		return sp.p, sp.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// prepareMedia runs the towers once, reporting each item as it starts and
// each of its tower's steps with the share of the work done and a steady
// estimate of the time left; it times the items for the towers' speeds.
func (r *run) prepareMedia(ctx context.Context, prepare func(context.Context, inputs.Towers, *media.Input, inputs.Progress) (*inputs.Prepared, error), md *Media, l *loaded, in *media.Input, sp *sharedPrep) {
	start := time.Now()
	var item string
	var itemStart time.Time
	clock := newTowerClock(md.towers, l, in, start)
	_, audioLoaded := l.s.Towers()
	meter := newTowerMeter(audioLoaded)
	kinds, units := planUnits(in)
	p, err := prepare(ctx, l.s, in, func(st inputs.Step) {
		now := time.Now()
		if st.What != item {
			item, itemStart = st.What, now
		}
		meter.see(st, now, kinds, units)
		fraction, left := clock.step(st, now)
		r.mu.Lock()
		m := r.rec.Media
		m.Done, m.Total, m.Stage = st.Done, st.Total, st.What
		m.Loading, m.Block, m.Blocks = st.Loading, st.Block, st.Blocks
		m.Fraction, m.LeftMs = fraction, left
		m.ItemMs = 0
		if st.What != "" {
			m.ItemMs = ms(now.Sub(itemStart))
		}
		m.Items = mediaItems(st.Items)
		r.mediaChanged()
		r.mu.Unlock()
		r.th.poke()
	})
	sp.p, sp.err = p, err
	r.mu.Lock()
	m := r.rec.Media
	m.TowerMs = ms(time.Since(start))
	m.Stage, m.Loading, m.Block, m.Blocks, m.ItemMs, m.LeftMs = "", false, 0, 0, 0, 0
	if p != nil {
		m.Items = mediaItems(p.Items)
	}
	switch {
	case err == nil:
		m.Status, m.Done, m.Fraction = StatusDone, m.Total, 1
	case errors.Is(err, context.Canceled):
		m.Status, m.Error = StatusCancelled, "stopped"
	default:
		m.Status, m.Error = StatusError, err.Error()
	}
	r.mediaChanged()
	r.mu.Unlock()
	r.th.poke()
	if err != nil {
		return
	}
	// What this pass says of the towers: their speed here, and the inputs
	// now in the model's tower cache (the media panel's estimates change).
	key := towerKey(l)
	for _, res := range meter.results {
		md.towers.speeds.record(key, res.audio, res.ms, res.profile)
	}
	md.towers.markEncoded(l, inputDigests(in))
	md.changed()
}

// mediaChanged marks the media preparation for the next update (r.mu held).
func (r *run) mediaChanged() {
	m := *r.rec.Media
	m.Items = append([]RunMediaItem{}, m.Items...)
	r.up.Media = &m
	r.dirty = true
}

func mediaItems(its []inputs.Item) []RunMediaItem {
	out := make([]RunMediaItem, len(its))
	for i, it := range its {
		out[i] = RunMediaItem{What: it.What, Ms: ms(it.Duration), Cached: it.Cached}
	}
	return out
}

// canTake checks that the model has the towers the media need.
func canTake(l *loaded, in *media.Input) error {
	mi := l.s.Info()
	vision, audio := mi.Vision, mi.Audio
	_, _, sound := in.Sound()
	switch {
	case (len(in.Images) > 0 || in.Video != nil) && !vision:
		return fmt.Errorf("%s has no vision tower: it cannot take images or video", l.info.Name)
	case sound && !audio:
		return fmt.Errorf("%s has no audio tower: it cannot take audio", l.info.Name)
	}
	return nil
}
