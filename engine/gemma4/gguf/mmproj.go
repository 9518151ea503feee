package gguf

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"verdict/engine/gemma4"
	"verdict/engine/weights"
)

// MMProjArch is the general.architecture of llama.cpp's multimodal
// projector ("mmproj") files, which hold a model's vision and audio towers.
const MMProjArch = "clip"

// The projector types of the Gemma 4 towers in clip.vision.projector_type
// and clip.audio.projector_type (or clip.projector_type).
const (
	ProjectorVision = "gemma4v"
	ProjectorAudio  = "gemma4a"
)

// Settings llama.cpp's clip.cpp fixes for gemma4v and gemma4a instead of
// reading them from the file; the rebuilt config says the same.
const (
	mmVisionRopeTheta = 100
	mmVisionPooling   = 3 // clip.vision.projector.scale_factor when absent
	mmAudioChunk      = 12
	mmAudioLeft       = 13
	mmAudioRight      = 0
	mmAudioLogitCap   = 50
	mmAudioResidual   = 0.5
	mmAudioEps        = 1e-6
)

// Bounds on the clip.* sizes: far above any released tower.
const (
	mmMaxHidden  = 1 << 14
	mmMaxLayers  = 1 << 10
	mmMaxPatch   = 1 << 8
	mmMaxTable   = 1 << 20
	mmMaxMelBins = 1 << 12
	mmMaxImage   = 1 << 16
)

// MMProj serves the Gemma 4 vision and audio towers of an mmproj GGUF (what
// llama.cpp's converter writes beside the text model) under their Hugging
// Face names, as gemma4.LoadVision and gemma4.LoadAudio read them,
// dequantised to float32 and with the converter's changes undone: the patch
// projection permuted back, the audio per_dim_scale taken back through
// softplus, the depthwise convolution given its middle dimension again.
// ConfigJSON is a gemma4 config.json with the towers the file holds.
type MMProj struct {
	G *weights.GGUF
	// Vision and Audio say which towers the file holds.
	Vision, Audio bool
	cfg           []byte
	mu            sync.RWMutex
	closed        bool
	byHF          map[string]*mmTensor
	names         []string
}

type mmTensor struct {
	t     *weights.GGUFTensor
	shape []int // the Hugging Face shape
	fix   mmFix
	patch int // fixPatch: the patch size
}

var _ weights.Store = (*MMProj)(nil)

// OpenMMProj opens an mmproj file. Close releases it.
func OpenMMProj(path string) (*MMProj, error) {
	g, err := weights.OpenGGUFFile(path)
	if err != nil {
		return nil, err
	}
	p, err := NewMMProj(g)
	if err != nil {
		g.Close()
		return nil, err
	}
	return p, nil
}

// FindMMProj returns the mmproj file beside a model: the one file in dir
// whose name starts with "mmproj" and ends in ".gguf" (llama.cpp's
// converter names it mmproj-<model>.gguf); "" when there is none, an error
// when there are several.
func FindMMProj(dir string) (string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	var found []string
	for _, e := range ents {
		n := e.Name()
		if !e.IsDir() && strings.HasPrefix(strings.ToLower(n), "mmproj") && strings.HasSuffix(strings.ToLower(n), ".gguf") {
			found = append(found, n)
		}
	}
	switch len(found) {
	case 0:
		return "", nil
	case 1:
		return filepath.Join(dir, found[0]), nil
	}
	return "", fmt.Errorf("%s holds %d mmproj files (%s): keep one", dir, len(found), strings.Join(found, ", "))
}

// NewMMProj serves a parsed mmproj GGUF; it takes g over (Close closes it).
// It refuses a file that is not llama.cpp's clip architecture, a tower of
// another projector type, metadata that is missing, mistyped or out of
// range, a tensor it has no Hugging Face name for (or of a tower the file
// says it lacks, or of a block past the count), one of a type it cannot
// read as float32, and one whose shape the converter does not write; each
// error names the file and the key or tensor.
func NewMMProj(g *weights.GGUF) (*MMProj, error) {
	wrap := func(err error) error { return fmt.Errorf("gemma4 mmproj: %s: %w", g.Path, err) }
	p := &MMProj{G: g, byHF: make(map[string]*mmTensor, len(g.Tensors))}
	if err := p.build(); err != nil {
		return nil, wrap(err)
	}
	return p, nil
}

