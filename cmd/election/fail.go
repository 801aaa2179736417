package main

import (
	"errors"
	"fmt"
	"io"
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

// hint says what an error whose cause is known means and what to do about
// it (see cause), in parentheses, or nothing.
func hint(err error) string {
	if c := cause(err); c != "" {
		return " (" + c + ")"
	}
	return ""
}
