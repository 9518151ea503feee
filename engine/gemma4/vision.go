package gemma4

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"

	"verdict/engine/weights"
)

// The vision encoder (transformers 5.17's Gemma4VisionModel and the
// embed_vision Gemma4MultimodalEmbedder), float32 on the CPU, as
// build/fixtures/GEMMA4.md ("Vision and audio") states it: patches of
// 2(x − 0.5) through input_proj plus a learned per-axis position table,
// pre-norm encoder layers (q/k/v norms, axial 2-D RoPE, scaling 1,
// bidirectional attention over the real patches, a gated GELU-tanh MLP,
// clipped linears), average pooling over k×k patch blocks times √hidden,
// standardize, then a weightless RMSNorm and a projection into the text
// decoder's embedding space.

// Bounds on tower configs: far above any released size, low enough that a
// corrupt config.json cannot ask for absurd allocations.
const (
	maxTowerHidden = 1 << 14
	maxTowerLayers = 1 << 10
	maxTowerTable  = 1 << 20
	maxPatchSize   = 1 << 8
)

// VisionConfig is a Gemma4VisionConfig (with the text width embed_vision
// projects to).
type VisionConfig struct {
	Hidden, Intermediate, Layers int
	Heads, KVHeads, HeadDim      int
	PatchSize, PoolingKernel     int
	PositionEmbeddingSize        int
	RopeTheta                    float64
	Eps                          float64
	ClippedLinears, Standardize  bool
	// TextHidden is text_config.hidden_size, the width of the soft tokens.
	TextHidden int
}

type rawVisionConfig struct {
	ModelType      string         `json:"model_type"`
	Hidden         *int           `json:"hidden_size"`
	Intermediate   *int           `json:"intermediate_size"`
	Layers         *int           `json:"num_hidden_layers"`
	Heads          *int           `json:"num_attention_heads"`
	KVHeads        *int           `json:"num_key_value_heads"`
	HeadDim        *int           `json:"head_dim"`
	Activation     *string        `json:"hidden_activation"`
	Eps            *float64       `json:"rms_norm_eps"`
	RopeParameters map[string]any `json:"rope_parameters"`
	Pooling        *int           `json:"pooling_kernel_size"`
	PatchSize      *int           `json:"patch_size"`
	PosSize        *int           `json:"position_embedding_size"`
	Clipped        *bool          `json:"use_clipped_linears"`
	Standardize    *bool          `json:"standardize"`
	AttentionBias  *bool          `json:"attention_bias"`
}

// towerFields reads a tower config's fields, each its value or default
// checked against its range; the first field out of range is the error,
// named under section, and later fields read as 0.
type towerFields struct {
	section string
	err     error
}

// int is an integer field: *p, or def when absent, within lo..hi.
func (t *towerFields) int(name string, p *int, def, lo, hi int) int {
	if t.err != nil {
		return 0
	}
	v := def
	if p != nil {
		v = *p
	}
	if v < lo || v > hi {
		t.err = fmt.Errorf("gemma4: %s.%s = %d, want %d..%d", t.section, name, v, lo, hi)
	}
	return v
}

// float is a real field: *p, or def when absent, not NaN and ok.
func (t *towerFields) float(name string, p *float64, def float64, ok func(float64) bool) float64 {
	if t.err != nil {
		return 0
	}
	v := def
	if p != nil {
		v = *p
	}
	if math.IsNaN(v) || !ok(v) {
		t.err = fmt.Errorf("gemma4: %s.%s = %g is out of range", t.section, name, v)
	}
	return v
}

// towerConfigs splits a gemma4 config.json into the named tower's config and
// the text width; a bare tower config (model_type want) has no text width.
func towerConfigs(data []byte, key, want string) (tower json.RawMessage, textHidden int, err error) {
	if len(data) > maxJSONConfig {
		return nil, 0, fmt.Errorf("config.json is %d bytes (at most %d)", len(data), maxJSONConfig)
	}
	var top struct {
		ModelType string          `json:"model_type"`
		Tower     json.RawMessage `json:"-"`
		Text      *struct {
			Hidden *int `json:"hidden_size"`
		} `json:"text_config"`
	}
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, 0, fmt.Errorf("config.json: %w", err)
	}
	switch top.ModelType {
	case want:
		return data, 0, nil
	case "gemma4":
	default:
		return nil, 0, fmt.Errorf("config.json: model_type %q, want gemma4 or %s", top.ModelType, want)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, 0, fmt.Errorf("config.json: %w", err)
	}
	tower = m[key]
	if len(tower) == 0 || string(tower) == "null" {
		return nil, 0, fmt.Errorf("config.json: model_type gemma4 without %s", key)
	}
	if top.Text == nil || top.Text.Hidden == nil {
		return nil, 0, errors.New("config.json: text_config.hidden_size is missing (the soft tokens' width)")
	}
	if *top.Text.Hidden < 1 || *top.Text.Hidden > maxTowerHidden*4 {
		return nil, 0, fmt.Errorf("config.json: text_config.hidden_size %d out of range", *top.Text.Hidden)
	}
	return tower, *top.Text.Hidden, nil
}

