package election

import (
	"errors"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Errors returned by NewElection for bad input. Each is wrapped with the value
// given and what is allowed, so match them with errors.Is.
var (
	// ErrInvalidName means the candidate name is empty or starts with
	// "released:" or "handoff:", which mark a released key.
	ErrInvalidName = errors.New("election: invalid name")
	// ErrInvalidKey means the election key is empty or has characters a KV key
	// may not have.
	ErrInvalidKey = errors.New("election: invalid key")
	// ErrNilBucket means no KV bucket was given.
	ErrNilBucket = errors.New("election: nil bucket")
	// ErrBucketNoTTL means the bucket has no TTL, so a crashed leader's key
	// would never expire.
	ErrBucketNoTTL = errors.New("election: bucket has no TTL")
	// ErrBucketStatus means the bucket's status could not be read: the bucket
	// is missing or the server is unreachable. The cause is wrapped.
	ErrBucketStatus = errors.New("election: cannot read bucket status")
	// ErrInvalidTTL means the bucket TTL is outside [MinTTL, MaxTTL].
	ErrInvalidTTL = errors.New("election: bucket TTL out of range")
	// ErrInvalidCampaignInterval means the campaign interval is below
	// MinCampaignInterval or closer to the TTL than MinIntervalGap.
	ErrInvalidCampaignInterval = errors.New("election: campaign interval out of range")
)

// Errors returned by CreateBucket and CheckBucket. A *BucketError matches
// ErrBucketConfig and the sentinel of each problem it lists (ErrBucketNoTTL,
// ErrInvalidTTL, ErrBucketEvicts).
var (
	// ErrBucketConfig means a bucket, or a BucketConfig, is unusable for
	// elections.
	ErrBucketConfig = errors.New("election: bucket unusable for elections")
	// ErrBucketEvicts means the bucket's stream discards old messages at a
	// message or byte limit, which can remove a leader's key before its TTL.
	ErrBucketEvicts = errors.New("election: bucket evicts keys at a size limit")
)

// Errors returned by Start.
var (
	// ErrAlreadyStarted is returned by Start when the election is running.
	ErrAlreadyStarted = errors.New("election: already started")
	// ErrStopped is returned by Start after Stop, and is the cause passed to
	// OnLost when a leader stands down because it was stopped.
	ErrStopped = errors.New("election: stopped")
)

// Errors returned by CheckHealth, and written by HealthHandler.
var (
	// ErrUnhealthy means the node still counts itself leader after its
	// validity deadline: its campaign goroutine has neither renewed nor stood
	// down. The key, the candidate, the fencing token and how late it is are
	// wrapped.
	ErrUnhealthy = errors.New("election: unhealthy")
	// ErrInvalidTolerance means a health check was given a negative
	// tolerance.
	ErrInvalidTolerance = errors.New("election: invalid health check tolerance")
)

// Outcomes of KV operations and causes of lost leadership, as passed to OnLost
// and written to the log. Any other error is an infrastructure failure
// (timeout, no responders, closed connection): it is retried and never taken
// for a lost race.
var (
	// ErrKeyHeld means a claim lost: the key was no longer at the revision the
	// candidate saw (another candidate holds it, or an entry is still there).
	ErrKeyHeld = errors.New("election: key held by another candidate")
	// ErrRevisionGone means the leader's revision of the key is no longer the
	// latest: the key was deleted, purged, overwritten or expired.
	ErrRevisionGone = errors.New("election: leadership revision gone")
	// ErrRenewDeadline means the leader could not renew before its validity
	// deadline and stood down by itself. The last renewal error is wrapped.
	ErrRenewDeadline = errors.New("election: renewal deadline passed")
	// ErrHandedOver means the leader stood down on request, to let another
	// candidate lead (Bucket.Resign or Bucket.Transfer).
	ErrHandedOver = errors.New("election: leadership handed over on request")
)

// Errors returned by Bucket.Resign and Bucket.Transfer.
var (
	// ErrNoLeader means nobody holds the key.
	ErrNoLeader = errors.New("election: no leader")
	// ErrNotTransferred means leadership did not move as asked: the
	// candidate a transfer named did not claim the key within half a TTL and
	// another did, or no other candidate claimed the key a leader resigned,
	// and it took the key back.
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