func (p *MMProj) build() error {
	g := p.G
	if a := g.Arch(); a != MMProjArch {
		if a == "" {
			return fmt.Errorf("no general.architecture: not a llama.cpp model file")
		}
		return fmt.Errorf("general.architecture is %q, not %q (an mmproj file)", a, MMProjArch)
	}
	m := clipMeta{g}
	if v, ok := g.KV["general.type"]; ok {
		if s, _ := v.Str(); s != "mmproj" {
			return fmt.Errorf("metadata general.type is %s, want \"mmproj\"", describe(v))
		}
	}
	var err error
	if p.Vision, err = m.optBool("clip.has_vision_encoder"); err != nil {
		return err
	}
	if p.Audio, err = m.optBool("clip.has_audio_encoder"); err != nil {
		return err
	}
	if !p.Vision && !p.Audio {
		return fmt.Errorf("neither clip.has_vision_encoder nor clip.has_audio_encoder is true: no tower")
	}
	blocks := [2]int{} // vision, audio
	for i, tw := range []struct {
		on         bool
		name, want string
	}{{p.Vision, "vision", ProjectorVision}, {p.Audio, "audio", ProjectorAudio}} {
		if !tw.on {
			continue
		}
		if err := m.projector(tw.name, tw.want); err != nil {
			return err
		}
		if blocks[i], err = m.int("clip."+tw.name+".block_count", 1, mmMaxLayers); err != nil {
			return err
		}
	}
	for _, t := range g.Tensors {
		n, ok := mmLookup(t.Name)
		if !ok {
			if _, key, blk := towerBlock(t.Name); blk && mmUnsupported[key] != "" {
				return fmt.Errorf("tensor %s: %s", t.Name, mmUnsupported[key])
			}
			return fmt.Errorf("tensor %s is not part of a Gemma 4 vision or audio tower as llama.cpp's converter writes it", t.Name)
		}
		tower, has, b := "vision", p.Vision, blocks[0]
		if n.audio {
			tower, has, b = "audio", p.Audio, blocks[1]
		}
		if !has {
			return fmt.Errorf("tensor %s belongs to the %s tower, which clip.has_%s_encoder says the file lacks", t.Name, tower, tower)
		}
		if n.block >= b {
			return fmt.Errorf("tensor %s: block %d beyond clip.%s.block_count %d", t.Name, n.block, tower, b)
		}
		if err := readable(t); err != nil {
			return err
		}
		mt := &mmTensor{t: t, shape: t.Shape(), fix: n.fix}
		switch n.fix {
		case fixPatch:
			sh := mt.shape
			if len(sh) != 4 || sh[1] != 3 || sh[2] != sh[3] {
				return fmt.Errorf("tensor %s has shape %v, want [hidden, 3, patch, patch]", t.Name, sh)
			}
			mt.patch = sh[2]
			mt.shape = []int{sh[0], 3 * sh[2] * sh[3]}
		case fixDepthwise:
			sh := mt.shape
			if len(sh) != 2 {
				return fmt.Errorf("tensor %s has shape %v, want [hidden, kernel]", t.Name, sh)
			}
			mt.shape = []int{sh[0], 1, sh[1]}
		case fixSoftplus:
			if len(mt.shape) != 1 {
				return fmt.Errorf("tensor %s has shape %v, want one dimension", t.Name, mt.shape)
			}
		}
		p.byHF[n.hf] = mt
		p.names = append(p.names, n.hf)
	}
	slices.Sort(p.names)
	cfg, err := p.config(m, blocks)
	if err != nil {
		return err
	}
	p.cfg = cfg
	return nil
}

// towerBlock splits "v.blk.N.key" or "a.blk.N.key".
func towerBlock(name string) (int, string, bool) {
	for _, pre := range []string{"v.", "a."} {
		if rest, ok := strings.CutPrefix(name, pre); ok {
			return blockOf(rest)
		}
	}
	return 0, "", false
}

