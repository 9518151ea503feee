package weights

import (
	"encoding/binary"
	"fmt"
	"math"
)

// GGMLType is a ggml tensor type id as a GGUF tensor info stores it.
type GGMLType uint32

// The ggml tensor types this package reads (ids from ggml.h).
const (
	GGMLF32  GGMLType = 0
	GGMLF16  GGMLType = 1
	GGMLQ4_0 GGMLType = 2
	GGMLQ4_1 GGMLType = 3
	GGMLQ5_0 GGMLType = 6
	GGMLQ5_1 GGMLType = 7
	GGMLQ8_0 GGMLType = 8
	GGMLQ4_K GGMLType = 12
	GGMLQ5_K GGMLType = 13
	GGMLQ6_K GGMLType = 14
	GGMLBF16 GGMLType = 30
)

// ggmlType describes a ggml type's blocks: block elements per block of
// size bytes; dequant is nil for types that are sized but not read.
type ggmlType struct {
	name        string
	block, size int
	dequant     func(dst []float32, src []byte) // whole blocks
}

// qkK is the super-block size of the k-quants (ggml's QK_K).
const qkK = 256

// ggmlTypes holds every type a GGUF file may declare. The ones with a
// dequantiser can be read; the others (other quantisations, integer types)
// open, are sized and listed, and give an error naming tensor and type
// when read.
var ggmlTypes = map[GGMLType]ggmlType{
	GGMLF32:  {"F32", 1, 4, dequantF32},
	GGMLF16:  {"F16", 1, 2, dequantF16},
	GGMLBF16: {"BF16", 1, 2, dequantBF16},
	GGMLQ4_0: {"Q4_0", 32, 18, dequantQ4_0},
	GGMLQ8_0: {"Q8_0", 32, 34, dequantQ8_0},
	GGMLQ4_K: {"Q4_K", qkK, 144, dequantQ4_K},
	GGMLQ5_K: {"Q5_K", qkK, 176, dequantQ5_K},
	GGMLQ6_K: {"Q6_K", qkK, 210, dequantQ6_K},
	GGMLQ4_1: {"Q4_1", 32, 20, dequantQ4_1},
	GGMLQ5_0: {"Q5_0", 32, 22, dequantQ5_0},
	GGMLQ5_1: {"Q5_1", 32, 24, dequantQ5_1},
	9:        {"Q8_1", 32, 36, nil},
	10:       {"Q2_K", qkK, 84, nil},
	11:       {"Q3_K", qkK, 110, nil},
	15:       {"Q8_K", qkK, 292, nil},
	16:       {"IQ2_XXS", qkK, 66, nil},
	17:       {"IQ2_XS", qkK, 74, nil},
	18:       {"IQ3_XXS", qkK, 98, nil},
	19:       {"IQ1_S", qkK, 50, nil},
	20:       {"IQ4_NL", 32, 18, nil},
	21:       {"IQ3_S", qkK, 110, nil},
	22:       {"IQ2_S", qkK, 82, nil},
	23:       {"IQ4_XS", qkK, 136, nil},
	24:       {"I8", 1, 1, nil},
	25:       {"I16", 1, 2, nil},
	26:       {"I32", 1, 4, nil},
	27:       {"I64", 1, 8, nil},
	28:       {"F64", 1, 8, nil},
	29:       {"IQ1_M", qkK, 56, nil},
	34:       {"TQ1_0", qkK, 54, nil},
	35:       {"TQ2_0", qkK, 66, nil},
	39:       {"MXFP4", 32, 17, nil},
}

func (t GGMLType) String() string {
	if tt, ok := ggmlTypes[t]; ok {
		return tt.name
	}
	return fmt.Sprintf("ggml type %d", uint32(t))
}

// DequantizeGGML converts whole blocks of a ggml type to float32:
// len(dst) elements from src, which must hold exactly their blocks.
func DequantizeGGML(t GGMLType, dst []float32, src []byte) error {
	tt, ok := ggmlTypes[t]
	if !ok || tt.dequant == nil {
		return fmt.Errorf("weights: ggml type %s cannot be read as float32 (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K and Q6_K can)", t)
	}
	if len(dst)%tt.block != 0 || len(src) != len(dst)/tt.block*tt.size {
		return fmt.Errorf("weights: %s: %d values from %d bytes is not whole blocks of %d values in %d bytes", tt.name, len(dst), len(src), tt.block, tt.size)
	}
	nb := len(dst) / tt.block
	parallelFor(nb*tt.block, func(lo, hi int) {
		// chunk on block boundaries
		b0, b1 := lo/tt.block, hi/tt.block
		if hi == len(dst) {
			b1 = nb
		}
		if b0 == b1 {
			return
		}
		tt.dequant(dst[b0*tt.block:b1*tt.block], src[b0*tt.size:b1*tt.size])
	})
	return nil
}

