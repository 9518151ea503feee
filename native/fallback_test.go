//go:build linux || darwin

package native

import (
	"math"
	"slices"
	"strings"
	"testing"
)

// partialTable is a backend library over host memory (as a new GPU
// backend would start): the device, buffer and stream parts whole (bind
// copies, as a GPU's does; transfers are memmove; graph_begin records
// nothing but says it does), and of the op table gather alone, doubled
// (so the test can tell it ran). Every other operation is left to the CPU.
const partialTable = `#include "backend.h"
#include <stdlib.h>
#include <string.h>
static int graphs;
static void *h_alloc(vd_backend *b, size_t n) { (void)b; return calloc(1, n ? n : 64); }
static void h_release(vd_backend *b, void *p, size_t n) { (void)b; (void)n; free(p); }
static void *h_bind(vd_backend *b, void *h, size_t n) { (void)b; void *p = malloc(n ? n : 64); if (p && n) memcpy(p, h, n); return p; }
static void h_unbind(vd_backend *b, void *p, void *h, size_t n) { (void)b; (void)h; (void)n; free(p); }
static int h_info(vd_backend *b, vd_info *o) { (void)b; memset(o, 0, sizeof *o); strcpy(o->name, "partial (test)"); return 0; }
static int h_limits(vd_backend *b, vd_limits *o) { (void)b; (void)o; return 1; }
static vd_stream *h_stream_new(vd_backend *b) { (void)b; return calloc(1, 64); }
static void h_stream_free(vd_stream *s) { free(s); }
static void h_move(vd_stream *s, void *d, const void *x, size_t n) { (void)s; memmove(d, x, n); }
static int h_sync(vd_stream *s) { (void)s; return 0; }
static int h_graph_begin(vd_stream *s) { (void)s; return 0; }
static void *h_graph_end(vd_stream *s) { (void)s; graphs++; return &graphs; }
static void h_graph_run(vd_stream *s, void *g) { (void)s; (void)g; }
static void h_graph_free(vd_backend *b, void *g) { (void)b; (void)g; graphs--; }
static int h_loop_begin(vd_stream *s) { (void)s; return 1; }
static void h_loop_while(vd_stream *s, vd_tensor c, vd_tensor i, int64_t l) { (void)s; (void)c; (void)i; (void)l; }
static void h_gather(vd_stream *s, vd_tensor y, vd_tensor x, vd_tensor idx) {
	(void)s;
	for (int64_t i = 0; i < idx.rows * idx.cols; i++)
		for (int64_t c = 0; c < x.cols; c++)
			((float *)y.data)[i * x.cols + c] = 2 * ((float *)x.data)[((int32_t *)idx.data)[i] * x.cols + c];
}
int vd_partial_graphs(void) { return graphs; }
static vd_backend t;
vd_backend *vd_partial_backend(int dev, char *err, size_t n) {
	(void)dev; (void)err; (void)n;
	t.abi = VD_ABI; t.name = "partial";
	t.device.info = h_info; t.device.limits = h_limits;
	t.buffer.alloc = h_alloc; t.buffer.release = h_release; t.buffer.bind = h_bind; t.buffer.unbind = h_unbind;
	t.stream.stream_new = h_stream_new; t.stream.stream_free = h_stream_free;
	t.stream.upload = h_move; t.stream.download = h_move; t.stream.copy = h_move; t.stream.sync = h_sync;
	t.stream.graph_begin = h_graph_begin; t.stream.graph_end = h_graph_end;
	t.stream.graph_run = h_graph_run; t.stream.graph_free = h_graph_free;
	t.stream.loop_begin = h_loop_begin; t.stream.loop_while = h_loop_while;
	t.op.gather = h_gather;
	return &t;
}
`

