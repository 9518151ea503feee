package native

/*
#include "kernels.h"

static void branch_attention(float *out, const float *q, const float *pk,
	const float *pv, const float *mk, const float *mv, const float *sk,
	const float *sv, const int32_t *qrow, const int32_t *qidx,
	const int32_t *mid_row, const int32_t *mid_len, int64_t nq, int64_t hq,
	int64_t hkv, int64_t d, int64_t prefix, int64_t suf_len,
	int64_t mid_stride, int64_t window, float scale)
{
	vk_branch_attn a = {out, q, pk, pv, mk, mv, sk, sv, qrow, qidx, mid_row,
		mid_len, nq, hq, hkv, d, prefix, suf_len, mid_stride, window, scale};
	vk_branch_attention(&a);
}
*/
import "C"

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
// q and out are [NQ, HeadsQ, HeadDim]; pk/pv hold the prefix, mk/mv the
// parent rows (nil without), sk/sv the rows' own keys and values. Each
// query's output equals Attention's over the same keys in one array, bit
// for bit, and does not depend on the other queries.
func BranchAttention(out, q, pk, pv, mk, mv, sk, sv []float32, p BranchAttnParams) {
	if p.NQ <= 0 || p.HeadsQ <= 0 || p.HeadDim <= 0 {
		return
	}
	check(p.HeadsKV > 0 && p.HeadsQ%p.HeadsKV == 0, "BranchAttention: HeadsQ is not a multiple of HeadsKV")
	d, kv := p.HeadDim, p.HeadsKV*p.HeadDim
	nq := p.NQ * p.HeadsQ * d
	check(len(q) >= nq && len(out) >= nq, "BranchAttention: q or out too short")
	check(len(p.QRow) >= p.NQ && len(p.QIdx) >= p.NQ, "BranchAttention: QRow or QIdx too short")
	check(len(pk) >= p.Prefix*kv && len(pv) >= p.Prefix*kv, "BranchAttention: prefix keys too short")
	rows := 0
	for i := 0; i < p.NQ; i++ {
		check(p.QRow[i] >= 0 && p.QIdx[i] >= 0 && int(p.QIdx[i]) < p.SufLen, "BranchAttention: query outside its row")
		rows = max(rows, int(p.QRow[i])+1)
	}
	check(len(sk) >= rows*p.SufLen*kv && len(sv) >= rows*p.SufLen*kv, "BranchAttention: row keys too short")
	var mkp, mvp *C.float
	var midRow, midLen *C.int32_t
	var midStride int
	if p.MidRow != nil {
		check(len(p.MidRow) >= p.NQ && len(p.MidLen) >= p.NQ, "BranchAttention: MidRow or MidLen too short")
		for i := 0; i < p.NQ; i++ {
			if p.MidRow[i] >= 0 {
				check(p.MidLen[i] >= 0 && int(p.MidLen[i]) <= p.MidStride, "BranchAttention: parent length exceeds MidStride")
				check(len(mk) >= (int(p.MidRow[i])+1)*p.MidStride*kv && len(mv) >= (int(p.MidRow[i])+1)*p.MidStride*kv,
					"BranchAttention: parent keys too short")
			}
		}
		mkp, mvp, midRow, midLen, midStride = fp(mk), fp(mv), ip(p.MidRow), ip(p.MidLen), p.MidStride
	}
	C.branch_attention(fp(out), fp(q), fp(pk), fp(pv), mkp, mvp, fp(sk), fp(sv), ip(p.QRow), ip(p.QIdx),
		midRow, midLen, i64(p.NQ), i64(p.HeadsQ), i64(p.HeadsKV), i64(d), i64(p.Prefix), i64(p.SufLen),
		i64(midStride), i64(p.Window), C.float(p.Scale))
}
