package gemma3n

import (
	"fmt"

	"verdict/engine/model"
)

// Gemma 3n is one implementation of the engine's model interface: what
// the scorer, generation, the catalog decoder, the scheduler and the
// session ask of a decoder. Its AltUp streams, Laurel, per-layer inputs and
// KV-sharing layers stay behind it.
var (
	_ model.Model        = (*Model)(nil)
	_ model.Exec         = (*Exec)(nil)
	_ model.GreedyLooper = (*Exec)(nil)
	_ model.Cache        = (*Cache)(nil)
	_ model.Ticket       = (*Ticket)(nil)
	_ model.Loop         = (*Loop)(nil)
)

// Config reports the limits callers check.
func (m *Model) Config() model.Config {
	return model.Config{
		Vocab: m.Cfg.VocabSize, Hidden: m.Cfg.HiddenSize, Layers: m.Cfg.NumLayers,
		MaxPositions: m.Cfg.MaxPositionEmbeddings,
	}
}

// Params counts the decoder's parameters (Config.Params).
func (m *Model) Params() int64 { return m.Cfg.Params() }

// Chat reports Gemma's chat format and the config's media tokens.
func (m *Model) Chat() model.Chat { return ChatFormat(m.Special) }

// ChatFormat is Gemma 3n's chat format (its processor's template) with the
// media tokens sp: no system turn (a system message starts the first user
// turn), nothing after the model's turn header, "\n\n" around each media
// run. Callers with no model at hand (a prompt's preview, tests) use it.
func ChatFormat(sp model.Special) model.Chat {
	return model.Chat{BOS: "<bos>", TurnStart: "<start_of_turn>", TurnEnd: "<end_of_turn>",
		User: "user", Assistant: "model", MediaPad: "\n\n", Media: sp}
}

// ConfigText is the text configuration and the media tokens, as a decision
// head's model hash has always read them.
func (m *Model) ConfigText() string { return fmt.Sprintf("%+v|%+v", m.Cfg, m.Special) }

// InputsResident reports whether the per-layer table is resident
// (PLEResident): a device loop may then feed any token.
func (m *Model) InputsResident() bool { return m.PLEResident() }

// ResidentBytes is the resident per-layer table's device memory
// (PLEBytes).
func (m *Model) ResidentBytes() int64 { return m.PLEBytes() }

// KVLayout describes the pool's kinds: the layers of each attention type
// that compute keys and values of their own (the KV-sharing layers read
// an earlier layer's), the sliding window, and the bytes per position.
func (m *Model) KVLayout() model.KVLayout {
	l := model.KVLayout{Width: m.Cfg.NumKVHeads * m.Cfg.HeadDim, BytesPerPosition: m.kvBytesPerPosition()}
	l.Kinds[model.KVSliding].Window = m.Cfg.SlidingWindow
	for i := range m.layers {
		y := &m.layers[i]
		if y.kvSrc != i {
			continue
		}
		k := model.KVGlobal
		if y.sliding {
			k = model.KVSliding
		}
		l.Kinds[k].Layers = append(l.Kinds[k].Layers, i)
	}
	return l
}
