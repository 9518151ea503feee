package ggufwrite

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"runtime"
	"sync"

	"verdict/engine/weights"
)

// Source is one tensor of a streamed file: its GGUF name, Dims in ggml
// order (innermost first), type, and Rows, which writes rows [r0,
// r0+len(dst)/Dims[0]) as float32 into dst (a row is Dims[0] values; the
// rows are the product of the other dims). Rows is called from several
// goroutines at once, on disjoint rows.
type Source struct {
	Name string
	Dims []int
	Type weights.GGMLType
	Rows func(r0 int, dst []float32) error
}

// blockOf is a type's block: values per block and bytes per block.
var blockOf = map[weights.GGMLType][2]int{
	weights.GGMLF32: {1, 4}, weights.GGMLF16: {1, 2}, weights.GGMLBF16: {1, 2},
	weights.GGMLQ8_0: {32, 34}, weights.GGMLQ4_0: {32, 18},
	weights.GGMLQ4_K: {256, 144}, weights.GGMLQ6_K: {256, 210},
}

// RowBytes is the encoded size of a row of n values of type t, or an error
// when t has no encoder or n is not whole blocks of it.
func RowBytes(t weights.GGMLType, n int) (int, error) {
	b, ok := blockOf[t]
	if !ok {
		return 0, fmt.Errorf("ggufwrite: no encoder for %s", t)
	}
	if n <= 0 || n%b[0] != 0 {
		return 0, fmt.Errorf("ggufwrite: rows of %d values are not whole %s blocks of %d", n, t, b[0])
	}
	return n / b[0] * b[1], nil
}

// chunkValues bounds the values one job generates and encodes: the memory
// in flight is about 3·GOMAXPROCS·chunkValues·(4 + encoded bytes per value).
var chunkValues = 1 << 20 // a variable for tests

// job is a run of rows of one tensor, encoded by a worker.
type job struct {
	src    *Source
	r0, n  int
	pad    int // zero bytes written after the job (the tensor's alignment padding)
	out    []byte
	err    error
	done   chan struct{}
	rowLen int
}

