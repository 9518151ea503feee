// Package load reads a model's tensors from a weights.Store by name, with
// the checks every tower needs: the tensor exists, its element type can be
// read as float32, and its shape is the one the configuration implies.
// Errors name the tensor (with the caller's prefix, e.g. "gemma3n: missing
// tensor model.language_model.norm.weight") and give the shape found and
// the one wanted.
//
// A Loader keeps the first error and does nothing after it: a tower reads
// all its tensors and looks at Err once. Large matrices may be handed to a
// Packer (the decoder's q4 packing) instead of being read, and a dry Loader
// checks names, types and shapes without reading anything.
//
// The text decoder, the vision tower and the audio tower all load through
// it.
package load

import (
	"fmt"
	"slices"

	"verdict/engine/weights"
	"verdict/native"
)

// Packer takes over the matrices it packs: Matrix and MatrixT ask it first
// and, when it packs the shape, hand it the destination to fill once every
// tensor has been checked.
type Packer interface {
	// Packs reports whether a rows×cols matrix is packed.
	Packs(rows, cols int) bool
	// Pack records that dst is to be the packed rows×cols matrix read from
	// the tensor name; with transpose, the tensor is stored cols×rows and
	// dst is its transpose.
	Pack(dst *native.Matrix, name string, rows, cols int, transpose bool)
}

// Options configure a Loader.
type Options struct {
	// Who begins every error ("gemma3n", "vision", "audio").
	Who string
	// Prefix is put before every name (see also Under).
	Prefix string
	// Missing, when set, is wrapped (besides weights.ErrNotFound) by the
	// error for a missing tensor.
	Missing error
	// Packer, when set, packs the matrices it wants.
	Packer Packer
	// Dry checks names, element types and shapes only: the readers return
	// nil (or empty matrices) and nothing is read or packed.
	Dry bool
}

// Loader reads tensors by name and keeps the first error. Loaders made by
// Under share the error with the one they came from. A Loader is not safe
// for concurrent use.
type Loader struct {
	*state
	prefix string
}

type state struct {
	store weights.Store
	opt   Options
	err   error
}

// New returns a Loader of store's tensors.
func New(store weights.Store, opt Options) *Loader {
	return &Loader{state: &state{store: store, opt: opt}, prefix: opt.Prefix}
}

// Under returns a Loader for the names below prefix (added to l's own),
// sharing l's error.
func (l *Loader) Under(prefix string) *Loader {
	return &Loader{state: l.state, prefix: l.prefix + prefix}
}

// Name is the full name of a tensor: the prefix and name.
func (l *Loader) Name(name string) string { return l.prefix + name }

// Err returns the first error.
func (l *Loader) Err() error { return l.err }

// Fail records err unless an error is already kept; a nil err is ignored.
func (l *Loader) Fail(err error) {
	if l.err == nil {
		l.err = err
	}
}

// Lookup returns a tensor's shape when the store has it; it records
// nothing.
func (l *Loader) Lookup(name string) (shape []int, ok bool) {
	shape, _, ok = l.store.Info(l.Name(name))
	return shape, ok
}

// Has reports whether the store has the tensor.
func (l *Loader) Has(name string) bool {
	_, ok := l.Lookup(name)
	return ok
}

// MissingError is the error for a tensor the store does not have. It wraps
// weights.ErrNotFound and the Loader's Options.Missing.
type MissingError struct {
	Who, Name string
	also      error
}

func (e *MissingError) Error() string { return e.Who + ": missing tensor " + e.Name }

// Unwrap returns weights.ErrNotFound and Options.Missing (when set).
func (e *MissingError) Unwrap() []error {
	if e.also == nil {
		return []error{weights.ErrNotFound}
	}
	return []error{weights.ErrNotFound, e.also}
}

// ShapeError is the error for a tensor of the wrong shape.
type ShapeError struct {
	Who, Name string
	Got, Want []int
}

func (e *ShapeError) Error() string {
	if e.Want == nil {
		return fmt.Sprintf("%s: tensor %s has shape %v, want a single value", e.Who, e.Name, e.Got)
	}
	return fmt.Sprintf("%s: tensor %s has shape %v, want %v", e.Who, e.Name, e.Got, e.Want)
}

// DTypeError is the error for a tensor whose element type cannot be read
// as float32.
type DTypeError struct {
	Who, Name, DType string
}

func (e *DTypeError) Error() string {
	return fmt.Sprintf("%s: tensor %s has element type %s, which cannot be read as float32", e.Who, e.Name, e.DType)
}

// info looks a full name up, recording a missing tensor or an unreadable
// element type.
func (l *Loader) info(full string) (shape []int, dtype string, ok bool) {
	if l.err != nil {
		return nil, "", false
	}
	shape, dtype, ok = l.store.Info(full)
	if !ok {
		l.Fail(&MissingError{Who: l.opt.Who, Name: full, also: l.opt.Missing})
		return nil, "", false
	}
	if !weights.Readable(dtype) {
		l.Fail(&DTypeError{Who: l.opt.Who, Name: full, DType: dtype})
		return nil, "", false
	}
	return shape, dtype, true
}

