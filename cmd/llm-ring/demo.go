package main

import (
	"context"
	"errors"
	"io"
)

// TODO(placeholder): replaced by the real subcommand.
func cmdDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errors.New("not built yet")
}
