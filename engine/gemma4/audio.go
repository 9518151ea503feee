package gemma4

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"

	"verdict/engine/weights"
)

// The audio encoder (transformers 5.17's Gemma4AudioModel and the
// embed_audio Gemma4MultimodalEmbedder), float32 on the CPU, as
// build/fixtures/GEMMA4.md ("Vision and audio") states it: two stride-2
// 3×3 convolutions with LayerNorm and ReLU over the log-mel features, a
// projection, conformer blocks (half-step feed-forward, chunked local
// attention with relative positions and a logit cap, a light causal
// convolution, a second feed-forward, a final norm), output_proj, then a
// weightless RMSNorm and a projection into the text embedding space. One
// clip at a time; the mask marks its real frames.

// AudioConfig is a Gemma4AudioConfig (with the text width embed_audio
// projects to).
type AudioConfig struct {
	Hidden, Layers, Heads int
	ConvChannels          [2]int
	ConvKernel            int
	ResidualWeight        float64
	ChunkSize             int
	ContextLeft           int
	ContextRight          int
	LogitCap              float64
	InvalidLogit          float64
	ClippedLinears        bool
	Eps                   float64
	GradientClipping      float64
	OutputDims            int
	TextHidden            int
}

type rawAudioConfig struct {
	ModelType      string   `json:"model_type"`
	Hidden         *int     `json:"hidden_size"`
	Layers         *int     `json:"num_hidden_layers"`
	Heads          *int     `json:"num_attention_heads"`
	Activation     *string  `json:"hidden_act"`
	ConvChannels   []int    `json:"subsampling_conv_channels"`
	ConvKernel     *int     `json:"conv_kernel_size"`
	ResidualWeight *float64 `json:"residual_weight"`
	ChunkSize      *int     `json:"attention_chunk_size"`
	ContextLeft    *int     `json:"attention_context_left"`
	ContextRight   *int     `json:"attention_context_right"`
	LogitCap       *float64 `json:"attention_logit_cap"`
	InvalidLogit   *float64 `json:"attention_invalid_logits_value"`
	Clipped        *bool    `json:"use_clipped_linears"`
	Eps            *float64 `json:"rms_norm_eps"`
	GradClip       *float64 `json:"gradient_clipping"`
	OutputDims     *int     `json:"output_proj_dims"`
}

