package native

import (
	"fmt"
	"math"
	"testing"
)

// TestPagedAttentionLimit: with QLim, query i sees keys (qpos[i] − window,
// qlim[i]] (the window counting back from its own position; no window:
// [0, qlim[i]]): the contiguous kernel's result over exactly those keys,
// bit for bit, on every kernel set. A Nil QLim and a QLim equal to QPos
// give the causal result's bits; a limit one position later differs.
func TestPagedAttentionLimit(t *testing.T) {
	be := Default()
	st, err := be.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	r := newRand(17)
	simdLevels(t, func(t *testing.T) {
		for _, c := range attnCases() {
			for _, block := range []int{1, 4, 16} {
				q, k, v, p := attnInputs(c)
				kw, hq := c.hkv*c.d, c.hq*c.d
				nb, blk, pos, ln := pagedLayout(r, c.nk, block)
				pk, pv := make([]float32, nb*block*kw), make([]float32, nb*block*kw)
				for i := range pk {
					pk[i], pv[i] = float32(math.NaN()), float32(math.NaN())
				}
				for e := range blk {
					for j := 0; j < int(ln[e]); j++ {
						src, dst := (int(pos[e])+j)*kw, (int(blk[e])*block+j)*kw
						copy(pk[dst:dst+kw], k[src:src+kw])
						copy(pv[dst:dst+kw], v[src:src+kw])
					}
				}
				// Each query's limit: its own position, or a later one among
				// the keys there are (queries past the keys keep theirs).
				lim := make([]int32, c.nq)
				for i, qp := range p.QPos[:c.nq] {
					lim[i] = qp
					if int(qp) < c.nk-1 && r.IntN(3) > 0 {
						lim[i] = qp + 1 + int32(r.IntN(c.nk-1-int(qp)))
					}
				}
				run := func(ql Tensor) []float32 {
					out := make([]float32, len(q))
					st.Attention(&PagedAttn{
						Out: be.hostTensor(out, c.nq, hq), Q: be.hostTensor(q, c.nq, hq),
						K: be.hostTensor(pk, nb*block, kw), V: be.hostTensor(pv, nb*block, kw),
						QPos: be.hostI32(p.QPos[:c.nq]), QSeq: be.hostI32(make([]int32, c.nq)),
						SeqEnt: be.hostI32([]int32{0, int32(len(blk))}),
						EntBlk: be.hostI32(blk), EntPos: be.hostI32(pos), EntLen: be.hostI32(ln),
						HeadsQ: c.hq, HeadsKV: c.hkv, HeadDim: c.d, Block: block, Window: c.window,
						MaxKeys: c.nk, Scale: p.Scale, QLim: ql,
					})
					return out
				}
				name := fmt.Sprintf("%s/block=%d", c.name, block)
				causal := make([]float32, len(q))
				Attention(causal, q, k, v, p)
				bitsEqual(t, name+"/nil", run(Tensor{}), causal)
				bitsEqual(t, name+"/own", run(be.hostI32(p.QPos[:c.nq])), causal)
				got := run(be.hostI32(lim))
				for i := range c.nq {
					qp, l := int(p.QPos[i]), min(int(lim[i]), c.nk-1)
					lo := 0
					if c.window > 0 {
						lo = max(0, qp-c.window+1)
					}
					want := make([]float32, hq)
					if l >= lo {
						// The keys [lo, l] alone, the query last among them.
						Attention(want, q[i*hq:(i+1)*hq], k[lo*kw:(l+1)*kw], v[lo*kw:(l+1)*kw], AttnParams{
							NQ: 1, NK: l - lo + 1, HeadsQ: c.hq, HeadsKV: c.hkv, HeadDim: c.d,
							QPos: []int32{int32(l - lo)}, Scale: p.Scale,
						})
					}
					bitsEqual(t, fmt.Sprintf("%s/limit %d of query %d at %d", name, lim[i], i, qp), got[i*hq:(i+1)*hq], want)
				}
				// The limit is read: one position later moves a query that
				// has a later key.
				for i, qp := range p.QPos[:c.nq] {
					if int(qp) < c.nk-1 {
						l2 := append([]int32(nil), p.QPos[:c.nq]...)
						l2[i]++
						moved := run(be.hostI32(l2))
						same := true
						for j := i * hq; j < (i+1)*hq; j++ {
							same = same && moved[j] == causal[j]
						}
						if same {
							t.Fatalf("%s: query %d's limit one later did not change its output", name, i)
						}
						break
					}
				}
			}
		}
	})
}
