package app

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"
)

// TestDirect: programs' requests run beside one another and beside the
// page's run (the scheduler shares the model), name the loaded model or
// none, and are cancelled when the model is replaced.
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
		d2, _, err := s.Runs.Direct(context.Background(), "")
		if err != nil {
			t.Errorf("a second program's request beside the first: %v", err)
		} else {
			d2.Close()
		}
		st, err := s.Runs.Start(RunRequest{Input: "hi", Schema: json.RawMessage(`{"fields":[{"name":"a","question":"?","type":"bool"}]}`)})
		if err != nil {
			t.Errorf("the page's run beside a program's request: %v", err)
		} else {
			s.Runs.Cancel(st.ID, "")
			for s.Runs.Active() != nil {
				time.Sleep(5 * time.Millisecond)
			}
		}
		d.Close()
		if ctx.Err() == nil {
			t.Error("Close left the request's context running")
		}
	}
	// A program's request during the page's run; a second page run is
	// refused while the first runs.
	st, err := s.Generator.Start(RunRequest{Input: "hi", Settings: &RunSettings{Generation: GenerationSettings{MaxTokens: 4096, Temperature: 1, TopP: 1, Prompt: PromptChat}, Scorer: DefaultPreferences().Run.Scorer}})
	if err == nil {
		d, _, err := s.Runs.Direct(context.Background(), "")
		if err != nil {
			t.Errorf("a program's request during the page's run: %v", err)
		} else {
			d.Close()
		}
		if _, err := s.Runs.Start(RunRequest{Input: "hi", Schema: json.RawMessage(`{"fields":[{"name":"a","question":"?","type":"bool"}]}`)}); !errors.Is(err, ErrBusy) {
			t.Errorf("a second page run: %v", err)
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
