package gemma3n_test

import (
	"fmt"
	"testing"

	"verdict/engine/fixture/testmodel"
	"verdict/engine/model"
)

// Gemma 3n behind the model interface: Config, Chat and ConfigText say
// what its own config says, KVLayout the pool it reserves, and a view made
// through the interface has a pool of its own.
func TestModelInterface(t *testing.T) {
	g := testmodel.Tiny(t)
	var m model.Model = g
	c := m.Config()
	if c.Vocab != g.Cfg.VocabSize || c.Hidden != g.Cfg.HiddenSize || c.Layers != g.Cfg.NumLayers || c.MaxPositions != g.Cfg.MaxPositionEmbeddings {
		t.Errorf("Config %+v against %+v", c, g.Cfg)
	}
	if m.Params() != g.Cfg.Params() {
		t.Errorf("Params %d, want %d", m.Params(), g.Cfg.Params())
	}
	if ch := m.Chat(); ch.Media != g.Special || ch.TurnStart != "<start_of_turn>" || ch.Assistant != "model" {
		t.Errorf("Chat %+v", ch)
	}
	if m.ConfigText() != fmt.Sprintf("%+v|%+v", g.Cfg, g.Special) {
		t.Error("ConfigText is not the config and media tokens as text")
	}
	if m.InputsResident() != g.PLEResident() || m.ResidentBytes() != g.PLEBytes() {
		t.Error("InputsResident or ResidentBytes is not the per-layer table's")
	}
	l := m.KVLayout()
	own := 0
	for k, kind := range l.Kinds {
		own += len(kind.Layers)
		for _, i := range kind.Layers {
			if g.Cfg.KVSource(i) != i || (g.Cfg.LayerTypes[i] == "sliding_attention") != (k == model.KVSliding) {
				t.Errorf("layer %d in kind %d", i, k)
			}
		}
	}
	if l.Kinds[model.KVSliding].Window != g.Cfg.SlidingWindow || l.Kinds[model.KVGlobal].Window != 0 {
		t.Errorf("windows %d, %d", l.Kinds[model.KVGlobal].Window, l.Kinds[model.KVSliding].Window)
	}
	if l.Width != g.Cfg.NumKVHeads*g.Cfg.HeadDim || l.BytesPerPosition != int64(own*2*l.Width*4) {
		t.Errorf("width %d, %d bytes a position for %d layers of their own", l.Width, l.BytesPerPosition, own)
	}
	v, err := m.WithKVPositions(4 * model.KVBlock)
	if err != nil {
		t.Fatal(err)
	}
	defer v.CloseView()
	if pos, bytes := v.KVPool(); pos != 4*model.KVBlock || bytes != int64(pos)*l.BytesPerPosition {
		t.Errorf("a view of %d positions reserves %d positions, %d bytes", 4*model.KVBlock, pos, bytes)
	}
}
