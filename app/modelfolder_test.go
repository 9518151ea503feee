package app

import (
	"strings"
	"testing"
)

// titleDialogs records the title of the folder dialog it was asked for.
type titleDialogs struct {
	fakeDialogs
	title *string
}

func (d titleDialogs) ChooseDirectory(title string) (string, error) {
	*d.title = title
	return "/models/gemma-4-E2B-it", nil
}

// TestChooseModelFolderTitle: the window's folder dialog names both
// families the loader opens, not Gemma 3n alone.
func TestChooseModelFolderTitle(t *testing.T) {
	var title string
	s := &System{dialogs: titleDialogs{title: &title}}
	dir, err := s.ChooseModelFolder()
	if err != nil || dir != "/models/gemma-4-E2B-it" {
		t.Fatalf("ChooseModelFolder: %q, %v", dir, err)
	}
	for _, want := range []string{"Gemma 3n", "Gemma 4", "config.json", "tokenizer.json"} {
		if !strings.Contains(title, want) {
			t.Errorf("the dialog's title %q does not name %s", title, want)
		}
	}
}
