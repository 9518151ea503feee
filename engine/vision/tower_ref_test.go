package vision

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"testing"

	"verdict/engine/weights"
	"verdict/native"
)

// hostWorkspace holds forwardHost's buffers.
type hostWorkspace struct {
	bufs [6][]float32
}

func (w *hostWorkspace) get(i, n int) []float32 {
	if cap(w.bufs[i]) < n {
		w.bufs[i] = make([]float32, n)
	}
	return w.bufs[i][:n]
}

// hostAct is a channels-last activation [h·w, c] in one of the buffers.
type hostAct struct {
	buf     int
	h, w, c int
}

func normActHost(x []float32, w []float32, c int, gelu bool) {
	native.RMSNormAct(x, x, w, nil, nil, c, normEps, gelu)
}

func shortcutHost(b *block, x []float32) []float32 {
	if !b.skip {
		return nil
	}
	return x
}

// forwardHost is the encoder as it ran before the backend (the slice
// kernels on host buffers), kept as the reference the backend's forward must
// match bit for bit. probe, when not nil, sees each block's output
// (name, [h·w, c]) for tests. ctx is checked after the stem and every
// block; progress hears each step.
func (t *Tower) forwardHost(ws *hostWorkspace, ctx context.Context, pixels []float32, probe func(name string, x []float32, h, w, c int), progress func(done, total int)) ([]float32, error) {
	step, total := 0, Blocks()
	next := func() error {
		step++
		if progress != nil {
			progress(step, total)
		}
		return ctx.Err()
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// Buffer roles rotate; 0..2 are general, 3 holds the stage-2 output,
	// 4 and 5 are attention scratch.
	img := ws.get(0, len(pixels))
	native.CHWToHWC(img, pixels, 3, ImageSize*ImageSize)
	g := native.SameGeom(ImageSize, ImageSize, 3, 2)
	x := hostAct{buf: 1, h: g.OH, w: g.OW, c: stemChannels}
	xs := ws.get(1, g.OH*g.OW*stemChannels)
	native.Conv2D(xs, img, t.stem.packed, t.stem.bias, 3, g)
	normActHost(xs, t.stem.norm, stemChannels, true)
	if probe != nil {
		probe("stem", xs, x.h, x.w, x.c)
	}
	if err := next(); err != nil {
		return nil, err
	}
	var stage2 hostAct
	for s, stage := range t.stages {
		for _, b := range stage {
			x = t.runBlockHost(ws, b, x)
			if probe != nil {
				probe(b.name, ws.bufs[x.buf][:x.h*x.w*x.c], x.h, x.w, x.c)
			}
			if err := next(); err != nil {
				return nil, err
			}
		}
		if s == 2 {
			// Keep the stage-2 output for the MSFA in buffer 3.
			n := x.h * x.w * x.c
			copy(ws.get(3, n), ws.bufs[x.buf][:n])
			stage2 = hostAct{buf: 3, h: x.h, w: x.w, c: x.c}
		}
	}
	// MSFA: nearest-upsample stage 3 to stage 2's size, concatenate
	// (stage 2 first), FFN, average-pool to 16×16, norm.
	hi := stage2
	cat := (x.buf + 1) % 3
	catC := hi.c + x.c
	cb := ws.get(cat, hi.h*hi.w*catC)
	native.UpsampleConcat(cb, ws.bufs[hi.buf][:hi.h*hi.w*hi.c], hi.c, ws.bufs[x.buf][:x.h*x.w*x.c], x.c, hi.h, hi.w, x.h, x.w)
	midBuf := (cat + 1) % 3
	p := hi.h * hi.w
	mid := ws.get(midBuf, p*t.msfa.exp.out)
	native.GemmPacked(mid, cb, t.msfa.exp.packed, p)
	normActHost(mid, t.msfa.exp.norm, t.msfa.exp.out, true)
	proj := ws.get(cat, p*t.msfa.proj.out)
	native.GemmPacked(proj, mid, t.msfa.proj.packed, p)
	normActHost(proj, t.msfa.proj.norm, t.msfa.proj.out, false)
	const outRes = 16
	k := hi.h / outRes
	out := make([]float32, outRes*outRes*t.cfg.HiddenSize)
	native.AvgPool2D(out, proj, hi.h, hi.w, t.cfg.HiddenSize, k)
	normActHost(out, t.msfa.norm, t.cfg.HiddenSize, false)
	if probe != nil {
		probe("msfa", out, outRes, outRes, t.cfg.HiddenSize)
	}
	next()
	return out, nil
}

// runBlockHost applies one block to x (in buffer x.buf of 0..2) and returns the
// output activation (in one of buffers 0..2).
func (t *Tower) runBlockHost(ws *hostWorkspace, b *block, x hostAct) hostAct {
	xb := ws.bufs[x.buf][:x.h*x.w*x.c]
	free := [2]int{(x.buf + 1) % 3, (x.buf + 2) % 3}
	switch b.spec.kind {
	case kindER:
		g := native.SameGeom(x.h, x.w, b.spec.k, b.spec.stride)
		p := g.OH * g.OW
		mid := ws.get(free[0], p*b.mid)
		native.Conv2D(mid, xb, b.convExp.packed, nil, b.in, g)
		normActHost(mid, b.convExp.norm, b.mid, true)
		out := ws.get(free[1], p*b.out)
		native.GemmPacked(out, mid, b.convPwl.packed, p)
		native.RMSNormAct(out, out, b.convPwl.norm, nil, shortcutHost(b, xb), b.out, normEps, false)
		return hostAct{buf: free[1], h: g.OH, w: g.OW, c: b.out}
	case kindUIR:
		cur, h, w := xb, x.h, x.w
		next := 0
		if b.spec.start > 0 {
			g := native.SameGeom(h, w, b.spec.start, 1)
			y := ws.get(free[next], h*w*b.in)
			native.DepthwiseConv2D(y, cur, b.dwStart.dw, b.in, g)
			normActHost(y, b.dwStart.norm, b.in, false)
			cur, next = y, 1-next
		}
		mid := ws.get(free[next], h*w*b.mid)
		native.GemmPacked(mid, cur, b.pwExp.packed, h*w)
		normActHost(mid, b.pwExp.norm, b.mid, true)
		cur, next = mid, 1-next
		if b.spec.k > 0 {
			g := native.SameGeom(h, w, b.spec.k, b.spec.stride)
			y := ws.get(free[next], g.OH*g.OW*b.mid)
			native.DepthwiseConv2D(y, cur, b.dwMid.dw, b.mid, g)
			normActHost(y, b.dwMid.norm, b.mid, true)
			cur, next, h, w = y, 1-next, g.OH, g.OW
		}
		out := ws.get(free[next], h*w*b.out)
		native.GemmPacked(out, cur, b.pwProj.packed, h*w)
		native.RMSNormAct(out, out, b.pwProj.norm, b.gamma, shortcutHost(b, xb), b.out, normEps, false)
		return hostAct{buf: free[next], h: h, w: w, c: b.out}
	default: // kindMQA
		p, c := x.h*x.w, x.c
		n := ws.get(free[0], p*c)
		native.RMSNormAct(n, xb, b.norm, nil, nil, c, normEps, false)
		q := ws.get(free[1], p*b.headsDim)
		native.GemmPacked(q, n, b.query.packed, p)
		kvSrcK, kvSrcV, kp := n, n, p
		if b.spec.kvStride > 1 {
			g := native.SameGeom(x.h, x.w, b.spec.k, b.spec.kvStride)
			kp = g.OH * g.OW
			kd := ws.get(4, 2*kp*c)
			kvSrcK, kvSrcV = kd[:kp*c], kd[kp*c:]
			native.DepthwiseConv2D(kvSrcK, n, b.keyDown.dw, c, g)
			normActHost(kvSrcK, b.keyDown.norm, c, false)
			native.DepthwiseConv2D(kvSrcV, n, b.valDown.dw, c, g)
			normActHost(kvSrcV, b.valDown.norm, c, false)
		}
		kv := ws.get(5, 2*kp*b.spec.dim)
		k, v := kv[:kp*b.spec.dim], kv[kp*b.spec.dim:]
		native.GemmPacked(k, kvSrcK, b.key.packed, kp)
		native.GemmPacked(v, kvSrcV, b.value.packed, kp)
		o := ws.get(free[0], p*b.headsDim) // n is no longer needed
		native.MQAttention(o, q, k, v, p, b.spec.heads, kp, b.spec.dim, float32(1/math.Sqrt(float64(b.spec.dim))))
		out := ws.get(free[1], p*c)
		native.GemmPacked(out, o, b.output.packed, p)
		native.MulRows(out, b.gamma)
		native.Add(out, out, xb)
		return hostAct{buf: free[1], h: x.h, w: x.w, c: c}
	}
}

// TestTowerMatchesHost: the encoder on the built-in backend gives the bits
// of forwardHost (the slice kernels on host buffers, as before the
// backend) at every block's output and at the end, on the tiny fixture's
// pixels with the strong layer-scale gammas (so that every residual block
// moves the output; see TestTowerReferences). A second pass on the same
// tower (its workspace reused) gives the same bits again.
func TestTowerMatchesHost(t *testing.T) {
	dir := tinyDir(t)
	store, err := weights.OpenRecipe(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	tower, err := LoadTower(store, readFile(t, filepath.Join(dir, "config.json")))
	if err != nil {
		t.Fatal(err)
	}
	if tower.Backend() != native.Default() {
		t.Fatalf("LoadTower's backend is %s, want the built-in one", tower.Backend().Name())
	}
	strong, err := weights.NewRecipeStore(strongRecipe(t, readFile(t, filepath.Join(dir, "recipe.json"))), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer strong.Close()
	for s, st := range tower.stages {
		for j, b := range st {
			if b.gamma != nil {
				copy(b.gamma, tensor(t, strong, fmt.Sprintf("%sblocks.%d.%d.layer_scale.gamma", TowerPrefix, s, j)))
			}
		}
	}
	exp, err := weights.OpenSafetensors(filepath.Join(dir, "expected.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer exp.Close()
	pixels := tensor(t, exp, "pixel_values")

	type probed struct {
		name string
		x    []float32
	}
	record := func(into *[]probed) func(string, []float32, int, int, int) {
		return func(name string, x []float32, h, w, c int) {
			if len(x) != h*w*c {
				t.Errorf("%s: %d values for %d×%d×%d", name, len(x), h, w, c)
			}
			*into = append(*into, probed{name, slices.Clone(x)})
		}
	}
	var want, got []probed
	ref, err := tower.forwardHost(&hostWorkspace{}, context.Background(), pixels, record(&want), nil)
	if err != nil {
		t.Fatal(err)
	}
	tower.mu.Lock()
	out, err := tower.forward(context.Background(), pixels, record(&got), nil)
	tower.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) || len(want) != Blocks() {
		t.Fatalf("probed %d outputs, host %d, want %d", len(got), len(want), Blocks())
	}
	for i := range want {
		if got[i].name != want[i].name {
			t.Fatalf("output %d is %s, host's %s", i, got[i].name, want[i].name)
		}
		if at := firstDiff(got[i].x, want[i].x); at >= 0 {
			t.Fatalf("%s: value %d is %g (%#x), host's %g (%#x): not bit-identical", want[i].name, at,
				got[i].x[at], math.Float32bits(got[i].x[at]), want[i].x[at], math.Float32bits(want[i].x[at]))
		}
	}
	again, err := tower.Features(pixels)
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string][]float32{"first pass": out, "second pass": again} {
		if at := firstDiff(v, ref); at >= 0 {
			t.Fatalf("%s: output value %d is %g, host's %g: not bit-identical", name, at, v[at], ref[at])
		}
	}
	t.Logf("%d block outputs and the output bit-identical; output sha256 %x", len(want), hashF32(ref))
}

func firstDiff(a, b []float32) int {
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	return -1
}

func hashF32(x []float32) []byte {
	h := sha256.New()
	var b [4]byte
	for _, v := range x {
		binary.LittleEndian.PutUint32(b[:], math.Float32bits(v))
		h.Write(b[:])
	}
	return h.Sum(nil)
}