// The dequantisers follow ggml's reference definitions (dequantize_row_* in
// ggml-quants.c). Each product is rounded to float32 by an explicit
// conversion, so the compiler cannot fuse it into a multiply-add: results are
// the same on every architecture.

func dequantF32(dst []float32, src []byte) {
	for i := range dst {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
	}
}

func dequantF16(dst []float32, src []byte) {
	for i := range dst {
		dst[i] = F16ToFloat32(binary.LittleEndian.Uint16(src[2*i:]))
	}
}

func dequantBF16(dst []float32, src []byte) {
	for i := range dst {
		dst[i] = BF16ToFloat32(binary.LittleEndian.Uint16(src[2*i:]))
	}
}

func f16at(b []byte, i int) float32 { return F16ToFloat32(binary.LittleEndian.Uint16(b[i:])) }

// Q8_0: blocks of 32 values: an f16 scale d and 32 int8 q; x = d·q.
func dequantQ8_0(dst []float32, src []byte) {
	for b := 0; b < len(dst)/32; b++ {
		blk := src[b*34 : b*34+34]
		d := f16at(blk, 0)
		y := dst[b*32 : b*32+32]
		for j := range y {
			y[j] = float32(int8(blk[2+j])) * d
		}
	}
}

// Q4_0: blocks of 32 values: an f16 scale d and 16 bytes of 4-bit q, the
// low nibbles the first 16 values and the high nibbles the last 16;
// x = d·(q−8).
func dequantQ4_0(dst []float32, src []byte) {
	for b := 0; b < len(dst)/32; b++ {
		blk := src[b*18 : b*18+18]
		d := f16at(blk, 0)
		y := dst[b*32 : b*32+32]
		for j := 0; j < 16; j++ {
			q := blk[2+j]
			y[j] = float32(int(q&0xf)-8) * d
			y[j+16] = float32(int(q>>4)-8) * d
		}
	}
}

// Q4_1: blocks of 32 values: f16 d and m, then Q4_0's 16 bytes of nibbles;
// x = d·q + m.
func dequantQ4_1(dst []float32, src []byte) {
	for b := 0; b < len(dst)/32; b++ {
		blk := src[b*20 : b*20+20]
		d, m := f16at(blk, 0), f16at(blk, 2)
		y := dst[b*32 : b*32+32]
		for j := 0; j < 16; j++ {
			q := blk[4+j]
			y[j] = float32(float32(q&0xf)*d) + m
			y[j+16] = float32(float32(q>>4)*d) + m
		}
	}
}

// Q5_0: blocks of 32 values: f16 d, 4 bytes of fifth bits qh (a
// little-endian uint32, bit j for value j), 16 bytes of nibbles as Q4_0;
// x = d·(q−16). llama-quantize falls back to it for Q4_K tensors whose rows
// are not whole 256-value super-blocks.
func dequantQ5_0(dst []float32, src []byte) {
	for b := 0; b < len(dst)/32; b++ {
		blk := src[b*22 : b*22+22]
		d := f16at(blk, 0)
		qh := binary.LittleEndian.Uint32(blk[2:])
		y := dst[b*32 : b*32+32]
		for j := 0; j < 16; j++ {
			q := blk[6+j]
			lo := uint32(q&0xf) | (qh>>j&1)<<4
			hi := uint32(q>>4) | (qh>>(j+16)&1)<<4
			y[j] = float32(int(lo)-16) * d
			y[j+16] = float32(int(hi)-16) * d
		}
	}
}

// Q5_1: blocks of 32 values: f16 d and m, then Q5_0's fifth bits and
// nibbles; x = d·q + m. llama-quantize's fallback for Q5_K.
func dequantQ5_1(dst []float32, src []byte) {
	for b := 0; b < len(dst)/32; b++ {
		blk := src[b*24 : b*24+24]
		d, m := f16at(blk, 0), f16at(blk, 2)
		qh := binary.LittleEndian.Uint32(blk[4:])
		y := dst[b*32 : b*32+32]
		for j := 0; j < 16; j++ {
			q := blk[8+j]
			lo := uint32(q&0xf) | (qh>>j&1)<<4
			hi := uint32(q>>4) | (qh>>(j+16)&1)<<4
			y[j] = float32(float32(lo)*d) + m
			y[j+16] = float32(float32(hi)*d) + m
		}
	}
}

