package native

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
)

// pagedLayout spreads keys [0, nk) over runs in shuffled blocks of a pool:
// runs of random lengths, each from slot 0 of its first block over
// consecutive blocks (a fork's shared run may end inside a block), some
// back to back in the pool.
func pagedLayout(r *rand.Rand, nk, block int) (blocks int, blk, pos, ln []int32) {
	for p := 0; p < nk; {
		n := min(1+r.IntN(3*block), nk-p)
		blk, pos, ln = append(blk, 0), append(pos, int32(p)), append(ln, int32(n))
		p += n
	}
	// Place the runs: a shuffled order of slots, runs sometimes adjacent.
	order := r.Perm(len(blk))
	for _, i := range order {
		blk[i] = int32(blocks)
		blocks += (int(ln[i])+block-1)/block + r.IntN(2)
	}
	return blocks, blk, pos, ln
}

// TestPagedAttention: attention over keys in pool blocks equals attention
// over the same keys in one array, bit for bit, on every kernel set, with
// two sequences in one call.
func TestPagedAttention(t *testing.T) {
	be := Default()
	st, err := be.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	r := newRand(5)
	simdLevels(t, func(t *testing.T) {
		for _, c := range attnCases() {
			for _, block := range []int{1, 4, 16} {
				q, k, v, p := attnInputs(c)
				want := make([]float32, len(q))
				Attention(want, q, k, v, p)
				kw := c.hkv * c.d
				// Two sequences: the case's, and a decoy with other keys
				// whose queries are the same rows in reverse.
				nb, blk, pos, ln := pagedLayout(r, c.nk, block)
				nb2, blk2, pos2, ln2 := pagedLayout(r, c.nk, block)
				for i := range blk2 {
					blk2[i] += int32(nb)
				}
				pk, pv := make([]float32, (nb+nb2)*block*kw), make([]float32, (nb+nb2)*block*kw)
				for i := range pk {
					pk[i], pv[i] = float32(math.NaN()), float32(math.NaN())
				}
				place := func(blk, pos, ln []int32, k, v []float32) {
					for e := range blk {
						for j := 0; j < int(ln[e]); j++ {
							src := (int(pos[e]) + j) * kw
							dst := (int(blk[e])*block + j) * kw
							copy(pk[dst:dst+kw], k[src:src+kw])
							copy(pv[dst:dst+kw], v[src:src+kw])
						}
					}
				}
				place(blk, pos, ln, k, v)
				k2, v2 := randVec(r, len(k), 1), randVec(r, len(v), 1)
				place(blk2, pos2, ln2, k2, v2)
				nq := c.nq
				q2 := append(slices.Clone(q), q...)
				qpos := append(slices.Clone(p.QPos[:nq]), p.QPos[:nq]...)
				qseq := make([]int32, 2*nq)
				for i := nq; i < 2*nq; i++ {
					qseq[i] = 1
				}
				seqEnt := []int32{0, int32(len(blk)), int32(len(blk) + len(blk2))}
				eb, ep, el := append(blk, blk2...), append(pos, pos2...), append(ln, ln2...)
				out := make([]float32, len(q2))
				hq := c.hq * c.d
				st.Attention(&PagedAttn{
					Out: be.hostTensor(out, 2*nq, hq), Q: be.hostTensor(q2, 2*nq, hq),
					K: be.hostTensor(pk, (nb+nb2)*block, kw), V: be.hostTensor(pv, (nb+nb2)*block, kw),
					QPos: be.hostI32(qpos), QSeq: be.hostI32(qseq), SeqEnt: be.hostI32(seqEnt),
					EntBlk: be.hostI32(eb), EntPos: be.hostI32(ep), EntLen: be.hostI32(el),
					HeadsQ: c.hq, HeadsKV: c.hkv, HeadDim: c.d, Block: block, Window: c.window,
					MaxKeys: c.nk, Scale: p.Scale,
				})
				name := fmt.Sprintf("%s/block=%d", c.name, block)
				// Queries past the keys see the keys there are (the
				// contiguous kernel clips to nk the same way).
				bitsEqual(t, name, out[:len(q)], want)
				want2 := make([]float32, len(q))
				Attention(want2, q, k2, v2, p)
				bitsEqual(t, name+"/second sequence", out[len(q):], want2)
			}
		}
	})
}

