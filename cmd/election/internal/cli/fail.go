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
	fmt.Fprintf(stderr, "%s: %s%s\n", path, message(err), hint(err))
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

// message is err's text without the library's package name: its errors
// start with "election: ", at the start of the text or, wrapped by another
// package, after its ": " (fleet's "invalid configuration: election: …"),
// and a command's line starts with the command's name already.
func message(err error) string {
	return strings.ReplaceAll(strings.TrimPrefix(err.Error(), "election: "), ": election: ", ": ")
}