// ParseAudioConfig reads the audio_config of a gemma4 config.json (or a bare
// gemma4_audio config, whose TextHidden LoadAudio takes from the weights).
// Every field the encoder uses is checked; an error names the field.
func ParseAudioConfig(data []byte) (*AudioConfig, error) {
	raw, textHidden, err := towerConfigs(data, "audio_config", "gemma4_audio")
	if err != nil {
		return nil, fmt.Errorf("gemma4: audio: %w", err)
	}
	var r rawAudioConfig
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fmt.Errorf("gemma4: audio_config: %w", err)
	}
	if r.ModelType != "" && r.ModelType != "gemma4_audio" {
		return nil, fmt.Errorf("gemma4: audio_config.model_type %q, want gemma4_audio", r.ModelType)
	}
	c := &AudioConfig{TextHidden: textHidden}
	fs := towerFields{section: "audio_config"}
	f, fl := fs.int, fs.float
	// Defaults are Gemma4AudioConfig's.
	c.Hidden = f("hidden_size", r.Hidden, 1024, 2, maxTowerHidden)
	c.Layers = f("num_hidden_layers", r.Layers, 12, 1, maxTowerLayers)
	c.Heads = f("num_attention_heads", r.Heads, 8, 1, MaxHeads)
	c.ConvKernel = f("conv_kernel_size", r.ConvKernel, 5, 1, 1024)
	c.ChunkSize = f("attention_chunk_size", r.ChunkSize, 12, 1, 1<<12)
	c.ContextLeft = f("attention_context_left", r.ContextLeft, 13, 1, 1<<12)
	c.ContextRight = f("attention_context_right", r.ContextRight, 0, 0, 1<<12)
	c.OutputDims = f("output_proj_dims", r.OutputDims, 1536, 1, maxTowerHidden*4)
	c.ResidualWeight = fl("residual_weight", r.ResidualWeight, 0.5, func(v float64) bool { return math.Abs(v) < 1e6 })
	c.LogitCap = fl("attention_logit_cap", r.LogitCap, 50, func(v float64) bool { return v > 0 && v < 1e30 })
	c.InvalidLogit = fl("attention_invalid_logits_value", r.InvalidLogit, -1e9, func(v float64) bool { return v < 0 && v > -1e38 })
	c.Eps = fl("rms_norm_eps", r.Eps, 1e-6, func(v float64) bool { return v > 0 && v < 1 })
	c.GradientClipping = fl("gradient_clipping", r.GradClip, 1e10, func(v float64) bool { return v > 0 })
	if fs.err != nil {
		return nil, fs.err
	}
	if c.Hidden%c.Heads != 0 {
		return nil, fmt.Errorf("gemma4: audio_config: hidden_size %d is not a multiple of num_attention_heads %d", c.Hidden, c.Heads)
	}
	if c.Hidden%2 != 0 {
		return nil, fmt.Errorf("gemma4: audio_config.hidden_size %d: the sinusoidal positions need an even width", c.Hidden)
	}
	c.ConvChannels = [2]int{128, 32}
	if r.ConvChannels != nil {
		if len(r.ConvChannels) != 2 || r.ConvChannels[0] < 4 || r.ConvChannels[1] < 1 ||
			r.ConvChannels[0] > 1<<12 || r.ConvChannels[1] > 1<<12 {
			return nil, fmt.Errorf("gemma4: audio_config.subsampling_conv_channels %v, want two channel counts (the first ≥ 4)", r.ConvChannels)
		}
		c.ConvChannels = [2]int{r.ConvChannels[0], r.ConvChannels[1]}
	}
	if r.Activation != nil && *r.Activation != "silu" {
		return nil, fmt.Errorf("gemma4: audio_config.hidden_act %q, only silu is implemented", *r.Activation)
	}
	c.ClippedLinears = r.Clipped == nil || *r.Clipped
	return c, nil
}

// HeadDim is hidden_size / num_attention_heads.
func (c *AudioConfig) HeadDim() int { return c.Hidden / c.Heads }

// contextSize is the keys one chunk of queries sees: chunk + left − 1 + right.
func (c *AudioConfig) contextSize() int { return c.ChunkSize + c.ContextLeft - 1 + c.ContextRight }

type audioFF struct {
	PreNorm, PostNorm []float32
	L1, L2            clipLinear
}

// AudioLayer is one conformer block's weights.
type AudioLayer struct {
	FF1, FF2                           audioFF
	NormPreAttn, NormPostAttn, NormOut []float32
	PerDimScale                        []float32 // [head_dim]
	Q, K, V, Post                      clipLinear
	RelK                               []float32 // [hidden, hidden]
	ConvPreNorm, ConvNorm              []float32
	ConvStart, ConvEnd                 clipLinear
	Depthwise                          []float32 // [hidden, kernel]
	qScale                             []float32 // q_scale · softplus(per_dim_scale), per dim
	relK                               []float32 // [positions, hidden]: relative_k_proj of the position table
}

// Audio is a loaded audio encoder with its embedder.
type Audio struct {
	Cfg              *AudioConfig
	Conv0, Conv1     []float32 // [C0, 1, 3, 3], [C1, C0, 3, 3]
	Norm0, Norm1     []float32 // LayerNorm weights (no bias)
	InputProj        []float32 // [hidden, (C0/4)·C1]
	Layers           []AudioLayer
	OutProj, OutBias []float32 // [out, hidden], [out]
	EmbedProj        []float32 // [text hidden, out]
	posEmb           []float32 // [positions, hidden]: [sin | cos]
	qScale, kScale   float32
}

