package gemma3n_test

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"verdict/engine/fixture/testmodel"
	"verdict/engine/gemma3n"
	"verdict/engine/model"
	"verdict/engine/weights"
)

// TestCachedMatchesOneShot: prefilling in chunks and decoding token by token
// through the cache gives the one-shot forward's hidden states. The prompt is
// longer than the sliding window (16) so the window and the KV-shared layers
// are both exercised.
func TestCachedMatchesOneShot(t *testing.T) {
	m := testmodel.Tiny(t)
	ids := make([]int32, 40)
	for i := range ids {
		ids[i] = int32(2 + (i*7919)%260000)
	}
	D := m.Cfg.HiddenSize
	full, err := m.Forward(m.NewCache(), ids, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, chunks := range [][]int{{40}, {1, 39}, {17, 23}, {30, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}} {
		c := m.NewCache()
		pos := 0
		for _, n := range chunks {
			h, err := m.Forward(c, ids[pos:pos+n], nil)
			if err != nil {
				t.Fatal(err)
			}
			if d := maxDiff(h, full[pos*D:(pos+n)*D]); d > 1e-5 {
				t.Errorf("chunks %v: positions %d..%d differ by %g", chunks, pos, pos+n, d)
			}
			pos += n
		}
		if c.Len() != len(ids) {
			t.Errorf("cache length %d, want %d", c.Len(), len(ids))
		}
	}
	// A fork of the first 30 positions computes the tail exactly, and the
	// parent, grown on after the fork, is not disturbed by it.
	c := m.NewCache()
	if _, err := m.Forward(c, ids[:30], nil); err != nil {
		t.Fatal(err)
	}
	f := c.Clone()
	if _, err := m.Forward(c, []int32{9, 9, 9}, nil); err != nil {
		t.Fatal(err)
	}
	h, err := m.Forward(f, ids[30:], nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := maxDiff(h, full[30*D:]); d != 0 {
		t.Errorf("a fork: differs by %g", d)
	}
}

func TestForwardErrors(t *testing.T) {
	m := testmodel.Tiny(t)
	for _, ids := range [][]int32{{}, {-1}, {int32(m.Cfg.VocabSize)}} {
		if _, err := m.Forward(m.NewCache(), ids, nil); err == nil {
			t.Errorf("Forward(%v) succeeded", ids)
		}
	}
}

func maxDiff(a, b []float32) float64 {
	var m float64
	for i := range a {
		m = math.Max(m, math.Abs(float64(a[i]-b[i])))
	}
	return m
}

func TestKVSource(t *testing.T) {
	types := func(n int) string {
		var s []string
		for i := 0; i < n; i++ {
			if (i+1)%5 == 0 {
				s = append(s, `"full_attention"`)
			} else {
				s = append(s, `"sliding_attention"`)
			}
		}
		return "[" + strings.Join(s, ",") + "]"
	}
	for _, tc := range []struct {
		name          string
		layers, share int
		want          map[int]int
	}{
		{"E2B", 30, 10, map[int]int{0: 0, 19: 19, 20: 18, 23: 18, 24: 19, 28: 18, 29: 19}},
		{"E4B", 35, 15, map[int]int{20: 18, 24: 19, 29: 19, 34: 19, 33: 18}},
		{"no sharing", 5, 0, map[int]int{4: 4}},
	} {
		cfg := `{"model_type":"gemma3n_text","vocab_size":10,"vocab_size_per_layer_input":10,"hidden_size":8,
			"hidden_size_per_layer_input":2,"intermediate_size":16,"num_hidden_layers":` + strconv.Itoa(tc.layers) + `,
			"num_attention_heads":2,"num_key_value_heads":1,"head_dim":4,"num_kv_shared_layers":` + strconv.Itoa(tc.share) + `,
			"layer_types":` + types(tc.layers) + `,"laurel_rank":2,"hidden_activation":"gelu_pytorch_tanh",
			"rope_parameters":{"full_attention":{"rope_theta":1e6},"sliding_attention":{"rope_theta":1e4}}}`
		c, _, err := gemma3n.ParseConfig([]byte(cfg))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		for layer, want := range tc.want {
			if got := c.KVSource(layer); got != want {
				t.Errorf("%s: KVSource(%d) = %d, want %d", tc.name, layer, got, want)
			}
		}
	}
}

func TestParseConfigErrors(t *testing.T) {
	base := `"vocab_size":10,"vocab_size_per_layer_input":10,"hidden_size":8,"hidden_size_per_layer_input":2,
		"num_attention_heads":2,"num_key_value_heads":1,"head_dim":4,"laurel_rank":2,"hidden_activation":"gelu_pytorch_tanh",
		"rope_parameters":{"full_attention":{"rope_theta":1e6},"sliding_attention":{"rope_theta":1e4}}`
	for _, tc := range []struct{ json, want string }{
		{`{`, "config.json"},
		{`{"model_type":"llama"}`, "not gemma3n"},
		{`{"model_type":"gemma3n_text",` + base + `,"num_hidden_layers":2,"intermediate_size":[16]}`, "intermediate_size has 1 entries for 2 layers"},
		{`{"model_type":"gemma3n_text",` + base + `,"num_hidden_layers":0,"intermediate_size":16}`, "num_hidden_layers must be positive"},
		{`{"model_type":"gemma3n_text",` + base + `,"num_hidden_layers":2,"intermediate_size":16,"layer_types":["x","y"]}`, "unknown type"},
		{`{"model_type":"gemma3n_text",` + base + `,"num_hidden_layers":2,"intermediate_size":16,"num_kv_shared_layers":2}`, "num_kv_shared_layers 2 out of range"},
		{`{"text_config":{"model_type":"gemma3n_text",` + base + `,"num_hidden_layers":1,"intermediate_size":16,"hidden_activation":"relu"}}`, "hidden_activation"},
		// Sizes are bounded before the per-layer lists are made from them.
		{`{"model_type":"gemma3n_text",` + base + `,"num_hidden_layers":3000000,"intermediate_size":16}`, "num_hidden_layers 3000000 is over the limit of 1024"},
		{`{"model_type":"gemma3n_text",` + base + `,"num_hidden_layers":2,"intermediate_size":16,"hidden_size":1048576}`, "hidden_size 1048576 is over the limit"},
		{`{"model_type":"gemma3n_text",` + base + `,"num_hidden_layers":2,"intermediate_size":16,"head_dim":0}`, "head_dim must be positive, got 0"},
		{`{"model_type":"gemma3n_text",` + base + `,"num_hidden_layers":2,"intermediate_size":[16,-3]}`, "intermediate_size[1] is -3"},
		{`{"model_type":"gemma3n_text",` + base + `,"num_hidden_layers":2,"intermediate_size":16,"vocab_size_per_layer_input":11}`, "vocab_size_per_layer_input 11 is larger than vocab_size 10"},
		// Values outside their domain.
		{`{"model_type":"gemma3n_text",` + base + `,"num_hidden_layers":2,"intermediate_size":16,"rms_norm_eps":-1e-6}`, "rms_norm_eps must be positive, got -1e-06"},
		{`{"model_type":"gemma3n_text",` + base + `,"num_hidden_layers":2,"intermediate_size":16,"rms_norm_eps":0}`, "rms_norm_eps must be positive, got 0"},
		{`{"model_type":"gemma3n_text",` + base + `,"num_hidden_layers":2,"intermediate_size":16,"activation_sparsity_pattern":[1,0]}`, "activation_sparsity_pattern[0] is 1, want a value in [0, 1)"},
		{`{"model_type":"gemma3n_text",` + base + `,"num_hidden_layers":2,"intermediate_size":16,"activation_sparsity_pattern":[0,-0.5]}`, "activation_sparsity_pattern[1] is -0.5"},
		{`{"model_type":"gemma3n_text",` + base + `,"num_hidden_layers":2,"intermediate_size":16,"sliding_window":-4}`, "sliding_window must be positive, got -4"},
		{`{"model_type":"gemma3n_text",` + base + `,"num_hidden_layers":2,"intermediate_size":16,"max_position_embeddings":0}`, "max_position_embeddings must be positive, got 0"},
		{`{"model_type":"gemma3n_text",` + base + `,"num_hidden_layers":2,"intermediate_size":16,"final_logit_softcapping":-30}`, "final_logit_softcapping must be 0 (off) or positive"},
		{`{"model_type":"gemma3n_text",` + base + `,"num_hidden_layers":2,"intermediate_size":16,"head_dim":5}`, "head_dim 5 invalid"},
		{`{"model_type":"gemma3n_text",` + base + `,"num_hidden_layers":2,"intermediate_size":16,"eos_token_id":[1,10]}`, "eos_token_id 10 is outside the vocabulary [0, 10)"},
		{`{"image_token_id":-262145,"text_config":{"model_type":"gemma3n_text",` + base + `,"num_hidden_layers":2,"intermediate_size":16}}`, "image_token_id -262145 is outside"},
		{`{"vision_soft_tokens_per_image":-1,"text_config":{"model_type":"gemma3n_text",` + base + `,"num_hidden_layers":2,"intermediate_size":16}}`, "vision_soft_tokens_per_image -1"},
	} {
		_, _, err := gemma3n.ParseConfig([]byte(tc.json))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseConfig(%.60s…) = %v, want error containing %q", tc.json, err, tc.want)
		}
	}
}

// store wraps a real store, hiding, reshaping or retyping (as I64) one
// tensor, or adding one of two values.
type store struct {
	weights.Store
	hide, reshape, retype, add string
}

func (s store) Info(name string) ([]int, string, bool) {
	shape, dt, ok := s.Store.Info(name)
	switch name {
	case s.add:
		return []int{2}, "F32", true
	case s.hide:
		return nil, "", false
	case s.reshape:
		return []int{shape[0] + 1, shape[1]}, dt, ok
	case s.retype:
		return shape, "I64", ok
	}
	return shape, dt, ok
}

func TestLoadErrors(t *testing.T) {
	dir := testmodel.Dir(t, "gemma3n-micro-bf16.tar.gz")
	st, err := weights.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cb, _ := os.ReadFile(filepath.Join(dir, "config.json"))
	cfg, sp, err := gemma3n.ParseConfig(cb)
	if err != nil {
		t.Fatal(err)
	}
	const q = "model.language_model.layers.1.self_attn.q_proj.weight"
	for _, tc := range []struct {
		st   weights.Store
		want string
	}{
		{store{Store: st, hide: q}, "missing tensor " + q},
		{store{Store: st, reshape: q}, "tensor " + q + " has shape [17 16], want [16 16]"},
		{store{Store: st, retype: q}, "tensor " + q + " has element type I64, which cannot be read as float32"},
		{store{Store: st, retype: "model.language_model.norm.weight"}, "tensor model.language_model.norm.weight has element type I64"},
		{store{Store: st, add: "model.language_model.embed_tokens.embed_scale"}, "tensor model.language_model.embed_tokens.embed_scale has shape [2], want a single value"},
		{store{Store: st, hide: "model.language_model.embed_tokens.weight"}, "no embed_tokens.weight"},
	} {
		_, err := gemma3n.Load(tc.st, cfg, sp)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Load = %v, want error containing %q", err, tc.want)
		}
	}
	if _, err := gemma3n.Load(st, cfg, sp); err != nil {
		t.Errorf("Load of the unmodified checkpoint: %v", err)
	}
}

