package gemma3n

import (
	"context"
	"fmt"
	"math"

	"verdict/engine/kvpool"
	"verdict/engine/model"
	"verdict/engine/model/kit"
	"verdict/engine/weights"
	"verdict/engine/weights/load"
	"verdict/native"
)

// Model is a loaded Gemma 3n text decoder. It is read-only after Load and safe
// for concurrent forward passes, each with its own Cache.
type Model struct {
	Cfg     Config
	Special Special

	store  weights.Store
	prefix string // "model.language_model." or "model."

	embed      native.Matrix // [vocab, D], also the tied output head
	embedScale float32
	pleName    string // per-layer token embedding table, read by row
	pleScale   float32
	pleProj    native.Matrix // [L·P, D]
	pleNorm    []float32     // [P]
	altupProj  [3]native.Matrix
	altupUnemb [3]native.Matrix
	norm       []float32
	layers     []layer

	opt    LoadOptions
	packed *packed // the q4 arena (nil for f32 weights)

	be       *native.Backend
	bound    *native.Bound
	t        tensors
	onDevice bool          // the backend describes a device of its own (not the host's)
	ple      native.Tensor // the resident per-layer table (ple.go), or nil
	pleArena *native.Arena // its memory, unless bound
	pool     *kvpool.Pool
	maxRows  int
	execs    *kit.Pool[*Exec] // idle Execs
}

// Weights selects how Load keeps the decoder's large matrices
// (model.Weights).
type Weights = model.Weights

const (
	// WeightsF32 keeps the matrices as the checkpoint stores them (float32,
	// or bfloat16 widened on the fly), computing in float32: the exact path
	// the reference fixtures are checked with.
	WeightsF32 = model.WeightsF32
	// WeightsQ4 packs every large matrix (attention, MLP, AltUp and
	// per-layer projections, Laurel, the tied embedding and output head) to
	// 4 bits at load: groups of Group columns share a float32 scale and
	// offset. Activations and small parameters stay float32.
	WeightsQ4 = model.WeightsQ4
)

// DefaultGroup is the q4 group size (columns per scale and offset), chosen
// by measurement: see docs/architecture.md (Weights).
const DefaultGroup = 64

// LoadOptions are Load's settings.
type LoadOptions struct {
	Weights Weights // "" means WeightsF32
	Group   int     // q4 group size: a power of two >= 32 (0: DefaultGroup)
	// CacheDir, when set together with CacheKey, keeps packed weights in a
	// file there, memory-mapped on the next load; CacheKey identifies the
	// checkpoint (its files' paths, sizes and times, or its recipe) and
	// CacheName gives the file a readable prefix. Small models are never
	// cached.
	CacheDir, CacheKey, CacheName string
	// Log, when set, hears about cache files that were stale or corrupt.
	Log func(string)
	// Context, when set, stops a load: q4 packing checks it every few rows
	// and LoadWith then returns its error (a half-written cache file is
	// removed).
	Context context.Context
	// Progress, when set, hears the slow steps: stage names the step, done
	// of total its units (weights packed, or bytes of a cache file checked).
	Progress func(stage string, done, total int64)
	// Backend runs the model (nil: native.Default()).
	Backend *native.Backend
	// BatchRows is the most rows one forward pass takes (0:
	// DefaultBatchRows); scratch is reserved for it once per Exec.
	BatchRows int
	// KVPositions is the key/value pool's size in positions of each
	// attention kind (0: DefaultKVPositions).
	KVPositions int
	// PLE says where the per-layer embedding table lives ("": PLEAuto;
	// VERDICT_PLE overrides it).
	PLE PLEPlace
}

// DefaultKVPositions is the default key/value pool size, in positions.
const DefaultKVPositions = 1 << 17

// Stages LoadOptions.Progress names.
const (
	StagePacking  = "packing weights to 4 bits"
	StageChecking = "checking the packed-weights cache"
)

// ctx returns the load's context (never nil).
func (o LoadOptions) ctx() context.Context {
	if o.Context == nil {
		return context.Background()
	}
	return o.Context
}

// Weights reports how the model keeps its large matrices.
func (m *Model) Weights() Weights { return m.opt.Weights }

// Group reports the q4 group size (0 for f32 weights).
func (m *Model) Group() int {
	if m.opt.Weights != WeightsQ4 {
		return 0
	}
	return m.opt.Group
}

