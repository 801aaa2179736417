package cli

import (
	"errors"
	"fmt"
	"io"
	"strings"
)

// fail writes err as one line, with what to do about it when the cause is
// known, and returns the exit code: 2 for bad input, else 1.
func fail(stderr io.Writer, path string, err error) int {
	// The library's errors start with its package's name; the line starts
	// with the command's already.
	fmt.Fprintf(stderr, "%s: %s%s\n", path, strings.TrimPrefix(err.Error(), "election: "), hint(err))
	if errors.Is(err, errUsage) {
		return ExitUsage
	}
	return ExitError
}

// hint says what an error whose cause is known means and what to do about
// it (see cause), in parentheses, or nothing.
func hint(err error) string {
	if c := cause(err); c != "" {
		return " (" + c + ")"
	}
	return ""
}
