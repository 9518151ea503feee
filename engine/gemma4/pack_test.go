package gemma4

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"verdict/engine/model"
	"verdict/native"
)

// q4Diff is how far a q4 decoder's outputs are from the float32 one's over
// a fixture's prompts.
type q4Diff struct {
	embed, hidden float64 // relative L2 error of the embeddings and of the last layer's hidden states
	kl, klMax     float64 // mean and largest KL(f32 ‖ q4) of a position's next token
	klNext        float64 // mean KL between neighbouring positions' f32 distributions
	dp            float64 // largest probability difference
	argmax        float64 // share of positions whose argmax agrees
	positions     int
}

// q4Outputs runs ids through d and returns the embeddings, the last
// layer's hidden states and the logits of every position.
func q4Outputs(t *testing.T, d *Decoder, ids []int32) (embed, hidden, logits []float32) {
	t.Helper()
	x, err := d.Acquire()
	if err != nil {
		t.Fatal(err)
	}
	defer x.Release()
	c := d.NewCache()
	defer c.Free()
	var b model.Batch
	b.Add(c, ids, len(ids))
	b.Hook = func(layer int, h []float32) {
		switch layer { // layers count from -1 (the embeddings)
		case -1:
			embed = slices.Clone(h)
		case d.cfg.Layers - 1:
			hidden = slices.Clone(h)
		}
	}
	h, err := x.Forward(&b)
	if err != nil {
		t.Fatal(err)
	}
	logits = make([]float32, len(ids)*d.cfg.Vocab)
	if err := x.Logits(logits, h); err != nil {
		t.Fatal(err)
	}
	return embed, hidden, logits
}

// probs returns the probabilities of logits (float64).
func probs(lg []float32) []float64 {
	m := float64(slices.Max(lg))
	p := make([]float64, len(lg))
	var s float64
	for i, v := range lg {
		p[i] = math.Exp(float64(v) - m)
		s += p[i]
	}
	for i := range p {
		p[i] /= s
	}
	return p
}

func kl(p, q []float64) float64 {
	var s float64
	for i := range p {
		s += p[i] * math.Log(p[i]/q[i])
	}
	return s
}

// relErr accumulates the squared error of got against ref into e[0] and
// ref's squared norm into e[1].
func relErr(e *[2]float64, got, ref []float32) {
	for i := range ref {
		d := float64(got[i] - ref[i])
		e[0] += d * d
		e[1] += float64(ref[i]) * float64(ref[i])
	}
}

// compareQ4 measures q against ref over the fixture's prompt and its extra
// prompts.
func compareQ4(t *testing.T, fx *fixtureData, ref, q *Decoder) q4Diff {
	t.Helper()
	V := ref.cfg.Vocab
	prompts := [][]int{fx.Meta.IDs}
	for _, xp := range fx.Meta.ExtraPrompts {
		prompts = append(prompts, xp.IDs)
	}
	var d q4Diff
	var eEmb, eHid [2]float64
	agree, pairs := 0, 0
	for _, p := range prompts {
		ids := ids32(p)
		ef, hf, lf := q4Outputs(t, ref, ids)
		eq, hq, lq := q4Outputs(t, q, ids)
		relErr(&eEmb, eq, ef)
		relErr(&eHid, hq, hf)
		var prev []float64
		for r := range ids {
			pf, pq := probs(lf[r*V:(r+1)*V]), probs(lq[r*V:(r+1)*V])
			k := kl(pf, pq)
			d.kl += k
			d.klMax = math.Max(d.klMax, k)
			for i := range pf {
				d.dp = math.Max(d.dp, math.Abs(pf[i]-pq[i]))
			}
			if prev != nil {
				d.klNext += kl(prev, pf)
				pairs++
			}
			prev = pf
			if argmax(lf[r*V:(r+1)*V]) == argmax(lq[r*V:(r+1)*V]) {
				agree++
			}
			d.positions++
		}
	}
	d.embed, d.hidden = math.Sqrt(eEmb[0]/eEmb[1]), math.Sqrt(eHid[0]/eHid[1])
	d.kl /= float64(d.positions)
	d.klNext /= float64(pairs)
	d.argmax = float64(agree) / float64(d.positions)
	return d
}