// clipMeta reads an mmproj's clip.* metadata; every error names the key.
type clipMeta struct{ g *weights.GGUF }

func (m clipMeta) int(key string, lo, hi int) (int, error) {
	v, ok := m.g.KV[key]
	if !ok {
		return 0, fmt.Errorf("missing metadata %s", key)
	}
	return intValue(key, v, lo, hi)
}

func (m clipMeta) optInt(key string, def, lo, hi int) (int, error) {
	if _, ok := m.g.KV[key]; !ok {
		return def, nil
	}
	return m.int(key, lo, hi)
}

func (m clipMeta) optBool(key string) (bool, error) {
	v, ok := m.g.KV[key]
	if !ok {
		return false, nil
	}
	b, ok := v.Bool()
	if !ok {
		return false, fmt.Errorf("metadata %s is a %s, want a bool", key, typeName(v))
	}
	return b, nil
}

// float reads a required float scalar in the open interval (lo, hi).
func (m clipMeta) float(key string, lo, hi float64) (float64, error) {
	v, ok := m.g.KV[key]
	if !ok {
		return 0, fmt.Errorf("missing metadata %s", key)
	}
	x, ok := v.Float()
	if !ok || v.Type == weights.GGUFArray {
		return 0, fmt.Errorf("metadata %s is a %s, want a number", key, typeName(v))
	}
	if !(x > lo && x < hi) {
		return 0, fmt.Errorf("metadata %s is %v, outside %v to %v", key, x, lo, hi)
	}
	return float32Decimal(x), nil
}

// triple checks an optional array of three finite numbers (the image mean
// and standard deviation), each above min.
func (m clipMeta) triple(key string, min float64) error {
	v, ok := m.g.KV[key]
	if !ok {
		return nil
	}
	xs, ok := v.Floats()
	if !ok || len(xs) != 3 {
		return fmt.Errorf("metadata %s is a %s of %d, want three numbers", key, typeName(v), v.Len())
	}
	for i, x := range xs {
		if !(x > min) || math.IsInf(x, 0) {
			return fmt.Errorf("metadata %s[%d] is %v, want a finite number above %v", key, i, x, min)
		}
	}
	return nil
}

// projector checks a tower's projector type: clip.<tower>.projector_type,
// else clip.projector_type.
func (m clipMeta) projector(tower, want string) error {
	key := "clip." + tower + ".projector_type"
	v, ok := m.g.KV[key]
	if !ok {
		key = "clip.projector_type"
		if v, ok = m.g.KV[key]; !ok {
			return fmt.Errorf("missing metadata clip.%s.projector_type (the file has a %s encoder)", tower, tower)
		}
	}
	s, ok := v.Str()
	switch {
	case !ok:
		return fmt.Errorf("metadata %s is a %s, want a string", key, typeName(v))
	case s == want:
		return nil
	case s == want[:len(want)-1]+"u"+want[len(want)-1:]:
		return fmt.Errorf("metadata %s is %q: Gemma 4's unified %s encoder is not implemented (only %q)", key, s, tower, want)
	}
	return fmt.Errorf("metadata %s is %q, not %q (a Gemma 4 %s tower)", key, s, want, tower)
}

func describe(v weights.GGUFValue) string {
	if s, ok := v.Str(); ok {
		return fmt.Sprintf("%q", s)
	}
	return "a " + typeName(v)
}

// shapeOf is a served tensor's Hugging Face shape; ok false when absent.
func (p *MMProj) shapeOf(hf string) ([]int, bool) {
	t, ok := p.byHF[hf]
	if !ok {
		return nil, false
	}
	return t.shape, true
}

// hasClip reports whether any linear of a tower has its clipping bounds.
func (p *MMProj) hasClip(prefix string) bool {
	for _, n := range p.names {
		if strings.HasPrefix(n, prefix) && (strings.HasSuffix(n, ".input_max") || strings.HasSuffix(n, ".input_min") ||
			strings.HasSuffix(n, ".output_max") || strings.HasSuffix(n, ".output_min")) {
			return true
		}
	}
	return false
}

