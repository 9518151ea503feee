package weights_test

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"os"
	"testing"

	"verdict/engine/weights"
	"verdict/engine/weights/ggufwrite"
)

// Reference dequantisers written element by element from the block layouts
// (ggml-common.h's block_q8_0, block_q4_0, block_q4_K, block_q6_K): where
// element i of a block lives, independently of the loops of ggml.go.

func h16(b []byte, at int) float32 { return weights.F16ToFloat32(binary.LittleEndian.Uint16(b[at:])) }

func refQ8_0(blk []byte, i int) float32 { return float32(int8(blk[2+i])) * h16(blk, 0) }

func refQ4_0(blk []byte, i int) float32 {
	q := blk[2+i%16]
	if i >= 16 {
		q >>= 4
	}
	return float32(int(q&15)-8) * h16(blk, 0)
}

// six returns the 6-bit field k (0..15: eight scales, then eight mins) of a
// Q4_K block's 12 scale bytes, read bit by bit: fields 0-3 (scales) and 8-11
// (mins) are the low 6 bits of bytes 0-3 and 4-7; fields 4-7 and 12-15 take
// their low 4 bits from bytes 8-11 (low nibble: scales, high: mins) and their
// high 2 bits from the top bits of bytes 0-3 (scales) or 4-7 (mins).
func six(s []byte, k int) int {
	j, isMin := k%8, k >= 8
	base := 0
	if isMin {
		base = 4
	}
	if j < 4 {
		return int(s[base+j]) & 63
	}
	low := int(s[8+j-4]) & 15
	if isMin {
		low = int(s[8+j-4]) >> 4
	}
	return low | (int(s[base+j-4])>>6)<<4
}

func refQ4_K(blk []byte, i int) float32 {
	d, dmin := h16(blk, 0), h16(blk, 2)
	sub := i / 32 // 8 sub-blocks of 32
	chunk, r := i/64, i%64
	q := blk[16+chunk*32+r%32]
	if r >= 32 {
		q >>= 4
	}
	d1 := d * float32(six(blk[4:16], sub))
	m1 := dmin * float32(six(blk[4:16], 8+sub))
	return float32(d1*float32(q&15)) - m1
}

// refQ5_K: block_q5_K is d, dmin, the Q4_K scale bytes (4..15), qh (16..47),
// qs (48..175); element i of the 64-value chunk c sits in the low (i%64 <
// 32) or high nibble of qs[c*32+i%32], its fifth bit is bit 2c (low) or
// 2c+1 (high) of qh[i%32].
func refQ5_K(blk []byte, i int) float32 {
	d, dmin := h16(blk, 0), h16(blk, 2)
	sub := i / 32
	chunk, r := i/64, i%64
	q := int(blk[48+chunk*32+r%32])
	bit := 2 * chunk
	if r >= 32 {
		q >>= 4
		bit++
	}
	q = q&15 | int(blk[16+r%32]>>bit&1)<<4
	d1 := d * float32(six(blk[4:16], sub))
	m1 := dmin * float32(six(blk[4:16], 8+sub))
	return float32(d1*float32(q)) - m1
}

// refQ4_1: block_q4_1 is d, m, qs (4..19); element i is the low (i < 16) or
// high nibble of qs[i%16].
func refQ4_1(blk []byte, i int) float32 {
	q := blk[4+i%16]
	if i >= 16 {
		q >>= 4
	}
	return float32(float32(q&15)*h16(blk, 0)) + h16(blk, 2)
}

// fifth is element i's 5-bit value in a block_q5_0/q5_1 whose qh starts at
// byte at (qs follows at at+4): the nibble as Q4_0's, the fifth bit bit i of
// qh read as a little-endian 32-bit word.
func fifth(blk []byte, at, i int) int {
	q := int(blk[at+4+i%16])
	if i >= 16 {
		q >>= 4
	}
	return q&15 | int(blk[at+i/8]>>(i%8)&1)<<4
}

func refQ5_0(blk []byte, i int) float32 { return float32(fifth(blk, 2, i)-16) * h16(blk, 0) }

func refQ5_1(blk []byte, i int) float32 {
	return float32(float32(fifth(blk, 4, i))*h16(blk, 0)) + h16(blk, 2)
}

func refQ6_K(blk []byte, i int) float32 {
	half, r := i/128, i%128
	g, l := r/32, r%32 // group 0..3 of 32 within the half
	lo := blk[half*64+l+(g%2)*32]
	if g >= 2 {
		lo >>= 4
	}
	hi := blk[128+half*32+l] >> (2 * g) & 3
	q := int(lo&15|hi<<4) - 32
	sc := int8(blk[192+half*8+l/16+2*g])
	return float32(h16(blk, 208)*float32(sc)) * float32(q)
}

