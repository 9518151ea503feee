package native

// #include "cpu/kernels.h"
import "C"

import "unsafe"

// BF16ToF32 widens the bfloat16 bits src into dst[:len(src)].
func BF16ToF32(dst []float32, src []uint16) {
	if len(src) == 0 {
		return
	}
	check(len(dst) >= len(src), "BF16ToF32: dst too short")
	C.vk_bf16_to_f32(fp(dst), (*C.uint16_t)(unsafe.Pointer(unsafe.SliceData(src))), i64(len(src)))
}

// Div computes y = a/b elementwise; y may alias a or b.
func Div(y, a, b []float32) {
	if len(y) == 0 {
		return
	}
	check(len(a) >= len(y) && len(b) >= len(y), "Div: input too short")
	C.vk_div(fp(y), fp(a), fp(b), i64(len(y)))
}

// AddConst computes x = x + c in place.
func AddConst(x []float32, c float32) {
	if len(x) > 0 {
		C.vk_add_const(fp(x), i64(len(x)), C.float(c))
	}
}
