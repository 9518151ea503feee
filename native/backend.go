package native

/*
#include <stdlib.h>
#include "backend_call.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"
)

// Backend is a compute backend: the table of C functions of backend.h
// (memory, streams, transfers and operations over tensors). The engine
// reaches the hardware only through it, so a backend loaded from a shared
// library at run time serves the same engine as the one built in.
//
// Bit-exactness is each backend's own promise, stated by it: the built-in
// one (Default) gives exactly the results of this package's slice kernels
// (Linear, Attention, ...): 16-lane sums with fresh lane sums per 512
// columns and a fixed tree, independent of threads, SIMD level and batch.
type Backend struct {
	t     *C.vd_backend
	note  string           // why Open chose it (Note)
	lacks [opCount]bool    // operations it leaves to the CPU (fallback.go)
	fb    fallbackCounters // their count
	bound boundSet         // host memory bound to it, where some operation is left to the CPU
}

var defaultBackend = sync.OnceValue(func() *Backend { return newBackend(C.vd_cpu_backend()) })

// partial reports whether the backend leaves any operation to the CPU.
func (b *Backend) partial() bool {
	for _, l := range b.lacks {
		if l {
			return true
		}
	}
	return false
}

// Default returns the backend compiled into the binary.
func Default() *Backend { return defaultBackend() }

// Name reports the backend's name.
func (b *Backend) Name() string { return C.GoString(b.t.name) }

// Buffer is memory of a backend: allocated by it, or host memory bound
// to it (weights). A buffer is freed by Free; its tensors die with it.
type Buffer struct {
	be    *Backend
	p     unsafe.Pointer
	size  int
	host  unsafe.Pointer // bound host memory (nil: allocated)
	alive bool
}

// Alloc allocates bytes of backend memory.
func (b *Backend) Alloc(bytes int) (*Buffer, error) {
	if bytes < 0 {
		return nil, fmt.Errorf("native: %s: allocation of %d bytes", b.Name(), bytes)
	}
	p := C.vdc_alloc(b.t, C.size_t(bytes))
	if p == nil {
		return nil, deviceErrorf("native: %s: out of memory allocating %d bytes", b.Name(), bytes)
	}
	return &Buffer{be: b, p: p, size: bytes, alive: true}, nil
}

// Bind makes host memory usable by the backend's operations (weights: a
// mapped file, a packed arena): in place where the backend reads host
// memory, else copied once. The memory must outlive the buffer and not
// contain Go pointers.
func (b *Backend) Bind(host unsafe.Pointer, bytes int) (*Buffer, error) {
	p := C.vdc_bind(b.t, host, C.size_t(bytes))
	if p == nil && bytes > 0 {
		return nil, fmt.Errorf("native: %s: cannot bind %d bytes", b.Name(), bytes)
	}
	if p != nil && b.partial() {
		b.bound.add(p, bytes, host) // operations on the CPU read it there
	}
	return &Buffer{be: b, p: p, size: bytes, host: host, alive: true}, nil
}

// Free releases the buffer.
func (m *Buffer) Free() {
	if m == nil || !m.alive {
		return
	}
	m.alive = false
	if m.host != nil {
		m.be.bound.remove(m.p)
		C.vdc_unbind(m.be.t, m.p, m.host, C.size_t(m.size))
	} else {
		C.vdc_release(m.be.t, m.p, C.size_t(m.size))
	}
}

// Size reports the buffer's bytes.
func (m *Buffer) Size() int { return m.size }

// Tensor is a handle on elements in a backend's memory: where its first
// element is, its element type and its row-major [Rows, Cols] shape. A q4
// tensor also has its scales and offsets and group size.
type Tensor struct {
	t C.vd_tensor
}

func dtypeSize(d DType) int {
	if d == BF16 {
		return 2
	}
	return 4
}

// Tensor returns a tensor of rows×cols elements of type d at byte offset
// off of the buffer (F32, BF16 or I32).
func (m *Buffer) Tensor(off int, d DType, rows, cols int) Tensor {
	check(d != Q4, "Buffer.Tensor: q4 needs Q4Tensor")
	check(off >= 0 && rows >= 0 && cols >= 0 && off+rows*cols*dtypeSize(d) <= m.size, "Buffer.Tensor: outside the buffer")
	return Tensor{C.vd_tensor{data: unsafe.Add(m.p, off), dtype: C.int32_t(d), rows: C.int64_t(rows), cols: C.int64_t(cols)}}
}

// Q4Tensor returns a q4 tensor whose nibbles start at byte q and its scales
// and offsets at byte so of the buffer.
func (m *Buffer) Q4Tensor(q, so, rows, cols, group int) Tensor {
	nb, sf := Q4Sizes(rows, cols, group)
	check(q >= 0 && so >= 0 && q+nb <= m.size && so+4*sf <= m.size, "Buffer.Q4Tensor: outside the buffer")
	return Tensor{C.vd_tensor{data: unsafe.Add(m.p, q), aux: unsafe.Add(m.p, so), dtype: C.int32_t(Q4),
		group: C.int32_t(group), rows: C.int64_t(rows), cols: C.int64_t(cols)}}
}

// Rows reports the tensor's rows.
func (t Tensor) Rows() int { return int(t.t.rows) }

// Cols reports the tensor's columns.
func (t Tensor) Cols() int { return int(t.t.cols) }

// Len reports the tensor's elements.
func (t Tensor) Len() int { return int(t.t.rows * t.t.cols) }

// DType reports the tensor's element type.
func (t Tensor) DType() DType { return DType(t.t.dtype) }

// Nil reports whether t is the zero tensor (no elements anywhere).
func (t Tensor) Nil() bool { return t.t.data == nil }

// Slice returns rows [r0, r1) of t.
func (t Tensor) Slice(r0, r1 int) Tensor {
	check(0 <= r0 && r0 <= r1 && r1 <= t.Rows(), "Tensor.Slice: rows out of range")
	u := t
	c := int(t.t.cols)
	switch t.DType() {
	case Q4:
		g := int(t.t.group)
		u.t.data = unsafe.Add(t.t.data, r0*c/2)
		u.t.aux = unsafe.Add(t.t.aux, 4*r0*2*(c/g))
	default:
		u.t.data = unsafe.Add(t.t.data, r0*c*dtypeSize(t.DType()))
	}
	u.t.rows = C.int64_t(r1 - r0)
	return u
}

// View returns t's first rows·cols elements as a rows×cols tensor.
func (t Tensor) View(rows, cols int) Tensor {
	check(t.DType() != Q4, "Tensor.View: q4")
	check(rows >= 0 && cols >= 0 && rows*cols <= t.Len(), "Tensor.View: more elements than the tensor")
	u := t
	u.t.rows, u.t.cols = C.int64_t(rows), C.int64_t(cols)
	return u
}

// hostTensor wraps host memory as an F32 tensor without binding it: for
// the built-in backend's own memory and tests. The slice must stay alive
// and unmoved while the tensor is used.
func (b *Backend) hostTensor(x []float32, rows, cols int) Tensor {
	check(len(x) >= rows*cols, "hostTensor: slice too short")
	return Tensor{C.vd_tensor{data: unsafe.Pointer(unsafe.SliceData(x)), dtype: C.int32_t(F32), rows: C.int64_t(rows), cols: C.int64_t(cols)}}
}

// Stream orders a backend's operations. Operations and transfers are
// enqueued and run in order; host memory given to Upload must stay
// unchanged, and memory given to Download unread, until Sync returns.
// A stream is used by one goroutine at a time.
type Stream struct {
	be *Backend
	s  *C.vd_stream

	// Operations its backend leaves to the CPU (fallback.go).
	cpu       *Stream          // the CPU backend's stream that runs them
	fb        fallbackCounters // their count
	fbErr     error            // the first failure of one (sticky: Sync returns it)
	recording bool             // between BeginGraph or BeginLoop and EndGraph
	spoiled   bool             // an operation on the CPU was asked while recording

	calls OpCalls     // its calls into the op table (opcalls.go)
	apart map[Op]bool // composite operations it runs as their parts (Apart)
}

// NewStream returns a stream of the backend.
func (b *Backend) NewStream() (*Stream, error) {
	s := C.vdc_stream_new(b.t)
	if s == nil {
		return nil, deviceErrorf("native: %s: cannot create a stream", b.Name())
	}
	return &Stream{be: b, s: s}, nil
}

// Backend reports the stream's backend.
func (s *Stream) Backend() *Backend { return s.be }

// Close frees the stream.
func (s *Stream) Close() {
	if s.s != nil {
		C.vdc_stream_free(s.be.t, s.s)
		s.s = nil
	}
	if s.cpu != nil {
		s.cpu.Close()
		s.cpu = nil
	}
}

// ErrUnimplemented is wrapped by Sync's error when the backend does not
// implement an operation the stream was given (VD_EUNIMPL): that work can
// run on another backend (Default).
var ErrUnimplemented = errors.New("an operation the backend does not implement yet")

// ErrDevice is matched (errors.Is) by the errors of a device that failed:
// memory it could not allocate, a stream it could not create, a stream
// that failed. The work may succeed on another device; the messages are
// those the backend always gave.
var ErrDevice = errors.New("native: the device failed")

// deviceError is an ErrDevice with its own message.
type deviceError struct{ msg string }

func (e *deviceError) Error() string        { return e.msg }
func (e *deviceError) Is(target error) bool { return target == ErrDevice }

func deviceErrorf(format string, a ...any) error {
	return &deviceError{fmt.Sprintf(format, a...)}
}

// Sync waits until the stream has run everything enqueued.
func (s *Stream) Sync() error {
	if err := s.syncBackend(); err != nil {
		return err
	}
	return s.fbErr
}

func (s *Stream) syncBackend() error {
	if rc := C.vdc_sync(s.be.t, s.s); rc == C.VD_EUNIMPL {
		return fmt.Errorf("native: %s: stream failed: %w", s.be.Name(), ErrUnimplemented)
	} else if rc != 0 {
		return deviceErrorf("native: %s: stream failed (error %d)", s.be.Name(), int(rc))
	}
	return nil
}

func bytesOf(t Tensor) int {
	if t.DType() == Q4 {
		panic("native: transfers of q4 tensors")
	}
	return t.Len() * dtypeSize(t.DType())
}

// Upload copies x into the F32 tensor t (len(x) == t.Len()).
func (s *Stream) Upload(t Tensor, x []float32) {
	check(t.DType() == F32 && len(x) == t.Len(), "Upload: length or type differs")
	if len(x) > 0 {
		C.vdc_upload(s.be.t, s.s, t.t.data, unsafe.Pointer(unsafe.SliceData(x)), C.size_t(4*len(x)))
	}
}

// UploadI32 copies x into the I32 tensor t (len(x) == t.Len()).
func (s *Stream) UploadI32(t Tensor, x []int32) {
	check(t.DType() == I32 && len(x) == t.Len(), "UploadI32: length or type differs")
	if len(x) > 0 {
		C.vdc_upload(s.be.t, s.s, t.t.data, unsafe.Pointer(unsafe.SliceData(x)), C.size_t(4*len(x)))
	}
}

// Download copies the F32 tensor t into x (len(x) == t.Len()).
func (s *Stream) Download(x []float32, t Tensor) {
	check(t.DType() == F32 && len(x) == t.Len(), "Download: length or type differs")
	if len(x) > 0 {
		C.vdc_download(s.be.t, s.s, unsafe.Pointer(unsafe.SliceData(x)), t.t.data, C.size_t(4*len(x)))
	}
}

// DownloadI32 copies the I32 tensor t into x (len(x) == t.Len()).
func (s *Stream) DownloadI32(x []int32, t Tensor) {
	check(t.DType() == I32 && len(x) == t.Len(), "DownloadI32: length or type differs")
	if len(x) > 0 {
		C.vdc_download(s.be.t, s.s, unsafe.Pointer(unsafe.SliceData(x)), t.t.data, C.size_t(4*len(x)))
	}
}

// Copy copies src into dst (same type and element count).
func (s *Stream) Copy(dst, src Tensor) {
	check(dst.DType() == src.DType() && dst.Len() == src.Len(), "Copy: tensors differ")
	if n := bytesOf(src); n > 0 {
		C.vdc_copy(s.be.t, s.s, dst.t.data, src.t.data, C.size_t(n))
	}
}

// Sub returns rows×cols elements of t from element off on (F32 or I32).
func (t Tensor) Sub(off, rows, cols int) Tensor {
	check(t.DType() != Q4 && t.DType() != BF16, "Tensor.Sub: packed type")
	check(off >= 0 && rows >= 0 && cols >= 0 && off+rows*cols <= t.Len(), "Tensor.Sub: outside the tensor")
	u := t
	u.t.data = unsafe.Add(t.t.data, 4*off)
	u.t.rows, u.t.cols = C.int64_t(rows), C.int64_t(cols)
	return u
}

// Bound is a set of host memory bound to a backend (a model's weights).
type Bound struct {
	be   *Backend
	bufs []*Buffer
}

// NewBound starts a set of bound host memory.
func (b *Backend) NewBound() *Bound { return &Bound{be: b} }

func (w *Bound) bind(p unsafe.Pointer, bytes int) (*Buffer, error) {
	m, err := w.be.Bind(p, bytes)
	if err != nil {
		return nil, err
	}
	w.bufs = append(w.bufs, m)
	return m, nil
}

// Matrix binds a weight matrix's elements and returns its tensor.
func (w *Bound) Matrix(m Matrix) (Tensor, error) {
	switch m.DType {
	case F32:
		buf, err := w.bind(unsafe.Pointer(unsafe.SliceData(m.F32)), 4*len(m.F32))
		if err != nil {
			return Tensor{}, err
		}
		return buf.Tensor(0, F32, m.Rows, m.Cols), nil
	case BF16:
		buf, err := w.bind(unsafe.Pointer(unsafe.SliceData(m.BF16)), 2*len(m.BF16))
		if err != nil {
			return Tensor{}, err
		}
		return buf.Tensor(0, BF16, m.Rows, m.Cols), nil
	case Q4:
		m.checkQ4("Bound.Matrix")
		q, err := w.bind(unsafe.Pointer(unsafe.SliceData(m.Q4)), len(m.Q4))
		if err != nil {
			return Tensor{}, err
		}
		so, err := w.bind(unsafe.Pointer(unsafe.SliceData(m.Q4SO)), 4*len(m.Q4SO))
		if err != nil {
			return Tensor{}, err
		}
		t := q.Tensor(0, I32, 0, 0) // the nibbles' address
		t.t.aux = so.p
		t.t.dtype, t.t.group = C.int32_t(Q4), C.int32_t(m.Group)
		t.t.rows, t.t.cols = C.int64_t(m.Rows), C.int64_t(m.Cols)
		return t, nil
	}
	return Tensor{}, fmt.Errorf("native: Bound.Matrix: unknown dtype %v", m.DType)
}

// Vector binds float32 values as a [1, len(x)] tensor (nil: the zero tensor).
func (w *Bound) Vector(x []float32) (Tensor, error) {
	if x == nil {
		return Tensor{}, nil
	}
	buf, err := w.bind(unsafe.Pointer(unsafe.SliceData(x)), 4*len(x))
	if err != nil {
		return Tensor{}, err
	}
	return buf.Tensor(0, F32, 1, len(x)), nil
}

// Free unbinds everything.
func (w *Bound) Free() {
	for _, m := range w.bufs {
		m.Free()
	}
	w.bufs = nil
}

// Arena hands out tensors from one backend allocation, 64-byte aligned:
// scratch reserved once.
type Arena struct {
	buf  *Buffer
	used int
}

// NewArena allocates bytes of backend memory for tensors.
func (b *Backend) NewArena(bytes int) (*Arena, error) {
	buf, err := b.Alloc(bytes)
	if err != nil {
		return nil, err
	}
	return &Arena{buf: buf}, nil
}

// ArenaBytes is the arena size that holds tensors of the given elements
// (4 bytes each), with alignment.
func ArenaBytes(elems ...int) int {
	n := 0
	for _, e := range elems {
		n += (4*e + 63) &^ 63
	}
	return n
}

// Take returns the arena's next rows×cols tensor of type d (F32 or I32).
func (a *Arena) Take(d DType, rows, cols int) Tensor {
	n := (4*rows*cols + 63) &^ 63
	check(a.used+n <= a.buf.size, "Arena.Take: arena full")
	t := a.buf.Tensor(a.used, d, rows, cols)
	a.used += n
	return t
}

// Free releases the arena.
func (a *Arena) Free() { a.buf.Free() }

// hostI32 wraps host int32s as an I32 tensor (the built-in backend, tests).
func (b *Backend) hostI32(x []int32) Tensor {
	return Tensor{C.vd_tensor{data: unsafe.Pointer(unsafe.SliceData(x)), dtype: C.int32_t(I32), rows: 1, cols: C.int64_t(len(x))}}
}