// WriteStream writes a GGUF file (version 3, alignment 32) of the metadata
// kvs and the tensors ts to w, generating and encoding the tensors in
// chunks on all cores and writing them in order: memory stays bounded by
// a few chunks per core whatever the tensors' sizes. It returns the bytes
// written.
func WriteStream(w io.Writer, kvs []KV, ts []Source) (int64, error) {
	const align = 32
	sizes := make([]int, len(ts))
	var hdr bytes.Buffer
	hdr.WriteString("GGUF")
	le := func(v any) { binary.Write(&hdr, binary.LittleEndian, v) }
	le(uint32(3))
	le(uint64(len(ts)))
	le(uint64(len(kvs)))
	str := func(s string) { le(uint64(len(s))); hdr.WriteString(s) }
	for _, kv := range kvs {
		str(kv.Key)
		if err := value(&hdr, kv.Value, true); err != nil {
			return 0, fmt.Errorf("ggufwrite: %s: %w", kv.Key, err)
		}
	}
	off := 0
	for i, t := range ts {
		if len(t.Dims) == 0 || t.Rows == nil {
			return 0, fmt.Errorf("ggufwrite: %s: needs dims and a source of rows", t.Name)
		}
		rb, err := RowBytes(t.Type, t.Dims[0])
		if err != nil {
			return 0, fmt.Errorf("%s: %w", t.Name, err)
		}
		rows := 1
		for _, d := range t.Dims[1:] {
			if d <= 0 {
				return 0, fmt.Errorf("ggufwrite: %s: dims %v", t.Name, t.Dims)
			}
			rows *= d
		}
		sizes[i] = rows * rb
		str(t.Name)
		le(uint32(len(t.Dims)))
		for _, d := range t.Dims {
			le(uint64(d))
		}
		le(uint32(t.Type))
		le(uint64(off))
		off += (sizes[i] + align - 1) / align * align
	}
	hdr.Write(make([]byte, (align-hdr.Len()%align)%align))
	bw := bufio.NewWriterSize(w, 4<<20)
	total := int64(hdr.Len())
	if _, err := bw.Write(hdr.Bytes()); err != nil {
		return total, err
	}

	workers := runtime.GOMAXPROCS(0)
	jobs := make(chan *job, 2*workers)
	queue := make(chan *job, 2*workers) // the same jobs, in file order
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			var buf []float32
			for j := range jobs {
				n := j.n * j.rowLen
				if cap(buf) < n {
					buf = make([]float32, n)
				}
				j.err = j.src.Rows(j.r0, buf[:n])
				if j.err == nil {
					j.err = EncodeTo(j.src.Type, buf[:n], j.out)
				}
				close(j.done)
			}
		})
	}
	stop := make(chan struct{})
	go func() { // split the tensors into jobs, in order
		defer close(queue)
		defer close(jobs)
		for i := range ts {
			t := &ts[i]
			rowLen := t.Dims[0]
			rows := sizes[i] / must(RowBytes(t.Type, rowLen))
			per := max(1, chunkValues/rowLen)
			for r := 0; r < rows; r += per {
				n := min(per, rows-r)
				j := &job{src: t, r0: r, n: n, rowLen: rowLen, done: make(chan struct{})}
				j.out = make([]byte, n*must(RowBytes(t.Type, rowLen)))
				if r+n == rows {
					j.pad = (align - sizes[i]%align) % align
				}
				select {
				case queue <- j:
				case <-stop:
					return
				}
				jobs <- j
			}
		}
	}()
	var err error
	for j := range queue {
		<-j.done
		if err == nil && j.err != nil {
			err = fmt.Errorf("ggufwrite: %s: %w", j.src.Name, j.err)
			close(stop)
		}
		if err != nil {
			continue // drain
		}
		if _, e := bw.Write(j.out); e != nil {
			err = e
			close(stop)
			continue
		}
		bw.Write(make([]byte, j.pad))
		total += int64(len(j.out) + j.pad)
	}
	wg.Wait()
	if err != nil {
		return total, err
	}
	return total, bw.Flush()
}

func must(n int, err error) int {
	if err != nil {
		panic(err)
	}
	return n
}

// EncodeTo encodes whole blocks of values in a ggml type into dst, which
// must hold exactly their encoded size; it allocates nothing for F32, F16,
// BF16, Q8_0 and Q4_0.
func EncodeTo(t weights.GGMLType, x []float32, dst []byte) error {
	b, ok := blockOf[t]
	if !ok {
		return fmt.Errorf("ggufwrite: no encoder for %s", t)
	}
	if len(x)%b[0] != 0 || len(dst) != len(x)/b[0]*b[1] {
		return fmt.Errorf("ggufwrite: %d values are not whole %s blocks of %d, or %d bytes are not their size", len(x), t, b[0], len(dst))
	}
	switch t {
	case weights.GGMLF32:
		for i, v := range x {
			binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
		}
	case weights.GGMLF16:
		for i, v := range x {
			binary.LittleEndian.PutUint16(dst[2*i:], F32ToF16(v))
		}
	case weights.GGMLBF16:
		for i, v := range x {
			binary.LittleEndian.PutUint16(dst[2*i:], F32ToBF16(v))
		}
	default:
		for i := 0; i < len(x)/b[0]; i++ {
			xs, d := x[i*b[0]:(i+1)*b[0]], dst[i*b[1]:(i+1)*b[1]]
			switch t {
			case weights.GGMLQ8_0:
				q8_0To(xs, d)
			case weights.GGMLQ4_0:
				q4_0To(xs, d)
			case weights.GGMLQ4_K:
				copy(d, q4_K(xs))
			case weights.GGMLQ6_K:
				copy(d, q6_K(xs))
			}
		}
	}
	return nil
}
