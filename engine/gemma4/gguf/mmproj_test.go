package gguf_test

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"verdict/engine/fixture/testmodel"
	"verdict/engine/gemma4"
	"verdict/engine/gemma4/gguf"
	"verdict/engine/weights"
	"verdict/engine/weights/ggufwrite"
)

// The mmproj files (testdata/gguf-llamacpp/mmproj-gemma4-synthetic.tar.gz)
// were written by build/fixtures/make_gemma4_mmproj.py with llama.cpp's
// gguf-py from the vision and audio fixtures' safetensors.
const mmTarball = "gguf-llamacpp/mmproj-gemma4-synthetic.tar.gz"

func mmPath(t testing.TB, outtype string) string {
	return filepath.Join(testmodel.Dir(t, mmTarball), "mmproj-gemma4-synthetic-"+outtype+".gguf")
}

func openMM(t testing.TB, outtype string) *gguf.MMProj {
	t.Helper()
	p, err := gguf.OpenMMProj(mmPath(t, outtype))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func openMMBytes(t testing.TB, data []byte) (*gguf.MMProj, error) {
	g, err := weights.ParseGGUF("test.gguf", data)
	if err != nil {
		return nil, err
	}
	p, err := gguf.NewMMProj(g)
	if err == nil {
		t.Cleanup(func() { p.Close() })
	}
	return p, err
}

// towerFx is one tower fixture: its config, weights and reference tensors.
type towerFx struct {
	cfg []byte
	st  weights.Store
	exp map[string]refTensor
	tol map[string]float64
}

type refTensor struct {
	shape []int
	f     []float32
	i     []int32
}

func openTowerFx(t testing.TB, name string) *towerFx {
	t.Helper()
	dir := testmodel.Dir(t, name)
	fx := &towerFx{}
	var err error
	if fx.cfg, err = os.ReadFile(filepath.Join(dir, "config.json")); err != nil {
		t.Fatal(err)
	}
	if fx.st, err = weights.Open(dir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fx.st.Close() })
	fx.exp = readRef(t, filepath.Join(dir, "expected.safetensors"))
	mj, err := os.ReadFile(filepath.Join(dir, "meta.json"))
	if err != nil {
		t.Fatal(err)
	}
	var meta struct {
		Tolerances map[string]float64 `json:"tolerances"`
	}
	if err := json.Unmarshal(mj, &meta); err != nil {
		t.Fatal(err)
	}
	fx.tol = meta.Tolerances
	return fx
}

// readRef reads a safetensors file of F32 and I32 tensors.
func readRef(t testing.TB, path string) map[string]refTensor {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := binary.LittleEndian.Uint64(data)
	var hdr map[string]json.RawMessage
	if err := json.Unmarshal(data[8:8+n], &hdr); err != nil {
		t.Fatal(err)
	}
	body := data[8+n:]
	out := map[string]refTensor{}
	for name, raw := range hdr {
		if name == "__metadata__" {
			continue
		}
		var info struct {
			Dtype   string `json:"dtype"`
			Shape   []int  `json:"shape"`
			Offsets [2]int `json:"data_offsets"`
		}
		if err := json.Unmarshal(raw, &info); err != nil {
			t.Fatal(err)
		}
		b := body[info.Offsets[0]:info.Offsets[1]]
		r := refTensor{shape: info.Shape}
		switch info.Dtype {
		case "F32":
			r.f = make([]float32, len(b)/4)
			for i := range r.f {
				r.f[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
			}
		case "I32":
			r.i = make([]int32, len(b)/4)
			for i := range r.i {
				r.i[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
			}
		}
		out[name] = r
	}
	return out
}

func mmDiff(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	var m float64
	for i := range a {
		m = max(m, math.Abs(float64(a[i])-float64(b[i])))
	}
	return m
}

// visionRun loads the vision tower from st with the config in cfgJSON and
// encodes the fixture's image: the soft tokens and the trace.
func visionRun(t testing.TB, fx *towerFx, cfgJSON []byte, st weights.Store) ([]float32, *gemma4.VisionTrace) {
	t.Helper()
	cfg, err := gemma4.ParseVisionConfig(cfgJSON)
	if err != nil {
		t.Fatal(err)
	}
	v, err := gemma4.LoadVision(cfg, st)
	if err != nil {
		t.Fatal(err)
	}
	ids := fx.exp["image_position_ids"].i
	pos := make([]gemma4.Patch, len(ids)/2)
	for i := range pos {
		pos[i] = gemma4.Patch{X: int(ids[2*i]), Y: int(ids[2*i+1])}
	}
	var tr gemma4.VisionTrace
	soft, _, err := v.Encode(fx.exp["pixel_values"].f, pos, &tr)
	if err != nil {
		t.Fatal(err)
	}
	return soft, &tr
}

// audioRun loads the audio tower from st (edit changes the parsed config)
// and encodes the fixture's two clips: the soft tokens of each, joined.
func audioRun(t testing.TB, fx *towerFx, cfgJSON []byte, st weights.Store, edit func(*gemma4.AudioConfig)) []float32 {
	t.Helper()
	cfg, err := gemma4.ParseAudioConfig(cfgJSON)
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(cfg)
	}
	a, err := gemma4.LoadAudio(cfg, st)
	if err != nil {
		t.Fatal(err)
	}
	feats, m := fx.exp["input_features"], fx.exp["input_features_mask"]
	B, T := m.shape[0], m.shape[1]
	F := len(feats.f) / (B * T)
	var out []float32
	for b := range B {
		mask := make([]bool, T)
		for i := range mask {
			mask[i] = m.i[b*T+i] != 0
		}
		soft, _, err := a.Encode(feats.f[b*T*F:(b+1)*T*F], mask, nil)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, soft...)
	}
	return out
}

