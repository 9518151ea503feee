package gemma4

import (
	"slices"
	"strings"
	"testing"

	"verdict/engine/model"
	"verdict/native"
)

// loopCase is a fixture and where its per-layer table is kept.
var loopCases = []struct {
	fixture string
	ple     PLEPlace
}{
	{"gemma4-synthetic-tiny", PLEAuto},
	{"gemma4-synthetic-tiny", PLEHost},
	{"gemma4-synthetic-tiny-f64", PLEAuto},
	{"gemma4-synthetic-tiny-moe", PLEAuto},
}

// TestGreedyLoop: DecodeGreedy of two sequences at once as a greedy loop
// (a dense model with its table resident; the built-in backend runs the
// loop's body from the host, the body a device records) chooses the
// tokens Forward and Greedy choose a step at a time (greedySteps), stops
// on a stop token, and leaves the caches where the steps leave them: the
// next pass gives the same logits bit for bit. deviceSteps says why a
// model's steps need the host (MoE routing, a table not resident), and
// GreedyLoops is false on the built-in backend, which records no loops.
func TestGreedyLoop(t *testing.T) {
	for _, lc := range loopCases {
		fx := loadFixture(t, lc.fixture)
		d := fx.open(t, Options{PLE: lc.ple})
		why := d.deviceSteps(true)
		switch {
		case d.cfg.MoE:
			if !strings.Contains(why, "mixture-of-experts") {
				t.Errorf("%s: a MoE model's steps: %q", lc.fixture, why)
			}
		case lc.ple == PLEHost:
			if !strings.Contains(why, "not resident") || d.deviceSteps(false) != "" {
				t.Errorf("%s, table on the host: %q, %q", lc.fixture, why, d.deviceSteps(false))
			}
		case why != "":
			t.Errorf("%s: a dense model's steps need the host: %s", lc.fixture, why)
		}
		x, err := d.Acquire()
		if err != nil {
			t.Fatal(err)
		}
		ex := x.(*Exec)
		if ex.GreedyLoops() {
			t.Errorf("%s: GreedyLoops on the built-in backend", lc.fixture)
		}
		ids := ids32(fx.Meta.IDs)
		prompts := [][]int32{ids, ids[:len(ids)/2]}
		const steps = 12
		var res [2][][]int32
		var next [2][]float32
		for k, decode := range []func([]model.Cache, []int32, int, []int32) ([][]int32, error){ex.DecodeGreedy, ex.greedySteps} {
			var cs []model.Cache
			first := make([]int32, len(prompts))
			for i, p := range prompts {
				c := d.NewCache()
				var b model.Batch
				b.Add(c, p, 1)
				h, err := x.Forward(&b)
				if err != nil {
					t.Fatal(err)
				}
				if err := x.Greedy(first[i:i+1], h); err != nil {
					t.Fatal(err)
				}
				cs = append(cs, c)
			}
			// Sequence 1 stops at its fourth token (the reference decode's).
			var stop []int32
			if k == 0 {
				r, err := ex.greedySteps([]model.Cache{cs[1].Clone()}, first[1:], 4, nil)
				if err != nil {
					t.Fatal(err)
				}
				stop = []int32{r[0][3]}
			} else {
				stop = []int32{res[0][1][len(res[0][1])-1]}
			}
			if res[k], err = decode(cs, first, steps, stop); err != nil {
				t.Fatal(err)
			}
			last := res[k][0][len(res[k][0])-1]
			next[k] = run(t, x, cs[0], []int32{last}, d.cfg.Vocab)
			for _, c := range cs {
				c.Free()
			}
		}
		if !slices.EqualFunc(res[0], res[1], slices.Equal) || len(res[0][1]) > 4 {
			t.Errorf("%s %s: DecodeGreedy chose %v, Forward and Greedy %v", lc.fixture, lc.ple, res[0], res[1])
		}
		if !slices.Equal(next[0], next[1]) {
			t.Errorf("%s %s: the pass after DecodeGreedy differs from the one after the steps", lc.fixture, lc.ple)
		}
		x.Release()
	}
}

