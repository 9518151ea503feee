package native

import "math"

// BF16ToF32 widens bfloat16 bits to float32.
func BF16ToF32(dst []float32, src []uint16) {
	for i, b := range src {
		dst[i] = math.Float32frombits(uint32(b) << 16)
	}
}

// Div computes y = a/b elementwise; y may alias a or b.
func Div(y, a, b []float32) {
	for i := range y {
		y[i] = a[i] / b[i]
	}
}

// AddConst adds c to every element of x.
func AddConst(x []float32, c float32) {
	for i := range x {
		x[i] += c
	}
}