// TestMMProjConfig: the config rebuilt from the metadata parses to the
// fixtures' tower configs, field for field, except the audio logit cap,
// which an mmproj file cannot carry (llama.cpp fixes it at 50; the fixture
// uses 0.2).
func TestMMProjConfig(t *testing.T) {
	vfx := openTowerFx(t, "gemma4-synthetic-vision.tar.gz")
	for _, outtype := range []string{"F32", "F16"} {
		p := openMM(t, outtype)
		if !p.Vision || !p.Audio {
			t.Fatalf("%s: vision %v, audio %v, want both", outtype, p.Vision, p.Audio)
		}
		gv, err := gemma4.ParseVisionConfig(p.ConfigJSON())
		if err != nil {
			t.Fatal(err)
		}
		wv, _ := gemma4.ParseVisionConfig(vfx.cfg)
		if *gv != *wv {
			t.Errorf("%s: vision config\n%+v\nthe fixture's\n%+v", outtype, *gv, *wv)
		}
		ga, err := gemma4.ParseAudioConfig(p.ConfigJSON())
		if err != nil {
			t.Fatal(err)
		}
		wa, _ := gemma4.ParseAudioConfig(vfx.cfg)
		if ga.LogitCap != 50 || wa.LogitCap != 0.2 {
			t.Errorf("%s: logit caps %v (rebuilt) and %v (fixture), want 50 and 0.2", outtype, ga.LogitCap, wa.LogitCap)
		}
		ga.LogitCap = wa.LogitCap
		if *ga != *wa {
			t.Errorf("%s: audio config\n%+v\nthe fixture's\n%+v", outtype, *ga, *wa)
		}
	}
}

// roundF16 rounds to the nearest IEEE half (ties to even), as numpy's
// astype(float16) does.
func roundF16(f float32) float32 {
	a := math.Abs(float64(f))
	if a == 0 || math.IsNaN(a) || math.IsInf(a, 0) {
		return f
	}
	_, e := math.Frexp(a) // a = m·2^e, m in [0.5, 1)
	step := math.Ldexp(1, max(e-1, -14)-10)
	q := math.RoundToEven(a/step) * step
	if q >= 65520 {
		q = math.Inf(1)
	}
	return float32(math.Copysign(q, float64(f)))
}

