package gemma3n_test

import (
	"encoding/json"
	"testing"

	"verdict/engine/gemma3n"
	"verdict/engine/models"
	"verdict/engine/weights"
	"verdict/native"
)

// e2bShaped loads Gemma 3n E2B's structure (synthetic-e2b: 30 layers, the
// last 10 sharing keys and values, activation sparsity on the first 10,
// AltUp, Laurel, per-layer inputs) at reduced widths and q4: the same
// operations a step as E2B, each on smaller tensors.
func e2bShaped(t testing.TB) *gemma3n.Model {
	t.Helper()
	cfgJSON, recipe, ok := models.Synthetic("synthetic-e2b")
	if !ok {
		t.Fatal("no synthetic-e2b shape")
	}
	// Each full width becomes a smaller one: hidden 2048 → 512 (8 heads
	// of 64), per-layer 256 → 64, KV 512 → 128, MLP 8192 → 1024,
	// vocabularies → 1024.
	shrink := map[float64]float64{2048: 512, 256: 64, 512: 128, 30 * 256: 30 * 64, 8192: 1024, 262400: 1024, 262144: 1024}
	var r map[string]any
	if err := json.Unmarshal(recipe, &r); err != nil {
		t.Fatal(err)
	}
	for _, e := range r["tensors"].([]any) {
		shape := e.(map[string]any)["shape"].([]any)
		for i, d := range shape {
			if v, ok := shrink[d.(float64)]; ok {
				shape[i] = v
			}
		}
	}
	var c map[string]any
	if err := json.Unmarshal(cfgJSON, &c); err != nil {
		t.Fatal(err)
	}
	text := c["text_config"].(map[string]any)
	text["hidden_size"], text["hidden_size_per_layer_input"], text["head_dim"] = 512, 64, 64
	text["vocab_size"], text["vocab_size_per_layer_input"] = 1024, 1024
	inter := text["intermediate_size"].([]any)
	for i := range inter {
		inter[i] = 1024
	}
	recipe, _ = json.Marshal(r)
	cfgJSON, _ = json.Marshal(c)
	st, err := weights.NewRecipeStore(recipe, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg, sp, err := gemma3n.ParseConfig(cfgJSON)
	if err != nil {
		t.Fatal(err)
	}
	m, err := gemma3n.LoadWith(st, cfg, sp, gemma3n.LoadOptions{Weights: gemma3n.WeightsQ4})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// stepCalls runs a prompt, then one decode step of one token with the
// greedy head, and returns the step's op calls: each layer's, the whole
// forward pass's and the head's.
func stepCalls(t *testing.T, m *gemma3n.Model) (layers []native.OpCalls, pass, head native.OpCalls) {
	ex, err := m.Acquire()
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Release()
	x := ex.(*gemma3n.Exec)
	c := m.NewCache()
	defer c.Free()
	var b gemma3n.Batch
	b.Add(c, []int32{2, 17, 300, 41}, 1)
	if _, err := x.Forward(&b); err != nil {
		t.Fatal(err)
	}
	b.Reset()
	b.Add(c, []int32{5}, 1)
	var prev native.OpCalls
	// A hook (which runs every row through every layer, as a one-row step
	// does anyway) marks the layers' ends; it calls no operation.
	b.Hook = func(layer int, _ []float32) {
		now := x.St.OpCalls()
		if layer >= 0 {
			layers = append(layers, now.Sub(prev))
		}
		prev = now
	}
	start := x.St.OpCalls()
	h, err := x.Forward(&b)
	if err != nil {
		t.Fatal(err)
	}
	pass = x.St.OpCalls().Sub(start)
	start = x.St.OpCalls()
	if err := x.Greedy(make([]int32, 1), h); err != nil {
		t.Fatal(err)
	}
	head = x.St.OpCalls().Sub(start)
	return layers, pass, head
}

// TestDecodeOpCalls reports the backend op calls of one decode step of
// E2B's structure on the CPU backend (each a kernel launch or a few on a
// GPU: issue 25's measure), per layer and per step, and checks their
// bookkeeping: the layers' calls are within the pass's, the pass calls
// the layer steps of backend_ops.h once a layer (with Laurel's norm-add
// and the per-layer input's inside them). Measured: 481 calls a step
// (14/15/15 a layer: sparse, dense, KV-shared) before those two merges,
// 422 after (12/13/13; the last layer 14 with its own per-layer input).
func TestDecodeOpCalls(t *testing.T) {
	m := e2bShaped(t)
	layers, pass, head := stepCalls(t, m)
	cfg := m.Cfg
	if len(layers) != cfg.NumLayers {
		t.Fatalf("%d layers counted, want %d", len(layers), cfg.NumLayers)
	}
	var sum native.OpCalls
	for i, l := range layers {
		for op := range sum {
			sum[op] += l[op]
		}
		switch {
		case i == 0: // the hook after the embeddings is before the pass's opening
			t.Logf("layer 0 with the per-layer inputs and the streams before it: %d calls: %v", l.Total(), l)
		case i == 1 || l != layers[i-1]:
			t.Logf("layer %d: %d calls: %v", i, l.Total(), l)
		}
	}
	t.Logf("the layers: %d calls; the pass: %d (%v)", sum.Total(), pass.Total(), pass)
	t.Logf("the greedy head: %d calls (%v); the step: %d", head.Total(), head, pass.Total()+head.Total())
	for op := range sum {
		if sum[op] > pass[op] {
			t.Errorf("%v: the layers call it %d times, the pass %d", native.Op(op), sum[op], pass[op])
		}
	}
	for _, op := range []native.Op{native.OpAltUpPredictStep, native.OpAltUpCorrectStep} {
		if pass[op] != int64(cfg.NumLayers) {
			t.Errorf("%v: %d calls, want one a layer (%d)", op, pass[op], cfg.NumLayers)
		}
	}
	// Laurel's norm-add runs in the attention's norm_add_more and a
	// layer's per-layer input in the next layer's predict step: no
	// norm_add, norm_add_more once a layer and once more for the last
	// layer's per-layer input.
	if pass[native.OpNormAdd] != 0 || pass[native.OpNormAddMore] != int64(cfg.NumLayers+1) {
		t.Errorf("norm_add %d and norm_add_more %d calls, want 0 and %d", pass[native.OpNormAdd], pass[native.OpNormAddMore], cfg.NumLayers+1)
	}
}
