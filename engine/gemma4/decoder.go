package gemma4

import (
	"context"
	"fmt"
	"math"

	"verdict/engine/kvpool"
	"verdict/engine/model"
	"verdict/engine/model/kit"
	"verdict/native"
)

// Gemma 4 behind the engine's model interface: a Decoder runs the forward
// pass of the reference decoder (Model) as the backend's operations on a
// stream, over ragged batches of rows of any sequences, with the keys and
// values in a paged pool (engine/kvpool) whose full and sliding kinds have
// their own widths.
var (
	_ model.Model        = (*Decoder)(nil)
	_ model.Exec         = (*Exec)(nil)
	_ model.GreedyLooper = (*Exec)(nil)
	_ model.Loop         = (*Loop)(nil)
	_ model.Cache        = (*kvpool.Cache)(nil)
	_ model.Ticket       = (*kvpool.Ticket)(nil)
)

// DefaultBatchRows is the number of rows an Exec runs at once unless
// Options say otherwise.
const DefaultBatchRows = 512

// DefaultKVPositions is the key/value pool's default size, in positions of
// each attention kind (at least 4 × max_position_embeddings when larger).
const DefaultKVPositions = 1 << 17

// Options are NewDecoder's settings.
type Options struct {
	// Backend runs the model (nil: native.Default()).
	Backend *native.Backend
	// BatchRows is the most rows one Forward takes (0: DefaultBatchRows).
	BatchRows int
	// KVPositions is the pool's size in positions of each kind (0:
	// DefaultKVPositions).
	KVPositions int
	// Weights: model.WeightsF32 (the reference's float32 weights bound in
	// place: the exact path; "" means it) or model.WeightsQ4 (the large
	// matrices packed to 4 bits: pack.go).
	Weights model.Weights
	// Group is the q4 group size, a power of two from 32 to 512 (0:
	// DefaultGroup).
	Group int
	// Context, when set, stops packing between matrices; NewDecoder then
	// returns its error.
	Context context.Context
	// Progress, when set, hears the weights packed: done of total.
	Progress func(done, total int64)
}

// Decoder is a Gemma 4 text decoder on a backend, implementing the engine's
// model interface (engine/model). Its weights are the reference decoder's
// (Ref), bound to the backend in place; it is read-only after NewDecoder
// and safe for concurrent passes, each on an Exec of its own.
type Decoder struct {
	// Ref is the plain-Go decoder over the same weights.
	Ref *Model

	cfg     *Config
	be      *native.Backend
	bound   *native.Bound
	t       tensors
	pool    *kvpool.Pool
	execs   *kit.Pool[*Exec] // idle Execs
	maxRows int
	view    bool         // made by WithKVPositions: the weights are another's
	media   *MediaTokens // SetMediaTokens (multimodal.go); nil: text only
	weights model.Weights
	group   int             // q4 group size (0: float32 weights)
	packed  []native.Matrix // the q4 matrices bound (kept alive here)

	embScale, pleScale, projScale, inScale, rootD float32
}

// tensors are the decoder's weights bound to its backend.
type tensors struct {
	embed, embedPL, plProj, plNorm, norm native.Tensor
	invFreq                              [2]native.Tensor // by LayerType
	layers                               []layerTensors
}

type layerTensors struct {
	inNorm, postAttnNorm, q, qNorm, k, v, kNorm, o native.Tensor
	preFF, postFF, gate, up, down                  native.Tensor
	pleGate, pleProj, pleNorm                      native.Tensor
	routerProj, routerScale, gateUp, expDown       native.Tensor
	postFF1, postFF2, preFF2                       native.Tensor
}

// NewDecoder binds m's weights to a backend and reserves its key/value
// pool. m must not change afterwards.
func NewDecoder(m *Model, opt Options) (*Decoder, error) {
	c := m.Cfg
	d := &Decoder{Ref: m, cfg: c, be: opt.Backend, maxRows: opt.BatchRows, execs: &kit.Pool[*Exec]{}}
	if d.be == nil {
		d.be = native.Default()
	}
	if d.maxRows == 0 {
		d.maxRows = DefaultBatchRows
	}
	if d.maxRows < 1 || d.maxRows > 1<<16 {
		return nil, fmt.Errorf("gemma4: %d batch rows: want 1 to %d", d.maxRows, 1<<16)
	}
	kv := opt.KVPositions
	if kv == 0 {
		kv = max(DefaultKVPositions, 4*c.MaxPositions)
	}
	if kv < 1 || kv > kvpool.MaxPositions {
		return nil, fmt.Errorf("gemma4: a key/value pool of %d positions: want 1 to %d", kv, kvpool.MaxPositions)
	}
	d.embScale, d.pleScale = m.embScale, m.pleScale
	d.projScale = float32(math.Pow(float64(c.Hidden), -0.5))
	d.inScale = float32(math.Pow(2, -0.5))
	d.rootD = d.projScale
	var err error
	if d.weights, d.group, err = weightsOf(opt); err != nil {
		return nil, err
	}
	if err := d.bind(opt.Context, opt.Progress); err != nil {
		return nil, err
	}
	p, err := kvpool.New(d.be, c.Layers, d.kvSpecs(), kv, d.maxRows)
	if err != nil {
		d.bound.Free()
		return nil, fmt.Errorf("gemma4: %w", err)
	}
	d.pool = p
	return d, nil
}