// TestLoadConfigMismatch: a config whose sizes are not the checkpoint's
// fails before anything is sized by it, naming the field and both values.
func TestLoadConfigMismatch(t *testing.T) {
	dir := testmodel.Dir(t, "gemma3n-micro-bf16.tar.gz")
	st, err := weights.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cb, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		field string
		value any
		want  string
	}{
		{"num_hidden_layers", 5, "config num_hidden_layers is 5 but the checkpoint has 4 layers"},
		{"vocab_size", 8192, "config vocab_size is 8192 but the checkpoint's model.language_model.embed_tokens.weight rows says 4096"},
		{"hidden_size", 32, "config hidden_size is 32 but the checkpoint's model.language_model.embed_tokens.weight columns says 16"},
		{"hidden_size_per_layer_input", 8, "config hidden_size_per_layer_input is 8 but"},
		{"head_dim", 16, "config head_dim is 16 but"},
		{"num_attention_heads", 4, "config num_attention_heads is 4 but the checkpoint's model.language_model.layers.0.self_attn.q_proj.weight rows / head_dim says 2"},
		{"laurel_rank", 8, "config laurel_rank is 8 but"},
		{"intermediate_size", 64, "config intermediate_size[0] is 64 but the checkpoint's model.language_model.layers.0.mlp.gate_proj.weight rows says 32"},
	} {
		var m map[string]any
		if err := json.Unmarshal(cb, &m); err != nil {
			t.Fatal(err)
		}
		text := m
		if sub, ok := m["text_config"].(map[string]any); ok {
			text = sub
		}
		text["intermediate_size"] = 32 // one value for every layer
		delete(text, "layer_types")
		delete(text, "activation_sparsity_pattern")
		text[tc.field] = tc.value
		b, _ := json.Marshal(m)
		cfg, sp, err := gemma3n.ParseConfig(b)
		if err != nil {
			t.Fatalf("%s=%v: ParseConfig: %v", tc.field, tc.value, err)
		}
		if _, err := gemma3n.Load(st, cfg, sp); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s=%v: Load = %v, want error containing %q", tc.field, tc.value, err, tc.want)
		}
	}
}

