package gemma4

import (
	"fmt"
	"math"
	"testing"

	"verdict/engine/model"
	"verdict/native"
)

// linearsRun is what one Exec computed: a prompt's logits and hidden
// states (every row, each layer), then each greedy decode step's token,
// logits and hidden states.
type linearsRun struct {
	logits, hidden [][]float32 // [0]: the prompt's; [1+i]: step i's
	tokens         []int32     // the steps' tokens
}

// runLinears prefills prompt on a fresh cache of d through an Exec whose
// layer products run one by one (apart) or grouped (Stream.Linears), then
// takes steps greedy decode steps of one row; last, when not 0, replaces
// the first step's token (the perturbation).
func runLinears(t *testing.T, d *Decoder, apart bool, prompt []int32, steps int, last int32) linearsRun {
	t.Helper()
	ex, err := d.acquire()
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Release()
	ex.setApart(apart)
	defer ex.setApart(false) // the Exec goes back to the pool
	c := d.NewCache()
	defer c.Free()
	V := d.cfg.Vocab
	var r linearsRun
	fwd := func(ids []int32) []int32 {
		var b model.Batch
		b.Add(c, ids, len(ids))
		var hidden []float32
		b.Hook = func(_ int, h []float32) { hidden = append(hidden, h...) }
		h, err := ex.Forward(&b)
		if err != nil {
			t.Fatal(err)
		}
		lg := make([]float32, len(ids)*V)
		if err := ex.Logits(lg, h); err != nil {
			t.Fatal(err)
		}
		next := make([]int32, 1)
		if err := ex.Greedy(next, h.Slice(h.Rows()-1, h.Rows())); err != nil {
			t.Fatal(err)
		}
		r.logits, r.hidden = append(r.logits, lg), append(r.hidden, hidden)
		return next
	}
	next := fwd(prompt)
	for i := range steps {
		if i == 0 && last != 0 {
			next[0] = last
		}
		r.tokens = append(r.tokens, next[0])
		next = fwd(next)
	}
	return r
}

// bitsDiffer names the first element where got and want differ in their
// bits ("" if none).
func bitsDiffer(got, want []float32) string {
	if len(got) != len(want) {
		return fmt.Sprintf("%d values, want %d", len(got), len(want))
	}
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			return fmt.Sprintf("value %d: %v, want %v", i, got[i], want[i])
		}
	}
	return ""
}

// compareRuns reports where two runs differ ("" if nowhere).
func compareRuns(got, want linearsRun) string {
	if len(got.logits) != len(want.logits) {
		return fmt.Sprintf("%d passes, want %d", len(got.logits), len(want.logits))
	}
	for i := range want.logits {
		what := "the prompt"
		if i > 0 {
			what = fmt.Sprintf("step %d", i-1)
			if got.tokens[i-1] != want.tokens[i-1] {
				return fmt.Sprintf("%s: token %d, want %d", what, got.tokens[i-1], want.tokens[i-1])
			}
		}
		if s := bitsDiffer(got.hidden[i], want.hidden[i]); s != "" {
			return what + ": hidden states: " + s
		}
		if s := bitsDiffer(got.logits[i], want.logits[i]); s != "" {
			return what + ": logits: " + s
		}
	}
	return ""
}

