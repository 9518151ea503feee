package gemma4

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"verdict/engine/weights"
	"verdict/native"
)

// The tower fixtures' families (meta.json "family"): testdata/
// gemma4-synthetic-vision and gemma4-synthetic-audio
// (build/fixtures/make_gemma4_mm_fixtures.py), every stage of one tower
// against transformers' float32 and float64 answers.
const (
	FamilyVision = "gemma4-vision"
	FamilyAudio  = "gemma4-audio"
)

// towerFixture is a tower fixture folder, opened: its config, references
// (expected.safetensors), weights and meta.json.
type towerFixture struct {
	dir  string
	cfg  []byte
	exp  map[string]refTensor
	st   weights.Store
	meta struct {
		Family     string             `json:"family"`
		Tolerances map[string]float64 `json:"tolerances"`
		Dist       map[string]float64 `json:"transformers_f32_vs_f64"`
		Processor  struct {
			PatchSize     int `json:"patch_size"`
			MaxSoftTokens int `json:"max_soft_tokens"`
			PoolingKernel int `json:"pooling_kernel_size"`
		} `json:"image_processor"`
		NumSoft json.RawMessage `json:"num_soft_tokens"`
	}
}

// openTowerDir opens the tower fixture folder dir; close frees its weights.
func openTowerDir(dir string) (*towerFixture, error) {
	fx := &towerFixture{dir: dir}
	var err error
	if fx.cfg, err = os.ReadFile(filepath.Join(dir, "config.json")); err != nil {
		return nil, fmt.Errorf("tower fixture: %w", err)
	}
	mj, err := os.ReadFile(filepath.Join(dir, "meta.json"))
	if err != nil {
		return nil, fmt.Errorf("tower fixture: %w", err)
	}
	if err := json.Unmarshal(mj, &fx.meta); err != nil {
		return nil, fmt.Errorf("tower fixture: meta.json: %w", err)
	}
	if fx.exp, err = readExpected(filepath.Join(dir, "expected.safetensors")); err != nil {
		return nil, fmt.Errorf("tower fixture: %w", err)
	}
	if fx.st, err = weights.Open(dir); err != nil {
		return nil, fmt.Errorf("tower fixture: %w", err)
	}
	return fx, nil
}

func (fx *towerFixture) close() { fx.st.Close() }

// ref is the F32 reference name.
func (fx *towerFixture) ref(name string) ([]float32, error) {
	r, ok := fx.exp[name]
	if !ok || r.f == nil {
		return nil, fmt.Errorf("tower fixture: expected.safetensors has no F32 %s", name)
	}
	return r.f, nil
}

// refInts is the I32 reference name and its shape.
func (fx *towerFixture) refInts(name string) ([]int, []int, error) {
	r, ok := fx.exp[name]
	if !ok || r.i == nil {
		return nil, nil, fmt.Errorf("tower fixture: expected.safetensors has no I32 %s", name)
	}
	return r.i, r.shape, nil
}

// tolerance is meta.json's tolerance for a check: 4× transformers' own
// float32 distance from its float64 answer, at least 1e-5.
func (fx *towerFixture) tolerance(name string) (float64, error) {
	v, ok := fx.meta.Tolerances[name]
	if !ok || !(v > 0) {
		return 0, fmt.Errorf("tower fixture: meta.json has no tolerance %s", name)
	}
	return v, nil
}

// patches is the vision fixture's image: its patches' pixels and positions.
func (fx *towerFixture) patches() ([]float32, []Patch, error) {
	pv, err := fx.ref("pixel_values")
	if err != nil {
		return nil, nil, err
	}
	ids, shape, err := fx.refInts("image_position_ids")
	if err != nil {
		return nil, nil, err
	}
	if len(shape) == 0 || len(ids) < 2*shape[0] {
		return nil, nil, fmt.Errorf("tower fixture: image_position_ids of shape %v", shape)
	}
	pos := make([]Patch, shape[0])
	for i := range pos {
		pos[i] = Patch{ids[2*i], ids[2*i+1]}
	}
	return pv, pos, nil
}