// AudioPrefix and EmbedAudioPrefix are the tensors' names in a
// Gemma4ForConditionalGeneration checkpoint.
const (
	AudioPrefix      = "model.audio_tower."
	EmbedAudioPrefix = "model.embed_audio."
)

// LoadAudio reads the audio tower and embed_audio from st, checking every
// shape against cfg.
func LoadAudio(cfg *AudioConfig, st weights.Store) (*Audio, error) {
	c := *cfg
	if c.TextHidden == 0 {
		shape, _, ok := st.Info(EmbedAudioPrefix + "embedding_projection.weight")
		if !ok || len(shape) != 2 {
			return nil, fmt.Errorf("gemma4: %sembedding_projection.weight: %w", EmbedAudioPrefix, weights.ErrNotFound)
		}
		c.TextHidden = shape[0]
	}
	l := &towerLoader{st: st}
	H, C0, C1, p, cl := c.Hidden, c.ConvChannels[0], c.ConvChannels[1], AudioPrefix, c.ClippedLinears
	a := &Audio{Cfg: &c}
	sp := p + "subsample_conv_projection."
	a.Conv0 = l.get(sp+"layer0.conv.weight", C0, 1, 3, 3)
	a.Norm0 = l.get(sp+"layer0.norm.weight", C0)
	a.Conv1 = l.get(sp+"layer1.conv.weight", C1, C0, 3, 3)
	a.Norm1 = l.get(sp+"layer1.norm.weight", C1)
	a.InputProj = l.get(sp+"input_proj_linear.weight", H, C0/4*C1)
	ff := func(q string) audioFF {
		return audioFF{PreNorm: l.get(q+".pre_layer_norm.weight", H), PostNorm: l.get(q+".post_layer_norm.weight", H),
			L1: l.linear(q+".ffw_layer_1", 4*H, H, cl), L2: l.linear(q+".ffw_layer_2", H, 4*H, cl)}
	}
	a.Layers = make([]AudioLayer, c.Layers)
	for i := range a.Layers {
		ly := &a.Layers[i]
		q := fmt.Sprintf("%slayers.%d.", p, i)
		ly.FF1, ly.FF2 = ff(q+"feed_forward1"), ff(q+"feed_forward2")
		ly.NormPreAttn = l.get(q+"norm_pre_attn.weight", H)
		ly.NormPostAttn = l.get(q+"norm_post_attn.weight", H)
		ly.NormOut = l.get(q+"norm_out.weight", H)
		ly.PerDimScale = l.get(q+"self_attn.per_dim_scale", c.HeadDim())
		ly.Q = l.linear(q+"self_attn.q_proj", H, H, cl)
		ly.K = l.linear(q+"self_attn.k_proj", H, H, cl)
		ly.V = l.linear(q+"self_attn.v_proj", H, H, cl)
		ly.Post = l.linear(q+"self_attn.post", H, H, cl)
		ly.RelK = l.get(q+"self_attn.relative_k_proj.weight", H, H)
		ly.ConvPreNorm = l.get(q+"lconv1d.pre_layer_norm.weight", H)
		ly.ConvNorm = l.get(q+"lconv1d.conv_norm.weight", H)
		ly.ConvStart = l.linear(q+"lconv1d.linear_start", 2*H, H, cl)
		ly.ConvEnd = l.linear(q+"lconv1d.linear_end", H, H, cl)
		ly.Depthwise = l.get(q+"lconv1d.depthwise_conv1d.weight", H, 1, c.ConvKernel)
	}
	a.OutProj = l.get(p+"output_proj.weight", c.OutputDims, H)
	a.OutBias = l.get(p+"output_proj.bias", c.OutputDims)
	a.EmbedProj = l.get(EmbedAudioPrefix+"embedding_projection.weight", c.TextHidden, c.OutputDims)
	if l.err != nil {
		return nil, l.err
	}
	a.prepare()
	return a, nil
}