// scaleMinK4 unpacks the j-th 6-bit scale and min of a Q4_K block's 12
// scale bytes (ggml's get_scale_min_k4).
func scaleMinK4(j int, q []byte) (sc, m uint8) {
	if j < 4 {
		return q[j] & 63, q[j+4] & 63
	}
	return (q[j+4] & 0xf) | ((q[j-4] >> 6) << 4), (q[j+4] >> 4) | ((q[j] >> 6) << 4)
}

// Q4_K: super-blocks of 256 values: f16 d and dmin, 12 bytes of eight 6-bit
// scales and mins, 128 bytes of 4-bit q. Each 64 values take 32 bytes: the
// low nibbles are the first 32 (scale 2i), the high nibbles the next 32
// (scale 2i+1); x = d·sc·q − dmin·m.
func dequantQ4_K(dst []float32, src []byte) {
	for b := 0; b < len(dst)/qkK; b++ {
		blk := src[b*144 : b*144+144]
		d, dmin := f16at(blk, 0), f16at(blk, 2)
		scales, qs := blk[4:16], blk[16:144]
		y := dst[b*qkK : b*qkK+qkK]
		for j, is := 0, 0; j < qkK; j, is = j+64, is+2 {
			sc, m := scaleMinK4(is, scales)
			d1, m1 := d*float32(sc), dmin*float32(m)
			sc, m = scaleMinK4(is+1, scales)
			d2, m2 := d*float32(sc), dmin*float32(m)
			q := qs[j/2 : j/2+32]
			for l := 0; l < 32; l++ {
				y[j+l] = float32(d1*float32(q[l]&0xf)) - m1
				y[j+32+l] = float32(d2*float32(q[l]>>4)) - m2
			}
		}
	}
}

// Q5_K: Q4_K's layout with a fifth bit: f16 d and dmin, the same 12 scale
// bytes, 32 bytes of high bits qh, 128 bytes of low nibbles. Value l of the
// c-th 64 (low nibble for the first 32, high for the next 32) takes its
// fifth bit from bit 2c (2c+1) of qh[l]; x = d·sc·q − dmin·m, q in 0..31.
// llama-quantize's Q4_K_S and Q5_K_M mixes hold it.
func dequantQ5_K(dst []float32, src []byte) {
	for b := 0; b < len(dst)/qkK; b++ {
		blk := src[b*176 : b*176+176]
		d, dmin := f16at(blk, 0), f16at(blk, 2)
		scales, qh, qs := blk[4:16], blk[16:48], blk[48:176]
		y := dst[b*qkK : b*qkK+qkK]
		for c := 0; c < 4; c++ {
			sc, m := scaleMinK4(2*c, scales)
			d1, m1 := d*float32(sc), dmin*float32(m)
			sc, m = scaleMinK4(2*c+1, scales)
			d2, m2 := d*float32(sc), dmin*float32(m)
			q := qs[c*32 : c*32+32]
			for l := 0; l < 32; l++ {
				lo := q[l]&0xf | (qh[l]>>(2*c)&1)<<4
				hi := q[l]>>4 | (qh[l]>>(2*c+1)&1)<<4
				y[c*64+l] = float32(d1*float32(lo)) - m1
				y[c*64+32+l] = float32(d2*float32(hi)) - m2
			}
		}
	}
}

// Q6_K: super-blocks of 256 values: 128 bytes of low 4 bits ql, 64 bytes of
// high 2 bits qh, 16 int8 scales and an f16 d. Each 128 values take 64 ql
// bytes and 32 qh bytes; x = d·scale·(q−32), one scale per 16 values.
func dequantQ6_K(dst []float32, src []byte) {
	for b := 0; b < len(dst)/qkK; b++ {
		blk := src[b*210 : b*210+210]
		ql, qh, sc := blk[0:128], blk[128:192], blk[192:208]
		d := f16at(blk, 208)
		y := dst[b*qkK : b*qkK+qkK]
		for n := 0; n < 2; n++ {
			l8, h8, s8, y8 := ql[n*64:], qh[n*32:], sc[n*8:], y[n*128:]
			for l := 0; l < 32; l++ {
				is := l / 16
				q1 := int(l8[l]&0xf|(h8[l]>>0&3)<<4) - 32
				q2 := int(l8[l+32]&0xf|(h8[l]>>2&3)<<4) - 32
				q3 := int(l8[l]>>4|(h8[l]>>4&3)<<4) - 32
				q4 := int(l8[l+32]>>4|(h8[l]>>6&3)<<4) - 32
				y8[l] = float32(d*float32(int8(s8[is]))) * float32(q1)
				y8[l+32] = float32(d*float32(int8(s8[is+2]))) * float32(q2)
				y8[l+64] = float32(d*float32(int8(s8[is+4]))) * float32(q3)
				y8[l+96] = float32(d*float32(int8(s8[is+6]))) * float32(q4)
			}
		}
	}
}
