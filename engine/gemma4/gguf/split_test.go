package gguf_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"verdict/engine/fixture/testmodel"
	"verdict/engine/weights"
	"verdict/engine/weights/ggufwrite"
)

// The MoE Q8_0 file in both expert layouts (make_gemma4_gguf.py): fused
// ffn_gate_up_exps, as the converter writes it, and split ffn_gate_exps +
// ffn_up_exps, which llama.cpp also loads.
func moeQ8(t *testing.T) string {
	return filepath.Join(testmodel.Dir(t, "gguf-llamacpp/gemma4-tiny-moe-Q8_0.tar.gz"), "gemma4-synthetic-tiny-moe-Q8_0.gguf")
}

func moeSplitQ8(t *testing.T) string {
	return filepath.Join(testmodel.Dir(t, "gguf-llamacpp/gemma4-tiny-moe-split.tar.gz"), "gemma4-synthetic-tiny-moe-split-Q8_0.gguf")
}

// TestSplitExperts: the split file serves what the fused one does (names,
// shapes, types, every value, Rows) and gives the same logits bit for bit,
// also with the up halves stored F32 beside Q8_0 gates (reported as F32);
// the split file with its gate and up names crossed opens and does not.
func TestSplitExperts(t *testing.T) {
	fused, split := openStore(t, moeQ8(t)), openStore(t, moeSplitQ8(t))
	if got, want := split.Names(), fused.Names(); !slices.Equal(got, want) {
		t.Fatalf("names %v, the fused file's %v", got, want)
	}
	nSplit := 0
	for _, x := range split.G.Tensors {
		if strings.HasSuffix(x.Name, ".ffn_gate_exps.weight") {
			nSplit++
		}
	}
	if nSplit == 0 {
		t.Fatal("the split file has no ffn_gate_exps")
	}
	for _, n := range fused.Names() {
		fs, ft, _ := fused.Info(n)
		ss, stype, _ := split.Info(n)
		if !slices.Equal(fs, ss) || ft != stype {
			t.Errorf("%s: %v %s, the fused file's %v %s", n, ss, stype, fs, ft)
		}
		a, _ := fused.Float32(n)
		b, err := split.Float32(n)
		if err != nil || !slices.Equal(a, b) {
			t.Errorf("%s: values differ from the fused file's (%v)", n, err)
		}
		if strings.HasSuffix(n, "experts.gate_up_proj") {
			cols := len(a) / fs[0]
			row := make([]float32, 2*cols)
			if err := split.Rows(n, 3, row); err != nil || !slices.Equal(row, a[3*cols:5*cols]) {
				t.Errorf("%s: Rows(3, 2 experts) differ from Float32's (%v)", n, err)
			}
		}
	}
	ids := []int{2, 25, 51, 207, 55, 203, 466, 499, 162, 114, 260, 84, 443, 503, 283, 89, 421, 49, 169, 101}
	want := forward(t, fused, fused.ConfigJSON(), ids, nil)
	if got := forward(t, split, split.ConfigJSON(), ids, nil); !slices.Equal(got, want) {
		t.Errorf("the split file's logits differ from the fused file's by %.3g", maxDiff(got, want))
	}
	// The up halves as F32 (their Q8_0 values), the gates Q8_0: served as
	// F32, the same values and logits.
	kvs, ts := parts(t, moeSplitQ8(t))
	for i := range ts {
		if strings.HasSuffix(ts[i].Name, ".ffn_up_exps.weight") {
			n := 1
			for _, d := range ts[i].Dims {
				n *= d
			}
			v := make([]float32, n)
			if err := weights.DequantizeGGML(ts[i].Type, v, ts[i].Data); err != nil {
				t.Fatal(err)
			}
			b, err := ggufwrite.Encode(weights.GGMLF32, v)
			if err != nil {
				t.Fatal(err)
			}
			ts[i].Type, ts[i].Data = weights.GGMLF32, b
		}
	}
	mixed, err := openBytes(t, encode(t, kvs, ts))
	if err != nil {
		t.Fatal(err)
	}
	if _, typ, _ := mixed.Info("model.layers.0.experts.gate_up_proj"); typ != "F32" {
		t.Errorf("Q8_0 gate and F32 up reported as %s", typ)
	}
	if got := forward(t, mixed, mixed.ConfigJSON(), ids, nil); !slices.Equal(got, want) {
		t.Errorf("Q8_0 gates and F32 ups: logits differ from the fused file's by %.3g", maxDiff(got, want))
	}
	kvs, ts = parts(t, moeSplitQ8(t))
	for i := range ts {
		if b, ok := strings.CutSuffix(ts[i].Name, ".ffn_gate_exps.weight"); ok {
			ts[i].Name = b + ".ffn_up_exps.weight"
		} else if b, ok := strings.CutSuffix(ts[i].Name, ".ffn_up_exps.weight"); ok {
			ts[i].Name = b + ".ffn_gate_exps.weight"
		}
	}
	crossed, err := openBytes(t, encode(t, kvs, ts))
	if err != nil {
		t.Fatal(err)
	}
	e := maxDiff(forward(t, crossed, crossed.ConfigJSON(), ids, nil), want)
	if e == 0 {
		t.Error("the split file with gate and up crossed gives the same logits")
	}
	t.Logf("%d blocks of split experts: every value and the logits equal the fused file's; gate and up crossed: logits off by %.3g", nSplit, e)
}