// prepare computes the position table, the scales and each layer's
// projected relative keys (all float32, as transformers does).
func (a *Audio) prepare() {
	c := a.Cfg
	H, hd := c.Hidden, c.HeadDim()
	n := H / 2
	incr := float32(math.Log(10000) / float64(max(n-1, 1)))
	inv := make([]float32, n)
	for i := range inv {
		inv[i] = float32(math.Exp(float64(float32(i) * -incr)))
	}
	npos := c.contextSize()/2 + 1
	a.posEmb = make([]float32, npos*H)
	for r := range npos {
		pv := float32(c.contextSize()/2 - r)
		for i := range n {
			t := float64(pv * inv[i])
			a.posEmb[r*H+i] = float32(math.Sin(t))
			a.posEmb[r*H+n+i] = float32(math.Cos(t))
		}
	}
	a.qScale = float32(math.Pow(float64(hd), -0.5) / math.Ln2)
	a.kScale = float32(math.Log(1+math.E) / math.Ln2)
	for i := range a.Layers {
		ly := &a.Layers[i]
		ly.qScale = make([]float32, hd)
		for d, s := range ly.PerDimScale {
			ly.qScale[d] = float32(math.Log1p(math.Exp(float64(s))))
		}
		ly.relK = make([]float32, npos*H)
		for r := range npos {
			matVec(ly.relK[r*H:(r+1)*H], ly.RelK, a.posEmb[r*H:(r+1)*H])
		}
	}
}

// AudioTrace receives the encoder's intermediate values, [frames·hidden]
// each (all frames, padding included).
type AudioTrace struct {
	// Hidden holds the subsampling's output, then each block's.
	Hidden [][]float32
	// FF1, Attn, LConv, FF2 are each block's parts: the first feed-forward
	// (with its residual), the attention (after post), the light conv (with
	// its residual), the second feed-forward (with its residual).
	FF1, Attn, LConv, FF2 [][]float32
	// TowerOut is output_proj's output, [frames·output_proj_dims].
	TowerOut []float32
}

// Encode runs the tower and embed_audio over one clip's log-mel features
// feats [T, bins] with mask [T] (true for real frames). It returns the soft
// tokens [T', TextHidden] of every output frame and the output mask [T']
// (the merge keeps the true rows). trace may be nil.
func (a *Audio) Encode(feats []float32, mask []bool, trace *AudioTrace) (soft []float32, outMask []bool, err error) {
	c := a.Cfg
	T := len(mask)
	switch {
	case T == 0:
		return nil, nil, errors.New("gemma4: audio: no frames")
	case len(feats)%T != 0:
		return nil, nil, fmt.Errorf("gemma4: audio: %d feature values for %d frames", len(feats), T)
	}
	F := len(feats) / T
	if f2 := ((F+1)/2 + 1) / 2; f2 != c.ConvChannels[0]/4 {
		return nil, nil, fmt.Errorf("gemma4: audio: %d mel bins subsample to %d, the input projection expects %d (subsampling_conv_channels[0]/4)",
			F, f2, c.ConvChannels[0]/4)
	}
	// Subsampling: [1, T, F] → [C0, T/2, F/2] → [C1, T/4, F/4].
	x, t1, f1 := conv2dNormReLU(feats, 1, T, F, mask, a.Conv0, a.Norm0, c.ConvChannels[0], c.Eps)
	m1 := everyOther(mask)
	x, t2, f2 := conv2dNormReLU(x, c.ConvChannels[0], t1, f1, m1, a.Conv1, a.Norm1, c.ConvChannels[1], c.Eps)
	outMask = everyOther(m1)
	H, C1 := c.Hidden, c.ConvChannels[1]
	h := make([]float32, t2*H)
	flat := make([]float32, f2*C1)
	for t := range t2 {
		for f := range f2 {
			for ch := range C1 {
				flat[f*C1+ch] = x[(ch*t2+t)*f2+f]
			}
		}
		matVec(h[t*H:(t+1)*H], a.InputProj, flat)
	}
	if trace != nil {
		trace.Hidden = [][]float32{slices.Clone(h)}
	}
	for l := range a.Layers {
		a.block(&a.Layers[l], h, outMask, trace)
		if trace != nil {
			trace.Hidden = append(trace.Hidden, slices.Clone(h))
		}
	}
	out := make([]float32, t2*c.OutputDims)
	for t := range t2 {
		row := out[t*c.OutputDims : (t+1)*c.OutputDims]
		matVec(row, a.OutProj, h[t*H:(t+1)*H])
		for i := range row {
			row[i] += a.OutBias[i]
		}
	}
	if trace != nil {
		trace.TowerOut = slices.Clone(out)
	}
	return embedSoft(out, t2, c.OutputDims, c.TextHidden, a.EmbedProj, c.Eps), outMask, nil
}

