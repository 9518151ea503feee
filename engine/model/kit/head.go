package kit

import (
	"fmt"

	"verdict/native"
)

// HeadRows is the number of output rows the dense head computes at once.
const HeadRows = 64

// Head is the output side of an Exec: the output heads (the output
// weights, then the final soft-cap; each returns only what its caller
// reads) and the host's way to and from the Exec's outputs (Upload,
// Download). A family fills it from its Exec's scratch and embeds it, so
// that its Exec has those methods of model.Exec.
type Head struct {
	Name    string         // the family, prefixing errors
	St      *native.Stream // the Exec's stream
	W       native.Tensor  // the output weights [Vocab, Hidden]
	SoftCap float32        // the final logit soft-cap (0: none)
	Vocab   int
	Hidden  int
	Out     native.Tensor // the Exec's output [rows, Hidden], where Upload places host states

	// The input side (Embed): the input embedding [Vocab, Hidden], its
	// scale, and scratch for ids [1, rows] (I32) and embeddings [rows,
	// Hidden].
	Input        native.Tensor
	InputScale   float32
	InIDs, InEmb native.Tensor

	// Scratch (F32): logits [HeadRows, Vocab], a row's log-sum-exp
	// [1, rows], the selected logits [1, G].
	LogitsBuf, LSE, Sel native.Tensor
	// Scratch (I32): LogitsRows' ids [1, Vocab], a token a row [1, rows],
	// SelectLogprobs' rows and columns [1, G].
	IDs, Tok, SRow, SCol native.Tensor
	// Host staging: SelectLogprobs' rows and columns [G], and at least one
	// token.
	HSRow, HSCol, HOne []int32
}

// head gives Embed the Head of an Exec that embeds one.
func (x *Head) head() *Head { return x }

func (x *Head) softcap(t native.Tensor) {
	if c := x.SoftCap; c > 0 {
		x.St.Softcap(t, t, c)
	}
}

// Dense computes the soft-capped logits of h [n <= HeadRows, D] into
// LogitsBuf and returns them.
func (x *Head) Dense(h native.Tensor) native.Tensor {
	lg := x.LogitsBuf.Slice(0, h.Rows())
	x.St.Linear(lg, h, x.W)
	x.softcap(lg)
	return lg
}