// TestQ4Logits holds a q4 decoder's outputs near the float32 decoder's on
// every fixture, at each group size (the bounds at the default). On weights
// q4 represents, the two agree (TestQ4RoundTrip); what is measured here is
// the rounding's own effect. The fixtures are q4's worst case: random
// Gaussian weights, rows of 64 columns (one group a row at the default),
// and six random layers that amplify every error, so the bounds catch gross
// mistakes (a wrong scale, row or matrix gives errors near 1 at the
// embeddings):
//
//   - the embeddings (a lookup, not amplified): 4-bit steps of about a
//     fifteenth of a group's range (≈ 4.9σ for 64 Gaussian values) round
//     with an error of step/√12 ≈ 0.09σ, less after the least-squares
//     refits; measured 0.060, bound 0.08;
//   - the last hidden states: measured 0.70 (dense) and 0.88 (MoE, where
//     the error also changes which experts run), bound 1 (√2 for unrelated
//     states of the same size);
//   - the next-token distributions: the final soft-cap of 1 keeps every
//     logit in (−1, 1), so divergences are small in absolute terms; they
//     are bounded against the divergence between neighbouring positions'
//     float32 distributions (unrelated ones): measured 28% (dense) and 49%
//     (MoE), bound 60%.
//
// Argmax agreement is logged only: the soft-cap leaves near-ties (the
// median gap of the top two logits is 0.03), which any error reorders.
func TestQ4Logits(t *testing.T) {
	for _, name := range fixtures {
		fx := loadFixture(t, name)
		ref := fx.decoder(t, Options{})
		for _, g := range []int{32, 64, 128} {
			q := fx.decoder(t, Options{Weights: model.WeightsQ4, Group: g})
			d := compareQ4(t, fx, ref, q)
			t.Logf("%-26s group %3d: relative error %.3f (embeddings) %.3f (hidden); KL mean %.2e max %.2e (%.0f%% of neighbours' %.2e); max |dp| %.2e; argmax agrees %.2f of %d; %d packed bytes",
				name, g, d.embed, d.hidden, d.kl, d.klMax, 100*d.kl/d.klNext, d.klNext, d.dp, d.argmax, d.positions, q.PackedBytes())
			if g != DefaultGroup {
				continue
			}
			if !(d.embed <= q4MaxEmbed && d.hidden <= q4MaxHidden && d.kl <= q4MaxKLShare*d.klNext) {
				t.Errorf("%s group %d: relative error %.3g of the embeddings (bound %g), %.3g of the hidden states (bound %g); KL %.3g, %.0f%% of the neighbours' (bound %.0f%%)",
					name, g, d.embed, q4MaxEmbed, d.hidden, q4MaxHidden, d.kl, 100*d.kl/d.klNext, 100*q4MaxKLShare)
			}
		}
	}
}

// Bounds of TestQ4Logits at the default group size.
const (
	q4MaxEmbed   = 0.08
	q4MaxHidden  = 1.0
	q4MaxKLShare = 0.6
)

// roundTrip replaces every matrix of m whose columns fit groups of g by
// its q4 round trip (the weights q4 stands for exactly).
func roundTrip(m *Model, g int) {
	c := m.Cfg
	D := c.Hidden
	mats := []struct {
		w    []float32
		cols int
	}{{m.Embed, D}, {m.PLProj, D}}
	for l := range m.Layers {
		y := &m.Layers[l]
		mats = append(mats, []struct {
			w    []float32
			cols int
		}{
			{y.Q, D}, {y.K, D}, {y.V, D}, {y.O, c.Heads * y.headDim}, {y.Gate, D}, {y.Up, D}, {y.Down, y.intermediate},
			{y.PLEGate, D}, {y.PLEProj, c.PerLayerInput}, {y.RouterProj, D}, {y.ExpertGateUp, D}, {y.ExpertDown, c.MoEIntermediate},
		}...)
	}
	for _, x := range mats {
		if len(x.w) > 0 && native.Q4Fits(x.cols, g) {
			native.Quantize(native.NewF32(len(x.w)/x.cols, x.cols, x.w), g).ReadRows(x.w, 0)
		}
	}
}

