package model

import (
	"errors"
	"fmt"
)

// ErrTooLong marks an error for a sequence longer than the model's
// positions (max_position_embeddings): the request is too long, the engine
// is sound. Match it with errors.Is.
var ErrTooLong = errors.New("model: the sequence is longer than the model's positions")

// TooLong is an error with the message of format and a that errors.Is
// matches to ErrTooLong.
func TooLong(format string, a ...any) error { return &tooLong{fmt.Sprintf(format, a...)} }

type tooLong struct{ msg string }

func (e *tooLong) Error() string        { return e.msg }
func (e *tooLong) Is(target error) bool { return target == ErrTooLong }
