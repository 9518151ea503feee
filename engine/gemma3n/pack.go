package gemma3n

import (
	"fmt"
	"sync"
	"time"

	"verdict/engine/packcache"
	"verdict/native"
)

// Packing the large matrices to 4 bits at load (Weights q4), and the cache
// of packed weights on disk.
//
// The packed matrices live in one arena outside the Go heap: a memory-mapped
// cache file, or anonymous memory when there is no cache (engine/packcache,
// which Gemma 4 shares, describes the file and when it is refused and
// rebuilt).

// packMinCache is the smallest packed size worth a cache file: smaller
// models pack in a moment.
var packMinCache = packcache.DefaultMin

// packReq is one matrix to pack.
type packReq struct {
	dst        *native.Matrix
	name       string
	rows, cols int  // the packed matrix's shape
	transpose  bool // packed is the transpose of the stored cols×rows tensor
}

// entryName names a request in the cache header.
func (r packReq) entryName() string {
	if r.transpose {
		return r.name + " (transposed)"
	}
	return r.name
}

// packed is a model's arena of packed weights.
type packed struct {
	*packcache.Arena
}

func (p *packed) close() error {
	if p == nil {
		return nil
	}
	return p.Close()
}

// layout assigns each request its offsets; it returns the data size.
func layout(reqs []packReq, group int) ([]packcache.Entry, int64) {
	ms := make([]packcache.Matrix, len(reqs))
	for i, r := range reqs {
		ms[i] = packcache.Matrix{Name: r.entryName(), Rows: r.rows, Cols: r.cols}
	}
	return packcache.Layout(ms, group)
}

// pack packs reqs into q4 matrices, from the cache when it holds them.
func (pk *packer) pack(reqs []packReq) (*packed, error) {
	opt := pk.opt
	es, size := layout(reqs, opt.Group)
	a, err := packcache.Open(packcache.Options{
		Dir: opt.CacheDir, Key: opt.CacheKey, Name: opt.CacheName, Group: opt.Group,
		Min: packMinCache, Log: opt.Log, Checking: pk.report(StageChecking),
	}, es, size)
	if err != nil {
		return nil, fmt.Errorf("gemma3n: %w", err)
	}
	p := &packed{a}
	if !a.FromDisk {
		if err := pk.quantizeAll(a.Area(), reqs, es); err != nil {
			p.close()
			return nil, err
		}
		if err := a.Commit(); err != nil && opt.Log != nil {
			opt.Log(fmt.Sprintf("packed weights: no cache (%v)", err))
		}
	}
	bindAll(a.Area(), reqs, es, opt.Group)
	return p, nil
}

func bindAll(data []byte, reqs []packReq, es []packcache.Entry, group int) {
	for i, r := range reqs {
		q, so := packcache.View(data, &es[i])
		*r.dst = native.NewQ4(r.rows, r.cols, group, q, so)
	}
}

// report returns a progress function for stage that passes at most about
// ten calls a second (and the last one) to LoadOptions.Progress; nil when
// there is none.
func (pk *packer) report(stage string) func(done, total int64) {
	f := pk.opt.Progress
	if f == nil {
		return nil
	}
	var mu sync.Mutex
	var last time.Time
	return func(done, total int64) {
		mu.Lock()
		defer mu.Unlock()
		if now := time.Now(); done >= total || now.Sub(last) >= 100*time.Millisecond {
			last = now
			f(stage, done, total)
		}
	}
}

// quantizeAll packs every request into data, reading the source a few rows
// at a time (never a whole float32 copy of the model). It stops between
// reads when the load's context is done, and reports the weights packed.
func (pk *packer) quantizeAll(data []byte, reqs []packReq, es []packcache.Entry) error {
	const chunk = 4 << 20 // floats per read
	ctx, report := pk.opt.ctx(), pk.report(StagePacking)
	var total, done int64
	for _, r := range reqs {
		total += int64(r.rows) * int64(r.cols)
	}
	step := func(n int64) error {
		done += n
		if report != nil {
			report(done, total)
		}
		return ctx.Err()
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	var buf []float32
	for i, r := range reqs {
		q, so := packcache.View(data, &es[i])
		if r.transpose {
			if err := pk.quantizeT(q, so, r); err != nil {
				return err
			}
			if err := step(int64(r.rows) * int64(r.cols)); err != nil {
				return err
			}
			continue
		}
		per := max(1, chunk/r.cols)
		if need := min(per, r.rows) * r.cols; cap(buf) < need {
			buf = make([]float32, need)
		}
		ng := r.cols / pk.opt.Group
		for r0 := 0; r0 < r.rows; r0 += per {
			n := min(per, r.rows-r0)
			b := buf[:n*r.cols]
			if err := pk.store.Rows(r.name, r0, b); err != nil {
				return fmt.Errorf("gemma3n: packing %s: %w", r.name, err)
			}
			native.QuantizeQ4(q[r0*r.cols/2:], so[r0*ng*2:], b, n, r.cols, pk.opt.Group)
			if err := step(int64(n) * int64(r.cols)); err != nil {
				return err
			}
		}
	}
	return nil
}

// quantizeT packs the transpose of a stored tensor: it reads the whole
// tensor (one matrix of float32, transiently), then packs the transpose a
// few rows at a time.
func (pk *packer) quantizeT(q []byte, so []float32, r packReq) error {
	src := make([]float32, r.rows*r.cols) // stored as [r.cols, r.rows]
	if err := pk.store.Rows(r.name, 0, src); err != nil {
		return fmt.Errorf("gemma3n: packing %s: %w", r.name, err)
	}
	per := max(1, (1<<20)/r.cols)
	buf := make([]float32, min(per, r.rows)*r.cols)
	ng := r.cols / pk.opt.Group
	for r0 := 0; r0 < r.rows; r0 += per {
		n := min(per, r.rows-r0)
		b := buf[:n*r.cols]
		for c := 0; c < r.cols; c++ {
			row := src[c*r.rows+r0 : c*r.rows+r0+n]
			for k, v := range row {
				b[k*r.cols+c] = v
			}
		}
		native.QuantizeQ4(q[r0*r.cols/2:], so[r0*ng*2:], b, n, r.cols, pk.opt.Group)
	}
	return nil
}