// everyOther is mask[::2].
func everyOther(m []bool) []bool {
	out := make([]bool, 0, (len(m)+1)/2)
	for i := 0; i < len(m); i += 2 {
		out = append(out, m[i])
	}
	return out
}

// conv2dNormReLU is one subsampling layer on x [cin, T, F]: frames whose
// mask is false are zeroed, then a 3×3 convolution with stride 2 and
// padding 1 (no bias), a LayerNorm over the channels (weight, no bias) and
// a ReLU. It returns [cout, T', F'].
func conv2dNormReLU(x []float32, cin, T, F int, mask []bool, w, norm []float32, cout int, eps float64) ([]float32, int, int) {
	xm := slices.Clone(x)
	for ci := range cin {
		for t := range T {
			if !mask[t] {
				clear(xm[(ci*T+t)*F : (ci*T+t+1)*F])
			}
		}
	}
	To, Fo := (T-1)/2+1, (F-1)/2+1
	y := make([]float32, cout*To*Fo)
	for co := range cout {
		for to := range To {
			for fo := range Fo {
				var s float32
				for ci := range cin {
					for kt := range 3 {
						ti := 2*to + kt - 1
						if ti < 0 || ti >= T {
							continue
						}
						for kf := range 3 {
							fi := 2*fo + kf - 1
							if fi < 0 || fi >= F {
								continue
							}
							s = fma32(w[((co*cin+ci)*3+kt)*3+kf], xm[(ci*T+ti)*F+fi], s)
						}
					}
				}
				y[(co*To+to)*Fo+fo] = s
			}
		}
	}
	v := make([]float32, cout)
	for to := range To {
		for fo := range Fo {
			var mean, ss float64
			for co := range cout {
				v[co] = y[(co*To+to)*Fo+fo]
				mean += float64(v[co])
			}
			mean /= float64(cout)
			for _, e := range v {
				d := float64(e) - mean
				ss += d * d
			}
			r := 1 / math.Sqrt(ss/float64(cout)+eps)
			for co := range cout {
				n := float32((float64(v[co])-mean)*r) * norm[co]
				y[(co*To+to)*Fo+fo] = max(n, 0)
			}
		}
	}
	return y, To, Fo
}

func silu(x float32) float32 { return float32(float64(x) / (1 + math.Exp(-float64(x)))) }

func sigmoid(x float32) float32 { return float32(1 / (1 + math.Exp(-float64(x)))) }

// clampAll is torch.clamp(x, −c, c).
func clampAll(x []float32, c float32) {
	for i, v := range x {
		x[i] = min(max(v, -c), c)
	}
}

// defaultEps is Gemma4RMSNorm's default, which the feed-forwards and the
// block norms use (they do not pass the config's rms_norm_eps).
const defaultEps = 1e-6