// clip is clip b of the audio fixture's batch: features [T, bins] and mask.
func (fx *towerFixture) clip(b int) ([]float32, []bool, error) {
	f, err := fx.ref("input_features")
	if err != nil {
		return nil, nil, err
	}
	m, shape, err := fx.refInts("input_features_mask")
	if err != nil {
		return nil, nil, err
	}
	if len(shape) != 2 || b >= shape[0] || len(m) != shape[0]*shape[1] || len(f)%(shape[0]*shape[1]) != 0 {
		return nil, nil, fmt.Errorf("tower fixture: clip %d of input_features_mask %v, %d features", b, shape, len(f))
	}
	T := shape[1]
	F := len(f) / (shape[0] * T)
	mask := make([]bool, T)
	for i := range mask {
		mask[i] = m[b*T+i] != 0
	}
	return f[b*T*F : (b+1)*T*F], mask, nil
}

// scaledErr is max |a−b| / max(1, max|b|) over each block of n values (a
// layer), the largest over the blocks.
func scaledErr(a, b []float32, n int) float64 {
	var worst float64
	for s := 0; s+n <= len(b); s += n {
		e, _ := maxAbs(a[s:s+n], b[s:s+n])
		worst = max(worst, e/max(1, maxMag(b[s:s+n])))
	}
	return worst
}

// visionEncoder is Vision.Encode's signature: the plain-Go tower and
// VisionOps both have it.
type visionEncoder func(pixels []float32, pos []Patch, trace *VisionTrace) ([]float32, int, error)

// visionTowerChecks runs enc over the fixture's image and compares every
// stage with the fixture's references and tolerances: the hidden states and
// the pooled output scaled by max(1, max|reference|), the tower's output
// and the soft tokens unscaled (as the fixture measured transformers' own
// error), and the soft tokens' count exactly.
func visionTowerChecks(fx *towerFixture, cfg *VisionConfig, enc visionEncoder) ([]Check, error) {
	pv, pos, err := fx.patches()
	if err != nil {
		return nil, err
	}
	var tr VisionTrace
	soft, n, err := enc(pv, pos, &tr)
	if err != nil {
		return nil, err
	}
	var out []Check
	check := func(name, ref, tolKey string, got []float32, scaled bool, block, k int) error {
		r, err := fx.ref(ref)
		if err != nil {
			return err
		}
		tol, err := fx.tolerance(tolKey)
		if err != nil {
			return err
		}
		if block > 0 {
			if (k+1)*block > len(r) {
				return fmt.Errorf("tower fixture: %s: block %d of %d values past its %d", name, k, block, len(r))
			}
			r = r[k*block : (k+1)*block]
		}
		if len(got) != len(r) {
			return fmt.Errorf("tower fixture: %s: %d values, the reference has %d", name, len(got), len(r))
		}
		var e float64
		if scaled {
			e = scaledErr(got, r, len(r))
		} else if e, err = maxAbs(got, r); err != nil {
			return fmt.Errorf("tower fixture: %s: %w", name, err)
		}
		out = append(out, Check{Name: name, MaxErr: e, Tol: tol})
		return nil
	}
	block := len(pos) * cfg.Hidden
	for l, h := range tr.Hidden {
		if err := check(fmt.Sprintf("hidden_states[%d]", l), "hidden_states", "vision_hidden_states_scaled", h, true, block, l); err != nil {
			return nil, err
		}
	}
	for _, c := range []struct {
		name, ref, tol string
		got            []float32
		scaled         bool
	}{
		{"pooled", "pooled", "vision_pooled", tr.Pooled, true},
		{"pooled_f64", "pooled_f64", "vision_pooled", tr.Pooled, true},
		{"tower_output", "tower_output", "vision_tower_output", tr.TowerOut, false},
		{"tower_output_f64", "tower_output_f64", "vision_tower_output", tr.TowerOut, false},
		{"soft_tokens", "soft_tokens", "vision_soft_tokens", soft, false},
		{"soft_tokens_f64", "soft_tokens_f64", "vision_soft_tokens", soft, false},
	} {
		if err := check(c.name, c.ref, c.tol, c.got, c.scaled, 0, 0); err != nil {
			return nil, err
		}
	}
	if hs, _ := fx.ref("hidden_states"); len(tr.Hidden)*block != len(hs) {
		return nil, fmt.Errorf("tower fixture: %d hidden states of %d values, the reference holds %d", len(tr.Hidden), block, len(hs))
	}
	ref, _ := fx.ref("soft_tokens")
	want := len(ref) / cfg.TextHidden
	out = append(out, Check{Name: "soft_token_count", MaxErr: float64(abs(n - want)), Note: fmt.Sprintf("%d soft tokens, transformers %d", n, want)})
	return out, nil
}

