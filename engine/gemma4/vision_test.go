package gemma4

import (
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"
)

// openTowerFixture opens testdata/<name>.tar.gz (a tower fixture,
// verify_towers.go), closed when the test ends.
func openTowerFixture(t testing.TB, name string) *towerFixture {
	t.Helper()
	fx, err := openTowerDir(fixtureDir(t, name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fx.close)
	return fx
}

func (fx *towerFixture) f32(t testing.TB, name string) []float32 {
	t.Helper()
	v, err := fx.ref(name)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func (fx *towerFixture) ints(t testing.TB, name string) ([]int, []int) {
	t.Helper()
	v, shape, err := fx.refInts(name)
	if err != nil {
		t.Fatal(err)
	}
	return v, shape
}

func (fx *towerFixture) tol(t testing.TB, name string) float64 {
	t.Helper()
	v, err := fx.tolerance(name)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// towerCheck is one comparison; the perturbation tests look them up by name.
type towerCheck struct {
	name     string
	err, tol float64
}

func (c towerCheck) ok() bool { return c.err <= c.tol }

func visionPatches(t testing.TB, fx *towerFixture) ([]float32, []Patch) {
	t.Helper()
	pv, pos, err := fx.patches()
	if err != nil {
		t.Fatal(err)
	}
	return pv, pos
}

// visionChecks runs v over the fixture's image and compares every stage
// (visionTowerChecks).
func visionChecks(t testing.TB, fx *towerFixture, v *Vision) []towerCheck {
	t.Helper()
	return visionChecksOf(t, fx, v.Cfg, v.Encode)
}

func loadVisionFixture(t testing.TB) (*towerFixture, *Vision) {
	t.Helper()
	fx := openTowerFixture(t, "gemma4-synthetic-vision")
	cfg, err := ParseVisionConfig(fx.cfg)
	if err != nil {
		t.Fatal(err)
	}
	v, err := LoadVision(cfg, fx.st)
	if err != nil {
		t.Fatal(err)
	}
	return fx, v
}

func TestVisionForward(t *testing.T) {
	fx, v := loadVisionFixture(t)
	for _, c := range visionChecks(t, fx, v) {
		t.Logf("%-18s max err %.3g (tolerance %.3g)", c.name, c.err, c.tol)
		if !c.ok() {
			t.Errorf("%s: error %.3g over the tolerance %.3g", c.name, c.err, c.tol)
		}
	}
}

func TestVisionPreprocess(t *testing.T) {
	fx := openTowerFixture(t, "gemma4-synthetic-vision")
	pc := ImageProcessorConfig{fx.meta.Processor.PatchSize, fx.meta.Processor.MaxSoftTokens, fx.meta.Processor.PoolingKernel}
	img, shape := fx.ints(t, "image_u8")
	rgb := make([]uint8, len(img))
	for i, v := range img {
		rgb[i] = uint8(v)
	}
	pixels, pos, nSoft, err := pc.PatchifyImage(rgb, shape[0], shape[1])
	if err != nil {
		t.Fatal(err)
	}
	wantPV, wantPos := visionPatches(t, fx)
	if e, err := maxAbs(pixels, wantPV); err != nil || e != 0 {
		t.Errorf("pixel_values differ from the processor's by %g (%v)", e, err)
	}
	if !slices.Equal(pos, wantPos) {
		t.Error("patch positions differ from the processor's")
	}
	var want int
	if err := json.Unmarshal(fx.meta.NumSoft, &want); err != nil || nSoft != want {
		t.Errorf("%d soft tokens, the processor said %s", nSoft, fx.meta.NumSoft)
	}
	// The resize case: the 50x70 image's target size and patch grid.
	rimg, rshape := fx.ints(t, "resize_image_u8")
	th, tw, err := pc.TargetSize(rshape[0], rshape[1])
	if err != nil {
		t.Fatal(err)
	}
	rpos, _ := fx.ints(t, "resize_position_ids")
	ps := pc.PatchSize
	if n := len(rpos) / 2; n != th/ps*tw/ps {
		t.Errorf("target %dx%d gives %d patches, the processor made %d", th, tw, th/ps*tw/ps, n)
	}
	for i := 0; i < len(rpos)/2; i++ {
		if rpos[2*i] != i%(tw/ps) || rpos[2*i+1] != i/(tw/ps) {
			t.Fatalf("resize patch %d at (%d, %d), want row-major in a %d-wide grid", i, rpos[2*i], rpos[2*i+1], tw/ps)
		}
	}
	rgb2 := make([]uint8, len(rimg))
	for i, v := range rimg {
		rgb2[i] = uint8(v)
	}
	if _, _, _, err := pc.PatchifyImage(rgb2, rshape[0], rshape[1]); err == nil || !strings.Contains(err.Error(), "not implemented") {
		t.Errorf("a %dx%d image that needs a resize: err %v, want a refusal naming the resize", rshape[0], rshape[1], err)
	}
}

func TestVisionRefuses(t *testing.T) {
	fx, v := loadVisionFixture(t)
	pv, pos := visionPatches(t, fx)
	bad := slices.Clone(pos)
	bad[3] = Patch{v.Cfg.PositionEmbeddingSize, 0}
	odd := slices.Clone(pos[:len(pos)-1])
	for _, tc := range []struct {
		name   string
		pixels []float32
		pos    []Patch
		want   string
	}{
		{"no patches", nil, nil, "no patches"},
		{"short pixels", pv[:len(pv)-1], pos, "pixel values"},
		{"position past the table", pv, bad, "outside the position table"},
		{"patches not a multiple of k²", pv[:len(odd)*48], odd, "multiple of pooling_kernel_size"},
		{"only padding", make([]float32, 9*48), slices.Repeat([]Patch{{-1, -1}}, 9), "every patch is padding"},
	} {
		if _, _, err := v.Encode(tc.pixels, tc.pos, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want one containing %q", tc.name, err, tc.want)
		}
	}
	pc := ImageProcessorConfig{4, 71, 3}
	if _, _, err := pc.TargetSize(96, 96); err == nil || !strings.Contains(err.Error(), "max_soft_tokens") {
		t.Errorf("max_soft_tokens 71: err %v", err)
	}
}

func TestParseVisionConfig(t *testing.T) {
	fx := openTowerFixture(t, "gemma4-synthetic-vision")
	c, err := ParseVisionConfig(fx.cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := VisionConfig{Hidden: 32, Intermediate: 64, Layers: 2, Heads: 2, KVHeads: 1, HeadDim: 16, PatchSize: 4,
		PoolingKernel: 3, PositionEmbeddingSize: 32, RopeTheta: 100, Eps: 1e-6, ClippedLinears: true, Standardize: true,
		TextHidden: 32}
	if *c != want {
		t.Errorf("config %+v, want %+v", *c, want)
	}
	var m map[string]any
	if err := json.Unmarshal(fx.cfg, &m); err != nil {
		t.Fatal(err)
	}
	vc := m["vision_config"].(map[string]any)
	for _, tc := range []struct {
		key  string
		val  any
		want string
	}{
		{"num_key_value_heads", 3.0, "multiple of num_key_value_heads"},
		{"head_dim", 18.0, "multiple of 4"},
		{"hidden_size", 0.0, "hidden_size = 0"},
		{"hidden_activation", "relu", "hidden_activation"},
		{"rope_parameters", map[string]any{"rope_type": "yarn"}, "rope_type"},
		{"rms_norm_eps", -1.0, "rms_norm_eps"},
	} {
		old := vc[tc.key]
		vc[tc.key] = tc.val
		js, _ := json.Marshal(m)
		vc[tc.key] = old
		if _, err := ParseVisionConfig(js); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s = %v: err %v, want one containing %q", tc.key, tc.val, err, tc.want)
		}
	}
	if _, err := ParseVisionConfig([]byte(`{"model_type": "gemma3n"}`)); err == nil || !strings.Contains(err.Error(), "model_type") {
		t.Errorf("gemma3n: err %v", err)
	}
}

func TestLoadVisionRefuses(t *testing.T) {
	fx := openTowerFixture(t, "gemma4-synthetic-vision")
	cfg, err := ParseVisionConfig(fx.cfg)
	if err != nil {
		t.Fatal(err)
	}
	wrong := *cfg
	wrong.Intermediate = 65
	if _, err := LoadVision(&wrong, fx.st); err == nil || !strings.Contains(err.Error(), "mlp.gate_proj.linear.weight: shape") {
		t.Errorf("intermediate 65: err %v, want the gate projection's shape named", err)
	}
	wrong = *cfg
	wrong.Layers = 3
	if _, err := LoadVision(&wrong, fx.st); err == nil || !strings.Contains(err.Error(), "encoder.layers.2.") {
		t.Errorf("3 layers: err %v, want layer 2's tensor named", err)
	}
}

// TestVisionChecksCanFail perturbs one weight or setting at a time and
// requires the checks to catch it.
func TestVisionChecksCanFail(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(v *Vision)
		fails  string // a check that must fail
	}{
		{"layer 1 k_norm[0] × 1.05", func(v *Vision) { v.Layers[1].KNorm[0] *= 1.05 }, "hidden_states[2]"},
		{"position table x row 5 × 1.01", func(v *Vision) {
			for j := range v.Cfg.Hidden {
				v.PosTable[5*v.Cfg.Hidden+j] *= 1.01
			}
		}, "hidden_states[0]"},
		{"layer 0 q_proj input clip off", func(v *Vision) {
			v.Layers[0].Q.inMin, v.Layers[0].Q.inMax = float32(math.Inf(-1)), float32(math.Inf(1))
		}, "hidden_states[1]"},
		{"layer 0 down_proj output bound × 0.99", func(v *Vision) { v.Layers[0].Down.outMax *= 0.99 }, "hidden_states[1]"},
		{"RoPE θ 101", func(v *Vision) {
			for i := range v.invFreq {
				v.invFreq[i] = 1 / float32(math.Pow(101, float64(2*i)/float64(v.Cfg.HeadDim/2)))
			}
		}, "hidden_states[1]"},
		{"RoPE frequencies 0 and 1 swapped", func(v *Vision) { v.invFreq[0], v.invFreq[1] = v.invFreq[1], v.invFreq[0] }, "hidden_states[1]"},
		{"std_scale[3] × 1.01", func(v *Vision) { v.StdScale[3] *= 1.01 }, "tower_output"},
		{"embed_vision row 0 × 1.01", func(v *Vision) {
			for j := range v.Cfg.Hidden {
				v.EmbedProj[j] *= 1.01
			}
		}, "soft_tokens"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fx, v := loadVisionFixture(t)
			tc.mutate(v)
			for _, c := range visionChecks(t, fx, v) {
				if c.name == tc.fails {
					if c.ok() {
						t.Errorf("%s still passes (error %.3g, tolerance %.3g)", c.name, c.err, c.tol)
					}
					return
				}
			}
			t.Fatalf("no check %s", tc.fails)
		})
	}
}