var refs = []struct {
	typ          weights.GGMLType
	block, bytes int
	scaleAt      []int // f16 fields to keep finite
	ref          func([]byte, int) float32
}{
	{weights.GGMLQ8_0, 32, 34, []int{0}, refQ8_0},
	{weights.GGMLQ4_0, 32, 18, []int{0}, refQ4_0},
	{weights.GGMLQ4_K, 256, 144, []int{0, 2}, refQ4_K},
	{weights.GGMLQ5_K, 256, 176, []int{0, 2}, refQ5_K},
	{weights.GGMLQ6_K, 256, 210, []int{208}, refQ6_K},
}

// refs32 are the 32-value types llama-quantize falls back to on rows that
// are not whole K-quant super-blocks (Q4_K → Q5_0, Q5_K → Q5_1) and Q4_1;
// kept apart from refs, whose order is the oracle file's.
var refs32 = []struct {
	typ          weights.GGMLType
	block, bytes int
	scaleAt      []int
	ref          func([]byte, int) float32
}{
	{weights.GGMLQ4_1, 32, 20, []int{0, 2}, refQ4_1},
	{weights.GGMLQ5_0, 32, 22, []int{0}, refQ5_0},
	{weights.GGMLQ5_1, 32, 24, []int{0, 2}, refQ5_1},
}

// Random blocks (finite f16 scales) dequantise exactly as the references
// say, bit for bit, in one call over several blocks.
func TestDequantizeMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, r := range append(refs, refs32...) {
		const nb = 7
		src := make([]byte, nb*r.bytes)
		for i := range src {
			src[i] = byte(rng.Uint32())
		}
		for b := 0; b < nb; b++ {
			for _, at := range r.scaleAt {
				f := float32(rng.NormFloat64() * 0.05)
				binary.LittleEndian.PutUint16(src[b*r.bytes+at:], ggufwrite.F32ToF16(f))
			}
		}
		dst := make([]float32, nb*r.block)
		if err := weights.DequantizeGGML(r.typ, dst, src); err != nil {
			t.Fatal(err)
		}
		for b := 0; b < nb; b++ {
			blk := src[b*r.bytes : (b+1)*r.bytes]
			for i := 0; i < r.block; i++ {
				want, got := r.ref(blk, i), dst[b*r.block+i]
				if math.Float32bits(want) != math.Float32bits(got) {
					t.Fatalf("%s block %d element %d: got %g, reference %g", r.typ, b, i, got, want)
				}
			}
		}
	}
}

// Hand-built blocks with known values.
func TestDequantizeKnownBlocks(t *testing.T) {
	half := ggufwrite.F32ToF16(0.5)
	one := ggufwrite.F32ToF16(1)
	two := ggufwrite.F32ToF16(2)

	q8 := binary.LittleEndian.AppendUint16(nil, half)
	for i := 0; i < 32; i++ {
		q8 = append(q8, byte(int8(i*8-128)))
	}
	q4 := binary.LittleEndian.AppendUint16(nil, two)
	for j := 0; j < 16; j++ {
		q4 = append(q4, byte(j|(15-j)<<4))
	}
	// Q4_K: d=1, dmin=0.5; scale k = k+1, min k = 2k; nibbles i%16.
	q4k := binary.LittleEndian.AppendUint16(nil, one)
	q4k = binary.LittleEndian.AppendUint16(q4k, half)
	var sc [12]byte
	for k := 0; k < 4; k++ {
		sc[k] = byte(k + 1)
		sc[k+4] = byte(2 * k)
		sc[k+8] = byte(k+5) | byte(2*(k+4))<<4 // scales 5..8 and mins 8..14 fit 4 bits
	}
	q4k = append(q4k, sc[:]...)
	for c := 0; c < 4; c++ {
		for l := 0; l < 32; l++ {
			q4k = append(q4k, byte(l%16|(15-l%16)<<4))
		}
	}
	// Q6_K: every q = 32+5 (value 5), scales 1..16, d = 0.5.
	q6 := make([]byte, 0, 210)
	for i := 0; i < 128; i++ {
		q6 = append(q6, 0x55) // low nibbles 5
	}
	for i := 0; i < 64; i++ {
		q6 = append(q6, 0xaa) // high bits 2 (q = 2<<4 | 5 = 37)
	}
	for k := 0; k < 16; k++ {
		q6 = append(q6, byte(k+1))
	}
	q6 = binary.LittleEndian.AppendUint16(q6, half)

	for _, tc := range []struct {
		typ  weights.GGMLType
		src  []byte
		n    int
		want func(i int) float32
	}{
		{weights.GGMLQ8_0, q8, 32, func(i int) float32 { return float32(i*8-128) * 0.5 }},
		{weights.GGMLQ4_0, q4, 32, func(i int) float32 {
			if i < 16 {
				return float32(i-8) * 2
			}
			return float32(15-(i-16)-8) * 2
		}},
		{weights.GGMLQ4_K, q4k, 256, func(i int) float32 {
			sub, r := i/32, i%64
			q := r % 16
			if r >= 32 {
				q = 15 - r%16
			}
			return float32((sub+1)*q) - 0.5*float32(2*sub)
		}},
		{weights.GGMLQ6_K, q6, 256, func(i int) float32 {
			// element i's scale: 16 values per scale, in order
			return 0.5 * float32(i/16+1) * 5
		}},
	} {
		dst := make([]float32, tc.n)
		if err := weights.DequantizeGGML(tc.typ, dst, tc.src); err != nil {
			t.Fatal(err)
		}
		for i, got := range dst {
			if w := tc.want(i); got != w {
				t.Fatalf("%s element %d: got %g, want %g", tc.typ, i, got, w)
			}
		}
	}
}