// TestMMProjTensors: the store serves exactly the fixtures' tensors, each
// with its checkpoint shape, and each value the checkpoint's (F32 file) or
// its F16 rounding where the F16 file holds F16; per_dim_scale is served as
// a value whose softplus (as the tower computes it) is the checkpoint's.
func TestMMProjTensors(t *testing.T) {
	fxs := []*towerFx{openTowerFx(t, "gemma4-synthetic-vision.tar.gz"), openTowerFx(t, "gemma4-synthetic-audio.tar.gz")}
	sp := func(s float32) float32 { return float32(math.Log1p(math.Exp(float64(s)))) }
	for _, outtype := range []string{"F32", "F16"} {
		p := openMM(t, outtype)
		var want []string
		for _, fx := range fxs {
			want = append(want, fx.st.Names()...)
		}
		slices.Sort(want)
		if got := p.Names(); !slices.Equal(got, want) {
			t.Fatalf("%s: serves %d tensors, the fixtures hold %d:\n%v\n%v", outtype, len(got), len(want), got, want)
		}
		types := map[string]int{}
		same := 0
		for _, fx := range fxs {
			for _, n := range fx.st.Names() {
				ws, _, _ := fx.st.Info(n)
				gs, dtype, _ := p.Info(n)
				types[dtype]++
				if len(ws) == 0 {
					ws = []int{1} // the converter's scalars are 1-D
				}
				if !slices.Equal(gs, ws) {
					t.Errorf("%s: %s has shape %v, the checkpoint %v", outtype, n, gs, ws)
					continue
				}
				w, _ := fx.st.Float32(n)
				g, err := p.Float32(n)
				if err != nil {
					t.Fatal(err)
				}
				for i := range w {
					var ok bool
					switch {
					case strings.HasSuffix(n, "per_dim_scale"):
						ok = sp(g[i]) == sp(w[i])
						if g[i] == w[i] {
							same++
						}
					case dtype == "F16":
						ok = g[i] == roundF16(w[i])
					default:
						ok = g[i] == w[i]
					}
					if !ok {
						t.Errorf("%s: %s[%d] = %v, the checkpoint's %v", outtype, n, i, g[i], w[i])
						break
					}
				}
			}
		}
		t.Logf("%s: %d tensors %v; per_dim_scale: %d values served bit for bit, the others with the same softplus", outtype, len(want), types, same)
	}
}

// TestMMProjTowers: the towers loaded from the mmproj store give the
// safetensors towers' soft tokens (and every traced stage) bit for bit,
// from the F32 file and, against the checkpoint rounded as the F16 file
// rounds it, from the F16 file; so their errors against transformers' are
// the same. The audio tower runs with the fixture's logit cap; with the
// file's (llama.cpp's 50) its soft tokens move.
func TestMMProjTowers(t *testing.T) {
	vfx := openTowerFx(t, "gemma4-synthetic-vision.tar.gz")
	afx := openTowerFx(t, "gemma4-synthetic-audio.tar.gz")
	for _, outtype := range []string{"F32", "F16"} {
		p := openMM(t, outtype)
		vst, ast := weights.Store(vfx.st), weights.Store(afx.st)
		if outtype == "F16" {
			vst, ast = &rounded{vfx.st, p}, &rounded{afx.st, p}
		}
		want, wtr := visionRun(t, vfx, vfx.cfg, vst)
		got, gtr := visionRun(t, vfx, p.ConfigJSON(), p)
		if !slices.Equal(got, want) {
			t.Errorf("%s: vision soft tokens differ from the safetensors tower's by %g", outtype, mmDiff(got, want))
		}
		for l := range wtr.Hidden {
			if !slices.Equal(gtr.Hidden[l], wtr.Hidden[l]) {
				t.Errorf("%s: vision hidden state %d differs by %g", outtype, l, mmDiff(gtr.Hidden[l], wtr.Hidden[l]))
			}
		}
		t.Logf("%s: vision soft tokens vs transformers' %.3g (tolerance %.3g)", outtype, mmDiff(got, vfx.exp["soft_tokens"].f), vfx.tol["vision_soft_tokens"])

		capFx := func(c *gemma4.AudioConfig) { c.LogitCap = 0.2 }
		wantA := audioRun(t, afx, afx.cfg, ast, nil)
		gotA := audioRun(t, afx, p.ConfigJSON(), p, capFx)
		if !slices.Equal(gotA, wantA) {
			t.Errorf("%s: audio soft tokens differ from the safetensors tower's by %g", outtype, mmDiff(gotA, wantA))
		}
		ref := afx.exp["soft_tokens"].f
		om := afx.exp["output_mask"].i
		var e float64
		for i, m := range om {
			if m != 0 {
				D := len(ref) / len(om)
				e = max(e, mmDiff(gotA[i*D:(i+1)*D], ref[i*D:(i+1)*D]))
			}
		}
		t.Logf("%s: audio soft tokens (valid frames) vs transformers' %.3g (tolerance %.3g)", outtype, e, afx.tol["audio_soft_tokens"])
		if outtype == "F32" {
			for _, c := range []struct {
				name string
				got  []float32
				ref  string
				tol  string
			}{{"vision", got, "soft_tokens", "vision_soft_tokens"}} {
				if d := mmDiff(c.got, vfx.exp[c.ref].f); d > vfx.tol[c.tol] {
					t.Errorf("%s soft tokens %.3g from transformers', over %.3g", c.name, d, vfx.tol[c.tol])
				}
			}
			if e > afx.tol["audio_soft_tokens"] {
				t.Errorf("audio soft tokens %.3g from transformers', over %.3g", e, afx.tol["audio_soft_tokens"])
			}
			cap50 := audioRun(t, afx, p.ConfigJSON(), p, nil)
			if d := mmDiff(cap50, wantA); d == 0 {
				t.Error("the audio soft tokens with llama.cpp's logit cap 50 equal the fixture's (cap 0.2): the check cannot see the cap")
			} else {
				t.Logf("with the file's logit cap 50 the audio soft tokens move %.3g", d)
			}
		}
	}
}