// TestBackendOps: the stream operations give the slice kernels' results
// bit for bit.
func TestBackendOps(t *testing.T) {
	be := Default()
	st, err := be.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	r := newRand(11)
	w := be.NewBound()
	defer w.Free()
	for _, dt := range []DType{F32, BF16, Q4} {
		var m Matrix
		if dt == Q4 {
			m = Quantize(randMatrix(r, F32, 37, 128), 64)
		} else {
			m = randMatrix(r, dt, 37, 128)
		}
		wt, err := w.Matrix(m)
		if err != nil {
			t.Fatal(err)
		}
		x := randVec(r, 5*128, 1)
		want := make([]float32, 5*37)
		Linear(want, x, m, 5)
		got := make([]float32, 5*37)
		st.Linear(be.hostTensor(got, 5, 37), be.hostTensor(x, 5, 128), wt)
		bitsEqual(t, "Linear/"+dt.String(), got, want)
		ids := []int32{36, 0, 7, 7, 20}
		rows := make([]float32, 5*len(ids))
		st.LinearRows(be.hostTensor(rows, 5, len(ids)), be.hostTensor(x, 5, 128), wt, be.hostI32(ids))
		for tk := 0; tk < 5; tk++ {
			for j, id := range ids {
				if math.Float32bits(rows[tk*len(ids)+j]) != math.Float32bits(want[tk*37+int(id)]) {
					t.Fatalf("LinearRows/%v: row %d id %d", dt, tk, id)
				}
			}
		}
		emb := make([]float32, len(ids)*128)
		st.Embed(be.hostTensor(emb, len(ids), 128), wt, be.hostI32(ids), 1.5)
		for j, id := range ids {
			row := make([]float32, 128)
			m.ReadRows(row, int(id))
			Scale(row, 1.5)
			bitsEqual(t, "Embed/"+dt.String(), emb[j*128:(j+1)*128], row)
		}
	}
	// Memory work.
	x := randVec(r, 6*4, 1)
	y := make([]float32, 3*4)
	st.Gather(be.hostTensor(y, 3, 4), be.hostTensor(x, 6, 4), be.hostI32([]int32{5, 0, 5}))
	bitsEqual(t, "Gather", y, slices.Concat(x[20:24], x[0:4], x[20:24]))
	z := make([]float32, 6*4)
	st.Scatter(be.hostTensor(z, 6, 4), be.hostTensor(y, 3, 4), be.hostI32([]int32{1, 4, 2}))
	bitsEqual(t, "Scatter", z[4:20], slices.Concat(y[0:4], y[8:12], make([]float32, 4), y[4:8]))
	c2 := make([]float32, 3*2)
	st.Copy2D(be.hostTensor(c2, 3, 2), 2, be.hostTensor(x, 6, 4).Sub(1, 1, 2*4+2), 4, 3, 2)
	bitsEqual(t, "Copy2D", c2, []float32{x[1], x[2], x[5], x[6], x[9], x[10]})
	// Reductions.
	lg := randVec(r, 3*1001, 4)
	lse, want := make([]float32, 3), make([]float32, 3)
	st.LogSumExp(be.hostTensor(lse, 1, 3), be.hostTensor(lg, 3, 1001))
	LogSumExp(want, lg, 1001)
	bitsEqual(t, "LogSumExp", lse, want)
	am, wam := make([]int32, 3), make([]int32, 3)
	st.Argmax(be.hostI32(am), be.hostTensor(lg, 3, 1001))
	Argmax(wam, lg, 1001)
	if !slices.Equal(am, wam) {
		t.Errorf("Argmax %v, want %v", am, wam)
	}
	sel := make([]float32, 2)
	st.Select(be.hostTensor(sel, 1, 2), be.hostTensor(lg, 3, 1001), be.hostI32([]int32{2, 0}), be.hostI32([]int32{1000, 3}))
	bitsEqual(t, "Select", sel, []float32{lg[2*1001+1000], lg[3]})
	if err := st.Sync(); err != nil {
		t.Fatal(err)
	}
}

// refSample is the sampler generation used before sampling became a
// backend operation: the reference the operation must match.
func refSample(logits []float32, invTemp float32, topK int, topP, u float64) int32 {
	if invTemp == 0 {
		out := make([]int32, 1)
		Argmax(out, logits, len(logits))
		return out[0]
	}
	Scale(logits, invTemp)
	idx := make([]int32, len(logits))
	for i := range idx {
		idx[i] = int32(i)
	}
	sort.Slice(idx, func(a, b int) bool {
		x, y := logits[idx[a]], logits[idx[b]]
		if x != y {
			return x > y
		}
		return idx[a] < idx[b]
	})
	k := len(idx)
	if topK > 0 && topK < k {
		k = topK
	}
	idx = idx[:k]
	mx := float64(logits[idx[0]])
	p := make([]float64, k)
	var sum float64
	for i, id := range idx {
		p[i] = math.Exp(float64(logits[id]) - mx)
		sum += p[i]
	}
	if topP > 0 && topP < 1 {
		var cum float64
		for i := range p {
			cum += p[i] / sum
			if cum >= topP {
				p, idx = p[:i+1], idx[:i+1]
				break
			}
		}
		sum = 0
		for _, v := range p {
			sum += v
		}
	}
	r := u * sum
	for i, v := range p {
		r -= v
		if r < 0 {
			return idx[i]
		}
	}
	return idx[len(idx)-1]
}

// TestSample: the sampling operation draws what the reference sampler
// draws, over many logits, settings and draws (ties included).
func TestSample(t *testing.T) {
	be := Default()
	st, err := be.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	r := newRand(3)
	out := make([]int32, 1)
	for i := 0; i < 400; i++ {
		V := 1 + r.IntN(3000)
		lg := randVec(r, V, float32(0.5+4*r.Float64()))
		if i%5 == 0 { // ties
			for j := range lg {
				lg[j] = float32(math.Round(float64(lg[j])))
			}
		}
		invT := float32(1 / (0.2 + 2*r.Float64()))
		if i%7 == 0 {
			invT = 0
		}
		topK := []int{0, 1, 5, 40, V + 3}[r.IntN(5)]
		topP := []float64{0, 0.5, 0.9, 1}[r.IntN(4)]
		u := r.Float64()
		want := refSample(slices.Clone(lg), invT, topK, topP, u)
		st.Sample(be.hostI32(out), be.hostTensor(lg, 1, V), Sampling{InvTemp: invT, TopK: topK, TopP: topP, U: u})
		if out[0] != want {
			t.Fatalf("case %d (V=%d, 1/T=%v, k=%d, p=%v, u=%v): drew %d, the reference %d", i, V, invT, topK, topP, u, out[0], want)
		}
	}
}