// Encoding then dequantising stays within each type's step: the writer
// the model tests use is a valid encoder.
func TestEncodeRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	x := make([]float32, 4096)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	amax := 0.0
	for _, v := range x {
		amax = max(amax, math.Abs(float64(v)))
	}
	for _, tc := range []struct {
		typ weights.GGMLType
		tol float64 // of the largest magnitude
	}{
		{weights.GGMLF32, 0}, {weights.GGMLF16, 1e-3}, {weights.GGMLBF16, 8e-3},
		{weights.GGMLQ8_0, 1.0 / 200}, {weights.GGMLQ4_0, 1.0 / 12}, {weights.GGMLQ4_K, 1.0 / 12}, {weights.GGMLQ6_K, 1.0 / 45},
	} {
		b, err := ggufwrite.Encode(tc.typ, x)
		if err != nil {
			t.Fatal(err)
		}
		y := make([]float32, len(x))
		if err := weights.DequantizeGGML(tc.typ, y, b); err != nil {
			t.Fatal(err)
		}
		e := 0.0
		for i := range x {
			e = max(e, math.Abs(float64(x[i]-y[i])))
		}
		t.Logf("%s: max error %.3g of max |x| %.3g", tc.typ, e, amax)
		if e > tc.tol*amax {
			t.Errorf("%s: max error %g over %g", tc.typ, e, tc.tol*amax)
		}
	}
}

// F32ToF16 inverts F16ToFloat32 on every half (NaNs stay NaN) and rounds
// halfway cases to even.
func TestF32ToF16(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		f := weights.F16ToFloat32(uint16(h))
		got := ggufwrite.F32ToF16(f)
		if math.IsNaN(float64(f)) {
			if !math.IsNaN(float64(weights.F16ToFloat32(got))) {
				t.Fatalf("NaN %#04x became %#04x", h, got)
			}
			continue
		}
		if got != uint16(h) {
			t.Fatalf("half %#04x (%g) became %#04x", h, f, got)
		}
	}
	// 1 + 2^-11 is halfway between 1 and the next half: ties to even (1).
	if got := ggufwrite.F32ToF16(1 + 1.0/2048); got != 0x3c00 {
		t.Errorf("1+2^-11 -> %#04x, want 0x3c00", got)
	}
	if got := ggufwrite.F32ToF16(65520); got != 0x7c00 {
		t.Errorf("65520 -> %#04x, want infinity", got)
	}
}

// TestDequantizeMatchesGGML holds the dequantisers to ggml's own output when
// VERDICT_GGML_ORACLE names a file made with ggml (skipped otherwise): n =
// 16384 float32 inputs, then for Q8_0, Q4_0, Q4_K and Q6_K in turn the blocks
// ggml's quantize_row_*_ref made of them and the float32 values its
// dequantize_row_* gives for those blocks. Every value must match bit for bit.
func TestDequantizeMatchesGGML(t *testing.T) {
	path := os.Getenv("VERDICT_GGML_ORACLE")
	if path == "" {
		t.Skip("VERDICT_GGML_ORACLE is not set")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const n = 16384
	floats := func(p []byte) []float32 {
		out := make([]float32, len(p)/4)
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(p[4*i:]))
		}
		return out
	}
	off := 4 * n
	for _, r := range refs {
		size := n / r.block * r.bytes
		blocks, want := b[off:off+size], floats(b[off+size:off+size+4*n])
		off += size + 4*n
		got := make([]float32, n)
		if err := weights.DequantizeGGML(r.typ, got, blocks); err != nil {
			t.Fatal(err)
		}
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%s element %d: %g, ggml %g", r.typ, i, got[i], want[i])
			}
		}
		t.Logf("%s: %d values equal to ggml's, bit for bit", r.typ, n)
	}
	if off != len(b) {
		t.Errorf("%d bytes left over", len(b)-off)
	}
}
