package model

import (
	"errors"
	"fmt"
	"testing"
)

func TestTooLong(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{TooLong("a %d", 1), true},
		{fmt.Errorf("wrapped: %w", TooLong("b")), true},
		{errors.New("model: the sequence is longer than the model's positions"), false}, // the same words, not the mark
		{ErrBusy, false},
	} {
		if got := errors.Is(c.err, ErrTooLong); got != c.want {
			t.Errorf("%v: errors.Is ErrTooLong %v, want %v", c.err, got, c.want)
		}
	}
	if got := TooLong("the prompt has %d tokens", 9).Error(); got != "the prompt has 9 tokens" {
		t.Errorf("message %q", got)
	}
}