// TestForks: rows that fork a shared prefix (longer than the sliding
// window), batched together with unequal lengths, and rows that fork those
// rows, equal full forward passes over all their tokens bit for bit, whether
// only the wanted rows run the KV-sharing layers or every row does.
func TestForks(t *testing.T) {
	m := testmodel.Tiny(t)
	D := m.Cfg.HiddenSize
	prefix := make([]int32, 23)
	for i := range prefix {
		prefix[i] = int32(2 + (i*104729)%260000)
	}
	type branch struct {
		ids    []int32
		outs   int
		parent int
	}
	rows := []branch{
		{ids: []int32{14937, 47384, 1083}, outs: 1},
		{ids: []int32{14937, 53568, 1083, 623, 79205, 1894}, outs: 4},
		{ids: []int32{9}, outs: 1},
		{ids: []int32{14937, 40400, 1083, 3714, 7736, 8341, 1083}, outs: 2},
	}
	children := []branch{
		{ids: []int32{623, 976}, outs: 2, parent: 0},
		{ids: []int32{5712}, outs: 1, parent: 1},
		{ids: []int32{11, 12, 13, 14, 15, 16, 17, 18}, outs: 3, parent: 3},
		{ids: []int32{623}, outs: 1, parent: 0},
	}
	c := m.NewCache()
	if _, err := m.Forward(c, prefix, nil); err != nil {
		t.Fatal(err)
	}
	x, err := m.Acquire()
	if err != nil {
		t.Fatal(err)
	}
	defer x.Release()
	run := func(bs []branch, parents []model.Cache, all bool) ([][]float32, []model.Cache) {
		var b gemma3n.Batch
		seqs := make([]model.Cache, len(bs))
		for i, r := range bs {
			seqs[i] = parents[i].Clone()
			outs := r.outs
			if all {
				outs = len(r.ids)
			}
			b.Add(seqs[i], r.ids, outs)
		}
		h, err := x.Forward(&b)
		if err != nil {
			t.Fatal(err)
		}
		host := make([]float32, h.Len())
		if err := x.Download(host, h); err != nil {
			t.Fatal(err)
		}
		out := make([][]float32, len(bs))
		o := 0
		for i, r := range bs {
			k := r.outs
			if all {
				k = len(r.ids)
			}
			out[i] = host[(o+k-r.outs)*D : (o+k)*D]
			o += k
		}
		return out, seqs
	}
	for _, all := range []bool{false, true} {
		parents := []model.Cache{c, c, c, c}
		got, seqs := run(rows, parents, all)
		if c.Len() != len(prefix) {
			t.Fatalf("forks changed the prefix: length %d", c.Len())
		}
		for r, b := range rows {
			full, err := m.Forward(nil, append(slices.Clone(prefix), b.ids...), nil)
			if err != nil {
				t.Fatal(err)
			}
			if d := maxDiff(got[r], full[len(full)-b.outs*D:]); d != 0 {
				t.Errorf("all=%v row %d: differs from its own forward pass by %g", all, r, d)
			}
		}
		ps := make([]model.Cache, len(children))
		for i, ch := range children {
			ps[i] = seqs[ch.parent]
		}
		got, _ = run(children, ps, all)
		for r, b := range children {
			all := append(append(slices.Clone(prefix), rows[b.parent].ids...), b.ids...)
			full, err := m.Forward(nil, all, nil)
			if err != nil {
				t.Fatal(err)
			}
			if d := maxDiff(got[r], full[len(full)-b.outs*D:]); d != 0 {
				t.Errorf("child %d: differs from its own forward pass by %g", r, d)
			}
		}
	}
}

