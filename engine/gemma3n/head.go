package gemma3n

import "verdict/native"

// Logits computes the soft-capped output logits [n, vocab] of hidden states h.
func (m *Model) Logits(h []float32, n int) []float32 {
	out := make([]float32, n*m.Cfg.VocabSize)
	native.Linear(out, h, m.embed, n)
	m.softcap(out)
	return out
}

// LogitsRows is the sparse output head: the soft-capped logits of the token
// ids only, out[t, j] for id ids[j] and hidden state t of h [n, D], out
// [n, len(ids)]. It reads len(ids) rows of the tied embedding instead of
// the whole vocabulary's, and every value equals Logits' at that id, bit for
// bit. s (may be nil) is reused scratch.
func (m *Model) LogitsRows(out, h []float32, n int, ids []int32, s *native.RowScratch) {
	native.LinearRows(out, h, m.embed, ids, n, s)
	m.softcap(out[:n*len(ids)])
}

func (m *Model) softcap(x []float32) {
	if c := float32(m.Cfg.FinalLogitSoftcap); c > 0 {
		native.Softcap(x, c)
	}
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
