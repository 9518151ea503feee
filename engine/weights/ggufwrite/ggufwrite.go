// Package ggufwrite writes GGUF files: the container (Write, in memory, any
// version, alignment and metadata, for tests; WriteStream, chunked on all
// cores with bounded memory, for files of any size), ggml encoders for F32,
// F16, BF16, Q8_0, Q4_0, Q4_K and Q6_K (simple quantisers, not llama.cpp's
// optimising ones: any valid encoding reads back through the same
// dequantisers), llama.cpp's file types and "llama" vocabularies (Gemma's
// tokenizer's, or bytes). It knows no model: a model's layout (the names,
// shapes, types and metadata of its tensors) is the model's own, such as
// engine/gemma3n/gguf's for Gemma 3n.
package ggufwrite

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"

	"verdict/engine/weights"
)

// KV is one metadata pair. Value may be uint8, int8, uint16, int16, uint32,
// int32, float32, bool, string, uint64, int64, float64, a slice of any of
// those, or Raw.
type KV struct {
	Key   string
	Value any
}

// Raw is a metadata value written as given: type id and encoded bytes.
type Raw struct {
	Type  weights.GGUFType
	Bytes []byte
}

// Tensor is one tensor: Dims in ggml order (innermost first) and its
// encoded bytes.
type Tensor struct {
	Name string
	Dims []int
	Type weights.GGMLType
	Data []byte
}

// Options shape the container; zero values give version 3, alignment 32.
type Options struct {
	Version   uint32
	Alignment int
}

// Write writes a GGUF file. When Alignment is not 32 the caller must also
// list general.alignment among kvs for a reader to find it.
func Write(w io.Writer, opt Options, kvs []KV, tensors []Tensor) error {
	if opt.Version == 0 {
		opt.Version = 3
	}
	if opt.Alignment == 0 {
		opt.Alignment = 32
	}
	var b bytes.Buffer
	b.WriteString("GGUF")
	le := func(v any) { binary.Write(&b, binary.LittleEndian, v) }
	le(opt.Version)
	le(uint64(len(tensors)))
	le(uint64(len(kvs)))
	str := func(s string) { le(uint64(len(s))); b.WriteString(s) }
	for _, kv := range kvs {
		str(kv.Key)
		if err := value(&b, kv.Value, true); err != nil {
			return fmt.Errorf("ggufwrite: %s: %w", kv.Key, err)
		}
	}
	align := func(n int) int { return (n + opt.Alignment - 1) / opt.Alignment * opt.Alignment }
	off := 0
	offsets := make([]int, len(tensors))
	for i, t := range tensors {
		offsets[i] = off
		off = align(off + len(t.Data))
	}
	for i, t := range tensors {
		str(t.Name)
		le(uint32(len(t.Dims)))
		for _, d := range t.Dims {
			le(uint64(d))
		}
		le(uint32(t.Type))
		le(uint64(offsets[i]))
	}
	b.Write(make([]byte, align(b.Len())-b.Len()))
	start := b.Len()
	for i, t := range tensors {
		b.Write(make([]byte, start+offsets[i]-b.Len()))
		b.Write(t.Data)
	}
	_, err := w.Write(b.Bytes())
	return err
}

// value writes a typed value; withType prefixes its type id.
func value(b *bytes.Buffer, v any, withType bool) error {
	le := func(x any) { binary.Write(b, binary.LittleEndian, x) }
	typ := func(t weights.GGUFType) {
		if withType {
			le(uint32(t))
		}
	}
	switch x := v.(type) {
	case Raw:
		typ(x.Type)
		b.Write(x.Bytes)
	case uint8:
		typ(weights.GGUFUint8)
		le(x)
	case int8:
		typ(weights.GGUFInt8)
		le(x)
	case uint16:
		typ(weights.GGUFUint16)
		le(x)
	case int16:
		typ(weights.GGUFInt16)
		le(x)
	case uint32:
		typ(weights.GGUFUint32)
		le(x)
	case int32:
		typ(weights.GGUFInt32)
		le(x)
	case float32:
		typ(weights.GGUFFloat32)
		le(x)
	case bool:
		typ(weights.GGUFBool)
		le(x)
	case string:
		typ(weights.GGUFString)
		le(uint64(len(x)))
		b.WriteString(x)
	case uint64:
		typ(weights.GGUFUint64)
		le(x)
	case int64:
		typ(weights.GGUFInt64)
		le(x)
	case float64:
		typ(weights.GGUFFloat64)
		le(x)
	case []int32:
		return array(b, weights.GGUFInt32, len(x), func(i int) any { return x[i] }, withType)
	case []uint32:
		return array(b, weights.GGUFUint32, len(x), func(i int) any { return x[i] }, withType)
	case []float32:
		return array(b, weights.GGUFFloat32, len(x), func(i int) any { return x[i] }, withType)
	case []bool:
		return array(b, weights.GGUFBool, len(x), func(i int) any { return x[i] }, withType)
	case []string:
		return array(b, weights.GGUFString, len(x), func(i int) any { return x[i] }, withType)
	case [][]int32:
		return array(b, weights.GGUFArray, len(x), func(i int) any { return x[i] }, withType)
	default:
		return fmt.Errorf("unsupported value type %T", v)
	}
	return nil
}

