package cli

import (
	"context"
	"io"
)

func generateCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error { return nil }
func benchCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error    { return nil }
