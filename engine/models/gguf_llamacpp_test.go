package models_test

import (
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"verdict/engine/fixture/testmodel"
	"verdict/engine/weights"
)

// quantStep is the spacing of a ggml type's levels for values of largest
// magnitude amax, as its quantiser lays them out: Q8_0 ±127 steps of
// amax/127, Q4_0 ±8 of amax/8, Q6_K ±32 of amax/32, Q4_K and Q5_K 15 and 31
// steps over the block's range (at most 2·amax). Rounding to the nearest
// level leaves an error of RMS step/√12 for values spread evenly.
var quantStep = map[weights.GGMLType]float64{
	weights.GGMLQ8_0: 1.0 / 127, weights.GGMLQ4_0: 1.0 / 8, weights.GGMLQ6_K: 1.0 / 32,
	weights.GGMLQ4_K: 2.0 / 15, weights.GGMLQ5_K: 2.0 / 31,
}

// typeNamed is the ggml type a GGUF store reports as name.
func typeNamed(t *testing.T, name string) weights.GGMLType {
	for _, typ := range []weights.GGMLType{weights.GGMLF32, weights.GGMLF16, weights.GGMLBF16, weights.GGMLQ8_0,
		weights.GGMLQ4_0, weights.GGMLQ4_K, weights.GGMLQ5_K, weights.GGMLQ6_K} {
		if typ.String() == name {
			return typ
		}
	}
	t.Fatalf("unexpected type %s", name)
	return 0
}

// checkQuantised compares the values a GGUF tensor of type typ reads as
// with the exact ones: F32 bit for bit, F16 and BF16 within their rounding,
// a quantisation within 1.15 times the RMS error of rounding to its levels
// (a misread block layout, scale packing or nibble order is off by about
// the values themselves). It returns the RMS error.
func checkQuantised(t *testing.T, what string, typ weights.GGMLType, got, want []float32) float64 {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	var se, amax float64
	for i, w := range want {
		g := got[i]
		e := math.Abs(float64(g) - float64(w))
		se += e * e
		amax = max(amax, math.Abs(float64(w)))
		var ok bool
		switch typ {
		case weights.GGMLF32:
			ok = g == w
		case weights.GGMLF16:
			ok = e <= math.Abs(float64(w))*0x1p-11+0x1p-25
		case weights.GGMLBF16:
			ok = e <= math.Abs(float64(w))*0x1p-8
		default:
			ok = true
		}
		if !ok {
			t.Fatalf("%s (%s): element %d reads %g, want %g", what, typ, i, g, w)
		}
	}
	rms := math.Sqrt(se / float64(len(want)))
	if step, ok := quantStep[typ]; ok {
		if bound := 1.15 * step * amax / math.Sqrt(12); rms > bound {
			t.Errorf("%s (%s): RMS error %.3g over %.3g, the bound of rounding to the levels", what, typ, rms, bound)
		}
	}
	return rms
}

