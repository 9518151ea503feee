package gemma4

import (
	"fmt"

	"verdict/native"
)

// The output side: the tied embedding as the head, then the final soft-cap;
// each head returns only what its caller reads.

func (x *Exec) softcap(t native.Tensor) {
	if c := x.d.cfg.SoftCap; c > 0 {
		x.st.Softcap(t, t, float32(c))
	}
}

// headLogits computes the soft-capped logits of h [n <= headRows, D] into
// x.logits.
func (x *Exec) headLogits(h native.Tensor) native.Tensor {
	lg := x.logits.Slice(0, h.Rows())
	x.st.Linear(lg, h, x.d.t.embed)
	x.softcap(lg)
	return lg
}

// Logits writes the soft-capped output logits [n, vocab] of hidden states
// h [n, D] into out.
func (x *Exec) Logits(out []float32, h native.Tensor) error {
	V := x.d.cfg.Vocab
	if len(out) != h.Rows()*V {
		return fmt.Errorf("gemma4: %d values for %d rows of logits", len(out), h.Rows())
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

// SelectLogprobs is the scorer's head: for each wanted token j (id col[j]
// at row row[j], rows in increasing order) its soft-capped logit sel[j],
// and each row's log-sum-exp lse[r].
func (x *Exec) SelectLogprobs(sel, lse []float32, h native.Tensor, row, col []int32) error {
	n := h.Rows()
	if len(lse) != n || len(sel) != len(row) || len(col) != len(row) {
		return fmt.Errorf("gemma4: SelectLogprobs: %d rows, %d wanted, %d/%d outputs", n, len(row), len(sel), len(lse))
	}
	for j := range row {
		if row[j] < 0 || int(row[j]) >= n || (j > 0 && row[j] < row[j-1]) || col[j] < 0 || int(col[j]) >= x.d.cfg.Vocab {
			return fmt.Errorf("gemma4: SelectLogprobs: wanted token %d of row %d (rows in order, below %d)", col[j], row[j], n)
		}
	}
	if n > x.lse.Len() {
		return fmt.Errorf("gemma4: SelectLogprobs: %d rows, at most %d", n, x.lse.Len())
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

// LogitsRows writes the soft-capped logits of the token ids only, out[t, j]
// for ids[j] and row t of h [n, D], each equal to Logits' bit for bit.
func (x *Exec) LogitsRows(out []float32, h native.Tensor, ids []int32) error {
	n, k := h.Rows(), len(ids)
	if len(out) != n*k || k > x.hid.Len() {
		return fmt.Errorf("gemma4: LogitsRows: %d values for %d rows of %d ids", len(out), n, k)
	}
	if k == 0 {
		return nil
	}
	for _, id := range ids {
		if id < 0 || int(id) >= x.d.cfg.Vocab {
			return fmt.Errorf("gemma4: LogitsRows: token id %d outside the vocabulary of %d", id, x.d.cfg.Vocab)
		}
	}
	st := x.st
	st.UploadI32(x.hid.Sub(0, 1, k), ids)
	step := max(x.logits.Len()/k, 1)
	for r := 0; r < n; r += step {
		e := min(r+step, n)
		lg := x.logits.Sub(0, e-r, k)
		st.LinearRows(lg, h.Slice(r, e), x.d.t.embed, x.hid.Sub(0, 1, k))
		x.softcap(lg)
		st.Download(out[r*k:e*k], lg)
		if err := st.Sync(); err != nil {
			return err
		}
	}
	return nil
}

// Sample chooses the next token from the last row of h: the argmax at
// temperature 0, else a draw under p.
func (x *Exec) Sample(h native.Tensor, p native.Sampling) (int32, error) {
	if h.Rows() == 0 {
		return 0, fmt.Errorf("gemma4: Sample of no rows")
	}
	lg := x.headLogits(h.Slice(h.Rows()-1, h.Rows()))
	out := x.sid.Sub(0, 1, 1)
	x.st.Sample(out, lg, p)
	x.st.DownloadI32(x.hOne[:1], out)
	if err := x.st.Sync(); err != nil {
		return 0, err
	}
	return x.hOne[0], nil
}

// Greedy writes the argmax token of each row of h [n <= 64, D] into out.
func (x *Exec) Greedy(out []int32, h native.Tensor) error {
	n := h.Rows()
	if n > headRows || len(out) != n {
		return fmt.Errorf("gemma4: Greedy: %d rows (at most %d), %d outputs", n, headRows, len(out))
	}
	if n == 0 {
		return nil
	}
	ids := x.sid.Sub(0, n, 1)
	x.st.Argmax(ids, x.headLogits(h))
	x.st.DownloadI32(out, ids)
	return x.st.Sync()
}

// CatalogHead is the Exec's stream, the tied embedding [vocab, D] and the
// final soft-cap: Linear by it then the soft-cap gives Logits' values bit
// for bit.
func (x *Exec) CatalogHead() (st *native.Stream, w native.Tensor, softcap float32) {
	return x.st, x.d.t.embed, float32(x.d.cfg.SoftCap)
}