// config rebuilds a gemma4 config.json (model_type gemma4, text_config's
// hidden_size, and a vision_config and audio_config for the towers the file
// holds) from the clip.* metadata, the shapes of a few tensors and
// llama.cpp's fixed settings, then checks it with gemma4.ParseVisionConfig
// and ParseAudioConfig.
func (p *MMProj) config(m clipMeta, blocks [2]int) ([]byte, error) {
	cfg := map[string]any{"model_type": "gemma4", "architectures": []string{"Gemma4ForConditionalGeneration"}}
	text := 0
	setText := func(key string) error {
		d, err := m.int(key, 1, gemma4.MaxHidden)
		if err != nil {
			return err
		}
		if text != 0 && d != text {
			return fmt.Errorf("metadata %s is %d, clip.vision.projection_dim %d: one text model", key, d, text)
		}
		text = d
		return nil
	}
	if p.Vision {
		if err := setText("clip.vision.projection_dim"); err != nil {
			return nil, err
		}
		v, err := p.visionConfig(m, blocks[0])
		if err != nil {
			return nil, err
		}
		cfg["vision_config"] = v
	}
	if p.Audio {
		if err := setText("clip.audio.projection_dim"); err != nil {
			return nil, err
		}
		a, err := p.audioConfig(m, blocks[1])
		if err != nil {
			return nil, err
		}
		cfg["audio_config"] = a
	}
	cfg["text_config"] = map[string]any{"model_type": "gemma4_text", "hidden_size": text}
	js, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	if p.Vision {
		if _, err := gemma4.ParseVisionConfig(js); err != nil {
			return nil, fmt.Errorf("the vision config rebuilt from the metadata: %w", err)
		}
	}
	if p.Audio {
		if _, err := gemma4.ParseAudioConfig(js); err != nil {
			return nil, fmt.Errorf("the audio config rebuilt from the metadata: %w", err)
		}
	}
	return js, nil
}