// ParseVisionConfig reads the vision_config of a gemma4 config.json (or a
// bare gemma4_vision config, whose TextHidden is then taken from the
// weights by LoadVision). Every field the encoder uses is checked; an error
// names the field.
func ParseVisionConfig(data []byte) (*VisionConfig, error) {
	raw, textHidden, err := towerConfigs(data, "vision_config", "gemma4_vision")
	if err != nil {
		return nil, fmt.Errorf("gemma4: vision: %w", err)
	}
	var r rawVisionConfig
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fmt.Errorf("gemma4: vision_config: %w", err)
	}
	if r.ModelType != "" && r.ModelType != "gemma4_vision" {
		return nil, fmt.Errorf("gemma4: vision_config.model_type %q, want gemma4_vision", r.ModelType)
	}
	c := &VisionConfig{TextHidden: textHidden}
	fs := towerFields{section: "vision_config"}
	f := fs.int
	// Defaults are Gemma4VisionConfig's.
	c.Hidden = f("hidden_size", r.Hidden, 768, 1, maxTowerHidden)
	c.Intermediate = f("intermediate_size", r.Intermediate, 3072, 1, MaxFFN)
	c.Layers = f("num_hidden_layers", r.Layers, 16, 1, maxTowerLayers)
	c.Heads = f("num_attention_heads", r.Heads, 12, 1, MaxHeads)
	c.KVHeads = f("num_key_value_heads", r.KVHeads, 12, 1, MaxHeads)
	c.HeadDim = f("head_dim", r.HeadDim, 64, 4, MaxHeadDim)
	c.PatchSize = f("patch_size", r.PatchSize, 16, 1, maxPatchSize)
	c.PoolingKernel = f("pooling_kernel_size", r.Pooling, 3, 1, 64)
	c.PositionEmbeddingSize = f("position_embedding_size", r.PosSize, 10240, 1, maxTowerTable)
	if fs.err != nil {
		return nil, fs.err
	}
	if c.Heads%c.KVHeads != 0 {
		return nil, fmt.Errorf("gemma4: vision_config: num_attention_heads %d is not a multiple of num_key_value_heads %d", c.Heads, c.KVHeads)
	}
	if c.HeadDim%4 != 0 {
		return nil, fmt.Errorf("gemma4: vision_config.head_dim %d: the axial RoPE needs a multiple of 4", c.HeadDim)
	}
	if r.Activation != nil && *r.Activation != "gelu_pytorch_tanh" {
		return nil, fmt.Errorf("gemma4: vision_config.hidden_activation %q, only gelu_pytorch_tanh is implemented", *r.Activation)
	}
	if r.AttentionBias != nil && *r.AttentionBias {
		return nil, errors.New("gemma4: vision_config.attention_bias true is not implemented (transformers' vision attention has no biases)")
	}
	c.Eps = 1e-6
	if r.Eps != nil {
		if !(*r.Eps > 0 && *r.Eps < 1) {
			return nil, fmt.Errorf("gemma4: vision_config.rms_norm_eps %g, want 0 < eps < 1", *r.Eps)
		}
		c.Eps = *r.Eps
	}
	c.RopeTheta = 100
	if r.RopeParameters != nil {
		if t, ok := r.RopeParameters["rope_type"]; ok && t != "axial" && t != "default" {
			return nil, fmt.Errorf("gemma4: vision_config.rope_parameters.rope_type %v, want axial", t)
		}
		if th, ok := r.RopeParameters["rope_theta"]; ok {
			v, ok := th.(float64)
			if !ok || !(v > 1) || math.IsInf(v, 0) {
				return nil, fmt.Errorf("gemma4: vision_config.rope_parameters.rope_theta %v, want a number > 1", th)
			}
			c.RopeTheta = v
		}
	}
	c.ClippedLinears = r.Clipped != nil && *r.Clipped
	c.Standardize = r.Standardize != nil && *r.Standardize
	return c, nil
}