// TestLoopMatchesForward: a Loop fed a schedule of tokens (its step writes
// the next one and the running count from the host) gives the hidden
// states Forward gives decoding the same tokens one at a time, bit for
// bit, for two sequences at once; on a dense model the step gathers the
// per-layer rows from the loop's table on the device (a row of that table
// changed makes the states differ), on a MoE model it reads the tokens on
// the host. RunDevice runs nothing on the built-in backend (it records no
// loops) and on a MoE model.
func TestLoopMatchesForward(t *testing.T) {
	for _, lc := range loopCases {
		for _, spoil := range []bool{false, true} {
			fx := loadFixture(t, lc.fixture)
			if spoil && fx.Cfg.PerLayerInput == 0 {
				continue
			}
			d := fx.open(t, Options{PLE: lc.ple})
			D := d.cfg.Hidden
			x, err := d.Acquire()
			if err != nil {
				t.Fatal(err)
			}
			ex := x.(*Exec)
			ids := ids32(fx.Meta.IDs)
			const steps = 6
			prompts := [][]int32{ids, ids[3:11]}
			sched := [][]int32{{5, 9, 5, 17, 2, 9}, {17, 17, 3, 5, 2, 4}}
			var tokens []int32
			var loopC []model.Cache
			want := make([][][]float32, 2)
			for s, p := range prompts {
				tokens = append(tokens, sched[s]...)
				alone := d.NewCache()
				var b model.Batch
				b.Add(alone, p, 0)
				if _, err := x.Prefill(&b); err != nil {
					t.Fatal(err)
				}
				loopC = append(loopC, alone.Clone())
				for i := range steps {
					b.Reset()
					b.Add(alone, sched[s][i:i+1], 1)
					h, err := x.Prefill(&b)
					if err != nil {
						t.Fatal(err)
					}
					want[s] = append(want[s], h)
				}
				alone.Free()
			}
			l, err := ex.newLoop(loopC, steps, tokens)
			if err != nil {
				t.Fatal(err)
			}
			if l.device != !d.cfg.MoE {
				t.Errorf("%s: the loop's step on the device %v", lc.fixture, l.device)
			}
			st := ex.st
			if spoil { // the table's row of token 5 (row 2: 0, 2, 3, 4, 5, ...) moved
				LP := d.ple.width
				row := make([]float32, LP)
				if err := d.ple.row(5, row); err != nil {
					t.Fatal(err)
				}
				row[0] += 0.25
				r := ex.loop.hLUT[5]
				st.Upload(ex.loop.ple.Sub(int(r)*LP, 1, LP), row)
			}
			ar, err := d.be.NewArena(native.ArenaBytes(1))
			if err != nil {
				t.Fatal(err)
			}
			running := ar.Take(native.I32, 1, 1)
			st.UploadI32(l.IDs(), []int32{sched[0][0], sched[1][0]})
			st.UploadI32(running, []int32{1})
			if ok, err := l.RunDevice(func(native.Tensor) { t.Error("RunDevice ran a step") }, running, t); ok || err != nil {
				t.Errorf("%s: RunDevice on the built-in backend: %v, %v", lc.fixture, ok, err)
			}
			step, got, bad := 0, make([]float32, 2*D), 0
			n, err := l.RunHost(func(h native.Tensor) {
				st.Download(got, h)
				if err := st.Sync(); err != nil {
					t.Fatal(err)
				}
				for s := range 2 {
					if !slices.Equal(got[s*D:(s+1)*D], want[s][step]) {
						bad++
					}
				}
				step++
				if step < steps {
					st.UploadI32(l.IDs(), []int32{sched[0][step], sched[1][step]})
				} else {
					st.UploadI32(running, []int32{0})
				}
			}, running)
			if err != nil || n != steps {
				t.Fatalf("%s: RunHost ran %d steps: %v", lc.fixture, n, err)
			}
			if (bad > 0) != spoil {
				t.Errorf("%s %s (table row changed %v): %d of %d hidden states differ from Forward's", lc.fixture, lc.ple, spoil, bad, 2*steps)
			}
			if err := l.Close([]int{steps, steps}); err != nil {
				t.Fatal(err)
			}
			for s, c := range loopC {
				if c.Len() != len(prompts[s])+steps {
					t.Errorf("%s: after the loop sequence %d holds %d positions, want %d", lc.fixture, s, c.Len(), len(prompts[s])+steps)
				}
				c.Free()
			}
			ar.Free()
			x.Release()
		}
	}
}