func (p *MMProj) visionConfig(m clipMeta, L int) (map[string]any, error) {
	c := map[string]any{"model_type": "gemma4_vision", "num_hidden_layers": L, "hidden_activation": "gelu_pytorch_tanh",
		"attention_bias": false, "rope_parameters": map[string]any{"rope_type": "axial", "rope_theta": mmVisionRopeTheta}}
	H, err := m.int("clip.vision.embedding_length", 1, mmMaxHidden)
	if err != nil {
		return nil, err
	}
	c["hidden_size"] = H
	if c["intermediate_size"], err = m.int("clip.vision.feed_forward_length", 1, gemma4.MaxFFN); err != nil {
		return nil, err
	}
	heads, err := m.int("clip.vision.attention.head_count", 1, gemma4.MaxHeads)
	if err != nil {
		return nil, err
	}
	c["num_attention_heads"] = heads
	patch, err := m.int("clip.vision.patch_size", 1, mmMaxPatch)
	if err != nil {
		return nil, err
	}
	c["patch_size"] = patch
	if _, err := m.int("clip.vision.image_size", 1, mmMaxImage); err != nil { // required by clip.cpp, unused
		return nil, err
	}
	if err := m.triple("clip.vision.image_mean", math.Inf(-1)); err != nil {
		return nil, err
	}
	if err := m.triple("clip.vision.image_std", 0); err != nil {
		return nil, err
	}
	if c["rms_norm_eps"], err = m.float("clip.vision.attention.layer_norm_epsilon", 0, 1); err != nil {
		return nil, err
	}
	if c["pooling_kernel_size"], err = m.optInt("clip.vision.projector.scale_factor", mmVisionPooling, 1, 64); err != nil {
		return nil, err
	}
	// The head width: q_norm's length (the converter writes no head_dim).
	hd := H / heads
	if sh, ok := p.shapeOf(gemma4.VisionPrefix + "encoder.layers.0.self_attn.q_norm.weight"); ok && len(sh) == 1 {
		hd = sh[0]
	}
	if hd, err = m.optInt("clip.vision.attention.head_dim", hd, 4, gemma4.MaxHeadDim); err != nil {
		return nil, err
	}
	if hd < 4 || hd > gemma4.MaxHeadDim {
		return nil, fmt.Errorf("the vision head width %d (the length of v.blk.0.attn_q_norm.weight) is outside 4 to %d", hd, gemma4.MaxHeadDim)
	}
	c["head_dim"] = hd
	if sh, ok := p.shapeOf(gemma4.VisionPrefix + "encoder.layers.0.self_attn.q_proj.linear.weight"); ok && len(sh) == 2 && sh[0] != heads*hd {
		return nil, fmt.Errorf("metadata clip.vision.attention.head_count is %d, but v.blk.0.attn_q.weight has %d rows, not %d heads of %d", heads, sh[0], heads, hd)
	}
	kv := heads
	if sh, ok := p.shapeOf(gemma4.VisionPrefix + "encoder.layers.0.self_attn.k_proj.linear.weight"); ok && len(sh) == 2 {
		if sh[0]%hd != 0 {
			return nil, fmt.Errorf("tensor v.blk.0.attn_k.weight has %d rows, not whole heads of %d", sh[0], hd)
		}
		kv = sh[0] / hd
	}
	if kv, err = m.optInt("clip.vision.attention.head_count_kv", kv, 1, gemma4.MaxHeads); err != nil {
		return nil, err
	}
	c["num_key_value_heads"] = kv
	sh, ok := p.shapeOf(gemma4.VisionPrefix + "patch_embedder.position_embedding_table")
	if !ok {
		return nil, fmt.Errorf("missing tensor v.position_embd.weight (the position table)")
	}
	if len(sh) != 3 || sh[0] != 2 || sh[1] < 1 || sh[1] > mmMaxTable {
		return nil, fmt.Errorf("tensor v.position_embd.weight has shape %v, want [2, positions, %d]", sh, H)
	}
	c["position_embedding_size"] = sh[1]
	if pe, ok := p.byHF[gemma4.VisionPrefix+"patch_embedder.input_proj.weight"]; ok && pe.patch != patch {
		return nil, fmt.Errorf("tensor v.patch_embd.weight has patches of %d, clip.vision.patch_size is %d", pe.patch, patch)
	}
	_, bias := p.byHF[gemma4.VisionPrefix+"std_bias"]
	_, scale := p.byHF[gemma4.VisionPrefix+"std_scale"]
	if bias != scale {
		return nil, fmt.Errorf("tensor v.std_bias without v.std_scale, or the reverse (standardize needs both)")
	}
	c["standardize"] = bias
	c["use_clipped_linears"] = p.hasClip(gemma4.VisionPrefix)
	return c, nil
}

