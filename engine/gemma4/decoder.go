package gemma4

import (
	"context"
	"fmt"
	"math"
	"slices"

	"verdict/engine/kvpool"
	"verdict/engine/model"
	"verdict/engine/model/kit"
	"verdict/engine/packcache"
	"verdict/engine/weights"
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
	// Weights: model.WeightsF32 (the float32 weights bound as they are:
	// the exact path; "" means it) or model.WeightsQ4 (the large matrices
	// packed to 4 bits: pack.go).
	Weights model.Weights
	// Group is the q4 group size, a power of two from 32 to 512 (0:
	// DefaultGroup).
	Group int
	// Context, when set, stops packing between matrices; NewDecoder then
	// returns its error.
	Context context.Context
	// Progress, when set, hears the weights packed: done of total (from a
	// cache file, the weights bound from it).
	Progress func(done, total int64)
	// CacheDir, when set together with CacheKey, keeps the q4-packed
	// weights in a file there, memory-mapped by the next Open of the same
	// checkpoint and group instead of packing again (pack.go,
	// engine/packcache). CacheKey identifies the checkpoint (a changed key
	// packs again); CacheName gives the file a readable prefix. Models
	// whose packed weights are small are never cached.
	CacheDir, CacheKey, CacheName string
	// Log, when set, hears why a cache file was refused or not written.
	Log func(string)
	// Reference keeps NewDecoder's Model as the Decoder's Ref (the checks
	// that hold the reference against the Decoder). Without it the Decoder
	// holds none of the Model's float32 weights but those it binds in
	// place and the per-layer table it reads rows of: a q4 Decoder's
	// matrices are then only their packed copies once the caller drops m.
	Reference bool
	// PLE says where the per-layer embedding table is kept for device
	// loops ("": PLEAuto; ple.go). A pass reads its rows where the table
	// was read from either way.
	PLE PLEPlace
}

// Decoder is a Gemma 4 text decoder on a backend, implementing the engine's
// model interface (engine/model). It is read-only after it is built and
// safe for concurrent passes, each on an Exec of its own.
//
// Its weights are bound to the backend and held nowhere else: a matrix
// packed to q4 keeps only its packed copy, and a float32 one is bound in
// place (the built-in backend reads the Go slice) or uploaded. The
// per-layer embedding table is not copied: a pass reads its batch's rows
// from where the table is (the store, or the reference's slice: ple.go).
type Decoder struct {
	// Ref is the plain-Go decoder over the same weights when NewDecoder
	// was asked to keep it (Options.Reference); else nil.
	Ref *Model

	cfg     *Config
	be      *native.Backend
	bound   *native.Bound
	t       tensors
	lay     []layerMeta
	ple     pleTable // the per-layer rows (ple.go)
	costs   costs    // what the weights take (cost.go)
	pool    *kvpool.Pool
	execs   *kit.Pool[*Exec] // idle Execs
	maxRows int
	view    bool         // made by WithKVPositions: the weights are another's
	media   *MediaTokens // SetMediaTokens (multimodal.go); nil: text only
	weights model.Weights
	group   int              // q4 group size (0: float32 weights)
	packed  []native.Matrix  // the q4 matrices bound (kept alive here)
	arena   *packcache.Arena // their memory (nil: float32 weights)

	embScale, pleScale, projScale, inScale, rootD float32
}

// layerMeta is what a pass needs of a layer besides its bound tensors.
type layerMeta struct {
	headDim, kvH, intermediate int
	scalar                     float32
	expertScale                []float32 // router.per_expert_scale [E] (MoE only; the host's routing reads it)
}

// tensors are the decoder's weights bound to its backend.
type tensors struct {
	embed, plProj, plNorm, norm native.Tensor
	invFreq                     [2]native.Tensor // by LayerType
	layers                      []layerTensors
}

type layerTensors struct {
	inNorm, postAttnNorm, q, qNorm, k, v, kNorm, o native.Tensor
	preFF, postFF, gate, up, down                  native.Tensor
	pleGate, pleProj, pleNorm                      native.Tensor
	routerProj, routerScale, gateUp, expDown       native.Tensor
	postFF1, postFF2, preFF2                       native.Tensor
}