// TestOutputs: the wanted last positions' states equal Forward's last rows
// bit for bit, and the cache a prefill without outputs leaves decodes
// exactly like Forward's.
func TestOutputs(t *testing.T) {
	m := testmodel.Tiny(t)
	ids := make([]int32, 30)
	for i := range ids {
		ids[i] = int32(2 + (i*7919)%260000)
	}
	D := m.Cfg.HiddenSize
	full, err := m.Forward(nil, ids, nil)
	if err != nil {
		t.Fatal(err)
	}
	x, err := m.Acquire()
	if err != nil {
		t.Fatal(err)
	}
	defer x.Release()
	for _, keep := range []int{0, 1, 3, 30} {
		c := m.NewCache()
		var b gemma3n.Batch
		b.Add(c, ids, keep)
		h, err := x.Prefill(&b)
		if err != nil {
			t.Fatal(err)
		}
		if len(h) != keep*D || c.Len() != len(ids) {
			t.Fatalf("keep %d: %d values, cache %d", keep, len(h), c.Len())
		}
		want := full[(len(ids)-keep)*D:]
		for i := range h {
			if math.Float32bits(h[i]) != math.Float32bits(want[i]) {
				t.Fatalf("keep %d: value %d is %v, want %v", keep, i, h[i], want[i])
			}
		}
		// Decoding on from this cache gives Forward's next states.
		a, err := m.Forward(c, []int32{77, 5}, nil)
		if err != nil {
			t.Fatal(err)
		}
		c1 := m.NewCache()
		m.Forward(c1, ids, nil)
		b2, _ := m.Forward(c1, []int32{77, 5}, nil)
		for i := range a {
			if math.Float32bits(a[i]) != math.Float32bits(b2[i]) {
				t.Fatalf("keep %d: decode after it differs at %d", keep, i)
			}
		}
		c.Free()
		c1.Free()
	}
}