// rounded serves a checkpoint's tensors rounded to F16 where the mmproj
// file holds them as F16.
type rounded struct {
	weights.Store
	p *gguf.MMProj
}

func (r *rounded) Float32(name string) ([]float32, error) {
	v, err := r.Store.Float32(name)
	if err != nil {
		return nil, err
	}
	if _, dt, _ := r.p.Info(name); dt == "F16" {
		v = slices.Clone(v)
		for i := range v {
			v[i] = roundF16(v[i])
		}
	}
	return v, nil
}

// TestMMProjChecksCanFail: a file with two tensor names swapped, the patch
// projection left in the file's order, or one per_dim_scale value moved,
// opens; the comparison with the safetensors tower catches each.
func TestMMProjChecksCanFail(t *testing.T) {
	vfx := openTowerFx(t, "gemma4-synthetic-vision.tar.gz")
	afx := openTowerFx(t, "gemma4-synthetic-audio.tar.gz")
	wantV, _ := visionRun(t, vfx, vfx.cfg, vfx.st)
	wantA := audioRun(t, afx, afx.cfg, afx.st, nil)
	capFx := func(c *gemma4.AudioConfig) { c.LogitCap = 0.2 }
	for _, c := range []struct {
		name  string
		audio bool
		edit  func([]ggufwrite.Tensor)
	}{
		{"v.blk.1's ffn_gate and ffn_up swapped", false, func(ts []ggufwrite.Tensor) {
			g, u := tensor(ts, "v.blk.1.ffn_gate.weight"), tensor(ts, "v.blk.1.ffn_up.weight")
			g.Name, u.Name = u.Name, g.Name
		}},
		{"the patch projection's rows and columns crossed", false, func(ts []ggufwrite.Tensor) {
			x := tensor(ts, "v.patch_embd.weight") // F32 [H, 3, p, p]
			p := x.Dims[0]
			d := slices.Clone(x.Data)
			for plane := 0; plane < len(d)/(4*p*p); plane++ {
				for y := range p {
					for c := range p {
						o := 4 * (plane*p*p + y*p + c)
						copy(x.Data[o:o+4], d[4*(plane*p*p+c*p+y):])
					}
				}
			}
		}},
		{"a.blk.0's conv_norm and norm_conv swapped", true, func(ts []ggufwrite.Tensor) {
			g, u := tensor(ts, "a.blk.0.conv_norm.weight"), tensor(ts, "a.blk.0.norm_conv.weight")
			g.Name, u.Name = u.Name, g.Name
		}},
		{"a.blk.1.per_dim_scale one ulp up", true, func(ts []ggufwrite.Tensor) {
			x := tensor(ts, "a.blk.1.per_dim_scale.weight")
			binary.LittleEndian.PutUint32(x.Data[4:], binary.LittleEndian.Uint32(x.Data[4:])+1)
		}},
	} {
		kvs, ts := parts(t, mmPath(t, "F32"))
		c.edit(ts)
		p, err := openMMBytes(t, encode(t, kvs, ts))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var d float64
		if c.audio {
			d = mmDiff(audioRun(t, afx, p.ConfigJSON(), p, capFx), wantA)
		} else {
			got, _ := visionRun(t, vfx, p.ConfigJSON(), p)
			d = mmDiff(got, wantV)
		}
		if d == 0 {
			t.Errorf("%s: the soft tokens are the safetensors tower's", c.name)
		}
		t.Logf("%s: soft tokens move %.3g", c.name, d)
	}
}