// TestSplitExpertsRefused: a block with both layouts, half a pair, a pair
// of unlike or non-3-D shapes is refused naming the tensors; Rows outside
// the experts and BF16 of the fused view are errors.
func TestSplitExpertsRefused(t *testing.T) {
	fusedKV, fusedTS := parts(t, moeQ8(t))
	splitKV, splitTS := parts(t, moeSplitQ8(t))
	for _, c := range []struct {
		name string
		file func() ([]ggufwrite.KV, []ggufwrite.Tensor)
		want string
	}{
		{"both layouts", func() ([]ggufwrite.KV, []ggufwrite.Tensor) {
			ts := slices.Clone(fusedTS)
			return fusedKV, append(ts, *tensor(splitTS, "blk.2.ffn_gate_exps.weight"), *tensor(splitTS, "blk.2.ffn_up_exps.weight"))
		}, "tensor blk.2.ffn_gate_up_exps.weight beside blk.2.ffn_gate_exps.weight and blk.2.ffn_up_exps.weight"},
		{"up without gate", func() ([]ggufwrite.KV, []ggufwrite.Tensor) {
			return splitKV, dropTensor(slices.Clone(splitTS), "blk.4.ffn_gate_exps.weight")
		}, "tensor blk.4.ffn_up_exps.weight without blk.4.ffn_gate_exps.weight"},
		{"gate without up", func() ([]ggufwrite.KV, []ggufwrite.Tensor) {
			return splitKV, dropTensor(slices.Clone(splitTS), "blk.0.ffn_up_exps.weight")
		}, "tensor blk.0.ffn_gate_exps.weight without blk.0.ffn_up_exps.weight"},
		{"unlike shapes", func() ([]ggufwrite.KV, []ggufwrite.Tensor) {
			ts := slices.Clone(splitTS)
			x := tensor(ts, "blk.1.ffn_up_exps.weight")
			x.Dims = []int{x.Dims[0], x.Dims[1] / 2, x.Dims[2] * 2}
			return splitKV, ts
		}, "tensors blk.1.ffn_gate_exps.weight (dimensions [64 32 8]) and blk.1.ffn_up_exps.weight ([64 16 16])"},
		{"two dimensions", func() ([]ggufwrite.KV, []ggufwrite.Tensor) {
			ts := slices.Clone(splitTS)
			for _, n := range []string{"blk.3.ffn_gate_exps.weight", "blk.3.ffn_up_exps.weight"} {
				x := tensor(ts, n)
				x.Dims = []int{x.Dims[0], x.Dims[1] * x.Dims[2]}
			}
			return splitKV, ts
		}, "want the same three dimensions"},
		{"an empty dimension", func() ([]ggufwrite.KV, []ggufwrite.Tensor) {
			ts := slices.Clone(splitTS)
			for _, n := range []string{"blk.5.ffn_gate_exps.weight", "blk.5.ffn_up_exps.weight"} {
				x := tensor(ts, n)
				x.Dims, x.Data = []int{x.Dims[0], 0, x.Dims[2]}, nil
			}
			return splitKV, ts
		}, "blk.5.ffn_gate_exps.weight (dimensions [64 0 8])"},
		{"a block past the count", func() ([]ggufwrite.KV, []ggufwrite.Tensor) {
			ts := slices.Clone(splitTS)
			x := *tensor(ts, "blk.0.ffn_up_exps.weight")
			x.Name = "blk.7.ffn_up_exps.weight"
			return splitKV, append(ts, x)
		}, "blk.7.ffn_up_exps.weight: block 7 beyond gemma4.block_count 6"},
	} {
		kvs, ts := c.file()
		_, err := openBytes(t, encode(t, kvs, ts))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %q", c.name, err, c.want)
		}
	}
	s, err := openBytes(t, encode(t, splitKV, splitTS))
	if err != nil {
		t.Fatal(err)
	}
	const n = "model.layers.0.experts.gate_up_proj"
	sh, _, _ := s.Info(n)
	cols := sh[1] * sh[2]
	for _, c := range []struct {
		row0, values int
		want         string
	}{
		{7, 2 * cols, "rows 7 to 9 outside its 8"},
		{-1, cols, "rows -1 to 0 outside"},
		{0, cols + 1, "not whole rows"},
	} {
		if err := s.Rows(n, c.row0, make([]float32, c.values)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Rows(%d, %d values): %v, want %q", c.row0, c.values, err, c.want)
		}
	}
	if _, err := s.BF16(n); err == nil || !strings.Contains(err.Error(), "blk.0.ffn_gate_exps.weight and blk.0.ffn_up_exps.weight): type is Q8_0, not BF16") {
		t.Errorf("BF16: %v", err)
	}
	if _, ok := s.Tensor(n); ok {
		t.Error("Tensor gives one GGUF tensor for a view of two")
	}
	s.Close()
	if _, err := s.Float32(n); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("Float32 after Close: %v", err)
	}
}