// clipLinear is transformers' Gemma4ClippableLinear: y = clamp(W clamp(x,
// inMin, inMax), outMin, outMax), or a plain y = W x when the tower's
// use_clipped_linears is off.
type clipLinear struct {
	W                            []float32 // [out, in]
	out, in                      int
	clip                         bool
	inMin, inMax, outMin, outMax float32
}

// apply writes y = the clipped W x; scratch holds at least len(x) values.
func (c *clipLinear) apply(y, x, scratch []float32) {
	if c.clip {
		s := scratch[:len(x)]
		for i, v := range x {
			s[i] = min(max(v, c.inMin), c.inMax)
		}
		x = s
	}
	matVec(y[:c.out], c.W, x)
	if c.clip {
		for i := range y[:c.out] {
			y[i] = min(max(y[i], c.outMin), c.outMax)
		}
	}
}

// towerLoader reads one tower's tensors, the first error kept.
type towerLoader struct {
	st  weights.Store
	err error
}

func (l *towerLoader) get(name string, shape ...int) []float32 {
	if l.err != nil {
		return nil
	}
	got, _, ok := l.st.Info(name)
	if !ok {
		l.err = fmt.Errorf("gemma4: %s: %w", name, weights.ErrNotFound)
		return nil
	}
	if !slices.Equal(got, shape) {
		l.err = fmt.Errorf("gemma4: %s: shape %v, the config says %v", name, got, shape)
		return nil
	}
	v, err := l.st.Float32(name)
	if err != nil {
		l.err = fmt.Errorf("gemma4: %s: %w", name, err)
		return nil
	}
	return slices.Clone(v)
}

// scalar reads a one-value tensor (shape [] or [1]).
func (l *towerLoader) scalar(name string) float32 {
	if l.err != nil {
		return 0
	}
	got, _, ok := l.st.Info(name)
	if !ok {
		l.err = fmt.Errorf("gemma4: %s: %w", name, weights.ErrNotFound)
		return 0
	}
	if len(got) > 1 || (len(got) == 1 && got[0] != 1) {
		l.err = fmt.Errorf("gemma4: %s: shape %v, want a scalar", name, got)
		return 0
	}
	v, err := l.st.Float32(name)
	if err == nil && len(v) != 1 {
		err = fmt.Errorf("%d values", len(v))
	}
	if err != nil {
		l.err = fmt.Errorf("gemma4: %s: %w", name, err)
		return 0
	}
	if math.IsNaN(float64(v[0])) {
		l.err = fmt.Errorf("gemma4: %s is NaN", name)
	}
	return v[0]
}

// linear reads a Gemma4ClippableLinear at prefix p (p.linear.weight and,
// when clipped, the four bounds).
func (l *towerLoader) linear(p string, out, in int, clipped bool) clipLinear {
	c := clipLinear{W: l.get(p+".linear.weight", out, in), out: out, in: in, clip: clipped}
	if clipped {
		c.inMin, c.inMax = l.scalar(p+".input_min"), l.scalar(p+".input_max")
		c.outMin, c.outMax = l.scalar(p+".output_min"), l.scalar(p+".output_max")
	}
	return c
}

// VisionLayer is one encoder layer's weights.
type VisionLayer struct {
	InputNorm, PostAttnNorm, PreFFNorm, PostFFNorm []float32 // [hidden]
	QNorm, KNorm                                   []float32 // [head_dim]
	Q, K, V, O, Gate, Up, Down                     clipLinear
}

// Vision is a loaded vision encoder with its embedder.
type Vision struct {
	Cfg       *VisionConfig
	InputProj []float32 // [hidden, 3·patch²]
	PosTable  []float32 // [2, position_embedding_size, hidden]: x rows, then y rows
	Layers    []VisionLayer
	StdBias   []float32 // [hidden] (standardize only)
	StdScale  []float32
	EmbedProj []float32 // [text hidden, hidden]
	invFreq   []float32 // [head_dim/4]
}

