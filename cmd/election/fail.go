package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// fail writes err as one line, with what to do about it when the cause is
// known, and returns the exit code: 2 for bad input, else 1.
func fail(stderr io.Writer, path string, err error) int {
	fmt.Fprintf(stderr, "%s: %v%s\n", path, err, hint(err))
	if errors.Is(err, errUsage) {
		return exitUsage
	}
	return exitError
}

// hint says what to do about an error whose cause is known, or nothing.
func hint(err error) string {
	switch {
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, jetstream.ErrJetStreamNotEnabled),
		errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount):
		return " (no JetStream answered: enable JetStream for this account, or, through a leaf node, give the hub's --js-domain)"
	}
	return ""
}
