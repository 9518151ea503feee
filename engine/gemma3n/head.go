package gemma3n

// The output heads are kit.Head's (engine/model/kit), over the tied
// embedding and the final soft-cap (newExec).

// HeadBytes reports the bytes of weights the dense output head reads per
// decoded token (the tied embedding) and, for rows rows, the sparse head.
func (m *Model) HeadBytes(rows int) (dense, sparse int64) {
	dense = m.embed.Bytes()
	if m.embed.Rows > 0 {
		sparse = dense / int64(m.embed.Rows) * int64(rows)
	}
	return dense, sparse
}