// PackedCache reports the packed-weights cache file ("" when none) and
// whether this load read it from disk rather than building it.
func (m *Model) PackedCache() (path string, fromDisk bool) {
	if m.packed == nil {
		return "", false
	}
	return m.packed.Path, m.packed.FromDisk
}

// Close releases the packed weights' memory. The model must not be used
// afterwards.
func (m *Model) Close() error {
	m.CloseView()
	m.freePLE()
	if m.bound != nil {
		m.bound.Free()
		m.bound = nil
	}
	p := m.packed
	m.packed = nil
	return p.close()
}

type layer struct {
	sliding   bool
	invFreq   []float32
	kvSrc     int
	sparsityZ float32 // 0: no activation sparsity
	inter     int

	q, k, v, o                                  native.Matrix
	qNorm, kNorm                                []float32
	inNorm, postAttnNorm, preFFNorm, postFFNorm []float32
	gate, up, down                              native.Matrix
	// downT is down_proj transposed ([inter, D], q4) in q4 layers with
	// activation sparsity, whose MLP then reads only the surviving rows of
	// up and downT (down stays empty).
	downT                        native.Matrix
	keep                         float64 // the expected share of surviving MLP activations
	routerNorm, correctScale     []float32
	router, predCoefs, corrCoefs native.Matrix
	laurelL, laurelR             native.Matrix
	laurelNorm                   []float32
	pleGate, pleProj             native.Matrix
	postPLENorm                  []float32
}

// Load binds a decoder's weights from store as they are stored (float32
// weights): LoadWith with WeightsF32.
func Load(store weights.Store, cfg Config, sp Special) (*Model, error) {
	return LoadWith(store, cfg, sp, LoadOptions{Weights: WeightsF32})
}