// TestLinearsBits: a Gemma 4 layer's grouped products (q, k, v in one
// linears call; the MLP's and each expert's up product with the gate's
// GELU product as its epilogue; the per-layer gate with its GELU product)
// give the products one by one bit for bit: a prompt of 12 rows and 4
// greedy decode steps, every layer's hidden states and the logits, on the
// dense (per-layer inputs, KV sharing, double-wide MLP) and MoE
// (attention_k_eq_v) fixtures, with f32 and q4 weights. A first step's
// token changed is caught, so the comparison can fail.
func TestLinearsBits(t *testing.T) {
	prompt := []int32{2, 17, 300, 41, 5, 99, 256, 7, 480, 3, 64, 128}
	for _, name := range []string{"gemma4-synthetic-tiny", "gemma4-synthetic-tiny-moe"} {
		fx := loadFixture(t, name)
		for _, opt := range []Options{{Weights: model.WeightsF32}, {Weights: model.WeightsQ4, Group: 32}, {Weights: model.WeightsQ4}} {
			t.Run(fmt.Sprintf("%s/%s-%d", name, opt.Weights, opt.Group), func(t *testing.T) {
				d := fx.open(t, opt)
				if opt.Weights == model.WeightsQ4 && len(d.packed) == 0 {
					t.Fatal("no matrix packed to q4")
				}
				want := runLinears(t, d, true, prompt, 4, 0)
				got := runLinears(t, d, false, prompt, 4, 0)
				if s := compareRuns(got, want); s != "" {
					t.Errorf("grouped products differ from the products apart: %s", s)
				}
				tok := want.tokens[0] + 1
				if s := compareRuns(runLinears(t, d, false, prompt, 4, tok), want); s == "" {
					t.Errorf("first step's token %d for %d: no difference found", tok, want.tokens[0])
				} else {
					t.Logf("%d packed matrices; the perturbed run: %s", len(d.packed), s)
				}
			})
		}
	}
}

// stepCalls runs a prompt, then one decode step of one row with the
// greedy head on an Exec of d (products apart or grouped), and returns
// the step's op calls: each layer's (layer 0's with the per-layer
// inputs), the whole pass's and the head's.
func stepCalls(t *testing.T, d *Decoder, apart bool) (layers []native.OpCalls, pass, head native.OpCalls) {
	t.Helper()
	x, err := d.acquire()
	if err != nil {
		t.Fatal(err)
	}
	defer x.Release()
	x.setApart(apart)
	defer x.setApart(false)
	c := d.NewCache()
	defer c.Free()
	var b model.Batch
	b.Add(c, []int32{2, 17, 300, 41}, 1)
	if _, err := x.Forward(&b); err != nil {
		t.Fatal(err)
	}
	b = model.Batch{}
	b.Add(c, []int32{5}, 1)
	var prev native.OpCalls
	// The hook (a one-row batch runs every row anyway) marks the layers'
	// ends; it downloads, which is no op call.
	b.Hook = func(layer int, _ []float32) {
		now := x.st.OpCalls()
		if layer >= 0 {
			layers = append(layers, now.Sub(prev))
		}
		prev = now
	}
	start := x.st.OpCalls()
	h, err := x.Forward(&b)
	if err != nil {
		t.Fatal(err)
	}
	pass = x.st.OpCalls().Sub(start)
	start = x.st.OpCalls()
	if err := x.Greedy(make([]int32, 1), h); err != nil {
		t.Fatal(err)
	}
	head = x.st.OpCalls().Sub(start)
	return layers, pass, head
}

