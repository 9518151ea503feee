package weights

import "testing"

func TestReadable(t *testing.T) {
	for _, c := range []struct {
		dtype string
		want  bool
	}{
		{"F32", true}, {"BF16", true}, {"F16", true},
		{"Q4_K", true}, {"Q5_K", true}, {"Q6_K", true}, {"Q8_0", true}, {"Q4_0", true},
		{"I64", false}, {"U8", false}, {"BOOL", false}, {"F64", false},
		{"Q4_1", true}, {"Q5_0", true}, {"Q5_1", true}, {"IQ4_NL", false}, {"IQ2_XS", false}, {"", false}, {"f32", false},
	} {
		if got := Readable(c.dtype); got != c.want {
			t.Errorf("Readable(%q) = %v, want %v", c.dtype, got, c.want)
		}
	}
}