// LoadWith binds a decoder's weights from store. With WeightsF32, float32
// tensors of an mmapped checkpoint are used in place and bf16 matrices stay
// bf16; with WeightsQ4 the large matrices are packed (read a few rows at a
// time, never whole in float32) or mapped from the cache. The per-layer
// embedding table is never loaded whole: it is read by row.
func LoadWith(store weights.Store, cfg Config, sp Special, opt LoadOptions) (*Model, error) {
	if opt.Weights == "" {
		opt.Weights = WeightsF32
	}
	if _, err := model.ParseWeights(string(opt.Weights)); err != nil {
		return nil, fmt.Errorf("gemma3n: %w", err)
	}
	if opt.Group == 0 {
		opt.Group = DefaultGroup
	}
	if opt.Weights == WeightsQ4 && (opt.Group < 32 || opt.Group&(opt.Group-1) != 0 || opt.Group > 512) {
		return nil, fmt.Errorf("gemma3n: q4 group size %d: want a power of two from 32 to 512", opt.Group)
	}
	m := &Model{Cfg: cfg, Special: sp, store: store, opt: opt}
	switch {
	case has(store, "model.language_model.embed_tokens.weight"):
		m.prefix = "model.language_model."
	case has(store, "model.embed_tokens.weight"):
		m.prefix = "model."
	default:
		return nil, fmt.Errorf("gemma3n: no embed_tokens.weight under model.language_model. or model.")
	}
	if err := checkCheckpoint(store, m.prefix, cfg); err != nil {
		return nil, err
	}
	pk := &packer{store: store, opt: opt}
	l := load.New(store, load.Options{Who: "gemma3n", Prefix: m.prefix, Packer: pk})
	D, P, L := cfg.HiddenSize, cfg.PerLayerSize, cfg.NumLayers
	qd, kd := cfg.NumHeads*cfg.HeadDim, cfg.NumKVHeads*cfg.HeadDim

	l.Matrix(&m.embed, "embed_tokens.weight", cfg.VocabSize, D)
	m.embedScale = l.Scalar("embed_tokens.embed_scale", float32(math.Sqrt(float64(D))))
	m.pleName = l.Name("embed_tokens_per_layer.weight")
	l.Check("embed_tokens_per_layer.weight", cfg.VocabSizePerLayer, L*P)
	m.pleScale = l.Scalar("embed_tokens_per_layer.embed_scale", float32(math.Sqrt(float64(P))))
	l.Matrix(&m.pleProj, "per_layer_model_projection.weight", L*P, D)
	m.pleNorm = l.Vector("per_layer_projection_norm.weight", P)
	for i := 0; i < 3; i++ {
		l.Matrix(&m.altupProj[i], fmt.Sprintf("altup_projections.%d.weight", i), D, D)
		l.Matrix(&m.altupUnemb[i], fmt.Sprintf("altup_unembed_projections.%d.weight", i), D, D)
	}
	m.norm = l.Vector("norm.weight", D)

	invFreqs := map[string][]float32{}
	for _, t := range cfg.LayerTypes {
		if invFreqs[t] == nil {
			invFreqs[t] = l.OptionalVector("rotary_emb."+t+"_inv_freq", invFreq(cfg.RopeTheta[t], cfg.HeadDim))
		}
	}
	m.layers = make([]layer, L)
	for i := range m.layers {
		y := &m.layers[i]
		n := func(s string) string { return fmt.Sprintf("layers.%d.%s", i, s) }
		I := cfg.IntermediateSize[i]
		y.inter = I
		y.sliding = cfg.LayerTypes[i] == "sliding_attention"
		y.invFreq = invFreqs[cfg.LayerTypes[i]]
		y.kvSrc = cfg.KVSource(i)
		y.keep = 1
		if len(cfg.ActivationSparsity) > 0 && cfg.ActivationSparsity[i] > 0 {
			y.sparsityZ = sparsityZ(cfg.ActivationSparsity[i])
			y.keep = 1 - cfg.ActivationSparsity[i]
		}
		l.Matrix(&y.q, n("self_attn.q_proj.weight"), qd, D)
		y.qNorm = l.Vector(n("self_attn.q_norm.weight"), cfg.HeadDim)
		if y.kvSrc == i { // shared layers never use their own k/v weights
			l.Matrix(&y.k, n("self_attn.k_proj.weight"), kd, D)
			l.Matrix(&y.v, n("self_attn.v_proj.weight"), kd, D)
			y.kNorm = l.Vector(n("self_attn.k_norm.weight"), cfg.HeadDim)
		}
		l.Matrix(&y.o, n("self_attn.o_proj.weight"), D, qd)
		y.inNorm = l.Vector(n("input_layernorm.weight"), D)
		y.postAttnNorm = l.Vector(n("post_attention_layernorm.weight"), D)
		y.preFFNorm = l.Vector(n("pre_feedforward_layernorm.weight"), D)
		y.postFFNorm = l.Vector(n("post_feedforward_layernorm.weight"), D)
		l.Matrix(&y.gate, n("mlp.gate_proj.weight"), I, D)
		l.Matrix(&y.up, n("mlp.up_proj.weight"), I, D)
		if y.sparsityZ != 0 && pk.Packs(I, D) && pk.Packs(D, I) {
			l.MatrixT(&y.downT, n("mlp.down_proj.weight"), D, I)
		} else {
			l.Matrix(&y.down, n("mlp.down_proj.weight"), D, I)
		}
		y.routerNorm = l.Vector(n("altup.router_norm.weight"), D)
		y.correctScale = l.Vector(n("altup.correct_output_scale"), D)
		y.router = l.MatrixF32(n("altup.modality_router.weight"), 4, D)
		y.predCoefs = l.MatrixF32(n("altup.prediction_coefs.weight"), 16, 4)
		y.corrCoefs = l.MatrixF32(n("altup.correction_coefs.weight"), 4, 4)
		if c := float32(cfg.AltUpCoefClip); c > 0 { // transformers clamps on every call
			for j, v := range y.corrCoefs.F32 {
				y.corrCoefs.F32[j] = min(max(v, -c), c)
			}
		}
		l.Matrix(&y.laurelL, n("laurel.linear_left.weight"), cfg.LaurelRank, D)
		l.Matrix(&y.laurelR, n("laurel.linear_right.weight"), D, cfg.LaurelRank)
		y.laurelNorm = l.Vector(n("laurel.post_laurel_norm.weight"), D)
		l.Matrix(&y.pleGate, n("per_layer_input_gate.weight"), P, D)
		l.Matrix(&y.pleProj, n("per_layer_projection.weight"), D, P)
		y.postPLENorm = l.Vector(n("post_per_layer_input_norm.weight"), D)
	}
	if err := l.Err(); err != nil {
		return nil, err
	}
	if len(pk.reqs) > 0 {
		p, err := pk.pack(pk.reqs)
		if err != nil {
			return nil, err
		}
		m.packed = p
	}
	if err := m.start(opt); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

// start binds the weights to the backend and reserves the key/value pool.
func (m *Model) start(opt LoadOptions) error {
	be := opt.Backend
	if be == nil {
		be = native.Default()
	}
	m.maxRows = opt.BatchRows
	if m.maxRows <= 0 {
		m.maxRows = DefaultBatchRows
	}
	if m.maxRows > 1<<16 {
		return fmt.Errorf("gemma3n: %d batch rows: at most %d", m.maxRows, 1<<16)
	}
	if err := m.bind(be); err != nil {
		return err
	}
	_, m.onDevice = be.Info()
	place, err := plePlace(opt)
	if err != nil {
		return err
	}
	if err := m.bindPLE(be, place); err != nil {
		return err
	}
	m.execs = &kit.Pool[*Exec]{}
	kv := opt.KVPositions
	if kv <= 0 {
		kv = DefaultKVPositions
		if mp := m.Cfg.MaxPositionEmbeddings; mp > 0 {
			kv = max(kv, 4*mp)
		}
	}
	if kv > kvpool.MaxPositions {
		return fmt.Errorf("gemma3n: a key/value pool of %d positions: at most %d", kv, kvpool.MaxPositions)
	}
	if opt.KVPositions <= 0 {
		// A device's memory is committed when allocated (the host's only
		// when written): the default pool shrinks to fit what it has free.
		var free int64
		if d, ok := be.Info(); ok {
			free = d.MemFree
		}
		var err error
		if kv, err = kvFit(kv, free, m.kvBytesPerPosition()); err != nil {
			return err
		}
	}
	p, err := newPool(m, be, kv)
	if err != nil {
		return fmt.Errorf("gemma3n: key/value pool: %w", err)
	}
	m.pool = p
	return nil
}

func has(s weights.Store, name string) bool { _, _, ok := s.Info(name); return ok }

func invFreq(theta float64, headDim int) []float32 {
	f := make([]float32, headDim/2)
	for i := range f {
		// transformers: 1 / theta ** (arange(0, dim, 2, int64).float() / dim), in float32
		e := float32(2*i) / float32(headDim)
		f[i] = float32(1 / math.Pow(theta, float64(e)))
	}
	return f
}

// packer collects the large matrices of a q4 load; they are packed
// together (or mapped from the cache) once every tensor has been checked.
type packer struct {
	store weights.Store
	opt   LoadOptions
	reqs  []packReq
}

// q4MinElems: smaller matrices stay float32 (they cost nothing to read).
const q4MinElems = 4096

// Packs reports whether a rows×cols matrix is packed to q4: with WeightsQ4,
// when it is large and its columns fit the groups.
func (pk *packer) Packs(rows, cols int) bool {
	return pk.opt.Weights == WeightsQ4 && rows*cols >= q4MinElems && native.Q4Fits(cols, pk.opt.Group)
}

// Pack records a matrix to pack.
func (pk *packer) Pack(dst *native.Matrix, name string, rows, cols int, transpose bool) {
	pk.reqs = append(pk.reqs, packReq{dst: dst, name: name, rows: rows, cols: cols, transpose: transpose})
}

// Backend reports the backend the model runs on.
func (m *Model) Backend() *native.Backend { return m.be }

// minKVPositions is the smallest key/value pool a device's memory may
// shrink the default one to.
const minKVPositions = 8192

// kvFit returns the default pool of def positions, or, on a device with
// free bytes of memory (0: host memory, committed as written), as many
// positions as 60% of them hold at perPos bytes a position, in whole
// blocks; an error when that is fewer than minKVPositions.
func kvFit(def int, free, perPos int64) (int, error) {
	if free <= 0 || perPos <= 0 {
		return def, nil
	}
	n := free / 10 * 6 / perPos / KVBlock * KVBlock
	if n >= int64(def) {
		return def, nil
	}
	if n < minKVPositions {
		return 0, fmt.Errorf("gemma3n: the device has %.2f GiB free after the weights: keys and values for %d positions, fewer than the %d a model needs; run it on the CPU",
			float64(free)/(1<<30), n, minKVPositions)
	}
	return int(n), nil
}

// kvBytesPerPosition is the key/value pool's bytes per position (every
// layer with keys of its own, keys and values, float32).
func (m *Model) kvBytesPerPosition() int64 {
	var n int64
	for i := range m.layers {
		if m.layers[i].kvSrc == i {
			n += 2 * int64(m.Cfg.NumKVHeads*m.Cfg.HeadDim) * 4
		}
	}
	return n
}