func (p *MMProj) audioConfig(m clipMeta, L int) (map[string]any, error) {
	c := map[string]any{"model_type": "gemma4_audio", "num_hidden_layers": L, "hidden_act": "silu",
		"attention_chunk_size": mmAudioChunk, "attention_context_left": mmAudioLeft, "attention_context_right": mmAudioRight,
		"attention_logit_cap": mmAudioLogitCap, "residual_weight": mmAudioResidual, "rms_norm_eps": mmAudioEps}
	H, err := m.int("clip.audio.embedding_length", 2, mmMaxHidden)
	if err != nil {
		return nil, err
	}
	c["hidden_size"] = H
	if c["num_attention_heads"], err = m.int("clip.audio.attention.head_count", 1, gemma4.MaxHeads); err != nil {
		return nil, err
	}
	if ff, err := m.int("clip.audio.feed_forward_length", 1, gemma4.MaxFFN); err != nil {
		return nil, err
	} else if ff != 4*H {
		return nil, fmt.Errorf("metadata clip.audio.feed_forward_length is %d, want 4 × clip.audio.embedding_length (%d)", ff, 4*H)
	}
	// Read as the converter writes it (1e-5, a slip llama.cpp works round
	// by using 1e-6); the tower's norms use 1e-6.
	if _, err := m.float("clip.audio.attention.layer_norm_epsilon", 0, 1); err != nil {
		return nil, err
	}
	bins, err := m.int("clip.audio.num_mel_bins", 1, mmMaxMelBins)
	if err != nil {
		return nil, err
	}
	c["input_feat_size"] = bins
	c0, ok0 := p.shapeOf(gemma4.AudioPrefix + "subsample_conv_projection.layer0.conv.weight")
	c1, ok1 := p.shapeOf(gemma4.AudioPrefix + "subsample_conv_projection.layer1.conv.weight")
	if !ok0 || !ok1 {
		return nil, fmt.Errorf("missing tensor a.conv1d.0.weight or a.conv1d.1.weight (the subsampling convolutions)")
	}
	if len(c0) != 4 || c0[1] != 1 || c0[2] != 3 || c0[3] != 3 {
		return nil, fmt.Errorf("tensor a.conv1d.0.weight has shape %v, want [channels, 1, 3, 3]", c0)
	}
	if len(c1) != 4 || c1[1] != c0[0] || c1[2] != 3 || c1[3] != 3 {
		return nil, fmt.Errorf("tensor a.conv1d.1.weight has shape %v, want [channels, %d, 3, 3]", c1, c0[0])
	}
	c["subsampling_conv_channels"] = []int{c0[0], c1[0]}
	if f := ((bins+1)/2 + 1) / 2; f != c0[0]/4 {
		return nil, fmt.Errorf("metadata clip.audio.num_mel_bins is %d, which subsamples to %d, but a.conv1d.0.weight's %d channels expect %d", bins, f, c0[0], c0[0]/4)
	}
	dw, ok := p.shapeOf(gemma4.AudioPrefix + "layers.0.lconv1d.depthwise_conv1d.weight")
	if !ok {
		return nil, fmt.Errorf("missing tensor a.blk.0.conv_dw.weight (the light convolution)")
	}
	c["conv_kernel_size"] = dw[2]
	out, ok := p.shapeOf(gemma4.AudioPrefix + "output_proj.weight")
	if !ok || len(out) != 2 {
		return nil, fmt.Errorf("missing tensor a.pre_encode.out.weight (output_proj), or not a matrix")
	}
	c["output_proj_dims"] = out[0]
	c["use_clipped_linears"] = p.hasClip(gemma4.AudioPrefix)
	return c, nil
}

// ConfigJSON is the gemma4 config.json rebuilt from the metadata, for
// gemma4.ParseVisionConfig and ParseAudioConfig.
func (p *MMProj) ConfigJSON() []byte { return slices.Clone(p.cfg) }

// Path is the file's path.
func (p *MMProj) Path() string { return p.G.Path }

// TensorName is the file's name of the tensor served under a Hugging Face
// name, to point an error at the file.
func (p *MMProj) TensorName(hf string) (string, bool) {
	t, ok := p.byHF[hf]
	if !ok {
		return "", false
	}
	return t.t.Name, true
}

// Info implements weights.Store; dtype is the GGUF type's name.
func (p *MMProj) Info(name string) ([]int, string, bool) {
	t, ok := p.byHF[name]
	if !ok {
		return nil, "", false
	}
	return slices.Clone(t.shape), t.t.Type.String(), true
}

// Names implements weights.Store.
func (p *MMProj) Names() []string { return slices.Clone(p.names) }

func (p *MMProj) lookup(name string) (*mmTensor, error) {
	if p.closed {
		return nil, fmt.Errorf("gemma4 mmproj: %s: the store is closed", p.G.Path)
	}
	t, ok := p.byHF[name]
	if !ok {
		return nil, fmt.Errorf("gemma4 mmproj: %s: %w", name, weights.ErrNotFound)
	}
	return t, nil
}

// undo reverses the converter's change on whole rows of t's values.
func (t *mmTensor) undo(v []float32) error {
	switch t.fix {
	case fixPatch:
		p := t.patch
		row := 3 * p * p
		tmp := make([]float32, row)
		for s := 0; s+row <= len(v); s += row {
			r := v[s : s+row]
			for c := range 3 {
				for y := range p {
					for x := range p {
						tmp[(y*p+x)*3+c] = r[(c*p+y)*p+x]
					}
				}
			}
			copy(r, tmp)
		}
	case fixSoftplus:
		for i, y := range v {
			s, err := softplusInverse(y)
			if err != nil {
				return fmt.Errorf("value %d: %w", i, err)
			}
			v[i] = s
		}
	}
	return nil
}