func array(b *bytes.Buffer, elem weights.GGUFType, n int, at func(int) any, withType bool) error {
	if withType {
		binary.Write(b, binary.LittleEndian, uint32(weights.GGUFArray))
	}
	binary.Write(b, binary.LittleEndian, uint32(elem))
	binary.Write(b, binary.LittleEndian, uint64(n))
	for i := 0; i < n; i++ {
		if err := value(b, at(i), false); err != nil {
			return err
		}
	}
	return nil
}

// F32ToF16 rounds a float32 to IEEE half precision (nearest, ties to even;
// overflow to infinity), as numpy and ggml's reference conversion do.
func F32ToF16(f float32) uint16 {
	x := math.Float32bits(f)
	sign := uint16(x>>16) & 0x8000
	exp := int(x>>23&0xff) - 127
	mant := x & 0x7fffff
	switch {
	case exp == 128: // inf or NaN
		if mant != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	case exp > 15:
		return sign | 0x7c00
	case exp >= -14: // normal
		h := uint32(exp+15)<<10 | mant>>13
		rest := mant & 0x1fff
		if rest > 0x1000 || rest == 0x1000 && h&1 == 1 {
			h++ // may carry into the exponent, up to infinity: correct
		}
		return sign | uint16(h)
	case exp >= -25: // subnormal
		mant |= 0x800000
		shift := uint(-exp - 1) // value = mant·2^(exp−23) = h·2^−24
		h := mant >> shift
		rest := mant & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rest > half || rest == half && h&1 == 1 {
			h++
		}
		return sign | uint16(h)
	}
	return sign
}

// F32ToBF16 rounds a float32 to bfloat16 (nearest, ties to even; NaN kept
// quiet), as PyTorch does.
func F32ToBF16(f float32) uint16 {
	x := math.Float32bits(f)
	if x&0x7fffffff > 0x7f800000 {
		return uint16(x>>16) | 0x40
	}
	return uint16((x + 0x7fff + (x >> 16 & 1)) >> 16)
}

// Encode encodes values (whole blocks) in a ggml type.
func Encode(t weights.GGMLType, x []float32) ([]byte, error) {
	var out []byte
	le16 := func(v uint16) { out = binary.LittleEndian.AppendUint16(out, v) }
	blocks := func(n int) error {
		if len(x)%n != 0 {
			return fmt.Errorf("ggufwrite: %d values are not whole %s blocks of %d", len(x), t, n)
		}
		return nil
	}
	switch t {
	case weights.GGMLF32:
		for _, v := range x {
			out = binary.LittleEndian.AppendUint32(out, math.Float32bits(v))
		}
	case weights.GGMLF16:
		for _, v := range x {
			le16(F32ToF16(v))
		}
	case weights.GGMLBF16:
		for _, v := range x {
			le16(F32ToBF16(v))
		}
	case weights.GGMLQ8_0:
		if err := blocks(32); err != nil {
			return nil, err
		}
		for b := 0; b < len(x); b += 32 {
			out = append(out, q8_0(x[b:b+32])...)
		}
	case weights.GGMLQ4_0:
		if err := blocks(32); err != nil {
			return nil, err
		}
		for b := 0; b < len(x); b += 32 {
			out = append(out, q4_0(x[b:b+32])...)
		}
	case weights.GGMLQ4_K:
		if err := blocks(256); err != nil {
			return nil, err
		}
		for b := 0; b < len(x); b += 256 {
			out = append(out, q4_K(x[b:b+256])...)
		}
	case weights.GGMLQ6_K:
		if err := blocks(256); err != nil {
			return nil, err
		}
		for b := 0; b < len(x); b += 256 {
			out = append(out, q6_K(x[b:b+256])...)
		}
	default:
		return nil, errors.New("ggufwrite: no encoder for " + t.String())
	}
	return out, nil
}

func roundInt(v float32) int { return int(math.RoundToEven(float64(v))) }

func ceilInt(v float32) int { return int(math.Ceil(float64(v))) }

func clamp(v, lo, hi int) int { return min(max(v, lo), hi) }

// q8_0: d = max|x|/127, q = round(x/d).
func q8_0(x []float32) []byte {
	out := make([]byte, 34)
	q8_0To(x, out)
	return out
}

// q8_0To encodes one block of 32 values into its 34 bytes.
func q8_0To(x []float32, out []byte) {
	amax := float32(0)
	for _, v := range x {
		amax = max(amax, float32(math.Abs(float64(v))))
	}
	dh := F32ToF16(amax / 127)
	d := weights.F16ToFloat32(dh)
	binary.LittleEndian.PutUint16(out, dh)
	for i, v := range x {
		q := 0
		if d != 0 {
			q = clamp(roundInt(v/d), -128, 127)
		}
		out[2+i] = byte(int8(q))
	}
}

