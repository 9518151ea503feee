package native

import "math"

// BranchAttnParams describes attention for branch rows that continue a
// shared prefix, optionally through a parent segment.
//
// Keys come in up to three segments, each [n, HeadsKV, HeadDim]:
//   - the prefix pk/pv: Prefix keys at positions 0..Prefix-1;
//   - a parent segment: row MidRow[i] of mk/mv (MidLen rows of MidStride
//     keys: key k of parent row p at [p·MidStride + k]), MidLen[i] keys at
//     positions Prefix..Prefix+MidLen[i]-1; MidRow[i] < 0 means none;
//   - the query's own row QRow[i] of sk/sv (SufLen keys per row), key j at
//     position Prefix+MidLen[i]+j.
//
// Query i sits at own index QIdx[i] and sees the prefix, its parent segment
// and its own row up to itself, limited to the last Window positions when
// Window > 0. Rows never see each other's keys.
type BranchAttnParams struct {
	NQ                       int
	HeadsQ, HeadsKV, HeadDim int
	Prefix, SufLen           int
	QRow, QIdx               []int32
	MidStride                int
	MidRow, MidLen           []int32 // nil: no parent segments
	Window                   int
	Scale                    float32
}

// BranchAttention computes attention for branch rows; see BranchAttnParams.
// q and out are [NQ, HeadsQ, HeadDim].
func BranchAttention(out, q, pk, pv, mk, mv, sk, sv []float32, p BranchAttnParams) {
	d := p.HeadDim
	group := p.HeadsQ / p.HeadsKV
	var scores []float32
	for i := 0; i < p.NQ; i++ {
		r, j := int(p.QRow[i]), int(p.QIdx[i])
		mrow, mlen := -1, 0
		if p.MidRow != nil && p.MidRow[i] >= 0 {
			mrow, mlen = int(p.MidRow[i]), int(p.MidLen[i])
		}
		pos := p.Prefix + mlen + j
		lo := 0
		if p.Window > 0 && pos-p.Window+1 > lo {
			lo = pos - p.Window + 1
		}
		// key returns the key and value at position k (lo <= k <= pos).
		key := func(k, h int) ([]float32, []float32) {
			var o int
			switch {
			case k < p.Prefix:
				o = (k*p.HeadsKV + h) * d
				return pk[o : o+d], pv[o : o+d]
			case k < p.Prefix+mlen:
				o = ((mrow*p.MidStride+k-p.Prefix)*p.HeadsKV + h) * d
				return mk[o : o+d], mv[o : o+d]
			}
			o = ((r*p.SufLen+k-p.Prefix-mlen)*p.HeadsKV + h) * d
			return sk[o : o+d], sv[o : o+d]
		}
		if cap(scores) < pos+1 {
			scores = make([]float32, pos+1)
		}
		sc := scores[:pos+1]
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