// GGUF files made by llama.cpp's own converter and quantiser from a
// synthetic Gemma 3n (testdata/gguf-llamacpp: its README says how) read as
// the recipe they were made from: every tensor within its type's rounding,
// the metadata as the config, the logits within a per-type bound of the
// recipe's (about twice what was measured; the log prints the measurement).
func TestGGUFLlamaCppFiles(t *testing.T) {
	dir := testmodel.Dir(t, "gguf-llamacpp/micro.tar.gz")
	recipe, err := weights.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer recipe.Close()
	ref := openF32(t, dir)
	ids := []int32{2, 105, 200, 107, 45, 255, 1, 17}
	want := allLogits(t, ref, ids)
	t.Logf("reference logits: max |logit| %.3g", maxAbsDiff(want, make([]float32, len(want))))
	const ple = "model.language_model.embed_tokens_per_layer.weight"
	for _, tc := range []struct {
		file  string
		types []weights.GGMLType // each held by some tensor
		bound float64
	}{
		{"micro-convert-BF16.gguf", []weights.GGMLType{weights.GGMLBF16, weights.GGMLF32}, 5e-3},
		{"micro-convert-Q8_0.gguf", []weights.GGMLType{weights.GGMLQ8_0, weights.GGMLF16, weights.GGMLF32}, 1e-2},
		{"micro-quantize-pure-Q6_K.gguf", []weights.GGMLType{weights.GGMLQ6_K, weights.GGMLQ8_0, weights.GGMLF32}, 2e-2},
		{"micro-quantize-Q4_K-Q8_0.gguf", []weights.GGMLType{weights.GGMLQ4_K, weights.GGMLQ8_0, weights.GGMLF32}, 7e-2},
	} {
		t.Run(strings.TrimSuffix(tc.file, ".gguf"), func(t *testing.T) {
			path := filepath.Join(dir, tc.file)
			gs, err := weights.OpenGGUF(path)
			if err != nil {
				t.Fatal(err)
			}
			defer gs.Close()
			if ign := gs.Ignored(); len(ign) != 0 {
				t.Errorf("tensors not served: %v", ign)
			}
			seen := map[string]bool{}
			worst := map[string]float64{}
			for _, name := range recipe.Names() {
				shape, dt, ok := gs.Info(name)
				if !ok {
					t.Errorf("%s: not served", name)
					continue
				}
				seen[dt] = true
				x, err := recipe.Float32(name)
				if err != nil {
					t.Fatal(err)
				}
				y, err := gs.Float32(name)
				if err != nil {
					t.Fatal(err)
				}
				if name == ple {
					// the converter padded the table from 256 rows to the vocabulary's 320 with zeros
					rs, _, _ := recipe.Info(name)
					if len(shape) != 2 || shape[0] != 320 || shape[1] != rs[1] {
						t.Fatalf("%s: shape %v, want [320 %d]", name, shape, rs[1])
					}
					for i, v := range y[len(x):] {
						if v != 0 {
							t.Fatalf("%s: padding element %d is %g", name, i, v)
						}
					}
					y = y[:len(x)]
				}
				rms := checkQuantised(t, name, typeNamed(t, dt), y, x)
				worst[dt] = max(worst[dt], rms)
			}
			for _, typ := range tc.types {
				if !seen[typ.String()] {
					t.Errorf("no tensor of type %s (types: %s)", typ, gs.G.TypeCounts())
				}
			}
			t.Logf("largest RMS weight error by type: %v", worst)

			m := openF32(t, path)
			// The metadata gives the recipe's config, but for the per-layer
			// vocabulary: only Gemma's 262,144 is known to be padding.
			cfg := gemmaCfg(m)
			if cfg.VocabSizePerLayer != 320 {
				t.Errorf("per-layer vocabulary %d, want the padded table's 320", cfg.VocabSizePerLayer)
			}
			cfg.VocabSizePerLayer = gemmaCfg(ref).VocabSizePerLayer
			if !reflect.DeepEqual(cfg, gemmaCfg(ref)) {
				t.Errorf("config from the metadata:\n%+v\nthe recipe's:\n%+v", cfg, gemmaCfg(ref))
			}
			got := allLogits(t, m, ids)
			d := maxAbsDiff(want, got)
			t.Logf("%s: max |logit error| %.3g over %d logits (bound %.3g) [%s]", tc.file, d, len(got), tc.bound, gs.G.TypeCounts())
			if d > tc.bound {
				t.Errorf("max |logit error| %g over the bound %g", d, tc.bound)
			}
		})
	}
}

// A Q5_K tensor llama-quantize wrote (Q4_K_S puts the first layers'
// attention values in Q5_K) reads within Q5_K's rounding of the recipe.
func TestGGUFLlamaCppQ5K(t *testing.T) {
	dir := testmodel.Dir(t, "gguf-llamacpp/micro.tar.gz")
	js, err := os.ReadFile(filepath.Join(dir, "q5_k-recipe.json"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := weights.NewRecipeStore(js, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	const name = "model.language_model.layers.0.self_attn.v_proj.weight"
	want, err := st.Float32(name)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "q5_k-blk.0.attn_v.weight.bin"))
	if err != nil {
		t.Fatal(err)
	}
	got := make([]float32, len(want))
	if err := weights.DequantizeGGML(weights.GGMLQ5_K, got, raw); err != nil {
		t.Fatal(err)
	}
	rms := checkQuantised(t, name, weights.GGMLQ5_K, got, want)
	t.Logf("Q5_K: RMS error %.3g", rms)
}