// TestDecodeOpCalls reports the backend op calls of one decode step of the
// tiny dense and MoE fixtures on the CPU backend (a floor of a GPU's
// launches: issue 25's measure), the layers' products apart and grouped,
// and checks their structure layer by layer: the grouped layer calls
// linears once for its q, k, v (a layer with keys of its own), once for
// the MLP's up product and once for each expert a row takes (their gates'
// GELU products) and once for the per-layer gate (with per-layer inputs);
// apart it calls no linears, and each grouped call stands for one linear a
// part and one ew (gelu_mul) an epilogue; a layer with keys of its own
// calls norm_ropes once grouped for the three norm_rope calls apart; every
// other operation is the same.
func TestDecodeOpCalls(t *testing.T) {
	for _, name := range []string{"gemma4-synthetic-tiny", "gemma4-synthetic-tiny-moe"} {
		fx := loadFixture(t, name)
		d := fx.open(t, Options{Weights: model.WeightsQ4})
		c := d.cfg
		lA, pA, hA := stepCalls(t, d, true)
		lG, pG, hG := stepCalls(t, d, false)
		if len(lA) != c.Layers || len(lG) != c.Layers {
			t.Fatalf("%s: %d and %d layers counted, want %d", name, len(lA), len(lG), c.Layers)
		}
		t.Logf("%s: a decode step %d op calls apart, %d grouped (the pass %d → %d, the greedy head %d)",
			name, pA.Total()+hA.Total(), pG.Total()+hG.Total(), pA.Total(), pG.Total(), hG.Total())
		t.Logf("%s: the pass apart: %v", name, pA)
		t.Logf("%s: the pass grouped: %v", name, pG)
		if hA != hG {
			t.Errorf("%s: the head's calls %v apart, %v grouped", name, hA, hG)
		}
		var sumA, sumG native.OpCalls
		for l := range c.Layers {
			a, g := lA[l], lG[l]
			if l == 0 || a != lA[l-1] || g != lG[l-1] {
				t.Logf("%s: layer %d: %d calls apart, %d grouped: %v", name, l, a.Total(), g.Total(), g)
			}
			for op := range sumA {
				sumA[op] += a[op]
				sumG[op] += g[op]
			}
			// What layer l's grouping should do: its linears calls, the
			// parts (products) they hold and their epilogues.
			calls, parts, epi := 1, 2, 1 // the MLP's gate, then its up product into it
			if !c.KVShared(l) {
				calls++
				parts += 2 // q and k
				if !d.t.layers[l].v.Nil() {
					parts++
				}
			}
			if c.MoE {
				calls, parts, epi = calls+c.TopK, parts+2*c.TopK, epi+c.TopK // one row: its TopK experts, a gate and up each
			}
			if c.PerLayerInput > 0 {
				calls, parts, epi = calls+1, parts+1, epi+1
			}
			if a[native.OpLinears] != 0 || g[native.OpLinears] != int64(calls) {
				t.Errorf("%s layer %d: linears %d apart, %d grouped, want 0 and %d", name, l, a[native.OpLinears], g[native.OpLinears], calls)
			}
			// GeluMul is an ew call (as are Add and Scale).
			if a[native.OpLinear]-g[native.OpLinear] != int64(parts) || a[native.OpEW]-g[native.OpEW] != int64(epi) {
				t.Errorf("%s layer %d: linear %d apart, %d grouped, ew %d apart, %d grouped: want %d parts and %d epilogues grouped",
					name, l, a[native.OpLinear], g[native.OpLinear], a[native.OpEW], g[native.OpEW], parts, epi)
			}
			// A layer with keys of its own normalises and rotates q, k and v
			// in one norm_ropes call grouped, three norm_rope calls apart.
			ropes := int64(0) // the calls it saves
			if !c.KVShared(l) {
				ropes = 2
				if a[native.OpNormRoPE] != 3 || a[native.OpNormRoPEs] != 0 || g[native.OpNormRoPE] != 0 || g[native.OpNormRoPEs] != 1 {
					t.Errorf("%s layer %d: norm_rope %d apart, %d grouped, norm_ropes %d apart, %d grouped: want 3, 0, 0, 1",
						name, l, a[native.OpNormRoPE], g[native.OpNormRoPE], a[native.OpNormRoPEs], g[native.OpNormRoPEs])
				}
			}
			for op := range a {
				switch native.Op(op) {
				case native.OpLinear, native.OpLinears, native.OpEW:
				case native.OpNormRoPE, native.OpNormRoPEs:
					if ropes == 0 && a[op] != g[op] {
						t.Errorf("%s layer %d: %v %d apart, %d grouped", name, l, native.Op(op), a[op], g[op])
					}
				default:
					if a[op] != g[op] {
						t.Errorf("%s layer %d: %v %d apart, %d grouped", name, l, native.Op(op), a[op], g[op])
					}
				}
			}
			if want := a.Total() - int64(parts) - int64(epi) + int64(calls) - ropes; g.Total() != want {
				t.Errorf("%s layer %d: %d calls grouped, want %d", name, l, g.Total(), want)
			}
		}
		for op := range sumA {
			if sumA[op] > pA[op] || sumG[op] > pG[op] {
				t.Errorf("%s: %v: the layers call it %d/%d times, the pass %d/%d", name, native.Op(op), sumA[op], sumG[op], pA[op], pG[op])
			}
		}
		if pA.Total()-pG.Total() != sumA.Total()-sumG.Total() {
			t.Errorf("%s: the pass saves %d calls, its layers %d", name, pA.Total()-pG.Total(), sumA.Total()-sumG.Total())
		}
	}
}