// NewDecoder binds the reference decoder m's weights to a backend and
// reserves its key/value pool. The Decoder keeps of m only what it binds
// in place (float32 weights on the built-in backend) and the per-layer
// table it reads rows of, unless opt.Reference keeps m whole as Ref. m's
// weights must not change afterwards. A loader builds from the store with
// Open instead, which never holds the float32 weights all at once.
func NewDecoder(m *Model, opt Options) (*Decoder, error) {
	d, err := newDecoder(m.Cfg, opt)
	if err != nil {
		return nil, err
	}
	if opt.Reference {
		d.Ref = m
	}
	d.ple = pleFromModel(m)
	walk := func(b *binder) error {
		b.top(m)
		for l := range m.Layers {
			b.layer(l, &m.Layers[l])
		}
		return b.err
	}
	if err := d.finish(opt, walk); err != nil {
		return nil, err
	}
	return d, nil
}

// Open builds a Decoder from st's tensors (under model. or
// model.language_model., as Load reads them) without a reference Model:
// each layer's weights are read, checked, packed (q4) or bound (f32), and
// only the bound copies are kept, so loading needs about one layer's
// float32 weights beyond what the Decoder holds. The per-layer embedding
// table stays in st, which a pass reads its rows from (ple.go): st must
// stay open until the Decoder is closed. Float32 weights the store
// returns without a copy (an aligned float32 checkpoint) are bound in
// place on the built-in backend, so they stay the store's memory too.
func Open(cfg *Config, st weights.Store, opt Options) (*Decoder, error) {
	if cfg == nil || st == nil {
		return nil, fmt.Errorf("gemma4: Open needs a config and a store")
	}
	ld, err := newLoader(cfg, st, false)
	if err != nil {
		return nil, err
	}
	d, err := newDecoder(cfg, opt)
	if err != nil {
		return nil, err
	}
	// The first walk (the binder counting) only checks names and shapes:
	// a checkpoint that does not fit is refused before anything is read.
	walk := func(b *binder) error {
		ld.dry, ld.skip = b.count, b.pk.skip
		top := Model{Cfg: cfg}
		ld.top(&top, false)
		if ld.err != nil {
			return ld.err
		}
		b.top(&top)
		for l := range cfg.Layers {
			var y Layer
			ld.layer(l, &y)
			if ld.err != nil {
				return ld.err
			}
			b.layer(l, &y)
			if b.err != nil {
				return b.err
			}
		}
		return b.err
	}
	if cfg.PerLayerInput > 0 {
		if d.ple, err = pleFromStore(cfg, st, ld.prefix+pleTensor); err != nil {
			return nil, err
		}
	}
	if err := d.finish(opt, walk); err != nil {
		return nil, err
	}
	return d, nil
}

// newDecoder checks opt and sets what the Decoder derives from cfg.
func newDecoder(c *Config, opt Options) (*Decoder, error) {
	d := &Decoder{cfg: c, be: opt.Backend, maxRows: opt.BatchRows, execs: &kit.Pool[*Exec]{}}
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
	if _, err := plePlaceOf(opt.PLE); err != nil {
		return nil, err
	}
	d.embScale = float32(sqrt64(float64(c.Hidden)))
	d.pleScale = float32(sqrt64(float64(c.PerLayerInput)))
	d.projScale = float32(math.Pow(float64(c.Hidden), -0.5))
	d.inScale = float32(math.Pow(2, -0.5))
	d.rootD = d.projScale
	var err error
	if d.weights, d.group, err = weightsOf(opt); err != nil {
		return nil, err
	}
	return d, nil
}

