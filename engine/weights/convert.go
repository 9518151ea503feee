package weights

import (
	"encoding/binary"
	"math"
	"unsafe"
)

// dtypeSize holds the element sizes of the safetensors dtypes. A file using
// any of them opens (its data sizes are checked); only F32, BF16 and F16 can
// be read as float32, the others give an error naming tensor and dtype on
// access. A dtype missing here makes the file fail to open.
var dtypeSize = map[string]int{
	"F64": 8, "F32": 4, "F16": 2, "BF16": 2,
	"I64": 8, "I32": 4, "I16": 2, "I8": 1,
	"U64": 8, "U32": 4, "U16": 2, "U8": 1,
	"BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1,
	"C64": 8,
}

func readable(dtype string) bool {
	return dtype == "F32" || dtype == "BF16" || dtype == "F16"
}

// Readable reports whether a tensor of the element type Info reports can be
// read as float32 by the Store that reported it: the safetensors F32, BF16
// and F16, and the ggml types with a dequantiser (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K).
func Readable(dtype string) bool {
	if readable(dtype) {
		return true
	}
	for _, t := range ggmlTypes {
		if t.name == dtype {
			return t.dequant != nil
		}
	}
	return false
}

// BF16ToFloat32 converts bfloat16 bits to float32 (exact).
func BF16ToFloat32(b uint16) float32 {
	return math.Float32frombits(uint32(b) << 16)
}

// F16ToFloat32 converts IEEE half-precision bits to float32 (exact,
// including subnormals, infinities and NaN payloads).
func F16ToFloat32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch exp {
	case 0:
		// Zero or subnormal: mant * 2^-24, exact in float32.
		f := float32(mant) * (1.0 / (1 << 24))
		return math.Float32frombits(math.Float32bits(f) | sign)
	case 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	}
	return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
}

// decode converts raw little-endian elements of dtype (F32, BF16 or F16)
// into dst; len(raw) must be len(dst) times the element size.
func decode(dst []float32, dtype string, raw []byte) {
	parallelFor(len(dst), func(lo, hi int) {
		decodeRange(dst[lo:hi], dtype, raw[lo*dtypeSize[dtype]:hi*dtypeSize[dtype]])
	})
}

func decodeRange(dst []float32, dtype string, raw []byte) {
	switch dtype {
	case "F32":
		if littleEndian {
			copy(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(dst))), 4*len(dst)), raw)
			return
		}
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
	case "BF16":
		for i := range dst {
			dst[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(raw[2*i:])) << 16)
		}
	case "F16":
		for i := range dst {
			dst[i] = F16ToFloat32(binary.LittleEndian.Uint16(raw[2*i:]))
		}
	default:
		panic("weights: decode of " + dtype)
	}
}

// aligned reports whether b's first byte is aligned to n bytes.
func aligned(b []byte, n uintptr) bool {
	return uintptr(unsafe.Pointer(unsafe.SliceData(b)))%n == 0
}