// openPartial registers partialTable's library as "partial" for the test.
func openPartial(t *testing.T) *Backend {
	t.Helper()
	lib := fakeLib(t, partialTable)
	l := &Library{Name: "partial", Kind: "partial", File: CUDALibrary, Env: "VERDICT_PARTIAL_LIB",
		OpenSym: "vd_partial_backend", Max: 1}
	d := l.Driver()
	d.Auto = false
	register(t, d)
	t.Setenv("VERDICT_PARTIAL_LIB", lib)
	b, err := Open("partial")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// opsEnv runs operations on one backend: inputs uploaded to memory it
// allocates, weights bound to it, results downloaded by name.
type opsEnv struct {
	t   *testing.T
	be  *Backend
	st  *Stream
	w   *Bound
	buf []*Buffer
	out map[string][]float32
}

func (e *opsEnv) alloc(d DType, rows, cols int) Tensor {
	m, err := e.be.Alloc(4*rows*cols + 4)
	if err != nil {
		e.t.Fatal(err)
	}
	e.buf = append(e.buf, m)
	return m.Tensor(0, d, rows, cols)
}

func (e *opsEnv) f32(x []float32, rows, cols int) Tensor {
	t := e.alloc(F32, rows, cols)
	e.st.Upload(t, x)
	return t
}

func (e *opsEnv) i32(x []int32) Tensor {
	t := e.alloc(I32, 1, len(x))
	e.st.UploadI32(t, x)
	return t
}

func (e *opsEnv) mat(m Matrix) Tensor {
	t, err := e.w.Matrix(m)
	if err != nil {
		e.t.Fatal(err)
	}
	return t
}

// keep downloads t under name (after a sync, so an operation's error
// shows where it happened).
func (e *opsEnv) keep(name string, t Tensor) {
	if err := e.st.Sync(); err != nil {
		e.t.Fatalf("%s: %v", name, err)
	}
	x := make([]float32, t.Len())
	if t.DType() == I32 {
		v := make([]int32, t.Len())
		e.st.DownloadI32(v, t)
		for i := range v {
			x[i] = float32(v[i])
		}
	} else {
		e.st.Download(x, t)
	}
	if err := e.st.Sync(); err != nil {
		e.t.Fatal(err)
	}
	e.out[name] = x
}

func (e *opsEnv) free() {
	e.w.Free()
	for _, m := range e.buf {
		m.Free()
	}
	e.st.Close()
}

// runOps runs a program of most of the table's operations (the model's,
// the towers', the loops' bookkeeping) on be from seed 21's data, and
// returns every result by name.
func runOps(t *testing.T, be *Backend) map[string][]float32 {
	st, err := be.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	e := &opsEnv{t: t, be: be, st: st, w: be.NewBound(), out: map[string][]float32{}}
	defer e.free()
	r := newRand(21)
	const n, d, rows = 5, 128, 37
	xs := randVec(r, n*d, 1)
	x := e.f32(xs, n, d)
	ids := e.i32([]int32{36, 0, 7, 7, 20})
	for _, dt := range []DType{F32, BF16, Q4} {
		m := randMatrix(r, F32, rows, d)
		if dt == Q4 {
			m = Quantize(m, 64)
		} else if dt == BF16 {
			m = randMatrix(r, BF16, rows, d)
		}
		w := e.mat(m)
		y := e.alloc(F32, n, rows)
		e.st.Linear(y, x, w)
		e.keep("linear "+dt.String(), y)
		yr := e.alloc(F32, n, 5)
		e.st.LinearRows(yr, x, w, ids)
		e.keep("linear_rows "+dt.String(), yr)
		em := e.alloc(F32, 5, d)
		e.st.Embed(em, w, ids, 1.5)
		e.keep("embed "+dt.String(), em)
	}
	// Row operations, in place and not.
	nw := e.f32(randVec(r, d, 1), 1, d)
	y := e.alloc(F32, n, d)
	e.st.RMSNorm(y, x, nw, d, 1e-6)
	e.keep("rmsnorm", y)
	rms := e.alloc(F32, 1, n)
	e.st.RowRMS(rms, x, d, 1e-6)
	e.keep("row_rms", rms)
	e.st.ScaleRows(y, rms, d)
	e.keep("scale_rows", y)
	e.st.MulRows(y, nw)
	e.keep("mul_rows", y)
	b := e.f32(randVec(r, n*d, 1), n, d)
	e.st.GeluMul(y, x, b)
	e.keep("gelu_mul", y)
	e.st.Add(y, y, b)
	e.keep("add in place", y)
	e.st.Scale(y, y, 0.25)
	e.keep("scale", y)
	e.st.AddRep(y, y, nw)
	e.keep("add_rep", y)
	g := e.f32(randVec(r, n*d, 1), n, d)
	e.st.SparseGeluMul(g, b, d, 1.0)
	e.keep("sparse_gelu_mul", g)
	xa := e.f32(xs, n, d)
	e.st.NormAdd(y, xa, nw, b, g, d, 1e-6, 0.5)
	e.keep("norm_add y", y)
	e.keep("norm_add x", xa)
	// RoPE, and the fused norm, rope and scatter into a pool.
	const heads, hd = 4, 32
	pos := e.i32([]int32{3, 9, 0, 17, 4})
	inv := make([]float32, hd/2)
	for i := range inv {
		inv[i] = float32(math.Pow(10000, -2*float64(i)/hd))
	}
	invT := e.f32(inv, 1, hd/2)
	xr := e.f32(xs, n, d)
	e.st.RoPE(xr, pos, heads, hd, invT)
	e.keep("rope", xr)
	pool := e.f32(randVec(r, 8*d, 1), 8, d)
	xn := e.f32(xs, n, d)
	e.st.NormRoPE(xn, e.f32(randVec(r, hd, 1), 1, hd), 1e-6, pos, heads, hd, invT, pool, e.i32([]int32{6, 1, 0, 3, 7}))
	e.keep("norm_rope x", xn)
	e.keep("norm_rope pool", pool)
	// AltUp's router, coefficients, prediction and correction.
	const no, nc = 4, 16
	rw := e.mat(NewF32(no, d, randVec(r, no*d, 0.1)))
	cw := e.mat(NewF32(nc, no, randVec(r, nc*no, 1)))
	f := e.alloc(F32, n, d)
	ry, cy := e.alloc(F32, n, no), e.alloc(F32, n, nc)
	e.st.Router(ry, f, x, nw, rw, d, 1e-6, 1.0/d)
	e.keep("router", ry)
	e.st.RouterCoef(ry, f, x, nw, rw, d, 1e-6, 1.0/d, cw, cy, 1, true)
	e.keep("router_coef", cy)
	h4 := e.f32(randVec(r, 4*n*d, 1), 4*n, d)
	pred := e.alloc(F32, 4*n, d)
	e.st.AltUpPredict(pred, h4, cy, n, d)
	e.keep("altup_predict", pred)
	corr := e.alloc(F32, 4*n, d)
	e.st.AltUpCorrect(corr, pred, x, ry, n, d)
	e.keep("altup_correct", corr)
	// The sparse MLP over q4 weights.
	const inter = 256
	up, downT := e.mat(Quantize(randMatrix(r, F32, inter, d), 64)), e.mat(Quantize(randMatrix(r, F32, inter, d), 64))
	gs := e.f32(randVec(r, n*inter, 1), n, inter)
	hs, idx := e.alloc(F32, n, inter), e.alloc(I32, n, inter)
	e.st.SparseMLP(y, gs, hs, idx, x, up, downT, 1.0)
	e.keep("sparse_mlp", y)
	// Paged attention: keys of two sequences in blocks of 4.
	const hq, hkv, ad, block = 4, 2, 16, 4
	q := e.f32(randVec(r, 3*hq*ad, 1), 3, hq*ad)
	kp, vp := e.f32(randVec(r, 6*block*hkv*ad, 1), 6*block, hkv*ad), e.f32(randVec(r, 6*block*hkv*ad, 1), 6*block, hkv*ad)
	ao := e.alloc(F32, 3, hq*ad)
	e.st.Attention(&PagedAttn{Out: ao, Q: q, K: kp, V: vp,
		QPos: e.i32([]int32{9, 10, 5}), QSeq: e.i32([]int32{0, 0, 1}), SeqEnt: e.i32([]int32{0, 2, 3}),
		EntBlk: e.i32([]int32{4, 1, 0}), EntPos: e.i32([]int32{0, 4, 0}), EntLen: e.i32([]int32{4, 7, 6}),
		HeadsQ: hq, HeadsKV: hkv, HeadDim: ad, Block: block, MaxKeys: 11, Scale: 0.25})
	e.keep("attention", ao)
	// Memory work: gather is the backend's own (doubled), the rest the CPU's.
	gy := e.alloc(F32, 3, d)
	e.st.Gather(gy, x, e.i32([]int32{4, 0, 4}))
	e.keep("gather (the backend's)", gy)
	sy := e.f32(make([]float32, 6*d), 6, d)
	e.st.Scatter(sy, x.Slice(0, 3), e.i32([]int32{1, 4, 2}))
	e.keep("scatter", sy)
	c2 := e.alloc(F32, 3, 2)
	e.st.Copy2D(c2, 2, x.Sub(1, 1, 2*d+2), d, 3, 2)
	e.keep("copy2d", c2)
	// The output side.
	lg := e.f32(randVec(r, 3*1001, 4), 3, 1001)
	lse := e.alloc(F32, 1, 3)
	e.st.LogSumExp(lse, lg)
	e.keep("logsumexp", lse)
	am := e.alloc(I32, 1, 3)
	e.st.Argmax(am, lg)
	e.keep("argmax", am)
	sel := e.alloc(F32, 1, 2)
	e.st.Select(sel, lg, e.i32([]int32{2, 0}), e.i32([]int32{1000, 3}))
	e.keep("select", sel)
	tok := e.alloc(I32, 1, 1)
	e.st.Sample(tok, lg.Slice(1, 2), Sampling{InvTemp: 1.25, TopK: 40, TopP: 0.9, U: 0.37})
	e.keep("sample", tok)
	// The towers' operations.
	pw, err := e.w.Packed(PackMatrix(randVec(r, 24*d, 0.1), 24, d))
	if err != nil {
		t.Fatal(err)
	}
	py := e.alloc(F32, n, 24)
	e.st.Pointwise(py, x, pw)
	e.keep("pointwise", py)
	tr := e.alloc(F32, d, n)
	e.st.Transpose(tr, x)
	e.keep("transpose", tr)
	gl := e.alloc(F32, n, d/2)
	e.st.GLU(gl, x)
	e.keep("glu", gl)
	si := e.f32(xs, n, d)
	e.st.SiLU(si, si)
	e.st.Clip(si, si, 0.5)
	e.keep("silu, clip", si)
	// A loop step's bookkeeping (outside a loop: plain operations).
	it := e.i32([]int32{1})
	lr := &LoopRows{N: 2, Steps: 3, Iter: it, IDs: e.i32([]int32{2, 0}), LUT: e.i32([]int32{7, 8, 9}),
		Row: e.alloc(I32, 1, 2), Pos0: e.i32([]int32{10, 20}), Pos: e.alloc(I32, 1, 2),
		Slots0: e.i32([]int32{0, 1, 2, 3, 4, 5}), Slots1: e.i32([]int32{6, 7, 8, 9, 10, 11}),
		Slot0: e.alloc(I32, 1, 2), Slot1: e.alloc(I32, 1, 2)}
	e.st.LoopRows(lr)
	e.keep("loop_rows row", lr.Row)
	e.keep("loop_rows slot1", lr.Slot1)
	le := &LoopEmit{N: 2, Steps: 3, Iter: it, IDs: lr.IDs, Stop: e.i32([]int32{0, -1}), Out: e.i32(make([]int32, 6)),
		Done: e.i32([]int32{0, 0}), Cond: e.alloc(I32, 1, 1)}
	e.st.LoopEmit(le)
	e.keep("loop_emit out", le.Out)
	e.keep("loop_emit cond", le.Cond)
	return e.out
}

// TestFallback: a backend whose op table holds gather alone runs every
// other operation on the CPU backend, and gives the CPU's results bit for
// bit (gather its own); the copies and the time are counted, bound weights
// are read where they were bound from, and a recording that meets such an
// operation fails so that the caller runs it directly.
func TestFallback(t *testing.T) {
	pb := openPartial(t)
	if !pb.Supports(OpGather) || pb.Supports(OpLinear) || len(pb.Unsupported()) != int(opCount)-1 {
		t.Fatalf("Supports: gather %v, linear %v, %d left to the CPU", pb.Supports(OpGather), pb.Supports(OpLinear), len(pb.Unsupported()))
	}
	if !Default().Supports(OpLinear) || len(Default().Unsupported()) != 0 {
		t.Fatalf("the CPU leaves %v out", Default().Unsupported())
	}
	want := runOps(t, Default())
	got := runOps(t, pb)
	if len(got) != len(want) {
		t.Fatalf("%d results, want %d", len(got), len(want))
	}
	for name, w := range want {
		g := got[name]
		if strings.HasPrefix(name, "gather") {
			for i := range w {
				w[i] *= 2 // the backend's own gather doubles
			}
		}
		bitsEqual(t, name, g, w)
	}
	fs := pb.Fallbacks()
	if fs.Ops < 40 || fs.Bytes <= 0 || fs.Time <= 0 {
		t.Errorf("fallbacks %+v", fs)
	}

	// Copies: a product over bound weights copies x down and y down and up,
	// never the weights.
	st, err := pb.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	e := &opsEnv{t: t, be: pb, st: st, w: pb.NewBound(), out: map[string][]float32{}}
	defer e.free()
	r := newRand(3)
	w := e.mat(NewF32(300, 256, randVec(r, 300*256, 0.1)))
	x := e.f32(randVec(r, 2*256, 1), 2, 256)
	y := e.alloc(F32, 2, 300)
	before := st.Fallbacks()
	st.Linear(y, x, w)
	if err := st.Sync(); err != nil {
		t.Fatal(err)
	}
	if d := st.Fallbacks(); d.Ops != before.Ops+1 || d.Bytes-before.Bytes != 4*(2*256+2*2*300) {
		t.Errorf("a product on the CPU: %+v after %+v, want one more op and %d bytes", d, before, 4*(2*256+2*2*300))
	}
	// A recording that meets an operation left to the CPU fails; nothing
	// ran, and run directly it does.
	e.st.Upload(y, make([]float32, 600))
	if !st.BeginGraph() {
		t.Fatal("BeginGraph refused")
	}
	st.Linear(y, x, w)
	if g := st.EndGraph(); g != nil {
		t.Fatal("a recording with an operation on the CPU did not fail")
	}
	e.keep("recorded", y)
	if slices.ContainsFunc(e.out["recorded"], func(v float32) bool { return v != 0 }) {
		t.Error("the failed recording's product ran")
	}
	st.Linear(y, x, w)
	e.keep("direct", y)
	if !slices.ContainsFunc(e.out["direct"], func(v float32) bool { return v != 0 }) {
		t.Error("the product run directly wrote nothing")
	}
}