// audioEncoder is Audio.Encode's signature: the plain-Go tower and
// AudioOps both have it.
type audioEncoder func(feats []float32, mask []bool, trace *AudioTrace) ([]float32, []bool, error)

// audioTowerChecks runs enc over both clips of the fixture and compares
// every stage on the valid output frames (padding frames never reach a
// valid one) with the fixture's references and tolerances: the hidden
// states (the last layer's also against float64) and each layer's parts scaled by max(1, the reference block's
// max|value|), the tower's output and the soft tokens unscaled, and the
// output mask exactly (frames that differ from transformers').
func audioTowerChecks(fx *towerFixture, cfg *AudioConfig, enc audioEncoder) ([]Check, error) {
	om, oshape, err := fx.refInts("output_mask")
	if err != nil {
		return nil, err
	}
	if len(oshape) != 2 || len(om) != oshape[0]*oshape[1] {
		return nil, fmt.Errorf("tower fixture: output_mask of shape %v", oshape)
	}
	B, T2 := oshape[0], oshape[1]
	H, O, D := cfg.Hidden, cfg.OutputDims, cfg.TextHidden
	worst := map[string]float64{}
	var names []string
	maskOff := 0
	cmp := func(name string, got []float32, ref string, k, b, w int, scaled bool) error {
		r, err := fx.ref(ref)
		if err != nil {
			return err
		}
		base := ((k*B + b) * T2) * w
		if (k+1)*B*T2*w > len(r) || len(got) < T2*w {
			return fmt.Errorf("tower fixture: %s: %d values against a reference of %d (block %d, clip %d, width %d)", name, len(got), len(r), k, b, w)
		}
		var e float64
		for i := range T2 {
			if om[b*T2+i] == 0 {
				continue
			}
			d, err := maxAbs(got[i*w:(i+1)*w], r[base+i*w:base+(i+1)*w])
			if err != nil {
				return fmt.Errorf("tower fixture: %s: %w", name, err)
			}
			e = max(e, d)
		}
		if scaled {
			e /= max(1, maxMag(r[k*B*T2*w:(k+1)*B*T2*w]))
		}
		if _, ok := worst[name]; !ok {
			names = append(names, name)
		}
		worst[name] = max(worst[name], e)
		return nil
	}
	for b := range B {
		feats, mask, err := fx.clip(b)
		if err != nil {
			return nil, err
		}
		var tr AudioTrace
		soft, outMask, err := enc(feats, mask, &tr)
		if err != nil {
			return nil, err
		}
		if len(outMask) != T2 {
			return nil, fmt.Errorf("tower fixture: clip %d: %d output frames, transformers %d", b, len(outMask), T2)
		}
		for i, m := range outMask {
			if m != (om[b*T2+i] != 0) {
				maskOff++
			}
		}
		for l, h := range tr.Hidden {
			if err := cmp(fmt.Sprintf("hidden_states[%d]", l), h, "hidden_states", l, b, H, true); err != nil {
				return nil, err
			}
		}
		if last := len(tr.Hidden) - 1; last >= 0 {
			if err := cmp("hidden_states_f64[last]", tr.Hidden[last], "hidden_states_f64", last, b, H, true); err != nil {
				return nil, err
			}
		}
		for l := range tr.FF1 {
			for _, part := range []struct {
				name string
				v    []float32
			}{{"ff1", tr.FF1[l]}, {"attn", tr.Attn[l]}, {"lconv", tr.LConv[l]}, {"ff2", tr.FF2[l]}} {
				ref := fmt.Sprintf("layer%d_%s", l, part.name)
				if err := cmp(ref, part.v, ref, 0, b, H, true); err != nil {
					return nil, err
				}
			}
		}
		for _, c := range []struct {
			name string
			got  []float32
			w    int
		}{{"tower_output", tr.TowerOut, O}, {"tower_output_f64", tr.TowerOut, O}, {"soft_tokens", soft, D}, {"soft_tokens_f64", soft, D}} {
			if err := cmp(c.name, c.got, c.name, 0, b, c.w, false); err != nil {
				return nil, err
			}
		}
	}
	tolOf := map[string]string{"tower_output": "audio_tower_output", "tower_output_f64": "audio_tower_output",
		"soft_tokens": "audio_soft_tokens", "soft_tokens_f64": "audio_soft_tokens"}
	var out []Check
	for _, n := range names {
		key, ok := tolOf[n]
		if !ok {
			key = "audio_hidden_states_scaled"
		}
		tol, err := fx.tolerance(key)
		if err != nil {
			return nil, err
		}
		out = append(out, Check{Name: n, MaxErr: worst[n], Tol: tol})
	}
	out = append(out, Check{Name: "output_mask", MaxErr: float64(maskOff), Note: "frames unlike transformers'"})
	return out, nil
}

