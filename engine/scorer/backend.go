package scorer

import (
	"context"
	"fmt"
	"strings"
)

// BackendCached scores single-token answer codes read from one output
// vector per question (see cached.go).
const BackendCached = "cached"

// Backends lists the scoring backends Score accepts.
var Backends = []string{BackendJSON, BackendCached, BackendCatalog, BackendHead}

// Normalisations of Options.Normalize.
const (
	NormalizeNone       = "none"
	NormalizeContextual = "contextual"
	NormalizePMI        = "pmi"
)

// Normalizations lists the values Options.Normalize accepts ("" is none).
var Normalizations = []string{NormalizeNone, NormalizeContextual, NormalizePMI}

// CheckBackend refuses a backend Score does not know.
func CheckBackend(b string) error {
	if b == "" {
		return nil
	}
	for _, k := range Backends {
		if b == k {
			return nil
		}
	}
	return fmt.Errorf("scorer: unknown backend %q (%s)", b, strings.Join(Backends, ", "))
}

// CheckNormalize refuses a normalisation Score does not know.
func CheckNormalize(n string) error {
	for _, k := range Normalizations {
		if n == "" || n == k {
			return nil
		}
	}
	return fmt.Errorf("scorer: unknown normalisation %q (%s)", n, strings.Join(Normalizations, ", "))
}

// route answers the requests Score hands on: a normalisation (which scores
// the raw request and its reference inputs through Score again) and the
// cached backend. ok is false for a plain json or catalog request.
func (sc *Scorer) route(ctx context.Context, s *Schema, input string, opt Options) (*Result, bool, error) {
	if err := CheckBackend(opt.Backend); err != nil {
		return nil, true, err
	}
	if err := CheckNormalize(opt.Normalize); err != nil {
		return nil, true, err
	}
	switch {
	case opt.Normalize != "" && opt.Normalize != NormalizeNone:
		res, err := sc.normalized(ctx, s, input, opt)
		return res, true, err
	case opt.Backend == BackendCached:
		res, err := sc.scoreCached(ctx, s, input, opt)
		return res, true, err
	}
	return nil, false, nil
}
