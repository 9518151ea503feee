// The calibration report of a loaded examples file.

package app

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"verdict/engine/scorer"
)

// MaxReportExamples bounds the examples of one calibration report.
const MaxReportExamples = 1000

// CalibrationReportRequest is a schema and labelled examples (JSONL, the
// format of verdict calibrate) to report on.
type CalibrationReportRequest struct {
	Schema   json.RawMessage `json:"schema"`
	Examples string          `json:"examples"`
	// Backend is json (empty) or cached.
	Backend string `json:"backend,omitempty"`
}

// CalibrationReport scores every example with the loaded model, fits the
// temperatures and returns the quality figures before and after them (the
// report of verdict calibrate --report).
func (s *Scorer) CalibrationReport(req CalibrationReportRequest) (*scorer.CalibrationReport, error) {
	sc, err := scorer.ParseSchema(req.Schema)
	if err != nil {
		return nil, err
	}
	if req.Backend != "" && req.Backend != scorer.BackendJSON && req.Backend != scorer.BackendCached {
		return nil, &SettingsError{"backend", fmt.Sprintf("%q: calibration fits candidate likelihoods (json or cached)", req.Backend)}
	}
	if len(req.Examples) > MaxInputBytes*8 {
		return nil, &scorer.LimitError{What: "examples bytes", Value: len(req.Examples), Max: MaxInputBytes * 8}
	}
	ex, err := scorer.ReadExamples(strings.NewReader(req.Examples))
	if err != nil {
		return nil, err
	}
	if len(ex) > MaxReportExamples {
		return nil, &scorer.LimitError{What: "examples", Value: len(ex), Max: MaxReportExamples}
	}
	l, release, err := s.runs.models.acquire()
	if err != nil {
		return nil, err
	}
	defer release()
	set := s.runs.settings.Get().Run.Scorer
	_, rep, err := l.s.CalibrateReport(context.Background(), sc, ex, scorer.Options{BranchBatch: set.BranchBatch, Backend: req.Backend})
	if err != nil {
		return nil, err
	}
	return rep, nil
}