// VerifyTowerFixture runs every check of the Gemma 4 tower fixture folder
// dir (meta.json family gemma4-vision or gemma4-audio): the plain-Go tower
// (ref, on the CPU), then the same checks of the tower on backend be's
// operations (ops: VisionOps or AudioOps; nil: native.Default()). An error
// means a check could not run; a check that misses its tolerance is a Check
// that is not OK.
func VerifyTowerFixture(dir string, be *native.Backend) (ref, ops []Check, err error) {
	fx, err := openTowerDir(dir)
	if err != nil {
		return nil, nil, err
	}
	defer fx.close()
	switch fx.meta.Family {
	case FamilyVision:
		cfg, err := ParseVisionConfig(fx.cfg)
		if err != nil {
			return nil, nil, err
		}
		v, err := LoadVision(cfg, fx.st)
		if err != nil {
			return nil, nil, err
		}
		if ref, err = visionTowerChecks(fx, cfg, v.Encode); err != nil {
			return nil, nil, err
		}
		o, err := NewVisionOps(v, be)
		if err != nil {
			return nil, nil, err
		}
		defer o.Close()
		ops, err = visionTowerChecks(fx, cfg, o.Encode)
		return ref, ops, err
	case FamilyAudio:
		cfg, err := ParseAudioConfig(fx.cfg)
		if err != nil {
			return nil, nil, err
		}
		a, err := LoadAudio(cfg, fx.st)
		if err != nil {
			return nil, nil, err
		}
		if ref, err = audioTowerChecks(fx, cfg, a.Encode); err != nil {
			return nil, nil, err
		}
		o, err := NewAudioOps(a, be)
		if err != nil {
			return nil, nil, err
		}
		defer o.Close()
		ops, err = audioTowerChecks(fx, cfg, o.Encode)
		return ref, ops, err
	}
	return nil, nil, fmt.Errorf("tower fixture: meta.json family %q is neither %s nor %s", fx.meta.Family, FamilyVision, FamilyAudio)
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}