// TestQ4RoundTrip: on weights q4 represents exactly (each fixture's after a
// q4 round trip), the q4 decoder gives the float32 decoder's hidden states
// and logits but for the kernels' rounding. Packing, binding and every
// packed product (the experts' row slices, the head and the lookups from
// the packed embedding included) are checked here; TestQ4Logits measures
// the packing's own error.
func TestQ4RoundTrip(t *testing.T) {
	for _, name := range fixtures {
		for _, g := range []int{32, 64} {
			fx := loadFixture(t, name)
			m := fx.model(t)
			roundTrip(m, g)
			ref, err := NewDecoder(m, Options{KVPositions: 2048})
			if err != nil {
				t.Fatal(err)
			}
			q, err := NewDecoder(m, Options{KVPositions: 2048, Weights: model.WeightsQ4, Group: g})
			if err != nil {
				t.Fatal(err)
			}
			d := compareQ4(t, fx, ref, q)
			t.Logf("%-26s group %d: relative error %.2e (embeddings) %.2e (hidden), KL max %.2e, max |dp| %.2e, argmax agrees %.3f of %d",
				name, g, d.embed, d.hidden, d.klMax, d.dp, d.argmax, d.positions)
			if !(d.embed <= 1e-6 && d.hidden <= 1e-4 && d.klMax <= 1e-8 && d.argmax == 1) {
				t.Errorf("%s group %d: relative error %.3g (embeddings) %.3g (hidden), KL %.3g, argmax agreement %.3f: want 1e-6, 1e-4, 1e-8 and all",
					name, g, d.embed, d.hidden, d.klMax, d.argmax)
			}
			q.Close()
			ref.Close()
		}
	}
}

// role is one kind of bound weight: its tensors in each layer (or once)
// and whether q4 packs it.
type role struct {
	name  string
	packs bool // packed when large and its columns fit the group
	get   func(d *Decoder) []native.Tensor
}

// perLayer collects a layer tensor of every layer.
func perLayer(f func(lt *layerTensors) native.Tensor) func(d *Decoder) []native.Tensor {
	return func(d *Decoder) []native.Tensor {
		var out []native.Tensor
		for l := range d.t.layers {
			out = append(out, f(&d.t.layers[l]))
		}
		return out
	}
}

func once(f func(t *tensors) native.Tensor) func(d *Decoder) []native.Tensor {
	return func(d *Decoder) []native.Tensor { return []native.Tensor{f(&d.t)} }
}

var roles = []role{
	{"embed_tokens", true, once(func(t *tensors) native.Tensor { return t.embed })},
	{"embed_tokens_per_layer", false, func(d *Decoder) []native.Tensor { return []native.Tensor{d.ple.res} }}, // resident for loops
	{"per_layer_model_projection", true, once(func(t *tensors) native.Tensor { return t.plProj })},
	{"norm", false, once(func(t *tensors) native.Tensor { return t.norm })},
	{"q_proj", true, perLayer(func(l *layerTensors) native.Tensor { return l.q })},
	{"k_proj", true, perLayer(func(l *layerTensors) native.Tensor { return l.k })},
	{"v_proj", true, perLayer(func(l *layerTensors) native.Tensor { return l.v })},
	{"o_proj", true, perLayer(func(l *layerTensors) native.Tensor { return l.o })},
	{"q_norm", false, perLayer(func(l *layerTensors) native.Tensor { return l.qNorm })},
	{"gate_proj", true, perLayer(func(l *layerTensors) native.Tensor { return l.gate })},
	{"up_proj", true, perLayer(func(l *layerTensors) native.Tensor { return l.up })},
	{"down_proj", true, perLayer(func(l *layerTensors) native.Tensor { return l.down })},
	{"per_layer_input_gate", true, perLayer(func(l *layerTensors) native.Tensor { return l.pleGate })},
	{"per_layer_projection", true, perLayer(func(l *layerTensors) native.Tensor { return l.pleProj })},
	{"router.proj", false, perLayer(func(l *layerTensors) native.Tensor { return l.routerProj })},
	{"experts.gate_up_proj", true, perLayer(func(l *layerTensors) native.Tensor { return l.gateUp })},
	{"experts.down_proj", true, perLayer(func(l *layerTensors) native.Tensor { return l.expDown })},
}