// VisionPrefix and EmbedVisionPrefix are the tensors' names in a
// Gemma4ForConditionalGeneration checkpoint.
const (
	VisionPrefix      = "model.vision_tower."
	EmbedVisionPrefix = "model.embed_vision."
)

// LoadVision reads the vision tower and embed_vision from st, checking
// every shape against cfg. A bare config (TextHidden 0) takes the text width
// from embed_vision's projection.
func LoadVision(cfg *VisionConfig, st weights.Store) (*Vision, error) {
	c := *cfg
	if c.TextHidden == 0 {
		shape, _, ok := st.Info(EmbedVisionPrefix + "embedding_projection.weight")
		if !ok || len(shape) != 2 {
			return nil, fmt.Errorf("gemma4: %sembedding_projection.weight: %w", EmbedVisionPrefix, weights.ErrNotFound)
		}
		c.TextHidden = shape[0]
	}
	l := &towerLoader{st: st}
	H, hd, p := c.Hidden, c.HeadDim, VisionPrefix
	v := &Vision{Cfg: &c}
	v.InputProj = l.get(p+"patch_embedder.input_proj.weight", H, 3*c.PatchSize*c.PatchSize)
	v.PosTable = l.get(p+"patch_embedder.position_embedding_table", 2, c.PositionEmbeddingSize, H)
	v.Layers = make([]VisionLayer, c.Layers)
	for i := range v.Layers {
		ly := &v.Layers[i]
		q := fmt.Sprintf("%sencoder.layers.%d.", p, i)
		ly.InputNorm = l.get(q+"input_layernorm.weight", H)
		ly.PostAttnNorm = l.get(q+"post_attention_layernorm.weight", H)
		ly.PreFFNorm = l.get(q+"pre_feedforward_layernorm.weight", H)
		ly.PostFFNorm = l.get(q+"post_feedforward_layernorm.weight", H)
		ly.QNorm = l.get(q+"self_attn.q_norm.weight", hd)
		ly.KNorm = l.get(q+"self_attn.k_norm.weight", hd)
		ly.Q = l.linear(q+"self_attn.q_proj", c.Heads*hd, H, c.ClippedLinears)
		ly.K = l.linear(q+"self_attn.k_proj", c.KVHeads*hd, H, c.ClippedLinears)
		ly.V = l.linear(q+"self_attn.v_proj", c.KVHeads*hd, H, c.ClippedLinears)
		ly.O = l.linear(q+"self_attn.o_proj", H, c.Heads*hd, c.ClippedLinears)
		ly.Gate = l.linear(q+"mlp.gate_proj", c.Intermediate, H, c.ClippedLinears)
		ly.Up = l.linear(q+"mlp.up_proj", c.Intermediate, H, c.ClippedLinears)
		ly.Down = l.linear(q+"mlp.down_proj", H, c.Intermediate, c.ClippedLinears)
	}
	if c.Standardize {
		v.StdBias = l.get(p+"std_bias", H)
		v.StdScale = l.get(p+"std_scale", H)
	}
	v.EmbedProj = l.get(EmbedVisionPrefix+"embedding_projection.weight", c.TextHidden, H)
	if l.err != nil {
		return nil, l.err
	}
	// inv_freq[i] = 1 / θ^(2i / (head_dim/2)), i < head_dim/4, in float32.
	sd := hd / 2
	v.invFreq = make([]float32, hd/4)
	for i := range v.invFreq {
		v.invFreq[i] = 1 / float32(math.Pow(c.RopeTheta, float64(float32(2*i)/float32(sd))))
	}
	return v, nil
}

// VisionTrace receives the encoder's intermediate values.
type VisionTrace struct {
	// Hidden holds the patch embeddings, then each layer's output, [patches·hidden] each.
	Hidden [][]float32
	// Pooled is the pooler's output for the kept soft tokens (after the √hidden
	// scale, before standardize), [n·hidden].
	Pooled []float32
	// TowerOut is the tower's output (after standardize), [n·hidden].
	TowerOut []float32
}

// Patch is a patch's (x, y) grid position; (-1, -1) marks padding.
type Patch struct{ X, Y int }

