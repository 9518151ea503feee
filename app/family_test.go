package app

import (
	"testing"

	"verdict/engine/models"
)

// TestModelFamily: the ready model's info names its decoder family, which
// the model bar shows (the built-in model is a Gemma 3n).
func TestModelFamily(t *testing.T) {
	s, _ := readyServices(t)
	if got := s.Models.Info().Family; got != models.FamilyGemma3n {
		t.Errorf("family %q, want %q", got, models.FamilyGemma3n)
	}
}
