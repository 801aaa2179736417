package fence

import (
	"errors"
	"fmt"
)

// Errors of the fences. Each is wrapped with a message naming the resource
// and the values involved, so match them with errors.Is.
var (
	// ErrStale means a write was refused because the resource has already
	// accepted a higher fencing token: its writer is an ex-leader. The
	// error is a *StaleError, which carries the resource, the token and the
	// highest token accepted.
	ErrStale = errors.New("fence: stale fencing token")
	// ErrInvalidArgument means an argument is not allowed: an empty or
	// invalid resource name or subject, a zero token, a nil bucket or
	// stream. The message names which, the value given and what is allowed.
	ErrInvalidArgument = errors.New("fence: invalid argument")
	// ErrNotFenced means the resource's latest record was not written by a
	// fence: a KV value without the token envelope, or a stream message
	// without a valid Fencing-Token header. Something writes the resource
	// around the fence; the fence refuses to guess the token and writes
	// nothing.
	ErrNotFenced = errors.New("fence: record without a fencing token")
)

// StaleError is the error of a write refused for a stale token: Token is
// lower than Highest, the highest token Resource has accepted. errors.Is
// matches it to ErrStale.
type StaleError struct {
	// Resource is the KV key, the stream subject or the HTTP resource.
	Resource string
	// Token is the refused write's token.
	Token uint64
	// Highest is the highest token the resource had accepted when the
	// write was refused.
	Highest uint64
}

// Error names the resource, the token and the highest token accepted.
func (e *StaleError) Error() string {
	return fmt.Sprintf("fence: stale fencing token %d for resource %q: it has accepted token %d (the writer is no longer the leader)",
		e.Token, e.Resource, e.Highest)
}

// Unwrap returns ErrStale.
func (e *StaleError) Unwrap() error { return ErrStale }

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidArgument, fmt.Sprintf(format, args...))
}
