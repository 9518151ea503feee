package session

import (
	"testing"

	"verdict/engine/models"
)

// TestInfoFamily: the session's info names the decoder's family (the test
// model is a Gemma 3n).
func TestInfoFamily(t *testing.T) {
	if got := open(t).Info().Family; got != models.FamilyGemma3n {
		t.Errorf("family %q, want %q", got, models.FamilyGemma3n)
	}
}