// check verifies a full name against shape.
func (l *Loader) check(full string, shape []int) (dtype string, ok bool) {
	got, dtype, ok := l.info(full)
	if !ok {
		return "", false
	}
	if !slices.Equal(got, shape) {
		l.Fail(&ShapeError{Who: l.opt.Who, Name: full, Got: got, Want: slices.Clone(shape)})
		return "", false
	}
	return dtype, true
}

// Check verifies that the tensor exists, is readable and has exactly the
// given shape; it returns the element type.
func (l *Loader) Check(name string, shape ...int) (dtype string, ok bool) {
	return l.check(l.Name(name), shape)
}

// Shape returns the shape of a readable tensor of any shape (nil, with the
// error recorded, when it is missing).
func (l *Loader) Shape(name string) []int {
	shape, _, _ := l.info(l.Name(name))
	return shape
}

// read returns a checked tensor's data as the store gives it.
func (l *Loader) read(full string) []float32 {
	f, err := l.store.Float32(full)
	if err != nil {
		l.Fail(fmt.Errorf("%s: %w", l.opt.Who, err))
		return nil
	}
	return f
}

// Float32 returns a tensor of exactly the given shape as float32, as the
// store gives it: it may alias the store's read-only mapped memory.
func (l *Loader) Float32(name string, shape ...int) []float32 {
	full := l.Name(name)
	if _, ok := l.check(full, shape); !ok || l.opt.Dry {
		return nil
	}
	return l.read(full)
}

// Vector is Float32 as a private copy, free to be changed.
func (l *Loader) Vector(name string, shape ...int) []float32 {
	f := l.Float32(name, shape...)
	if f == nil {
		return nil
	}
	return append([]float32(nil), f...)
}

// OptionalVector returns Vector(name, len(def)) when the store has the
// tensor, else def.
func (l *Loader) OptionalVector(name string, def []float32) []float32 {
	if l.err != nil || !l.Has(name) {
		return def
	}
	return l.Vector(name, len(def))
}

// Scalar returns an optional single-value tensor (of shape [] or [1], or
// any shape of one element), or def when the store does not have it. A
// tensor of more values is an error.
func (l *Loader) Scalar(name string, def float32) float32 {
	full := l.Name(name)
	if l.err != nil || !l.Has(name) {
		return def
	}
	shape, _, ok := l.info(full)
	if !ok {
		return def
	}
	n := 1
	for _, d := range shape {
		n *= d
	}
	if n != 1 {
		l.Fail(&ShapeError{Who: l.opt.Who, Name: full, Got: shape})
		return def
	}
	if l.opt.Dry {
		return def
	}
	f := l.read(full)
	if len(f) != 1 {
		if f != nil {
			l.Fail(fmt.Errorf("%s: tensor %s gave %d values, want 1", l.opt.Who, full, len(f)))
		}
		return def
	}
	return f[0]
}

// Matrix binds a rows×cols weight into dst: handed to the Packer when it
// packs the shape (dst is filled later), else bf16 kept as bf16 and other
// types as the store's float32 (both may alias the store's mapped memory).
// On error, and when dry, dst is an empty rows×cols matrix.
func (l *Loader) Matrix(dst *native.Matrix, name string, rows, cols int) {
	full := l.Name(name)
	*dst = native.Matrix{Rows: rows, Cols: cols}
	dt, ok := l.check(full, []int{rows, cols})
	if !ok || l.opt.Dry {
		return
	}
	if p := l.opt.Packer; p != nil && p.Packs(rows, cols) {
		p.Pack(dst, full, rows, cols, false)
		return
	}
	if dt == "BF16" {
		b, err := l.store.BF16(full)
		if err != nil {
			l.Fail(fmt.Errorf("%s: %w", l.opt.Who, err))
			return
		}
		*dst = native.NewBF16(rows, cols, b)
		return
	}
	if f := l.read(full); f != nil {
		*dst = native.NewF32(rows, cols, f)
	}
}

// MatrixF32 returns a rows×cols weight as a private float32 matrix (never
// packed); empty on error and when dry.
func (l *Loader) MatrixF32(name string, rows, cols int) native.Matrix {
	v := l.Vector(name, rows, cols)
	if v == nil {
		return native.Matrix{Rows: rows, Cols: cols}
	}
	return native.NewF32(rows, cols, v)
}

// MatrixT binds the transpose of a weight stored rows×cols into dst (a
// cols×rows matrix): handed to the Packer when it packs cols×rows, else a
// private float32 copy, transposed.
func (l *Loader) MatrixT(dst *native.Matrix, name string, rows, cols int) {
	full := l.Name(name)
	*dst = native.Matrix{Rows: cols, Cols: rows}
	if _, ok := l.check(full, []int{rows, cols}); !ok || l.opt.Dry {
		return
	}
	if p := l.opt.Packer; p != nil && p.Packs(cols, rows) {
		p.Pack(dst, full, cols, rows, true)
		return
	}
	src := l.read(full)
	if src == nil {
		return
	}
	t := make([]float32, len(src))
	for r := 0; r < rows; r++ {
		for c := 0; c < cols; c++ {
			t[c*rows+r] = src[r*cols+c]
		}
	}
	*dst = native.NewF32(cols, rows, t)
}