// feedForward is Gemma4AudioFeedForward on each row of h [T, hidden], in
// place: h + residual_weight · post_norm(clamp(L2(silu(L1(pre_norm(clamp(h))))))).
func (a *Audio) feedForward(ff *audioFF, h []float32) {
	c := a.Cfg
	H := c.Hidden
	gc := float32(min(c.GradientClipping, math.MaxFloat32))
	x := make([]float32, H)
	mid := make([]float32, 4*H)
	o := make([]float32, H)
	scratch := make([]float32, 4*H)
	rw := float32(c.ResidualWeight)
	for t := 0; t+H <= len(h); t += H {
		copy(x, h[t:t+H])
		clampAll(x, gc)
		rmsNorm(x, x, ff.PreNorm, defaultEps)
		ff.L1.apply(mid, x, scratch)
		for i, v := range mid {
			mid[i] = silu(v)
		}
		ff.L2.apply(o, mid, scratch)
		clampAll(o, gc)
		rmsNorm(o, o, ff.PostNorm, defaultEps)
		for i := range o {
			h[t+i] += o[i] * rw
		}
	}
}

// block runs one conformer block over h [T, hidden] in place; valid marks
// the real frames (keys outside it are masked).
func (a *Audio) block(ly *AudioLayer, h []float32, valid []bool, trace *AudioTrace) {
	c := a.Cfg
	H := c.Hidden
	T := len(h) / H
	gc := float32(min(c.GradientClipping, math.MaxFloat32))
	a.feedForward(&ly.FF1, h)
	if trace != nil {
		trace.FF1 = append(trace.FF1, slices.Clone(h))
	}
	x := slices.Clone(h)
	for t := range T {
		row := x[t*H : (t+1)*H]
		clampAll(row, gc)
		rmsNorm(row, row, ly.NormPreAttn, defaultEps)
	}
	att := a.attention(ly, x, valid)
	if trace != nil {
		trace.Attn = append(trace.Attn, slices.Clone(att))
	}
	for t := range T {
		row := att[t*H : (t+1)*H]
		clampAll(row, gc)
		rmsNorm(row, row, ly.NormPostAttn, defaultEps)
		for i := range row {
			h[t*H+i] += row[i]
		}
	}
	a.lightConv(ly, h)
	if trace != nil {
		trace.LConv = append(trace.LConv, slices.Clone(h))
	}
	a.feedForward(&ly.FF2, h)
	if trace != nil {
		trace.FF2 = append(trace.FF2, slices.Clone(h))
	}
	for t := range T {
		row := h[t*H : (t+1)*H]
		clampAll(row, gc)
		rmsNorm(row, row, ly.NormOut, defaultEps)
	}
}

