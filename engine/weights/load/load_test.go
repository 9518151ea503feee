package load

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strings"
	"testing"

	"verdict/engine/weights"
	"verdict/native"
)

// memTensor is one tensor of a memStore: float32 data, or bf16 bits.
type memTensor struct {
	shape []int
	dtype string
	f32   []float32
	bf16  []uint16
	bad   bool // Float32 fails
}

// memStore is an in-memory weights.Store that counts the reads.
type memStore struct {
	t     map[string]memTensor
	reads *int
}

func (s memStore) Info(name string) ([]int, string, bool) {
	t, ok := s.t[name]
	return t.shape, t.dtype, ok
}

func (s memStore) Names() []string {
	var n []string
	for k := range s.t {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

func (s memStore) Float32(name string) ([]float32, error) {
	*s.reads++
	t, ok := s.t[name]
	switch {
	case !ok:
		return nil, fmt.Errorf("weights: %s: %w", name, weights.ErrNotFound)
	case t.bad:
		return nil, fmt.Errorf("weights: %s: truncated data", name)
	case t.bf16 != nil:
		f := make([]float32, len(t.bf16))
		for i, b := range t.bf16 {
			f[i] = weights.BF16ToFloat32(b)
		}
		return f, nil
	}
	return t.f32, nil
}

func (s memStore) BF16(name string) ([]uint16, error) {
	*s.reads++
	t, ok := s.t[name]
	if !ok || t.bf16 == nil {
		return nil, fmt.Errorf("weights: %s: not BF16", name)
	}
	return t.bf16, nil
}

func (s memStore) Rows(name string, row0 int, dst []float32) error {
	return errors.New("memStore: Rows not used")
}

func (s memStore) Close() error { return nil }

// recorder is a Packer of the matrices of at least min elements.
type recorder struct {
	min  int
	reqs []string
}

func (r *recorder) Packs(rows, cols int) bool { return rows*cols >= r.min }

func (r *recorder) Pack(dst *native.Matrix, name string, rows, cols int, transpose bool) {
	r.reqs = append(r.reqs, fmt.Sprintf("%s %dx%d transpose=%v", name, rows, cols, transpose))
	*dst = native.Matrix{Rows: rows, Cols: cols, DType: native.Q4}
}

var errTowerMissing = errors.New("tower: missing tensor")

func newStore() memStore {
	bf := func(v ...float32) []uint16 {
		b := make([]uint16, len(v))
		for i, x := range v {
			b[i] = uint16(math.Float32bits(x) >> 16)
		}
		return b
	}
	return memStore{reads: new(int), t: map[string]memTensor{
		"m.w":      {shape: []int{2, 3}, dtype: "F32", f32: []float32{1, 2, 3, 4, 5, 6}},
		"m.b":      {shape: []int{2, 3}, dtype: "BF16", bf16: bf(1, 2, 3, 4, 5, 6)},
		"m.big":    {shape: []int{4, 4}, dtype: "F32", f32: make([]float32, 16)},
		"m.norm":   {shape: []int{3}, dtype: "F32", f32: []float32{0.5, 1.5, 2.5}},
		"m.idx":    {shape: []int{3}, dtype: "I64"},
		"m.q":      {shape: []int{3}, dtype: "Q4_K", f32: []float32{7, 8, 9}},
		"m.s0":     {shape: []int{}, dtype: "F32", f32: []float32{4}},
		"m.s1":     {shape: []int{1}, dtype: "F32", f32: []float32{5}},
		"m.s2":     {shape: []int{2}, dtype: "F32", f32: []float32{1, 2}},
		"m.broken": {shape: []int{3}, dtype: "F32", bad: true},
		"m.sub.v":  {shape: []int{2}, dtype: "F32", f32: []float32{9, 10}},
	}}
}

func TestLoader(t *testing.T) {
	f32 := func(rows, cols int, v ...float32) native.Matrix { return native.NewF32(rows, cols, v) }
	for _, c := range []struct {
		name    string
		packer  bool
		dry     bool
		run     func(l *Loader) any
		want    any
		err     string // "" for none, else the whole message
		missing bool   // errors.Is(err, weights.ErrNotFound) and errTowerMissing
		reads   int    // store reads
	}{
		{name: "vector", run: func(l *Loader) any { return l.Vector("norm", 3) },
			want: []float32{0.5, 1.5, 2.5}, reads: 1},
		{name: "missing tensor", run: func(l *Loader) any { return l.Vector("gone", 3) },
			want: []float32(nil), err: "tower: missing tensor m.gone", missing: true},
		{name: "wrong shape", run: func(l *Loader) any { return l.Float32("w", 3, 2) },
			want: []float32(nil), err: "tower: tensor m.w has shape [2 3], want [3 2]"},
		{name: "wrong rank", run: func(l *Loader) any { return l.Float32("norm", 3, 1) },
			want: []float32(nil), err: "tower: tensor m.norm has shape [3], want [3 1]"},
		{name: "wrong dtype", run: func(l *Loader) any { return l.Vector("idx", 3) },
			want: []float32(nil), err: "tower: tensor m.idx has element type I64, which cannot be read as float32"},
		{name: "dequantised dtype", run: func(l *Loader) any { return l.Vector("q", 3) },
			want: []float32{7, 8, 9}, reads: 1},
		{name: "read error names the tower", run: func(l *Loader) any { return l.Vector("broken", 3) },
			want: []float32(nil), err: "tower: weights: m.broken: truncated data", reads: 1},
		{name: "optional present", run: func(l *Loader) any { return l.OptionalVector("norm", []float32{9, 9, 9}) },
			want: []float32{0.5, 1.5, 2.5}, reads: 1},
		{name: "optional default", run: func(l *Loader) any { return l.OptionalVector("absent", []float32{9, 9, 9}) },
			want: []float32{9, 9, 9}},
		{name: "optional of another length", run: func(l *Loader) any { return l.OptionalVector("norm", []float32{9, 9}) },
			want: []float32(nil), err: "tower: tensor m.norm has shape [3], want [2]"},
		{name: "scalar of shape []", run: func(l *Loader) any { return l.Scalar("s0", -1) }, want: float32(4), reads: 1},
		{name: "scalar of shape [1]", run: func(l *Loader) any { return l.Scalar("s1", -1) }, want: float32(5), reads: 1},
		{name: "scalar default", run: func(l *Loader) any { return l.Scalar("absent", -1) }, want: float32(-1)},
		{name: "scalar of two values", run: func(l *Loader) any { return l.Scalar("s2", -1) },
			want: float32(-1), err: "tower: tensor m.s2 has shape [2], want a single value"},
		{name: "scalar of a bad type", run: func(l *Loader) any { return l.Scalar("idx", -1) },
			want: float32(-1), err: "tower: tensor m.idx has element type I64, which cannot be read as float32"},
		{name: "f32 matrix", run: func(l *Loader) any { var m native.Matrix; l.Matrix(&m, "w", 2, 3); return m },
			want: f32(2, 3, 1, 2, 3, 4, 5, 6), reads: 1},
		{name: "bf16 matrix stays bf16", run: func(l *Loader) any { var m native.Matrix; l.Matrix(&m, "b", 2, 3); return m.DType },
			want: native.BF16, reads: 1},
		{name: "matrix of the wrong shape", run: func(l *Loader) any { var m native.Matrix; l.Matrix(&m, "w", 3, 2); return m },
			want: native.Matrix{Rows: 3, Cols: 2}, err: "tower: tensor m.w has shape [2 3], want [3 2]"},
		{name: "private f32 copy of bf16", run: func(l *Loader) any { return l.MatrixF32("b", 2, 3) },
			want: f32(2, 3, 1, 2, 3, 4, 5, 6), reads: 1},
		{name: "transposed", run: func(l *Loader) any { var m native.Matrix; l.MatrixT(&m, "w", 2, 3); return m },
			want: f32(3, 2, 1, 4, 2, 5, 3, 6), reads: 1},
		{name: "transposed of the wrong shape", run: func(l *Loader) any { var m native.Matrix; l.MatrixT(&m, "w", 3, 2); return m },
			want: native.Matrix{Rows: 2, Cols: 3}, err: "tower: tensor m.w has shape [2 3], want [3 2]"},
		{name: "packer takes large matrices", packer: true, run: func(l *Loader) any {
			var big, small, tr native.Matrix
			l.Matrix(&big, "big", 4, 4)
			l.Matrix(&small, "w", 2, 3)
			l.MatrixT(&tr, "big", 4, 4)
			return []any{big.DType, small, tr.DType}
		}, want: []any{native.Q4, f32(2, 3, 1, 2, 3, 4, 5, 6), native.Q4}, reads: 1},
		{name: "first error is kept and nothing is read after it", run: func(l *Loader) any {
			a := l.Vector("gone", 1)
			b := l.Vector("w", 9)
			c := l.Vector("norm", 3)
			return [][]float32{a, b, c}
		}, want: [][]float32{nil, nil, nil}, err: "tower: missing tensor m.gone", missing: true},
		{name: "dry reads nothing", dry: true, run: func(l *Loader) any {
			var m native.Matrix
			l.Matrix(&m, "w", 2, 3)
			return []any{l.Vector("norm", 3), m, l.Scalar("s0", -1)}
		}, want: []any{[]float32(nil), native.Matrix{Rows: 2, Cols: 3}, float32(-1)}},
		{name: "dry still checks", dry: true, run: func(l *Loader) any { return l.Vector("w", 6) },
			want: []float32(nil), err: "tower: tensor m.w has shape [2 3], want [6]"},
		{name: "under shares the error", run: func(l *Loader) any {
			v := l.Under("sub.").Vector("v", 2)
			l.Under("sub.").Vector("x", 2)
			return []any{v, l.Under("sub.").Name("v")}
		}, want: []any{[]float32{9, 10}, "m.sub.v"}, err: "tower: missing tensor m.sub.x", missing: true, reads: 1},
		{name: "shape of any rank", run: func(l *Loader) any { return []any{l.Shape("w"), l.Has("w"), l.Has("gone")} },
			want: []any{[]int{2, 3}, true, false}},
		{name: "shape of a missing tensor", run: func(l *Loader) any { return l.Shape("gone") },
			want: []int(nil), err: "tower: missing tensor m.gone", missing: true},
		{name: "check", run: func(l *Loader) any { dt, ok := l.Check("b", 2, 3); return []any{dt, ok} },
			want: []any{"BF16", true}},
		{name: "fail", run: func(l *Loader) any {
			l.Fail(nil)
			l.Fail(errors.New("tower: no"))
			l.Fail(errors.New("later"))
			return nil
		},
			want: nil, err: "tower: no"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newStore()
			opt := Options{Who: "tower", Prefix: "m.", Missing: errTowerMissing, Dry: c.dry}
			var rec *recorder
			if c.packer {
				rec = &recorder{min: 16}
				opt.Packer = rec
			}
			l := New(s, opt)
			got := c.run(l)
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("got %#v, want %#v", got, c.want)
			}
			err := l.Err()
			switch {
			case c.err == "" && err != nil:
				t.Errorf("error %q, want none", err)
			case c.err != "" && (err == nil || err.Error() != c.err):
				t.Errorf("error %v, want %q", err, c.err)
			}
			if m := errors.Is(err, weights.ErrNotFound) && errors.Is(err, errTowerMissing); m != c.missing {
				t.Errorf("missing = %v, want %v (%v)", m, c.missing, err)
			}
			if c.reads != *s.reads {
				t.Errorf("%d reads, want %d", *s.reads, c.reads)
			}
			if c.packer {
				want := []string{"m.big 4x4 transpose=false", "m.big 4x4 transpose=true"}
				if !reflect.DeepEqual(rec.reqs, want) {
					t.Errorf("pack requests %q, want %q", rec.reqs, want)
				}
			}
		})
	}
}

