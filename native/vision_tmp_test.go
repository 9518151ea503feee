package native

import (
	"fmt"
	"testing"
)

func BenchmarkVisionLinearTmp(b *testing.B) {
	for _, s := range []struct{ rows, cols, n int }{{2560, 640, 2304}, {1280, 2560, 576}, {512, 1152, 36864}} {
		b.Run(fmt.Sprintf("%dx%d/n=%d", s.rows, s.cols, s.n), func(b *testing.B) {
			benchLinear(b, F32, s.rows, s.cols, s.n, false)
		})
	}
}