// Encode runs the tower and embed_vision over one image's patches: pixels
// [len(pos), 3·patch²] in [0, 1] as the processor writes them, pos their
// positions. It returns the soft tokens [n, TextHidden] of the n pooled
// cells that hold a patch, in pooling order. trace may be nil.
func (v *Vision) Encode(pixels []float32, pos []Patch, trace *VisionTrace) (soft []float32, n int, err error) {
	c := v.Cfg
	H, P, pd := c.Hidden, len(pos), 3*c.PatchSize*c.PatchSize
	k := c.PoolingKernel
	switch {
	case P == 0:
		return nil, 0, errors.New("gemma4: vision: no patches")
	case len(pixels) != P*pd:
		return nil, 0, fmt.Errorf("gemma4: vision: %d pixel values for %d patches of %d", len(pixels), P, pd)
	case P%(k*k) != 0:
		return nil, 0, fmt.Errorf("gemma4: vision: %d patches is not a multiple of pooling_kernel_size² = %d", P, k*k)
	}
	pad := make([]bool, P)
	real := 0
	maxX := 0
	for i, p := range pos {
		switch {
		case p.X == -1 && p.Y == -1:
			pad[i] = true
			continue
		case p.X < 0 || p.Y < 0 || p.X >= c.PositionEmbeddingSize || p.Y >= c.PositionEmbeddingSize:
			return nil, 0, fmt.Errorf("gemma4: vision: patch %d at (%d, %d) is outside the position table [0, %d)", i, p.X, p.Y, c.PositionEmbeddingSize)
		}
		real++
		maxX = max(maxX, p.X)
	}
	if real == 0 {
		return nil, 0, errors.New("gemma4: vision: every patch is padding")
	}
	// Patch embeddings: input_proj(2(x − 0.5)) + table[0][x] + table[1][y].
	h := make([]float32, P*H)
	xs := make([]float32, pd)
	for i := range P {
		for j, px := range pixels[i*pd : (i+1)*pd] {
			xs[j] = 2 * (px - 0.5)
		}
		row := h[i*H : (i+1)*H]
		matVec(row, v.InputProj, xs)
		if !pad[i] {
			tx := v.PosTable[pos[i].X*H : (pos[i].X+1)*H]
			ty := v.PosTable[(c.PositionEmbeddingSize+pos[i].Y)*H : (c.PositionEmbeddingSize+pos[i].Y+1)*H]
			for j := range row {
				row[j] += tx[j] + ty[j]
			}
		}
	}
	if trace != nil {
		trace.Hidden = append(trace.Hidden[:0], slices.Clone(h))
	}
	for l := range v.Layers {
		v.layer(&v.Layers[l], h, pos, pad)
		if trace != nil {
			trace.Hidden = append(trace.Hidden, slices.Clone(h))
		}
	}
	// Pooling: the mean of each k×k block of patches (padding rows count as
	// zeros), cells numbered x/k + (maxX+1)/k · y/k, times √hidden.
	outLen := P / (k * k)
	cols := (maxX + 1) / k
	acc := make([]float64, outLen*H)
	used := make([]bool, outLen)
	w := float32(1) / float32(k*k)
	for i, p := range pos {
		x, y := max(p.X, 0), max(p.Y, 0)
		cell := x/k + cols*(y/k)
		if cell >= outLen {
			return nil, 0, fmt.Errorf("gemma4: vision: patch %d at (%d, %d) pools into cell %d of %d", i, p.X, p.Y, cell, outLen)
		}
		used[cell] = true
		if pad[i] {
			continue
		}
		for j, hv := range h[i*H : (i+1)*H] {
			acc[cell*H+j] += float64(w * hv)
		}
	}
	scale := float32(math.Sqrt(float64(H)))
	var pooled []float32
	for cell, u := range used {
		if !u {
			continue
		}
		for j := range H {
			pooled = append(pooled, float32(acc[cell*H+j])*scale)
		}
	}
	n = len(pooled) / H
	if trace != nil {
		trace.Pooled = slices.Clone(pooled)
	}
	if c.Standardize {
		for i := range n {
			row := pooled[i*H : (i+1)*H]
			for j := range row {
				row[j] = (row[j] - v.StdBias[j]) * v.StdScale[j]
			}
		}
	}
	if trace != nil {
		trace.TowerOut = slices.Clone(pooled)
	}
	return embedSoft(pooled, n, H, c.TextHidden, v.EmbedProj, c.Eps), n, nil
}