// softplusInverse returns an s whose softplus, as gemma4's audio tower
// computes it (float32(log1p(exp(s))) in float64), is y: the float32
// nearest log(expm1(y)), or the nearest float32 to it that gives y back.
func softplusInverse(y float32) (float32, error) {
	if !(y > 0) || math.IsInf(float64(y), 1) {
		return 0, fmt.Errorf("%v is not a softplus (which is positive and finite)", y)
	}
	sp := func(s float32) float32 { return float32(math.Log1p(math.Exp(float64(s)))) }
	yd := float64(y)
	s := y
	if yd < 40 { // above, softplus(s) rounds to s
		s = float32(math.Log(math.Expm1(yd)))
	}
	if sp(s) == y {
		return s, nil
	}
	lo, hi := s, s
	for range 16 {
		lo, hi = math.Nextafter32(lo, float32(math.Inf(-1))), math.Nextafter32(hi, float32(math.Inf(1)))
		if sp(lo) == y {
			return lo, nil
		}
		if sp(hi) == y {
			return hi, nil
		}
	}
	return s, nil
}

// Float32 implements weights.Store: a new slice, whatever the type.
func (p *MMProj) Float32(name string) ([]float32, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	t, err := p.lookup(name)
	if err != nil {
		return nil, err
	}
	out := make([]float32, numel(t.t))
	if err := weights.DequantizeGGML(t.t.Type, out, t.t.Data()); err != nil {
		return nil, fmt.Errorf("gemma4 mmproj: %s (%s): %w", name, t.t.Name, err)
	}
	if err := t.undo(out); err != nil {
		return nil, fmt.Errorf("gemma4 mmproj: %s (%s): %w", name, t.t.Name, err)
	}
	return out, nil
}

// BF16 implements weights.Store for BF16 tensors the converter left as they
// were.
func (p *MMProj) BF16(name string) ([]uint16, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	t, err := p.lookup(name)
	if err != nil {
		return nil, err
	}
	if t.t.Type != weights.GGMLBF16 || (t.fix != fixNone && t.fix != fixDepthwise) {
		return nil, fmt.Errorf("gemma4 mmproj: %s (%s): type %s, not BF16 as stored", name, t.t.Name, t.t.Type)
	}
	b := t.t.Data()
	out := make([]uint16, len(b)/2)
	for i := range out {
		out[i] = uint16(b[2*i]) | uint16(b[2*i+1])<<8
	}
	return out, nil
}

// Rows implements weights.Store, dequantising only the rows asked for.
func (p *MMProj) Rows(name string, row0 int, dst []float32) error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	t, err := p.lookup(name)
	if err != nil {
		return err
	}
	sh := t.shape
	if len(sh) < 2 {
		return fmt.Errorf("gemma4 mmproj: %s (%s): Rows needs at least two dimensions, it has %v", name, t.t.Name, sh)
	}
	cols := numel(t.t) / max(1, sh[0])
	if cols == 0 || len(dst)%cols != 0 {
		return fmt.Errorf("gemma4 mmproj: %s (%s): %d values are not whole rows of %d", name, t.t.Name, len(dst), cols)
	}
	n := len(dst) / cols
	if row0 < 0 || row0 > sh[0] || n > sh[0]-row0 {
		return fmt.Errorf("gemma4 mmproj: %s (%s): rows %d to %d outside its %d", name, t.t.Name, row0, row0+n, sh[0])
	}
	if n == 0 {
		return nil
	}
	rowBytes := len(t.t.Data()) / sh[0]
	if err := weights.DequantizeGGML(t.t.Type, dst, t.t.Data()[row0*rowBytes:(row0+n)*rowBytes]); err != nil {
		return fmt.Errorf("gemma4 mmproj: %s (%s): %w", name, t.t.Name, err)
	}
	if err := t.undo(dst); err != nil {
		return fmt.Errorf("gemma4 mmproj: %s (%s): %w", name, t.t.Name, err)
	}
	return nil
}

// Close implements weights.Store: it unmaps the file.
func (p *MMProj) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	return p.G.Close()
}