// Logits writes the soft-capped output logits [n, vocab] of hidden states h
// [n, D] into out.
func (x *Head) Logits(out []float32, h native.Tensor) error {
	V := x.Vocab
	if len(out) != h.Rows()*V {
		return fmt.Errorf("%s: %d values for %d rows of logits", x.Name, len(out), h.Rows())
	}
	for r := 0; r < h.Rows(); r += HeadRows {
		e := min(r+HeadRows, h.Rows())
		x.St.Download(out[r*V:e*V], x.Dense(h.Slice(r, e)))
		if err := x.St.Sync(); err != nil {
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
func (x *Head) SelectLogprobs(sel, lse []float32, h native.Tensor, row, col []int32) error {
	n := h.Rows()
	if len(lse) != n || len(sel) != len(row) || len(col) != len(row) {
		return fmt.Errorf("%s: SelectLogprobs: %d rows, %d wanted, %d/%d outputs", x.Name, n, len(row), len(sel), len(lse))
	}
	for j := range row {
		if row[j] < 0 || int(row[j]) >= n || (j > 0 && row[j] < row[j-1]) || col[j] < 0 || int(col[j]) >= x.Vocab {
			return fmt.Errorf("%s: SelectLogprobs: wanted token %d of row %d (rows in order, below %d)", x.Name, col[j], row[j], n)
		}
	}
	if n > x.LSE.Len() {
		return fmt.Errorf("%s: SelectLogprobs: %d rows, at most %d", x.Name, n, x.LSE.Len())
	}
	st, G := x.St, x.SRow.Len()
	j := 0
	for r := 0; r < n; r += HeadRows {
		e := min(r+HeadRows, n)
		lg := x.Dense(h.Slice(r, e))
		st.LogSumExp(x.LSE.Sub(r, 1, e-r), lg)
		for j < len(row) && int(row[j]) < e {
			k := 0
			for ; k < G && j+k < len(row) && int(row[j+k]) < e; k++ {
				x.HSRow[k], x.HSCol[k] = row[j+k]-int32(r), col[j+k]
			}
			st.UploadI32(x.SRow.Sub(0, 1, k), x.HSRow[:k])
			st.UploadI32(x.SCol.Sub(0, 1, k), x.HSCol[:k])
			st.Select(x.Sel.Sub(0, 1, k), lg, x.SRow.Sub(0, 1, k), x.SCol.Sub(0, 1, k))
			st.Download(sel[j:j+k], x.Sel.Sub(0, 1, k))
			if err := st.Sync(); err != nil { // the staging is reused
				return err
			}
			j += k
		}
	}
	st.Download(lse, x.LSE.Sub(0, 1, n))
	return st.Sync()
}

// LogitsRows is the sparse output head: the soft-capped logits of the
// token ids only, out[t, j] for id ids[j] and hidden state t of h [n, D].
// It reads len(ids) rows of the output weights instead of the whole
// vocabulary's, and every value equals the dense head's at that id, bit for
// bit.
func (x *Head) LogitsRows(out []float32, h native.Tensor, ids []int32) error {
	n, k := h.Rows(), len(ids)
	if len(out) != n*k || k > x.IDs.Len() {
		return fmt.Errorf("%s: LogitsRows: %d values for %d rows of %d ids", x.Name, len(out), n, k)
	}
	if k == 0 {
		return nil
	}
	for _, id := range ids {
		if id < 0 || int(id) >= x.Vocab {
			return fmt.Errorf("%s: LogitsRows: token id %d outside the vocabulary of %d", x.Name, id, x.Vocab)
		}
	}
	st := x.St
	st.UploadI32(x.IDs.Sub(0, 1, k), ids)
	step := max(x.LogitsBuf.Len()/k, 1)
	for r := 0; r < n; r += step {
		e := min(r+step, n)
		lg := x.LogitsBuf.Sub(0, e-r, k)
		st.LinearRows(lg, h.Slice(r, e), x.W, x.IDs.Sub(0, 1, k))
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
func (x *Head) Sample(h native.Tensor, p native.Sampling) (int32, error) {
	if h.Rows() == 0 {
		return 0, fmt.Errorf("%s: Sample of no rows", x.Name)
	}
	lg := x.Dense(h.Slice(h.Rows()-1, h.Rows()))
	out := x.Tok.Sub(0, 1, 1)
	x.St.Sample(out, lg, p)
	x.St.DownloadI32(x.HOne[:1], out)
	if err := x.St.Sync(); err != nil {
		return 0, err
	}
	return x.HOne[0], nil
}

// Greedy writes the argmax token of each row of h [n <= HeadRows, D] into
// out: the batched decode step's head, one pass over the output weights
// for all the rows, and only the ids cross back.
func (x *Head) Greedy(out []int32, h native.Tensor) error {
	n := h.Rows()
	if n > HeadRows || len(out) != n {
		return fmt.Errorf("%s: Greedy: %d rows (at most %d), %d outputs", x.Name, n, HeadRows, len(out))
	}
	if n == 0 {
		return nil
	}
	ids := x.Tok.Sub(0, n, 1)
	x.St.Argmax(ids, x.Dense(h))
	x.St.DownloadI32(out, ids)
	return x.St.Sync()
}

// CatalogHead is what a caller needs to run an output head of its own on
// the backend (the catalog decoder's step): the stream, the output weights
// [vocab, D] and the final logit soft-cap (0: none). The dense head is the
// stream's Linear by those weights followed by the soft-cap, so a head
// computed that way gives its values bit for bit.
func (x *Head) CatalogHead() (st *native.Stream, w native.Tensor, softcap float32) {
	return x.St, x.W, x.SoftCap
}
