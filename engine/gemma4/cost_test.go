package gemma4

import (
	"testing"

	"verdict/engine/model"
)

// wantCosts computes a decoder's weight bytes from its config alone, as
// the q4 format stores them: a matrix of at least 4096 weights whose
// columns are a multiple of the group takes rows·cols/2 bytes of nibbles
// and a float32 scale and offset per group of a row; every other matrix
// and vector 4 bytes a value. It returns the whole, the embedding's
// (the head's) and the experts'.
func wantCosts(c *Config, group int) (all, embed, experts int64) {
	mat := func(rows, cols int) int64 {
		if rows == 0 || cols == 0 {
			return 0
		}
		if group > 0 && rows*cols >= 4096 && cols%group == 0 {
			return int64(rows)*int64(cols)/2 + int64(rows)*int64(cols/group)*2*4
		}
		return 4 * int64(rows) * int64(cols)
	}
	vec := func(n int) int64 { return 4 * int64(n) }
	D, L, P, H := c.Hidden, c.Layers, c.PerLayerInput, c.Heads
	embed = mat(c.Vocab, D)
	all = embed + vec(D) // final norm
	if P > 0 {
		all += mat(L*P, D) + vec(P)
	}
	for _, d := range []int{c.HeadDim, c.GlobalHeadDim} {
		all += vec(d / 2) // the rotary frequencies, one table a layer type
	}
	for l := range L {
		d, kv := c.LayerHeadDim(l), c.LayerKVHeads(l)
		I := c.LayerIntermediate(l)
		all += vec(D)*4 + vec(d) + mat(H*d, D) + mat(D, H*d) // norms, q_norm, q, o
		if !c.KVShared(l) {
			all += mat(kv*d, D) + vec(d)
			if !c.VIsK(l) {
				all += mat(kv*d, D)
			}
		}
		all += mat(I, D)*2 + mat(D, I) + vec(1) // gate, up, down, layer_scalar
		if P > 0 {
			all += mat(P, D) + mat(D, P) + vec(D)
		}
		if c.MoE {
			E, Ie := c.Experts, c.MoEIntermediate
			e := mat(E*2*Ie, D) + mat(E*D, Ie)
			experts += e
			all += e + 4*int64(E)*int64(D) + vec(D) + vec(E) + vec(D)*3 // router (float32), its scale, per-expert scales, three norms
		}
	}
	return all, embed, experts
}

// TestCosts: WeightBytes, HeadBytes and DecodeBytes are what the config
// says the weights take, f32 and q4 of several groups, on the three
// fixtures, for a decoder built either way; a step reads the weights but
// the unchosen experts, one per-layer row and the keys and values. A
// decoder counting its q4 matrices as float32 (as before) fails.
func TestCosts(t *testing.T) {
	for _, name := range fixtures {
		fx := loadFixture(t, name)
		c := fx.Cfg
		for _, o := range []Options{{Weights: model.WeightsF32}, {Weights: model.WeightsQ4}, {Weights: model.WeightsQ4, Group: 32}} {
			for _, d := range []*Decoder{fx.open(t, o), fx.decoder(t, o)} {
				all, embed, experts := wantCosts(c, d.Group())
				if got := d.WeightBytes(); got != all {
					t.Errorf("%s %s/%d: WeightBytes %d, the config says %d", name, d.Weights(), d.Group(), got, all)
				}
				dense, sparse := d.HeadBytes(3)
				if dense != embed || sparse != 3*embed/int64(c.Vocab) {
					t.Errorf("%s %s/%d: HeadBytes %d, %d; want %d, %d", name, d.Weights(), d.Group(), dense, sparse, embed, 3*embed/int64(c.Vocab))
				}
				const ctx = 100
				want := all - experts + 4*int64(c.Layers*c.PerLayerInput)
				if c.MoE {
					want += experts * int64(c.TopK) / int64(c.Experts)
				}
				for l := range c.Layers {
					keys := ctx
					if c.LayerTypes[l] == Sliding {
						keys = min(ctx, c.SlidingWindow)
					}
					want += int64(keys) * int64(c.LayerKVHeads(l)*c.LayerHeadDim(l)) * 2 * 4
				}
				if got := d.DecodeBytes(ctx); got != want {
					t.Errorf("%s %s/%d: DecodeBytes(%d) %d, want %d", name, d.Weights(), d.Group(), ctx, got, want)
				}
				if d.Weights() == model.WeightsQ4 {
					if f32, _, _ := wantCosts(c, 0); d.WeightBytes() >= f32 {
						t.Errorf("%s q4/%d: %d weight bytes, not fewer than float32's %d", name, d.Group(), d.WeightBytes(), f32)
					}
				}
				if n := d.Params(); n*4 < all || (d.Weights() == model.WeightsF32 && n*4 != all+4*int64(c.VocabPerLayerInput*c.Layers*c.PerLayerInput)) {
					t.Errorf("%s %s/%d: %d parameters for %d weight bytes", name, d.Weights(), d.Group(), n, all)
				}
			}
		}
	}
}