// kvKind is the pool's kind of layer l's attention.
func (c *Config) kvKind(l int) int {
	if c.LayerTypes[l] == Sliding {
		return model.KVSliding
	}
	return model.KVGlobal
}

// kvSpecs are the pool's kinds: the layers of each that keep keys of
// their own, the window and the width (KV heads × head width of the type).
func (d *Decoder) kvSpecs() [2]kvpool.Spec {
	c := d.cfg
	var s [2]kvpool.Spec
	s[model.KVSliding].Window = c.SlidingWindow
	for l := range c.Layers {
		if c.KVShared(l) {
			continue
		}
		k := c.kvKind(l)
		s[k].Layers = append(s[k].Layers, l)
		s[k].Width = c.LayerKVHeads(l) * c.LayerHeadDim(l)
	}
	return s
}

// bind binds every weight to the backend (the built-in backend uses the
// float32 slices in place). With q4 weights the large matrices are packed
// first (pack.go) and their packed copies bound; ctx and progress are the
// packing's.
func (d *Decoder) bind(ctx context.Context, progress func(done, total int64)) error {
	m, c := d.Ref, d.cfg
	w := d.be.NewBound()
	d.bound = w
	pk := &packer{group: d.group}
	var err error
	// f32 binds a matrix as it is; mat packs it when the packer takes it.
	f32 := func(dst *native.Tensor, x []float32, rows, cols int) {
		if err == nil && x != nil {
			*dst, err = w.Matrix(native.NewF32(rows, cols, x))
		}
	}
	mat := func(dst *native.Tensor, name string, x []float32, rows, cols int) {
		if x != nil && pk.packs(rows, cols) {
			pk.add(dst, name, x, rows, cols)
			return
		}
		f32(dst, x, rows, cols)
	}
	vec := func(dst *native.Tensor, x []float32) {
		if err == nil {
			*dst, err = w.Vector(x)
		}
	}
	D, L, P, V := c.Hidden, c.Layers, c.PerLayerInput, c.Vocab
	t := &d.t
	mat(&t.embed, "embed_tokens", m.Embed, V, D)
	f32(&t.embedPL, m.EmbedPL, c.VocabPerLayerInput, L*P) // read a row a token
	mat(&t.plProj, "per_layer_model_projection", m.PLProj, L*P, D)
	vec(&t.plNorm, m.PLNorm)
	vec(&t.norm, m.Norm)
	for k := range m.rope {
		vec(&t.invFreq[k], m.rope[k].invFreq)
	}
	t.layers = make([]layerTensors, L)
	for l := range m.Layers {
		y, lt := &m.Layers[l], &t.layers[l]
		n := func(s string) string { return fmt.Sprintf("layers.%d.%s", l, s) }
		hd, kvd, I := c.Heads*y.headDim, y.kvH*y.headDim, y.intermediate
		vec(&lt.inNorm, y.InputNorm)
		vec(&lt.postAttnNorm, y.PostAttnNorm)
		mat(&lt.q, n("q_proj"), y.Q, hd, D)
		vec(&lt.qNorm, y.QNorm)
		mat(&lt.k, n("k_proj"), y.K, kvd, D)
		mat(&lt.v, n("v_proj"), y.V, kvd, D)
		vec(&lt.kNorm, y.KNorm)
		mat(&lt.o, n("o_proj"), y.O, D, hd)
		vec(&lt.preFF, y.PreFFNorm)
		vec(&lt.postFF, y.PostFFNorm)
		mat(&lt.gate, n("gate_proj"), y.Gate, I, D)
		mat(&lt.up, n("up_proj"), y.Up, I, D)
		mat(&lt.down, n("down_proj"), y.Down, D, I)
		mat(&lt.pleGate, n("per_layer_input_gate"), y.PLEGate, P, D)
		mat(&lt.pleProj, n("per_layer_projection"), y.PLEProj, D, P)
		vec(&lt.pleNorm, y.PLENorm)
		if c.MoE {
			E, Ie := c.Experts, c.MoEIntermediate
			f32(&lt.routerProj, y.RouterProj, E, D) // chooses the experts
			vec(&lt.routerScale, y.RouterScale)
			mat(&lt.gateUp, n("experts.gate_up_proj"), y.ExpertGateUp, E*2*Ie, D)
			mat(&lt.expDown, n("experts.down_proj"), y.ExpertDown, E*D, Ie)
			vec(&lt.postFF1, y.PostFFNorm1)
			vec(&lt.postFF2, y.PostFFNorm2)
			vec(&lt.preFF2, y.PreFFNorm2)
		}
	}
	if err == nil && len(pk.reqs) > 0 {
		d.packed, err = pk.pack(ctx, progress)
		for i := 0; err == nil && i < len(pk.reqs); i++ {
			*pk.reqs[i].dst, err = w.Matrix(d.packed[i])
		}
	}
	if err != nil {
		w.Free()
		d.bound, d.packed = nil, nil
		return fmt.Errorf("gemma4: binding weights: %w", err)
	}
	return nil
}

