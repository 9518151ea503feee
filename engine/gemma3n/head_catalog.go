package gemma3n

import "verdict/native"

// CatalogHead is what a caller needs to run an output head of its own on
// the backend (the catalog decoder's step): the Exec's stream, the tied
// output head's weights [vocab, D] and the final logit soft-cap (0: none).
// The dense head (Logits) is the stream's Linear by those weights followed
// by the soft-cap, so a head computed that way gives its values bit for bit.
func (x *Exec) CatalogHead() (st *native.Stream, w native.Tensor, softcap float32) {
	return x.st, x.m.t.embed, float32(x.m.Cfg.FinalLogitSoftcap)
}