// TestMMProjOneTower: a file with only one tower (the other's keys and
// tensors left out) serves that tower, bit for bit, and has no config for
// the other.
func TestMMProjOneTower(t *testing.T) {
	vfx := openTowerFx(t, "gemma4-synthetic-vision.tar.gz")
	afx := openTowerFx(t, "gemma4-synthetic-audio.tar.gz")
	for _, keep := range []string{"vision", "audio"} {
		drop := map[string]string{"vision": "audio", "audio": "vision"}[keep]
		kvs, ts := parts(t, mmPath(t, "F32"))
		kvs = slices.DeleteFunc(kvs, func(kv ggufwrite.KV) bool {
			return strings.HasPrefix(kv.Key, "clip."+drop+".") || kv.Key == "clip.has_"+drop+"_encoder"
		})
		pre := map[string][]string{"vision": {"v.", "mm.input"}, "audio": {"a.", "mm.a."}}[drop]
		ts = slices.DeleteFunc(ts, func(x ggufwrite.Tensor) bool {
			return strings.HasPrefix(x.Name, pre[0]) || strings.HasPrefix(x.Name, pre[1])
		})
		p, err := openMMBytes(t, encode(t, kvs, ts))
		if err != nil {
			t.Fatalf("%s only: %v", keep, err)
		}
		if p.Vision != (keep == "vision") || p.Audio != (keep == "audio") {
			t.Errorf("%s only: vision %v, audio %v", keep, p.Vision, p.Audio)
		}
		if keep == "vision" {
			want, _ := visionRun(t, vfx, vfx.cfg, vfx.st)
			if got, _ := visionRun(t, vfx, p.ConfigJSON(), p); !slices.Equal(got, want) {
				t.Errorf("vision only: soft tokens differ by %g", mmDiff(got, want))
			}
			if _, err := gemma4.ParseAudioConfig(p.ConfigJSON()); err == nil || !strings.Contains(err.Error(), "without audio_config") {
				t.Errorf("vision only: ParseAudioConfig: %v", err)
			}
		} else {
			want := audioRun(t, afx, afx.cfg, afx.st, nil)
			if got := audioRun(t, afx, p.ConfigJSON(), p, func(c *gemma4.AudioConfig) { c.LogitCap = 0.2 }); !slices.Equal(got, want) {
				t.Errorf("audio only: soft tokens differ by %g", mmDiff(got, want))
			}
			if _, err := gemma4.ParseVisionConfig(p.ConfigJSON()); err == nil || !strings.Contains(err.Error(), "without vision_config") {
				t.Errorf("audio only: ParseVisionConfig: %v", err)
			}
		}
	}
}

