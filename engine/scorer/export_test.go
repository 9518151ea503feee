package scorer

import (
	"verdict/engine/gemma3n"
	"verdict/engine/model"
)

// CachedCodes exposes the cached backend's answer codes per field index.
func (sc *Scorer) CachedCodes(s *Schema) (map[int][]string, error) { return sc.cachedCodes(s) }

// CodeTokens exposes the cached backend's code check.
func (sc *Scorer) CodeTokens(suffix string, codes []string) ([]int32, []int32, error) {
	return sc.codeTokens(suffix, codes)
}

// CachedPrompt is the cached backend's prompt text for input, in Gemma 3n's
// chat format.
func CachedPrompt(s *Schema, input string, codes map[int][]string) string {
	return s.promptWith(input, nil, false, gemma3n.ChatFormat(model.Special{}), codedCriteria(codes, s)).String()
}

// PriorsCached is the number of corrections whose reference results are kept.
func (sc *Scorer) PriorsCached() int { return sc.priors.len() }

// LeadInPrefix exposes where the key rows' common lead runs.
func LeadInPrefix(n, lead, rows int, byPass bool) bool { return leadInPrefix(n, lead, rows, byPass) }

// SetCostsByPass makes every model's passes cost by the pass (as a GPU's)
// or by the row, until restore is called.
func SetCostsByPass(byPass bool) (restore func()) {
	old := costsByPass
	costsByPass = func(model.Model) bool { return byPass }
	return func() { costsByPass = old }
}