// TestQ4Packs checks which weights q4 packs: every large matrix of a packed
// role whose columns fit the group, nothing else; f32 packs nothing. Each
// packed role the fixtures' shapes allow must be packed somewhere (a role
// bound as float32 everywhere fails).
func TestQ4Packs(t *testing.T) {
	packed := map[string]int{}
	for _, name := range fixtures {
		fx := loadFixture(t, name)
		m := fx.model(t)
		for _, c := range []struct {
			opt        Options
			weights    model.Weights
			group      int
			wantPacked bool
		}{
			{Options{}, model.WeightsF32, 0, false},
			{Options{Weights: model.WeightsF32, Group: 32}, model.WeightsF32, 0, false},
			{Options{Weights: model.WeightsQ4}, model.WeightsQ4, DefaultGroup, true},
			{Options{Weights: model.WeightsQ4, Group: 32}, model.WeightsQ4, 32, true},
			{Options{Weights: model.WeightsQ4, Group: 128}, model.WeightsQ4, 128, true},
		} {
			c.opt.KVPositions = 256
			d, err := NewDecoder(m, c.opt)
			if err != nil {
				t.Fatal(err)
			}
			if d.Weights() != c.weights || d.Group() != c.group || (d.PackedBytes() > 0) != c.wantPacked {
				t.Errorf("%s %+v: %s weights, group %d, %d packed bytes; want %s, group %d, packed %v",
					name, c.opt, d.Weights(), d.Group(), d.PackedBytes(), c.weights, c.group, c.wantPacked)
			}
			for _, r := range roles {
				for i, w := range r.get(d) {
					if w.Nil() {
						continue
					}
					large := w.Len() >= q4MinElems && w.Cols()%max(c.group, 1) == 0
					want := native.F32
					if c.wantPacked && r.packs && large {
						want = native.Q4
						packed[r.name]++
					}
					if w.DType() != want {
						t.Errorf("%s group %d: %s #%d (%dx%d) is %v, want %v", name, c.group, r.name, i, w.Rows(), w.Cols(), w.DType(), want)
					}
				}
			}
			d.Close()
		}
	}
	for _, r := range roles {
		// The fixtures' per-layer inputs are 16 wide (8 in the towers'):
		// the gate has 1024 weights, the projection 16 columns.
		if r.packs && packed[r.name] == 0 && r.name != "per_layer_input_gate" && r.name != "per_layer_projection" {
			t.Errorf("%s is never packed on the fixtures", r.name)
		}
	}
}

// TestQ4Refuses: unknown weights and bad group sizes are refused naming
// the problem, and a cancelled context stops packing.
func TestQ4Refuses(t *testing.T) {
	fx := loadFixture(t, "gemma4-synthetic-tiny")
	m := fx.model(t)
	done, cancel := context.WithCancel(context.Background())
	cancel()
	for _, c := range []struct {
		opt  Options
		want string
	}{
		{Options{Weights: "int8"}, `weights "int8": want f32 or q4`},
		{Options{Weights: model.WeightsQ4, Group: 48}, "group size 48"},
		{Options{Weights: model.WeightsQ4, Group: 16}, "group size 16"},
		{Options{Weights: model.WeightsQ4, Group: 1024}, "group size 1024"},
		{Options{Weights: model.WeightsQ4, Context: done}, context.Canceled.Error()},
	} {
		d, err := NewDecoder(m, c.opt)
		if err == nil {
			d.Close()
			t.Errorf("NewDecoder(%+v) did not fail", c.opt)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewDecoder(%+v): %v, want it to name %q", c.opt, err, c.want)
		}
	}
	if err := CheckWeights(model.WeightsQ4, 96); err == nil || !strings.Contains(err.Error(), "96") {
		t.Errorf("CheckWeights(q4, 96): %v", err)
	}
	_, err := NewDecoder(m, Options{Weights: model.WeightsQ4, Context: done})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled pack: %v, want context.Canceled", err)
	}
	// Progress hears every weight packed, the last call the total.
	var calls, last, total int64
	d, err := NewDecoder(m, Options{Weights: model.WeightsQ4, KVPositions: 256, Progress: func(done, tot int64) {
		calls++
		last, total = done, tot
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if calls == 0 || last != total || total == 0 {
		t.Errorf("progress: %d calls, last %d of %d", calls, last, total)
	}
	// Half a byte a weight, and a scale and offset (8 bytes) a group.
	if want := total/2 + total/DefaultGroup*8; d.PackedBytes() != want {
		t.Errorf("%d packed bytes for %d weights, want %d", d.PackedBytes(), total, want)
	}
}