// TestMaxPositions: no forward pass runs past max_position_embeddings; the
// error names both numbers, is marked model.ErrTooLong (the request's
// fault) and leaves the cache as it was.
func TestMaxPositions(t *testing.T) {
	m := *testmodel.Tiny(t) // a copy: the shared model keeps its config
	m.Cfg.MaxPositionEmbeddings = 8
	c := m.NewCache()
	if _, err := m.Forward(c, []int32{2, 10, 11, 12, 13, 14}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Forward(c, []int32{15, 16, 17}, nil); err == nil || !strings.Contains(err.Error(), "9 tokens exceed the model's max_position_embeddings of 8") || !errors.Is(err, model.ErrTooLong) {
		t.Errorf("forward past the limit: %v, want it named and marked model.ErrTooLong", err)
	}
	if c.Len() != 6 {
		t.Errorf("a refused pass changed the cache to %d positions", c.Len())
	}
	f := c.Clone()
	if _, err := m.Forward(f, []int32{20, 21}, nil); err != nil {
		t.Errorf("a fork within the limit: %v", err)
	}
}

// TestManyRuns: a batch whose sequences hold more key runs than an Exec
// first describes (a chain of forks, a run a link, shared by every
// sequence) grows its entry tables and gives each row its own forward
// pass's bits.
func TestManyRuns(t *testing.T) {
	m := testmodel.Tiny(t)
	D := m.Cfg.HiddenSize
	x, err := m.Acquire()
	if err != nil {
		t.Fatal(err)
	}
	defer x.Release()
	tok := func(i int) int32 { return int32(2 + (i*7919)%260000) }
	// A chain of depth links from a 5-token root, one token a link: each
	// link a fork, so its tip holds a run a link.
	depth := 4*x.Rows()/40 + 8
	cur := m.NewCache()
	path := []int32{tok(0), tok(1), tok(2), tok(3), tok(4)}
	if _, err := m.Forward(cur, path, nil); err != nil {
		t.Fatal(err)
	}
	for d := 0; d < depth; d++ {
		next := cur.Clone()
		id := tok(100 + d)
		var b gemma3n.Batch
		b.Add(next, []int32{id}, 0)
		if _, err := x.Forward(&b); err != nil {
			t.Fatal(err)
		}
		cur, path = next, append(path, id)
	}
	const n = 40
	var b gemma3n.Batch
	for c := 0; c < n; c++ {
		b.Add(cur.Clone(), []int32{tok(5000 + c)}, 1)
	}
	for round := 0; round < 2; round++ { // grown, then at the new size
		h, err := x.Forward(&b)
		if err != nil {
			t.Fatal(err)
		}
		host := make([]float32, h.Len())
		if err := x.Download(host, h); err != nil {
			t.Fatal(err)
		}
		for c := 0; c < n; c++ {
			full, err := m.Forward(nil, append(slices.Clone(path), tok(5000+c)), nil)
			if err != nil {
				t.Fatal(err)
			}
			if d := maxDiff(host[c*D:(c+1)*D], full[len(full)-D:]); d != 0 {
				t.Errorf("round %d, sequence %d: differs from its own forward pass by %g", round, c, d)
			}
		}
		b.Reset()
		for c := 0; c < n; c++ {
			b.Add(cur.Clone(), []int32{tok(5000 + c)}, 1)
		}
	}
}