// Cfg reports the decoder's configuration.
func (d *Decoder) Cfg() *Config { return d.cfg }

// Config reports the limits callers check.
func (d *Decoder) Config() model.Config {
	return model.Config{Vocab: d.cfg.Vocab, Hidden: d.cfg.Hidden, Layers: d.cfg.Layers, MaxPositions: d.maxPositions()}
}

// maxPositions is max_position_embeddings, or MaxPositions when the config
// gives none.
func (d *Decoder) maxPositions() int {
	if d.cfg.MaxPositions > 0 {
		return d.cfg.MaxPositions
	}
	return MaxPositions
}

// Chat reports Gemma 4's chat format under the template the checkpoint's
// shape implies (ChatFormat, TemplateOf), with no media tokens: the decoder
// takes text only until the towers' soft tokens reach it (AddMultimodal).
func (d *Decoder) Chat() model.Chat {
	c, err := ChatFormat(TemplateOf(d.cfg), model.Special{})
	if err != nil { // TemplateOf gives a known template
		panic(err)
	}
	return c
}

// ConfigText is the whole resolved configuration as text.
func (d *Decoder) ConfigText() string { return fmt.Sprintf("gemma4|%+v", *d.cfg) }

// Backend reports the backend the decoder runs on.
func (d *Decoder) Backend() *native.Backend { return d.be }

// Close releases the decoder's pool, Execs and bound weights; it must not
// be used afterwards.
func (d *Decoder) Close() error {
	d.CloseView()
	if d.bound != nil && !d.view {
		d.bound.Free()
	}
	d.bound = nil
	return nil
}

// InputsResident is true: every weight a token's pass reads (the
// per-layer table included) is bound to the backend.
func (d *Decoder) InputsResident() bool { return true }

// NewCache returns an empty sequence of the decoder's pool.
func (d *Decoder) NewCache() model.Cache { return d.pool.NewCache() }

// Need is the blocks of each kind sequences of the given positions take.
func (d *Decoder) Need(seqs ...int) [2]int { return d.pool.Need(seqs...) }

// AdmitFits reports whether an empty pool could promise need.
func (d *Decoder) AdmitFits(need [2]int) error { return d.pool.AdmitFits(need) }

// Admit promises need blocks to a new ticket.
func (d *Decoder) Admit(need [2]int) (model.Ticket, error) {
	t, err := d.pool.Admit(need)
	if err != nil {
		return nil, err
	}
	return t, nil
}

// KVFree reports the pool's free blocks not promised, per kind.
func (d *Decoder) KVFree() [2]int { return d.pool.FreeBlocks() }

// KVFits reports whether an empty pool could promise a sequence positions
// positions.
func (d *Decoder) KVFits(positions int) error { return d.pool.Fits(positions) }

// KVPool reports the pool reserved: positions of each kind, bytes in all.
func (d *Decoder) KVPool() (positions int, bytes int64) { return d.pool.Size() }

// KVLayout describes the pool's kinds: the layers of each attention type
// with keys of their own (the KV-shared layers read the last earlier
// layer's of their type), the window, and each kind's width (sliding:
// num_key_value_heads × head_dim; full: the global KV heads ×
// global_head_dim). Width is the widest kind's.
func (d *Decoder) KVLayout() model.KVLayout {
	s := d.kvSpecs()
	l := model.KVLayout{BytesPerPosition: d.pool.BytesPerPosition()}
	for k := range s {
		l.Kinds[k] = model.KVKind{Window: s[k].Window, Layers: s[k].Layers, Width: s[k].Width}
		l.Width = max(l.Width, s[k].Width)
	}
	return l
}

// WithKVPositions returns a view of d (the same weights) with a pool of
// its own of n positions per kind.
func (d *Decoder) WithKVPositions(n int) (model.Model, error) {
	if n <= 0 || n > kvpool.MaxPositions {
		return nil, fmt.Errorf("gemma4: a key/value pool of %d positions: want 1 to %d", n, kvpool.MaxPositions)
	}
	v := *d
	v.view, v.execs = true, &kit.Pool[*Exec]{}
	p, err := kvpool.New(v.be, v.cfg.Layers, v.kvSpecs(), n, v.maxRows)
	if err != nil {
		return nil, fmt.Errorf("gemma4: %w", err)
	}
	v.pool = p
	return &v, nil
}

// CloseView releases what the decoder holds of its own besides weights:
// its pool and idle Execs.
func (d *Decoder) CloseView() {
	d.execs.Close((*Exec).close)
	if d.pool != nil {
		d.pool.Close()
	}
}
