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

// namelessError is an error whose text is message's, for a line that
// starts with the command's name; it wraps the error, for hint.
type namelessError struct{ err error }

// Error is the wrapped error's text, without the library's package name.
func (e namelessError) Error() string { return message(e.err) }

// Unwrap returns the wrapped error.
func (e namelessError) Unwrap() error { return e.err }
