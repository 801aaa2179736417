package election

import (
	"errors"
	"fmt"

	"github.com/kvelect/election/internal/natscause"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Errors for what an election is given. Each is wrapped with a message
// naming what is wrong and what is allowed, so match them with errors.Is.
var (
	// ErrInvalidArgument means an argument or an option is not allowed: a
	// candidate name, a key, a nil bucket, a campaign interval, a priority,
	// metadata, a wait, a tolerance. The message names which, the value
	// given and what is allowed.
	ErrInvalidArgument = errors.New("election: invalid argument")
	// ErrBucketConfig means a bucket, or a BucketConfig, is unusable for
	// elections: no TTL, a TTL out of range, a stream that evicts keys at a
	// size limit, a sealed or mirror stream. A *BucketError lists every
	// problem.
	ErrBucketConfig = errors.New("election: bucket unusable for elections")
	// ErrBucketStatus means the bucket's status could not be read: the bucket
	// is missing or the server is unreachable. The cause is wrapped.
	ErrBucketStatus = errors.New("election: cannot read bucket status")
)

// Errors returned by Start.
var (
	// ErrAlreadyStarted is returned by Start when the election is running.
	ErrAlreadyStarted = errors.New("election: already started")
	// ErrStopped is returned by Start after Stop, and is the cause passed to
	// OnLost when a leader stands down because it was stopped. When Start's
	// context was cancelled with a cause of its own (context.WithCancelCause),
	// that cause is wrapped too, so that the stand-down says why the
	// program stopped the election (OnLost, EventLost, the history).
	ErrStopped = errors.New("election: stopped")
)

// ErrDuplicateName is returned by Start when another live election runs
// under the same candidate name for the same key, in this process or any
// other: it is a *DuplicateError, which names both.
var ErrDuplicateName = errors.New("election: duplicate candidate name")

// DuplicateError is the error of an election refused because its name is
// taken: another run of an election of that name for that key holds the
// candidate record and keeps writing it. Names identify candidates
// (transfers, the history, status, a fleet's nodes all go by them), so two
// live candidates of one name would be taken for one. errors.Is matches it
// to ErrDuplicateName.
type DuplicateError struct {
	Key  string
	Name string
	// Running is the run that holds the name, as its record describes it.
	Running Writer
	// Refused is this run.
	Refused Writer
}

// Error names the key, the name and both runs, on one line.
func (e *DuplicateError) Error() string {
	return fmt.Sprintf("%v: key %q: candidate %q already runs as %s; refused this one, %s: give each candidate of a key a name of its own",
		ErrDuplicateName, e.Key, e.Name, e.Running, e.Refused)
}

// Unwrap returns ErrDuplicateName, for errors.Is.
func (e *DuplicateError) Unwrap() error { return ErrDuplicateName }

// ErrUnhealthy is returned by CheckHealth, and written by HealthHandler,
// when the node still counts itself leader after its validity deadline: its
// campaign goroutine has neither renewed nor stood down. The key, the
// candidate, the fencing token and how late it is are wrapped.
var ErrUnhealthy = errors.New("election: unhealthy")

// Causes of lost leadership, as passed to OnLost and in EventLost. A KV
// error that is none of them is an infrastructure failure (timeout, no
// responders, closed connection): it is retried and never taken for a lost
// race.
var (
	// ErrRevisionGone means the leader's revision of the key is no longer the
	// latest: the key was deleted, purged, overwritten or expired.
	ErrRevisionGone = errors.New("election: leadership revision gone")
	// ErrRenewDeadline means the leader could not renew before its validity
	// deadline and stood down by itself. The last renewal error is wrapped.
	ErrRenewDeadline = errors.New("election: renewal deadline passed")
	// ErrHandedOver means the leader stood down on request, to let another
	// candidate lead (Bucket.Resign or Bucket.Transfer).
	ErrHandedOver = errors.New("election: leadership handed over on request")
	// ErrHealthCheck means the app's health check (WithHealthCheck) failed
	// as many times in a row as it allows, and the leader stood down and
	// released the key; the latest check's error is wrapped. A candidate
	// whose latest check failed does not claim, for the same reason
	// (EventHealth).
	ErrHealthCheck = errors.New("election: health check failed")
)

// ErrWorkInterrupted is returned by Election.Once when leadership ended (or
// Once's context was cancelled) before the work returned: the key is not
// marked done.
var ErrWorkInterrupted = errors.New("election: leadership ended before the work returned")

// ErrDoneUnconfirmed is returned by Election.Once, with OnceRan, when the
// work returned while this node led but the key's done mark could not be
// confirmed written before the leadership's validity deadline: the writes
// failed or their answers were lost, or another client wrote over the key
// first. The work ran; assume another host's Once may run it again, at
// once or when the key ages out, as after ErrWorkInterrupted.
var ErrDoneUnconfirmed = errors.New("election: the work ran, but the key's done mark is not confirmed")

// Errors returned by Bucket.Resign and Bucket.Transfer.
var (
	// ErrNoLeader means nobody holds the key.
	ErrNoLeader = errors.New("election: no leader")
	// ErrNotTransferred means leadership did not move as asked: the
	// candidate a transfer named did not claim the key within half a TTL and
	// another did, or no other candidate claimed the key a leader resigned,
	// and it took the key back, or Bucket.Resign found no other candidate
	// listed and did not ask the leader.
	ErrNotTransferred = errors.New("election: leadership not handed over as asked")
	// ErrNotCandidate means a transfer named a candidate that does not
	// campaign for the key: no election of that name runs for it (see
	// Bucket.Candidates). The live candidates are listed.
	ErrNotCandidate = errors.New("election: not a candidate")
)

// isCASConflict reports whether err says a compare-and-set lost to another
// writer. The server reports that as code 10071 on a single replica and as
// 10164 on replicated streams; jetstream wraps most, but not all, of these in
// ErrKeyExists or ErrKeyRevisionMismatch (Create over a delete marker on R3
// returns a bare 10164), so the codes are checked too.
func isCASConflict(err error) bool {
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return true
	}
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	return apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
}

// isMultiFilterUnsupported reports whether err is a server older than 2.10
// refusing a watcher on several keys: it ignores the consumer's filter
// subjects, then refuses last-per-subject delivery without a filter (code
// 10094).
// The watcher is made through nats.go's older API, hence its error type.
func isMultiFilterUnsupported(err error) bool {
	var apiErr *nats.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == 10094
}

// errAttrs is err as attributes of a log record: the error, and what it
// means about the link to the bucket when natscause knows (a region or a
// leaf node cut off, a meta group without quorum).
func errAttrs(err error) []any {
	if cause := natscause.Explain(err); cause != "" {
		return []any{"error", err, "cause", cause}
	}
	return []any{"error", err}
}