// attention is Gemma4AudioAttention over x [T, hidden]: queries in chunks,
// each chunk seeing context keys from left − 1 before its start to right
// after its end; logit = q·k + q·relK (Transformer-XL's shift), capped by
// c·tanh(·/c); keys outside the clip, padding keys and keys outside the
// window (0 ≤ i − j < left − 1, or 0 < j − i < right) get the invalid
// value; softmax; then post.
func (a *Audio) attention(ly *AudioLayer, x []float32, valid []bool) []float32 {
	c := a.Cfg
	H, hd, nh := c.Hidden, c.HeadDim(), c.Heads
	T := len(x) / H
	chunk, ctx := c.ChunkSize, c.contextSize()
	past := c.ContextLeft - 1
	npos := ctx/2 + 1
	nb := (T + chunk - 1) / chunk
	q := make([]float32, nb*chunk*H) // padded to whole chunks (zero queries)
	k := make([]float32, T*H)
	v := make([]float32, T*H)
	scratch := make([]float32, H)
	for t := range T {
		xt := x[t*H : (t+1)*H]
		qt, kt, vt := q[t*H:(t+1)*H], k[t*H:(t+1)*H], v[t*H:(t+1)*H]
		ly.Q.apply(qt, xt, scratch)
		ly.K.apply(kt, xt, scratch)
		ly.V.apply(vt, xt, scratch)
		for i := range qt {
			qt[i] = qt[i] * a.qScale * ly.qScale[i%hd]
			kt[i] *= a.kScale
		}
	}
	capv := float32(c.LogitCap)
	inval := float32(c.InvalidLogit)
	out := make([]float32, T*H)
	logits := make([]float32, ctx)
	for i := range T {
		b, qb := i/chunk, i%chunk
		start := b*chunk - past
		for hh := range nh {
			qh := q[i*H+hh*hd : i*H+(hh+1)*hd]
			for s := range ctx {
				j := start + s
				var ac float32
				if j >= 0 && j < T {
					ac = dot(qh, k[j*H+hh*hd:j*H+(hh+1)*hd])
				}
				// The shift: entry (qb, s) of the [chunk, ctx] block is element
				// qb·ctx + s of the raw [chunk, ctx+1] scores padded past npos.
				flat := qb*ctx + s
				r, p := flat/(ctx+1), flat%(ctx+1)
				var bd float32
				if p < npos {
					qr := q[(b*chunk+r)*H+hh*hd : (b*chunk+r)*H+(hh+1)*hd]
					bd = dot(qr, ly.relK[p*H+hh*hd:p*H+(hh+1)*hd])
				}
				l := float32(math.Tanh(float64((ac+bd)/capv))) * capv
				d := i - j
				ok := j >= 0 && j < T && valid[j] &&
					((d >= 0 && d < past) || (d < 0 && -d < c.ContextRight))
				if !ok {
					l = inval
				}
				logits[s] = l
			}
			softmax(logits)
			o := out[i*H+hh*hd : i*H+(hh+1)*hd]
			for s, pw := range logits {
				j := start + s
				if j < 0 || j >= T {
					continue
				}
				vj := v[j*H+hh*hd : j*H+(hh+1)*hd]
				for d := range o {
					o[d] = fma32(pw, vj[d], o[d])
				}
			}
		}
	}
	res := make([]float32, T*H)
	for t := range T {
		ly.Post.apply(res[t*H:(t+1)*H], out[t*H:(t+1)*H], scratch)
	}
	return res
}

// lightConv is Gemma4AudioLightConv1d on h [T, hidden], in place: h +
// linear_end(silu(conv_norm(clamp(causal depthwise conv(glu(linear_start(pre_norm(h)))))))).
func (a *Audio) lightConv(ly *AudioLayer, h []float32) {
	c := a.Cfg
	H, K := c.Hidden, c.ConvKernel
	T := len(h) / H
	gc := float32(min(c.GradientClipping, math.MaxFloat32))
	g := make([]float32, T*H)
	x := make([]float32, H)
	two := make([]float32, 2*H)
	scratch := make([]float32, 2*H)
	for t := range T {
		rmsNorm(x, h[t*H:(t+1)*H], ly.ConvPreNorm, c.Eps)
		ly.ConvStart.apply(two, x, scratch)
		for i := range H {
			g[t*H+i] = two[i] * sigmoid(two[H+i])
		}
	}
	y := make([]float32, H)
	o := make([]float32, H)
	for t := range T {
		for ch := range H {
			var s float32
			for kk := range K {
				ti := t - (K - 1) + kk
				if ti >= 0 {
					s = fma32(ly.Depthwise[ch*K+kk], g[ti*H+ch], s)
				}
			}
			y[ch] = s
		}
		clampAll(y, gc)
		rmsNorm(y, y, ly.ConvNorm, c.Eps)
		for i, v := range y {
			y[i] = silu(v)
		}
		ly.ConvEnd.apply(o, y, scratch)
		for i := range o {
			h[t*H+i] += o[i]
		}
	}
}