// TestErrorTypes: the errors are typed, for callers that want the details.
func TestErrorTypes(t *testing.T) {
	l := New(newStore(), Options{Who: "tower", Prefix: "m."})
	l.Float32("w", 3, 2)
	var se *ShapeError
	if !errors.As(l.Err(), &se) || !reflect.DeepEqual(se.Got, []int{2, 3}) || !reflect.DeepEqual(se.Want, []int{3, 2}) || se.Name != "m.w" {
		t.Errorf("shape error %#v", l.Err())
	}
	l = New(newStore(), Options{Who: "tower"})
	l.Vector("m.idx", 3)
	var de *DTypeError
	if !errors.As(l.Err(), &de) || de.DType != "I64" || de.Name != "m.idx" {
		t.Errorf("dtype error %#v", l.Err())
	}
	l = New(newStore(), Options{Who: "tower"})
	l.Vector("nothing", 3)
	var me *MissingError
	if !errors.As(l.Err(), &me) || me.Name != "nothing" || !errors.Is(l.Err(), weights.ErrNotFound) || errors.Is(l.Err(), errTowerMissing) {
		t.Errorf("missing error %#v", l.Err())
	}
	if !strings.HasPrefix(l.Err().Error(), "tower: ") {
		t.Errorf("error %q does not start with who", l.Err())
	}
}