// TestMMProjRefuses: a file that lies (a key missing, mistyped, absurd or
// inconsistent; a tensor foreign, of a missing tower, past the block count,
// misshapen, of an unreadable type, or one the towers would leave out) is
// refused, and the error names the key or tensor.
func TestMMProjRefuses(t *testing.T) {
	set := func(key string, v any) func([]ggufwrite.KV) []ggufwrite.KV {
		return func(k []ggufwrite.KV) []ggufwrite.KV { return setKV(k, key, v) }
	}
	drop := func(key string) func([]ggufwrite.KV) []ggufwrite.KV {
		return func(k []ggufwrite.KV) []ggufwrite.KV { return dropKV(k, key) }
	}
	rename := func(from, to string) func([]ggufwrite.Tensor) []ggufwrite.Tensor {
		return func(ts []ggufwrite.Tensor) []ggufwrite.Tensor {
			x := *tensor(ts, from)
			x.Name = to
			return append(ts, x)
		}
	}
	for _, c := range []struct {
		name string
		kv   func([]ggufwrite.KV) []ggufwrite.KV
		ts   func([]ggufwrite.Tensor) []ggufwrite.Tensor
		want string
	}{
		{"no architecture", drop("general.architecture"), nil, "no general.architecture"},
		{"a text model", set("general.architecture", "gemma4"), nil, `"gemma4", not "clip"`},
		{"not an mmproj", set("general.type", "model"), nil, `general.type is "model"`},
		{"no tower", func(k []ggufwrite.KV) []ggufwrite.KV {
			return setKV(setKV(k, "clip.has_vision_encoder", false), "clip.has_audio_encoder", false)
		}, nil, "neither clip.has_vision_encoder"},
		{"has_vision a number", set("clip.has_vision_encoder", uint32(1)), nil, "clip.has_vision_encoder is a uint32"},
		{"Gemma 3's projector", set("clip.vision.projector_type", "gemma3"), nil, `clip.vision.projector_type is "gemma3", not "gemma4v"`},
		{"the unified vision projector", set("clip.vision.projector_type", "gemma4uv"), nil, "unified vision encoder"},
		{"the unified audio projector", set("clip.audio.projector_type", "gemma4ua"), nil, "unified audio encoder"},
		{"no projector type", drop("clip.audio.projector_type"), nil, "missing metadata clip.audio.projector_type"},
		{"absurd block count", set("clip.vision.block_count", uint32(1<<30)), nil, "clip.vision.block_count is 1073741824, outside"},
		{"no block count", drop("clip.audio.block_count"), nil, "missing metadata clip.audio.block_count"},
		{"absurd hidden size", set("clip.vision.embedding_length", uint64(1<<40)), nil, "clip.vision.embedding_length is 1099511627776"},
		{"hidden size a string", set("clip.audio.embedding_length", "32"), nil, "clip.audio.embedding_length is a string"},
		{"heads unlike attn_q", set("clip.vision.attention.head_count", uint32(3)), nil, "clip.vision.attention.head_count is 3, but v.blk.0.attn_q.weight has 32 rows"},
		{"two text widths", set("clip.audio.projection_dim", uint32(64)), nil, "clip.audio.projection_dim is 64, clip.vision.projection_dim 32"},
		{"no projection dim", drop("clip.vision.projection_dim"), nil, "missing metadata clip.vision.projection_dim"},
		{"audio MLP not 4x", set("clip.audio.feed_forward_length", uint32(96)), nil, "clip.audio.feed_forward_length is 96"},
		{"NaN epsilon", set("clip.vision.attention.layer_norm_epsilon", float32(math.NaN())), nil, "clip.vision.attention.layer_norm_epsilon is NaN"},
		{"no audio epsilon", drop("clip.audio.attention.layer_norm_epsilon"), nil, "missing metadata clip.audio.attention.layer_norm_epsilon"},
		{"mel bins unlike the convolution", set("clip.audio.num_mel_bins", uint32(80)), nil, "clip.audio.num_mel_bins is 80"},
		{"an image mean of two", set("clip.vision.image_mean", []float32{0, 0}), nil, "clip.vision.image_mean is a array of float32 of 2"},
		{"a zero image std", set("clip.vision.image_std", []float32{1, 0, 1}), nil, "clip.vision.image_std[1] is 0"},
		{"patch size unlike the projection", set("clip.vision.patch_size", uint32(8)), nil, "patches of 4, clip.vision.patch_size is 8"},
		{"absurd pooling", set("clip.vision.projector.scale_factor", uint32(1000)), nil, "clip.vision.projector.scale_factor is 1000"},
		{"a foreign tensor", nil, rename("v.blk.0.attn_q.weight", "v.blk.0.attn_qkv.weight"), "tensor v.blk.0.attn_qkv.weight is not part"},
		{"a Gemma 3n tensor", nil, rename("mm.a.input_projection.weight", "mm.a.soft_emb_norm.weight"), "tensor mm.a.soft_emb_norm.weight is not part"},
		{"a bias the towers lack", nil, rename("v.blk.0.attn_q.input_max", "v.blk.0.attn_q.bias"), "tensor v.blk.0.attn_q.bias is not part"},
		{"a layer scalar", nil, rename("v.blk.0.attn_q.input_max", "v.blk.0.out_scale.weight"), "v.blk.0.out_scale.weight: a vision layer_scalar"},
		{"a key scale", nil, rename("a.blk.0.per_dim_scale.weight", "a.blk.0.per_dim_k_scale.weight"), "a.blk.0.per_dim_k_scale.weight: an audio per_dim_key_scale"},
		{"a block past the count", nil, rename("v.blk.1.ln1.weight", "v.blk.2.ln1.weight"), "v.blk.2.ln1.weight: block 2 beyond clip.vision.block_count 2"},
		{"an audio tensor without the audio tower", set("clip.has_audio_encoder", false), nil, "belongs to the audio tower"},
		{"an unreadable type", nil, func(ts []ggufwrite.Tensor) []ggufwrite.Tensor {
			x := tensor(ts, "v.blk.0.ffn_up.weight")
			x.Type, x.Data = 20, make([]byte, 64*32/32*18) // IQ4_NL
			return ts
		}, "v.blk.0.ffn_up.weight: type IQ4_NL cannot be read"},
		{"the patch projection flat", nil, func(ts []ggufwrite.Tensor) []ggufwrite.Tensor {
			x := tensor(ts, "v.patch_embd.weight")
			x.Dims = []int{48, 32}
			return ts
		}, "tensor v.patch_embd.weight has shape [32 48]"},
		{"the depthwise convolution 3-D", nil, func(ts []ggufwrite.Tensor) []ggufwrite.Tensor {
			x := tensor(ts, "a.blk.0.conv_dw.weight")
			x.Dims = []int{5, 1, 32}
			return ts
		}, "tensor a.blk.0.conv_dw.weight has shape [32 1 5]"},
		{"no position table", nil, func(ts []ggufwrite.Tensor) []ggufwrite.Tensor { return dropTensor(ts, "v.position_embd.weight") }, "missing tensor v.position_embd.weight"},
		{"std_bias alone", nil, func(ts []ggufwrite.Tensor) []ggufwrite.Tensor { return dropTensor(ts, "v.std_scale") }, "v.std_bias without v.std_scale"},
		{"no subsampling convolution", nil, func(ts []ggufwrite.Tensor) []ggufwrite.Tensor { return dropTensor(ts, "a.conv1d.1.weight") }, "missing tensor a.conv1d.0.weight or a.conv1d.1.weight"},
		{"K rows not whole heads", nil, func(ts []ggufwrite.Tensor) []ggufwrite.Tensor {
			x := tensor(ts, "v.blk.0.attn_k.weight")
			x.Dims, x.Data = []int{32, 12}, x.Data[:32*12*4]
			return ts
		}, "v.blk.0.attn_k.weight has 12 rows, not whole heads of 16"},
		{"a head width of 2", nil, func(ts []ggufwrite.Tensor) []ggufwrite.Tensor {
			x := tensor(ts, "v.blk.0.attn_q_norm.weight")
			x.Dims, x.Data = []int{2}, x.Data[:8]
			return ts
		}, "the vision head width 2 (the length of v.blk.0.attn_q_norm.weight)"},
		{"a softplus of zero", nil, func(ts []ggufwrite.Tensor) []ggufwrite.Tensor {
			x := tensor(ts, "a.blk.0.per_dim_scale.weight")
			clear(x.Data[:4])
			return ts
		}, ""}, // opens; reading it is refused (below)
	} {
		kvs, ts := parts(t, mmPath(t, "F32"))
		if c.kv != nil {
			kvs = c.kv(kvs)
		}
		if c.ts != nil {
			ts = c.ts(ts)
		}
		p, err := openMMBytes(t, encode(t, kvs, ts))
		if c.want == "" {
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			const n = "model.audio_tower.layers.0.self_attn.per_dim_scale"
			if _, err := p.Float32(n); err == nil || !strings.Contains(err.Error(), n) || !strings.Contains(err.Error(), "a.blk.0.per_dim_scale.weight") {
				t.Errorf("%s: Float32: %v, want an error naming both names", c.name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %q", c.name, err, c.want)
		}
	}
}

// TestMMProjLoadRefuses: a tensor whose shape disagrees with the metadata
// opens and the tower loader refuses it by its Hugging Face name;
// TensorName gives the file's.
func TestMMProjLoadRefuses(t *testing.T) {
	kvs, ts := parts(t, mmPath(t, "F32"))
	x := tensor(ts, "a.blk.1.attn_k_rel.weight")
	x.Dims, x.Data = []int{32, 16}, x.Data[:32*16*4]
	p, err := openMMBytes(t, encode(t, kvs, ts))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := gemma4.ParseAudioConfig(p.ConfigJSON())
	if err != nil {
		t.Fatal(err)
	}
	const hf = "model.audio_tower.layers.1.self_attn.relative_k_proj.weight"
	if _, err := gemma4.LoadAudio(cfg, p); err == nil || !strings.Contains(err.Error(), hf) {
		t.Fatalf("%v, want an error naming %s", err, hf)
	}
	if g, _ := p.TensorName(hf); g != "a.blk.1.attn_k_rel.weight" {
		t.Errorf("TensorName(%s) = %q", hf, g)
	}
}

// TestMMProjTruncated: a file cut anywhere is refused.
func TestMMProjTruncated(t *testing.T) {
	data, err := os.ReadFile(mmPath(t, "F16"))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, 3, 24, 100, 4096, 20000, len(data) / 2, len(data) - 1} {
		if _, err := openMMBytes(t, data[:n]); err == nil {
			t.Errorf("the file cut to %d of %d bytes opens", n, len(data))
		}
	}
}

// TestMMProjRows: Rows gives the rows Float32 gives, the converter's
// changes undone (the patch projection's rows permuted back).
func TestMMProjRows(t *testing.T) {
	p := openMM(t, "F16")
	for _, n := range []string{"model.vision_tower.patch_embedder.input_proj.weight", "model.audio_tower.layers.1.lconv1d.depthwise_conv1d.weight",
		"model.embed_audio.embedding_projection.weight"} {
		all, err := p.Float32(n)
		if err != nil {
			t.Fatal(err)
		}
		sh, _, _ := p.Info(n)
		cols := len(all) / sh[0]
		dst := make([]float32, 3*cols)
		if err := p.Rows(n, 5, dst); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(dst, all[5*cols:8*cols]) {
			t.Errorf("%s: rows 5 to 8 differ from Float32's", n)
		}
	}
	if err := p.Rows("model.audio_tower.layers.0.self_attn.per_dim_scale", 0, make([]float32, 8)); err == nil {
		t.Error("Rows of a 1-D tensor: no error")
	}
}

// TestFindMMProj: the one mmproj*.gguf beside a model, none, or several.
func TestFindMMProj(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		add, want string
		err       bool
	}{
		{"model.gguf", "", false},
		{"mmproj-gemma-4-F16.gguf", "mmproj-gemma-4-F16.gguf", false},
		{"MMPROJ-other.gguf", "", true},
	} {
		if err := os.WriteFile(filepath.Join(dir, c.add), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := gguf.FindMMProj(dir)
		if (err != nil) != c.err || (c.want != "" && got != filepath.Join(dir, c.want)) || (c.want == "" && got != "") {
			t.Errorf("after %s: %q, %v", c.add, got, err)
		}
	}
}

// FuzzOpenMMProj holds the mmproj reader to what the parser lets through:
// no panic; when a file opens, its config parses for the towers it says it
// has, and every tensor reads or names itself. Seed: the F16 file and its
// header alone. Run by go test -fuzz FuzzOpenMMProj ./engine/gemma4/gguf/.
func FuzzOpenMMProj(f *testing.F) {
	data, err := os.ReadFile(mmPath(f, "F16"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	f.Add(data[:4096])
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := openMMBytes(t, data)
		if err != nil {
			return
		}
		if p.Vision {
			if _, err := gemma4.ParseVisionConfig(p.ConfigJSON()); err != nil {
				t.Fatalf("opened, but its vision config does not parse: %v", err)
			}
		}
		if p.Audio {
			if _, err := gemma4.ParseAudioConfig(p.ConfigJSON()); err != nil {
				t.Fatalf("opened, but its audio config does not parse: %v", err)
			}
		}
		for _, n := range p.Names() {
			if _, err := p.Float32(n); err != nil && !strings.Contains(err.Error(), n) {
				t.Fatalf("%s: %v does not name it", n, err)
			}
		}
	})
}
