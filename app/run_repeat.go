// Repeating a finished run's scorer side with another backend.

package app

import (
	"fmt"
	"strings"

	"verdict/engine/scorer"
)

// Repeat runs the scorer side of finished run id again on the same input,
// schema and settings, with backend in place of its backend (the other
// settings as they were), and returns at once. Its media are taken again
// when they are still loaded.
func (s *Scorer) Repeat(id, backend string) (RunStarted, error) {
	rec, err := s.runs.Get(id)
	if err != nil {
		return RunStarted{}, err
	}
	if rec.Scorer == nil || len(rec.Schema) == 0 {
		return RunStarted{}, fmt.Errorf("run %s has no scorer side to repeat", id)
	}
	if err := scorer.CheckBackend(backend); err != nil || backend == "" {
		return RunStarted{}, &SettingsError{"scorer.backend", fmt.Sprintf("%q is not one of %s", backend, strings.Join(scorer.Backends, ", "))}
	}
	set := rec.Settings
	set.Scorer.Backend = backend
	req := RunRequest{Input: rec.Input.Text, Schema: rec.Schema, SchemaName: rec.SchemaName, Files: rec.Input.Files, Settings: &set}
	for _, m := range rec.Input.Media {
		req.Media = append(req.Media, m.ID)
	}
	return s.runs.start(req, true, false)
}
