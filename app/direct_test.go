package app

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"
)

// TestDirect: a program's request holds the run slot against the page's
// runs and other programs', names the loaded model or none, and is
// cancelled when the model is replaced.
func TestDirect(t *testing.T) {
	s, _ := readyServices(t)
	for _, c := range []struct {
		model string
		ok    bool
	}{
		{"", true},
		{"builtin", true},
		{s.Models.Info().Name, true},
		{"/elsewhere/gemma-3n-E2B-it", false},
	} {
		d, ctx, err := s.Runs.Direct(context.Background(), c.model)
		var mm *ModelMismatchError
		if !c.ok {
			if !errors.As(err, &mm) || mm.Want != c.model {
				t.Errorf("model %q: %v", c.model, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("model %q: %v", c.model, err)
		}
		if _, _, err := s.Runs.Direct(context.Background(), ""); !errors.Is(err, ErrBusy) {
			t.Errorf("a second program's request: %v", err)
		}
		if _, err := s.Runs.Start(RunRequest{Input: "hi", Schema: json.RawMessage(`{"fields":[{"name":"a","question":"?","type":"bool"}]}`)}); !errors.Is(err, ErrBusy) {
			t.Errorf("the page's run: %v", err)
		}
		d.Close()
		if ctx.Err() == nil {
			t.Error("Close left the request's context running")
		}
	}
	// The page's run holds the slot against programs.
	st, err := s.Generator.Start(RunRequest{Input: "hi", Settings: &RunSettings{Generation: GenerationSettings{MaxTokens: 4096, Temperature: 1, TopP: 1, Prompt: PromptChat}, Scorer: DefaultPreferences().Run.Scorer}})
	if err == nil {
		if _, _, err := s.Runs.Direct(context.Background(), ""); !errors.Is(err, ErrBusy) {
			t.Errorf("a program's request during the page's run: %v", err)
		}
		s.Runs.Cancel(st.ID, "")
		for s.Runs.Active() != nil {
			time.Sleep(5 * time.Millisecond)
		}
	} else {
		t.Fatal(err)
	}
	// Replacing the model cancels the request.
	d, ctx, err := s.Runs.Direct(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := s.Models.Open("builtin"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ctx.Done():
	case <-time.After(time.Minute):
		t.Fatal("the request outlived the model")
	}
}
