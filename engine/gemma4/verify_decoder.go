package gemma4

import (
	"fmt"

	"verdict/engine/model"
	"verdict/native"
)

// VerifyDecoder runs the checks of the Gemma 4 fixture folder dir through
// the engine's model interface: the fixture's weights behind a Decoder on
// be (nil: native.Default(), the CPU). Every check of VerifyFixture runs but those
// of values the interface does not expose (the per-layer inputs and the
// router's outputs, which the logits and hidden states cover).
func VerifyDecoder(dir string, be *native.Backend) ([]Check, error) {
	if be == nil {
		be = native.Default()
	}
	return withFixture(dir, func(fx *Fixture, m *Model) ([]Check, error) {
		d, err := NewDecoder(m, Options{Backend: be})
		if err != nil {
			return nil, err
		}
		defer d.Close()
		return fx.RunDecoder(d)
	})
}

// RunDecoder runs the fixture's checks on d through the model interface
// (Fixture.Run's, but the per-layer inputs and router outputs).
func (fx *Fixture) RunDecoder(d *Decoder) ([]Check, error) {
	x, err := d.Acquire()
	if err != nil {
		return nil, err
	}
	defer x.Release()
	return fx.run(&decPasses{d: d, x: x})
}

// decPasses runs the checks on a Decoder: every pass one Forward of a
// batch whose rows are all wanted, then the Logits head; generation by the
// Greedy head and DecodeGreedy.
type decPasses struct {
	d *Decoder
	x model.Exec
}

func (p *decPasses) config() *Config { return p.d.cfg }
func (p *decPasses) newCache() any   { return p.d.NewCache() }
func (p *decPasses) freeCache(c any) { c.(model.Cache).Free() }
func (p *decPasses) traced() bool    { return false }

func (p *decPasses) forward(ids []int, c any, tr *Trace) ([]float32, error) {
	if len(ids) > p.x.Rows() {
		return nil, fmt.Errorf("gemma4: fixture: a prompt of %d tokens, the decoder takes %d rows a pass", len(ids), p.x.Rows())
	}
	cache, _ := c.(model.Cache)
	if cache == nil {
		cache = p.d.NewCache()
		defer cache.Free()
	}
	var b model.Batch
	b.Add(cache, ids32(ids), len(ids))
	if tr != nil {
		tr.Hidden = make([][]float32, p.d.cfg.Layers+1)
		b.Hook = func(layer int, h []float32) { tr.Hidden[layer+1] = append([]float32(nil), h...) }
	}
	h, err := p.x.Forward(&b)
	if err != nil {
		return nil, err
	}
	out := make([]float32, len(ids)*p.d.cfg.Vocab)
	if err := p.x.Logits(out, h); err != nil {
		return nil, err
	}
	return out, nil
}

func (p *decPasses) generate(ids []int, n int) ([]int, error) {
	if n <= 0 {
		return nil, nil
	}
	c := p.d.NewCache()
	defer c.Free()
	var b model.Batch
	b.Add(c, ids32(ids), 1)
	h, err := p.x.Forward(&b)
	if err != nil {
		return nil, err
	}
	first := []int32{0}
	if err := p.x.Greedy(first, h); err != nil {
		return nil, err
	}
	out := []int{int(first[0])}
	if n == 1 {
		return out, nil
	}
	rest, err := p.x.DecodeGreedy([]model.Cache{c}, first, n-1, nil)
	if err != nil {
		return nil, err
	}
	for _, v := range rest[0] {
		out = append(out, int(v))
	}
	return out, nil
}

func ids32(ids []int) []int32 {
	out := make([]int32, len(ids))
	for i, v := range ids {
		out[i] = int32(v)
	}
	return out
}