// finish binds the weights walk visits (twice: counting, then binding),
// places the per-layer table (ple.go) and reserves the key/value pool.
func (d *Decoder) finish(opt Options, walk func(b *binder) error) error {
	if err := d.bind(opt, walk); err != nil {
		return err
	}
	place, _ := plePlaceOf(opt.PLE)
	if err := d.placePLE(place); err != nil {
		d.freeWeights()
		return err
	}
	kv := opt.KVPositions
	if kv == 0 {
		kv = max(DefaultKVPositions, 4*d.cfg.MaxPositions)
	}
	p, err := kvpool.New(d.be, d.cfg.Layers, d.kvSpecs(), kv, d.maxRows)
	if err != nil {
		d.freePLE()
		d.freeWeights()
		return fmt.Errorf("gemma4: %w", err)
	}
	d.pool = p
	return nil
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

// bind binds every weight walk visits to the backend (the built-in
// backend uses the float32 slices in place). walk runs twice: first the
// binder counts the weights to pack (packing's progress reports done of
// that total), then it packs the large matrices to q4 (with q4 weights)
// and binds each as it comes, so that a walk over a store holds one
// layer's float32 weights at a time. Between the walks the packed
// matrices' arena is opened (pack.go): from a cache file the second walk
// binds them without reading or packing. opt's Context and Progress are
// the packing's, its Cache fields the arena's.
func (d *Decoder) bind(opt Options, walk func(b *binder) error) error {
	d.t.layers = make([]layerTensors, d.cfg.Layers)
	d.lay = make([]layerMeta, d.cfg.Layers)
	b := &binder{d: d, count: true, pk: packer{group: d.group, ctx: opt.Context, progress: opt.Progress}}
	if err := walk(b); err != nil {
		return err
	}
	if len(b.pk.ms) > 0 {
		a, err := b.pk.arena(opt)
		if err != nil {
			return fmt.Errorf("gemma4: %w", err)
		}
		d.arena = a
	}
	b.count, b.w = false, d.be.NewBound()
	d.bound = b.w
	rope := Model{Cfg: d.cfg}
	rope.setDerived()
	for k := range rope.rope {
		b.vec(&d.t.invFreq[k], rope.rope[k].invFreq)
	}
	err := walk(b)
	if err == nil && b.pk.done != b.pk.total {
		err = fmt.Errorf("packed %d weights of the %d counted", b.pk.done, b.pk.total)
	}
	if err != nil {
		d.freeWeights()
		return fmt.Errorf("gemma4: binding weights: %w", err)
	}
	if err := d.arena.Commit(); err != nil && opt.Log != nil {
		opt.Log(fmt.Sprintf("packed weights: no cache (%v)", err))
	}
	return nil
}

// freeWeights frees the bound weights and then the packed arena (an
// uncommitted cache file is removed).
func (d *Decoder) freeWeights() {
	if d.bound != nil {
		d.bound.Free()
	}
	d.arena.Close()
	d.bound, d.packed, d.arena = nil, nil, nil
}

// binder binds the weights it is shown, packing the large matrices with
// q4 weights, and counts what they take (cost.go). In counting mode it
// only adds up the weights to pack.
type binder struct {
	d     *Decoder
	w     *native.Bound
	pk    packer
	count bool
	err   error
}

// f32 binds a float32 matrix (nil: absent).
func (b *binder) f32(dst *native.Tensor, role costRole, x []float32, rows, cols int) {
	if b.count || b.err != nil || x == nil {
		return
	}
	if len(x) != rows*cols {
		b.err = fmt.Errorf("a %dx%d matrix of %d weights", rows, cols, len(x))
		return
	}
	m := native.NewF32(rows, cols, x)
	*dst, b.err = b.w.Matrix(m)
	b.d.costs.add(role, m.Bytes(), int64(rows)*int64(cols))
}

// mat binds a matrix, packed to q4 when the packer takes it (nil: absent).
func (b *binder) mat(dst *native.Tensor, role costRole, name string, x []float32, rows, cols int) {
	if b.err != nil || x == nil {
		return
	}
	if !b.pk.packs(rows, cols) {
		b.f32(dst, role, x, rows, cols)
		return
	}
	if b.count {
		b.pk.total += int64(rows) * int64(cols)
		b.pk.ms = append(b.pk.ms, packcache.Matrix{Name: name, Rows: rows, Cols: cols})
		return
	}
	var m native.Matrix
	if m, b.err = b.pk.pack(name, x, rows, cols); b.err != nil {
		return
	}
	b.d.packed = append(b.d.packed, m)
	*dst, b.err = b.w.Matrix(m)
	b.d.costs.add(role, m.Bytes(), int64(rows)*int64(cols))
}

// vec binds a vector (nil: absent).
func (b *binder) vec(dst *native.Tensor, x []float32) {
	if b.count || b.err != nil || x == nil {
		return
	}
	*dst, b.err = b.w.Vector(x)
	b.d.costs.add(roleRest, int64(len(x))*4, int64(len(x)))
}

// top binds the weights outside the layers: the embedding (the head too),
// the final norm and the per-layer projection and norm.
func (b *binder) top(m *Model) {
	c, t := b.d.cfg, &b.d.t
	D, L, P := c.Hidden, c.Layers, c.PerLayerInput
	b.mat(&t.embed, roleEmbed, "embed_tokens.weight", m.Embed, c.Vocab, D)
	b.mat(&t.plProj, roleRest, "per_layer_model_projection.weight", m.PLProj, L*P, D)
	b.vec(&t.plNorm, m.PLNorm)
	b.vec(&t.norm, m.Norm)
}

// layer binds layer l's weights and keeps what a pass reads of it on the
// host (layerMeta).
func (b *binder) layer(l int, y *Layer) {
	c := b.d.cfg
	D, P := c.Hidden, c.PerLayerInput
	if !b.count && b.err == nil {
		meta := layerMeta{headDim: y.headDim, kvH: y.kvH, intermediate: y.intermediate, scalar: y.Scalar}
		if y.PerExpertScale != nil {
			meta.expertScale = slices.Clone(y.PerExpertScale)
		}
		b.d.lay[l] = meta
		b.d.costs.add(roleRest, 4*int64(1+len(y.PerExpertScale)), int64(1+len(y.PerExpertScale))) // layer_scalar, per_expert_scale: host values
	}
	lt := &b.d.t.layers[l]
	n := func(s string) string { return fmt.Sprintf("layers.%d.%s", l, s) } // the loader's names (model.go)
	hd, kvd, I := c.Heads*y.headDim, y.kvH*y.headDim, y.intermediate
	b.vec(&lt.inNorm, y.InputNorm)
	b.vec(&lt.postAttnNorm, y.PostAttnNorm)
	b.mat(&lt.q, roleRest, n("self_attn.q_proj.weight"), y.Q, hd, D)
	b.vec(&lt.qNorm, y.QNorm)
	b.mat(&lt.k, roleRest, n("self_attn.k_proj.weight"), y.K, kvd, D)
	b.mat(&lt.v, roleRest, n("self_attn.v_proj.weight"), y.V, kvd, D)
	b.vec(&lt.kNorm, y.KNorm)
	b.mat(&lt.o, roleRest, n("self_attn.o_proj.weight"), y.O, D, hd)
	b.vec(&lt.preFF, y.PreFFNorm)
	b.vec(&lt.postFF, y.PostFFNorm)
	b.mat(&lt.gate, roleRest, n("mlp.gate_proj.weight"), y.Gate, I, D)
	b.mat(&lt.up, roleRest, n("mlp.up_proj.weight"), y.Up, I, D)
	b.mat(&lt.down, roleRest, n("mlp.down_proj.weight"), y.Down, D, I)
	b.mat(&lt.pleGate, roleRest, n("per_layer_input_gate.weight"), y.PLEGate, P, D)
	b.mat(&lt.pleProj, roleRest, n("per_layer_projection.weight"), y.PLEProj, D, P)
	b.vec(&lt.pleNorm, y.PLENorm)
	if c.MoE {
		E, Ie := c.Experts, c.MoEIntermediate
		b.f32(&lt.routerProj, roleRest, y.RouterProj, E, D) // chooses the experts
		b.vec(&lt.routerScale, y.RouterScale)
		b.mat(&lt.gateUp, roleExperts, n("experts.gate_up_proj"), y.ExpertGateUp, E*2*Ie, D)
		b.mat(&lt.expDown, roleExperts, n("experts.down_proj"), y.ExpertDown, E*D, Ie)
		b.vec(&lt.postFF1, y.PostFFNorm1)
		b.vec(&lt.postFF2, y.PostFFNorm2)
		b.vec(&lt.preFF2, y.PreFFNorm2)
	}
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
// shape implies (ChatFormat, TemplateOf). Its media tokens are those given
// to SetMediaTokens (MediaTokens.Special: no fixed soft-token counts, an
// image's and a clip's vary), none before: the decoder then takes text
// only.
func (d *Decoder) Chat() model.Chat {
	var sp model.Special
	if d.media != nil {
		sp = d.media.Special()
	}
	c, err := ChatFormat(TemplateOf(d.cfg), sp)
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
	if !d.view {
		d.freeWeights()
	}
	d.bound = nil
	if !d.view {
		d.freePLE()
	}
	return nil
}

// InputsResident reports whether every weight a token's pass reads is on
// the backend: true unless the model has a per-layer table that stays
// where it was read from (ple.go), whose rows a pass uploads.
func (d *Decoder) InputsResident() bool { return d.cfg.PerLayerInput == 0 || d.PLEResident() }

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
