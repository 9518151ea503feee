package gemma3n

import (
	"fmt"

	"verdict/native"
)

// The output side: reductions over the tied output head that return only
// what their callers read.

func (x *Exec) softcap(t native.Tensor) {
	if c := float32(x.m.Cfg.FinalLogitSoftcap); c > 0 {
		x.st.Softcap(t, t, c)
	}
}

// logits computes the soft-capped logits of hidden states h [n <= headRows,
// D] into x.logits.
func (x *Exec) headLogits(h native.Tensor) native.Tensor {
	lg := x.logits.Slice(0, h.Rows())
	x.st.Linear(lg, h, x.m.t.embed)
	x.softcap(lg)
	return lg
}

// Logits writes the soft-capped output logits [n, vocab] of hidden states h
// [n, D] into out.
func (x *Exec) Logits(out []float32, h native.Tensor) error {
	V := x.m.Cfg.VocabSize
	if len(out) != h.Rows()*V {
		return fmt.Errorf("gemma3n: %d values for %d rows of logits", len(out), h.Rows())
	}
	for r := 0; r < h.Rows(); r += headRows {
		e := min(r+headRows, h.Rows())
		x.st.Download(out[r*V:e*V], x.headLogits(h.Slice(r, e)))
		if err := x.st.Sync(); err != nil {
			return err
		}
	}
	return nil
}

// SelectLogprobs is the scorer's head: for hidden states h [n, D] it
// returns, for each wanted token j (the ids col[j] at rows row[j], rows in
// increasing order), its soft-capped logit sel[j], and each row's log-sum-exp
// over the vocabulary lse[r]: log P(col[j]) = sel[j] − lse[row[j]]. Only
// those floats cross back.
func (x *Exec) SelectLogprobs(sel, lse []float32, h native.Tensor, row, col []int32) error {
	n := h.Rows()
	if len(lse) != n || len(sel) != len(row) || len(col) != len(row) {
		return fmt.Errorf("gemma3n: SelectLogprobs: %d rows, %d wanted, %d/%d outputs", n, len(row), len(sel), len(lse))
	}
	for j := range row {
		if row[j] < 0 || int(row[j]) >= n || (j > 0 && row[j] < row[j-1]) || col[j] < 0 || int(col[j]) >= x.m.Cfg.VocabSize {
			return fmt.Errorf("gemma3n: SelectLogprobs: wanted token %d of row %d (rows in order, below %d)", col[j], row[j], n)
		}
	}
	st, G := x.st, x.srow.Len()
	j := 0
	for r := 0; r < n; r += headRows {
		e := min(r+headRows, n)
		lg := x.headLogits(h.Slice(r, e))
		st.LogSumExp(x.lse.Sub(r, 1, e-r), lg)
		for j < len(row) && int(row[j]) < e {
			k := 0
			for ; k < G && j+k < len(row) && int(row[j+k]) < e; k++ {
				x.hSRow[k], x.hSCol[k] = row[j+k]-int32(r), col[j+k]
			}
			st.UploadI32(x.srow.Sub(0, 1, k), x.hSRow[:k])
			st.UploadI32(x.scol.Sub(0, 1, k), x.hSCol[:k])
			st.Select(x.ssel.Sub(0, 1, k), lg, x.srow.Sub(0, 1, k), x.scol.Sub(0, 1, k))
			st.Download(sel[j:j+k], x.ssel.Sub(0, 1, k))
			if err := st.Sync(); err != nil { // the staging is reused
				return err
			}
			j += k
		}
	}
	st.Download(lse, x.lse.Sub(0, 1, n))
	return st.Sync()
}

// LogitsRows is the sparse output head: the soft-capped logits of the
// token ids only, out[t, j] for id ids[j] and hidden state t of h [n, D].
// It reads len(ids) rows of the tied embedding instead of the whole
// vocabulary's, and every value equals the dense head's at that id, bit for
// bit.
func (x *Exec) LogitsRows(out []float32, h native.Tensor, ids []int32) error {
	n, k := h.Rows(), len(ids)
	if len(out) != n*k || k > x.hid.Len() {
		return fmt.Errorf("gemma3n: LogitsRows: %d values for %d rows of %d ids", len(out), n, k)
	}
	if k == 0 {
		return nil
	}
	for _, id := range ids {
		if id < 0 || int(id) >= x.m.Cfg.VocabSize {
			return fmt.Errorf("gemma3n: LogitsRows: token id %d outside the vocabulary", id)
		}
	}
	st := x.st
	st.UploadI32(x.hid.Sub(0, 1, k), ids)
	step := max(x.logits.Len()/k, 1)
	for r := 0; r < n; r += step {
		e := min(r+step, n)
		lg := x.logits.Sub(0, e-r, k)
		st.LinearRows(lg, h.Slice(r, e), x.m.t.embed, x.hid.Sub(0, 1, k))
		x.softcap(lg)
		st.Download(out[r*k:e*k], lg)
		if err := st.Sync(); err != nil {
			return err
		}
	}
	return nil
}

// Sample chooses the next token from the last row of h: the argmax at
// temperature 0, else a draw after temperature, top-k and top-p with the
// uniform draw p.U. Only the token id crosses back.
func (x *Exec) Sample(h native.Tensor, p native.Sampling) (int32, error) {
	lg := x.headLogits(h.Slice(h.Rows()-1, h.Rows()))
	out := x.sid.Sub(0, 1, 1)
	x.st.Sample(out, lg, p)
	x.st.DownloadI32(x.hOne[:1], out)
	if err := x.st.Sync(); err != nil {
		return 0, err
	}
	return x.hOne[0], nil
}

// HeadBytes reports the bytes of weights the dense output head reads per
// decoded token (the tied embedding) and, for rows rows, the sparse head.
func (m *Model) HeadBytes(rows int) (dense, sparse int64) {
	dense = m.embed.Bytes()
	if m.embed.Rows > 0 {
		sparse = dense / int64(m.embed.Rows) * int64(rows)
	}
	return dense, sparse
}

// Greedy writes the argmax token of each row of h [n <= 64, D] into out:
// the batched decode step's head, one pass over the output weights for
// all the rows, and only the ids cross back.
func (x *Exec) Greedy(out []int32, h native.Tensor) error {
	n := h.Rows()
	if n > headRows || len(out) != n {
		return fmt.Errorf("gemma3n: Greedy: %d rows (at most %d), %d outputs", n, headRows, len(out))
	}
	if n == 0 {
		return nil
	}
	ids := x.sid.Sub(0, n, 1)
	x.st.Argmax(ids, x.headLogits(h))
	x.st.DownloadI32(out, ids)
	return x.st.Sync()
}