// embedSoft is Gemma4MultimodalEmbedder: a weightless RMSNorm over each row
// of x [n, in], then proj [out, in].
func embedSoft(x []float32, n, in, out int, proj []float32, eps float64) []float32 {
	soft := make([]float32, n*out)
	row := make([]float32, in)
	for i := range n {
		rmsNorm(row, x[i*in:(i+1)*in], nil, eps)
		matVec(soft[i*out:(i+1)*out], proj, row)
	}
	return soft
}

// rope2d rotates each head of x (head width d) by the patch's position:
// the first d/2 dims by x, the last d/2 by y, each half NeoX-style (dims j
// and j + d/4 pair) with the angles pos·inv_freq[j].
func (v *Vision) rope2d(x []float32, d int, p Patch) {
	q := d / 4
	for axis, at := range [2]int{p.X, p.Y} {
		base := axis * d / 2
		fp := float32(at)
		for j := range q {
			a := float64(fp * v.invFreq[j])
			cs, sn := float32(math.Cos(a)), float32(math.Sin(a))
			for h := 0; h+d <= len(x); h += d {
				i0, i1 := h+base+j, h+base+j+q
				x0, x1 := x[i0], x[i1]
				x[i0] = x0*cs - x1*sn
				x[i1] = x1*cs + x0*sn
			}
		}
	}
}

// layer runs one encoder layer over h [P, hidden] in place.
func (v *Vision) layer(ly *VisionLayer, h []float32, pos []Patch, pad []bool) {
	c := v.Cfg
	H, hd, P := c.Hidden, c.HeadDim, len(pos)
	nq, nkv := c.Heads*hd, c.KVHeads*hd
	group := c.Heads / c.KVHeads
	xn := make([]float32, H)
	scratch := make([]float32, max(H, c.Heads*hd, c.Intermediate))
	q := make([]float32, P*nq)
	k := make([]float32, P*nkv)
	val := make([]float32, P*nkv)
	for i := range P {
		rmsNorm(xn, h[i*H:(i+1)*H], ly.InputNorm, c.Eps)
		qi, ki, vi := q[i*nq:(i+1)*nq], k[i*nkv:(i+1)*nkv], val[i*nkv:(i+1)*nkv]
		ly.Q.apply(qi, xn, scratch)
		ly.K.apply(ki, xn, scratch)
		ly.V.apply(vi, xn, scratch)
		rmsNormHeads(qi, ly.QNorm, hd, c.Eps)
		rmsNormHeads(ki, ly.KNorm, hd, c.Eps)
		rmsNormHeads(vi, nil, hd, c.Eps)
		v.rope2d(qi, hd, pos[i])
		v.rope2d(ki, hd, pos[i])
	}
	// Bidirectional attention over the real patches (transformers adds the
	// dtype's minimum to padding keys: exp gives exactly 0).
	keys := make([]int, 0, P)
	for j := range P {
		if !pad[j] {
			keys = append(keys, j)
		}
	}
	att := make([]float32, nq)
	scores := make([]float32, len(keys))
	o := make([]float32, H)
	mid := make([]float32, c.Intermediate)
	up := make([]float32, c.Intermediate)
	for i := range P {
		for hh := range c.Heads {
			qh := q[i*nq+hh*hd : i*nq+(hh+1)*hd]
			off := (hh / group) * hd
			for t, j := range keys {
				scores[t] = dot(qh, k[j*nkv+off:j*nkv+off+hd])
			}
			softmax(scores)
			out := att[hh*hd : (hh+1)*hd]
			clear(out)
			for t, j := range keys {
				pw := scores[t]
				vj := val[j*nkv+off : j*nkv+off+hd]
				for d := range out {
					out[d] = fma32(pw, vj[d], out[d])
				}
			}
		}
		ly.O.apply(o, att, scratch)
		rmsNorm(o, o, ly.PostAttnNorm, c.Eps)
		row := h[i*H : (i+1)*H]
		for j := range row {
			row[j] += o[j]
		}
	}
	for i := range P {
		row := h[i*H : (i+1)*H]
		rmsNorm(xn, row, ly.PreFFNorm, c.Eps)
		ly.Gate.apply(mid, xn, scratch)
		ly.Up.apply(up, xn, scratch)
		gatedGelu(mid, up)
		ly.Down.apply(o, mid, scratch)
		rmsNorm(o, o, ly.PostFFNorm, c.Eps)
		for j := range row {
			row[j] += o[j]
		}
	}
}
