package gemma3n

import (
	"fmt"
	"math"
	"strings"

	"verdict/engine/weights"
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
	routerNorm, correctScale                    []float32
	router, predCoefs, corrCoefs                native.Matrix
	laurelL, laurelR                            native.Matrix
	laurelNorm                                  []float32
	pleGate, pleProj                            native.Matrix
	postPLENorm                                 []float32
}

// Load binds a decoder's weights from store. Float32 tensors of an mmapped
// checkpoint are used in place, bf16 matrices stay bf16; the per-layer
// embedding table is never loaded whole.
func Load(store weights.Store, cfg Config, sp Special) (*Model, error) {
	m := &Model{Cfg: cfg, Special: sp, store: store}
	switch {
	case has(store, "model.language_model.embed_tokens.weight"):
		m.prefix = "model.language_model."
	case has(store, "model.embed_tokens.weight"):
		m.prefix = "model."
	default:
		return nil, fmt.Errorf("gemma3n: no embed_tokens.weight under model.language_model. or model.")
	}
	l := &loader{m: m}
	D, P, L := cfg.HiddenSize, cfg.PerLayerSize, cfg.NumLayers
	qd, kd := cfg.NumHeads*cfg.HeadDim, cfg.NumKVHeads*cfg.HeadDim

	m.embed = l.matrix("embed_tokens.weight", cfg.VocabSize, D)
	m.embedScale = l.scalar("embed_tokens.embed_scale", float32(math.Sqrt(float64(D))))
	m.pleName = m.prefix + "embed_tokens_per_layer.weight"
	l.check(m.pleName, cfg.VocabSizePerLayer, L*P)
	m.pleScale = l.scalar("embed_tokens_per_layer.embed_scale", float32(math.Sqrt(float64(P))))
	m.pleProj = l.matrix("per_layer_model_projection.weight", L*P, D)
	m.pleNorm = l.vector("per_layer_projection_norm.weight", P)
	for i := 0; i < 3; i++ {
		m.altupProj[i] = l.matrix(fmt.Sprintf("altup_projections.%d.weight", i), D, D)
		m.altupUnemb[i] = l.matrix(fmt.Sprintf("altup_unembed_projections.%d.weight", i), D, D)
	}
	m.norm = l.vector("norm.weight", D)

	invFreqs := map[string][]float32{}
	for _, t := range cfg.LayerTypes {
		if invFreqs[t] == nil {
			invFreqs[t] = l.optionalVector("rotary_emb."+t+"_inv_freq", invFreq(cfg.RopeTheta[t], cfg.HeadDim))
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
		if len(cfg.ActivationSparsity) > 0 && cfg.ActivationSparsity[i] > 0 {
			y.sparsityZ = sparsityZ(cfg.ActivationSparsity[i])
		}
		y.q = l.matrix(n("self_attn.q_proj.weight"), qd, D)
		y.qNorm = l.vector(n("self_attn.q_norm.weight"), cfg.HeadDim)
		if y.kvSrc == i { // shared layers never use their own k/v weights
			y.k = l.matrix(n("self_attn.k_proj.weight"), kd, D)
			y.v = l.matrix(n("self_attn.v_proj.weight"), kd, D)
			y.kNorm = l.vector(n("self_attn.k_norm.weight"), cfg.HeadDim)
		}
		y.o = l.matrix(n("self_attn.o_proj.weight"), D, qd)
		y.inNorm = l.vector(n("input_layernorm.weight"), D)
		y.postAttnNorm = l.vector(n("post_attention_layernorm.weight"), D)
		y.preFFNorm = l.vector(n("pre_feedforward_layernorm.weight"), D)
		y.postFFNorm = l.vector(n("post_feedforward_layernorm.weight"), D)
		y.gate = l.matrix(n("mlp.gate_proj.weight"), I, D)
		y.up = l.matrix(n("mlp.up_proj.weight"), I, D)
		y.down = l.matrix(n("mlp.down_proj.weight"), D, I)
		y.routerNorm = l.vector(n("altup.router_norm.weight"), D)
		y.correctScale = l.vector(n("altup.correct_output_scale"), D)
		y.router = l.f32matrix(n("altup.modality_router.weight"), 4, D)
		y.predCoefs = l.f32matrix(n("altup.prediction_coefs.weight"), 16, 4)
		y.corrCoefs = l.f32matrix(n("altup.correction_coefs.weight"), 4, 4)
		if c := float32(cfg.AltUpCoefClip); c > 0 { // transformers clamps on every call
			for j, v := range y.corrCoefs.F32 {
				y.corrCoefs.F32[j] = min(max(v, -c), c)
			}
		}
		y.laurelL = l.matrix(n("laurel.linear_left.weight"), cfg.LaurelRank, D)
		y.laurelR = l.matrix(n("laurel.linear_right.weight"), D, cfg.LaurelRank)
		y.laurelNorm = l.vector(n("laurel.post_laurel_norm.weight"), D)
		y.pleGate = l.matrix(n("per_layer_input_gate.weight"), P, D)
		y.pleProj = l.matrix(n("per_layer_projection.weight"), D, P)
		y.postPLENorm = l.vector(n("post_per_layer_input_norm.weight"), D)
	}
	if l.err != nil {
		return nil, l.err
	}
	return m, nil
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

// loader binds tensors and keeps the first error.
type loader struct {
	m   *Model
	err error
}

func (l *loader) fail(err error) {
	if l.err == nil {
		l.err = err
	}
}

// check verifies that name exists with the given 2-D shape.
func (l *loader) check(name string, shape ...int) (dtype string, ok bool) {
	got, dt, ok := l.m.store.Info(name)
	if !ok {
		l.fail(fmt.Errorf("gemma3n: missing tensor %s", name))
		return "", false
	}
	if !sameShape(got, shape) {
		l.fail(fmt.Errorf("gemma3n: tensor %s has shape %v, want %v", name, got, shape))
		return "", false
	}
	return dt, true
}

func sameShape(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func (l *loader) full(name string) string {
	if strings.HasPrefix(name, "model.") {
		return name
	}
	return l.m.prefix + name
}

// matrix binds a Linear weight, keeping bf16 in place.
func (l *loader) matrix(name string, rows, cols int) native.Matrix {
	name = l.full(name)
	dt, ok := l.check(name, rows, cols)
	if !ok {
		return native.Matrix{Rows: rows, Cols: cols}
	}
	if dt == "BF16" {
		b, err := l.m.store.BF16(name)
		if err != nil {
			l.fail(err)
			return native.Matrix{Rows: rows, Cols: cols}
		}
		return native.NewBF16(rows, cols, b)
	}
	f, err := l.m.store.Float32(name)
	if err != nil {
		l.fail(err)
		return native.Matrix{Rows: rows, Cols: cols}
	}
	return native.NewF32(rows, cols, f)
}

// f32matrix binds a small matrix as a private float32 copy.
func (l *loader) f32matrix(name string, rows, cols int) native.Matrix {
	v := l.vector(name, rows, cols)
	if v == nil {
		return native.Matrix{Rows: rows, Cols: cols}
	}
	return native.NewF32(rows, cols, v)
}

// vector reads a small tensor as a private float32 copy.
func (l *loader) vector(name string, shape ...int) []float32 {
	name = l.full(name)
	if _, ok := l.check(name, shape...); !ok {
		return nil
	}
	f, err := l.m.store.Float32(name)
	if err != nil {
		l.fail(err)
		return nil
	}
	return append([]float32(nil), f...)
}

// optionalVector reads a buffer when the checkpoint has it, else returns def.
func (l *loader) optionalVector(name string, def []float32) []float32 {
	if _, _, ok := l.m.store.Info(l.full(name)); !ok {
		return def
	}
	return l.vector(name, len(def))
}

// scalar reads an optional scalar buffer, else returns def.
func (l *loader) scalar(name string, def float32) float32 {
	name = l.full(name)
	if _, _, ok := l.m.store.Info(name); !ok {
		return def
	}
	f, err := l.m.store.Float32(name)
	if err != nil || len(f) != 1 {
		return def
	}
	return f[0]
}
