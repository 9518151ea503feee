package native

import "math"

// BranchAttnParams describes attention for branch rows that continue a
// shared prefix. The prefix keys and values are [Prefix, HeadsKV, HeadDim]
// at positions 0..Prefix-1. Every branch row r has its own suffix keys and
// values, SufLen of them, stored at [r·SufLen + j] of the suffix arrays
// ([rows·SufLen, HeadsKV, HeadDim]) at positions Prefix+j. Query i belongs
// to row QRow[i] at suffix index QIdx[i] (position Prefix+QIdx[i]) and sees
// the prefix and its own row's suffix keys up to itself, limited to the
// last Window positions when Window > 0. Branch rows never see each other.
type BranchAttnParams struct {
	NQ                       int
	HeadsQ, HeadsKV, HeadDim int
	Prefix, SufLen           int
	QRow, QIdx               []int32
	Window                   int
	Scale                    float32
}

// BranchAttention computes attention for branch rows; see BranchAttnParams.
// q and out are [NQ, HeadsQ, HeadDim].
func BranchAttention(out, q, pk, pv, sk, sv []float32, p BranchAttnParams) {
	d := p.HeadDim
	group := p.HeadsQ / p.HeadsKV
	sc := make([]float32, p.Prefix+p.SufLen)
	for i := 0; i < p.NQ; i++ {
		r, j := int(p.QRow[i]), int(p.QIdx[i])
		pos := p.Prefix + j
		lo := 0
		if p.Window > 0 && pos-p.Window+1 > lo {
			lo = pos - p.Window + 1
		}
		// key index k < Prefix: prefix key k; else suffix key k-Prefix of row r.
		key := func(k, h int) ([]float32, []float32) {
			if k < p.Prefix {
				o := (k*p.HeadsKV + h) * d
				return pk[o : o+d], pv[o : o+d]
			}
			o := ((r*p.SufLen+k-p.Prefix)*p.HeadsKV + h) * d
			return sk[o : o+d], sv[o : o+d]
		}
		for h := 0; h < p.HeadsQ; h++ {
			kh := h / group
			qv := q[(i*p.HeadsQ+h)*d : (i*p.HeadsQ+h+1)*d]
			m := float32(math.Inf(-1))
			for k := lo; k <= pos; k++ {
				kv, _ := key(k, kh)
				var s float32
				for c := range qv {
					s += qv[c] * kv[c]
				}
				s *= p.Scale
				sc[k] = s
				if s > m {
					m = s
				}
			}
			var sum float32
			for k := lo; k <= pos; k++ {
				sc[k] = float32(math.Exp(float64(sc[k] - m)))
				sum += sc[k]
			}
			o := out[(i*p.HeadsQ+h)*d : (i*p.HeadsQ+h+1)*d]
			for c := range o {
				o[c] = 0
			}
			for k := lo; k <= pos; k++ {
				_, vv := key(k, kh)
				w := sc[k] / sum
				for c := range o {
					o[c] += w * vv[c]
				}
			}
		}
	}
}