// q4_0: d = (the value of largest magnitude)/−8, q = round(x/d)+8 in 0..15.
func q4_0(x []float32) []byte {
	out := make([]byte, 18)
	q4_0To(x, out)
	return out
}

// q4_0To encodes one block of 32 values into its 18 bytes.
func q4_0To(x []float32, out []byte) {
	var m float32
	for _, v := range x {
		if math.Abs(float64(v)) > math.Abs(float64(m)) {
			m = v
		}
	}
	dh := F32ToF16(m / -8)
	d := weights.F16ToFloat32(dh)
	var q [32]int
	for i, v := range x {
		if d != 0 {
			q[i] = clamp(roundInt(v/d)+8, 0, 15)
		} else {
			q[i] = 8
		}
	}
	binary.LittleEndian.PutUint16(out, dh)
	for j := 0; j < 16; j++ {
		out[2+j] = byte(q[j] | q[j+16]<<4)
	}
}

// q4_K: per 32 values a 6-bit scale and min: x ≈ d·sc·q − dmin·m, q in 0..15.
func q4_K(x []float32) []byte {
	var scale, mins [8]float32
	for j := 0; j < 8; j++ {
		sub := x[j*32 : j*32+32]
		lo, hi := min(float32(0), slices.Min(sub)), max(float32(0), slices.Max(sub))
		scale[j], mins[j] = (hi-lo)/15, -lo
	}
	dh, mh := F32ToF16(slices.Max(scale[:])/63), F32ToF16(slices.Max(mins[:])/63)
	d, dmin := weights.F16ToFloat32(dh), weights.F16ToFloat32(mh)
	var sc, mn [8]int
	var q [256]int
	for j := 0; j < 8; j++ {
		if d > 0 {
			sc[j] = clamp(ceilInt(scale[j]/d), 0, 63) // up: no value clamps
		}
		if dmin > 0 {
			mn[j] = clamp(ceilInt(mins[j]/dmin), 0, 63)
		}
		ds, dm := d*float32(sc[j]), dmin*float32(mn[j])
		for l := 0; l < 32; l++ {
			if ds > 0 {
				q[j*32+l] = clamp(roundInt((x[j*32+l]+dm)/ds), 0, 15)
			}
		}
	}
	out := binary.LittleEndian.AppendUint16(nil, dh)
	out = binary.LittleEndian.AppendUint16(out, mh)
	var s [12]byte
	for i := 0; i < 4; i++ {
		s[i] = byte(sc[i] | sc[i+4]>>4<<6)
		s[i+4] = byte(mn[i] | mn[i+4]>>4<<6)
		s[i+8] = byte(sc[i+4]&0xf | (mn[i+4]&0xf)<<4)
	}
	out = append(out, s[:]...)
	for c := 0; c < 4; c++ {
		for l := 0; l < 32; l++ {
			out = append(out, byte(q[c*64+l]|q[c*64+32+l]<<4))
		}
	}
	return out
}

// q6_K: per 16 values an int8 scale: x ≈ d·sc·(q−32), q in 0..63.
func q6_K(x []float32) []byte {
	var scale [16]float32
	for k := 0; k < 16; k++ {
		for _, v := range x[k*16 : k*16+16] {
			scale[k] = max(scale[k], float32(math.Abs(float64(v)))/31)
		}
	}
	dh := F32ToF16(slices.Max(scale[:]) / 127)
	d := weights.F16ToFloat32(dh)
	var sc [16]int
	var q [256]int
	for k := 0; k < 16; k++ {
		if d > 0 {
			sc[k] = clamp(ceilInt(scale[k]/d), -128, 127)
		}
		ds := d * float32(sc[k])
		for l := 0; l < 16; l++ {
			i := k*16 + l
			q[i] = 32
			if ds != 0 {
				q[i] = clamp(roundInt(x[i]/ds), -32, 31) + 32
			}
		}
	}
	ql, qh := make([]byte, 128), make([]byte, 64)
	for n := 0; n < 2; n++ {
		for l := 0; l < 32; l++ {
			q1, q2, q3, q4 := q[n*128+l], q[n*128+l+32], q[n*128+l+64], q[n*128+l+96]
			ql[n*64+l] = byte(q1&0xf | (q3&0xf)<<4)
			ql[n*64+l+32] = byte(q2&0xf | (q4&0xf)<<4)
			qh[n*32+l] = byte(q1>>4 | (q2>>4)<<2 | (q3>>4)<<4 | (q4>>4)<<6)
		}
	}
	out := append(ql, qh...)
	for _, s := range sc {
		out = append(out, byte(int8(s)))
	}
	return binary.LittleEndian.AppendUint16(out, dh)
}

// KVs makes metadata pairs from alternating keys and values.
func KVs(pairs ...any) []KV {
	out := make([]KV, 0, len(pairs)/2)
	for i := 0; i+1 < len(pairs); i += 2 {
		out = append(out, KV{Key: pairs[i].(string), Value: pairs[i+1]})
	}
	return out
}
