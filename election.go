package election

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Election campaigns for one key of a KV bucket on behalf of one candidate.
// Make one with NewElection and run it with Start; all methods are safe for
// concurrent use.
type Election struct {
	name   string
	key    string
	kv     jetstream.KeyValue
	opts   options
	timing timing
	clock  Clock // every reading of the time and every timer of the election
	log    *slog.Logger

	watcher *watcher // shared with the Bucket that made this election; nil: its own
	bucket  *Bucket  // the Bucket that made this election, if one did

	mu         sync.Mutex
	state      State
	validUntil time.Time     // a leader's validity deadline, on the monotonic clock
	validSlept time.Duration // what the clock reported as slept when the write validUntil counts from was sent
	token      uint64        // the revision of the claim that began this node's tenure
	started    bool
	stopped    bool
	cancel     context.CancelFunc
	done       chan struct{} // closed when Start returns
	metadata   map[string]string
	republish  chan struct{} // buffered 1: SetMetadata changed the metadata
	presence   *presence     // the candidate record's writer and what it found (presence.go)
}

// validKey is what nats.go accepts as a KV key; it also excludes wildcards.
var validKey = regexp.MustCompile(`^[-/_=.a-zA-Z0-9]+$`)

// NewElection prepares an election for key in the bucket kv, with name
// identifying this candidate (it is the value written to the key). It reads
// the bucket's TTL from the server within ctx and checks it, and the
// options, against the limits (MinTTL and the others). The election watches
// its key with a watcher of its own; elections made by a Bucket share one
// (Bucket.NewElection, which reads nothing from the server).
func NewElection(ctx context.Context, name, key string, kv jetstream.KeyValue, opts ...Option) (*Election, error) {
	if err := CheckCandidate(name, key); err != nil {
		return nil, err
	}
	if kv == nil {
		return nil, fmt.Errorf("%w: the bucket is nil; pass a jetstream.KeyValue bound to the election bucket", ErrInvalidArgument)
	}
	info, err := readBucket(ctx, kv)
	if err != nil {
		return nil, err
	}
	return newElection(name, key, kv, info, nil, opts)
}

// CheckCandidate returns the error NewElection would give for the candidate
// name and the key (matching ErrInvalidArgument), naming what is allowed,
// or nil if both are allowed. Names follow the rule of keys (see CheckKey):
// letters, digits and - / _ = . (not at the start or end, not twice in a
// row), so that any candidate name can also name a fleet's node, and no
// name can be taken for a release (released:, handoff:) or a done marker
// (done:), which have a colon.
func CheckCandidate(name, key string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: the candidate name must not be empty; allowed: %s", ErrInvalidArgument, allowedChars)
	case !validName(name):
		return fmt.Errorf("%w: candidate name %q: allowed: %s", ErrInvalidArgument, name, allowedChars)
	}
	return CheckKey(key)
}

// allowedChars describes the names and keys CheckCandidate and CheckKey
// allow.
const allowedChars = "letters, digits and - / _ = . (not at the start or end, not twice in a row)"

// validName reports whether s is made of allowedChars.
func validName(s string) bool {
	return validKey.MatchString(s) && s[0] != '.' && s[len(s)-1] != '.' && !strings.Contains(s, "..")
}

// bucketInfo is what elections need to know of their bucket's settings.
type bucketInfo struct {
	ttl                 time.Duration
	absenceProvesExpiry bool
}

// readBucket reads the bucket's settings from the server and checks that its
// keys expire.
func readBucket(ctx context.Context, kv jetstream.KeyValue) (bucketInfo, error) {
	status, err := kv.Status(ctx)
	if err != nil {
		return bucketInfo{}, fmt.Errorf("%w %q: %w", ErrBucketStatus, kv.Bucket(), err)
	}
	ttl := status.TTL()
	if ttl == 0 {
		return bucketInfo{}, fmt.Errorf("%w: bucket %q keeps keys forever; create it with a TTL between %v and %v (election bucket create --bucket %s --ttl 30s)",
			ErrBucketConfig, kv.Bucket(), MinTTL, MaxTTL, kv.Bucket())
	}
	return bucketInfo{ttl: ttl, absenceProvesExpiry: keysOnlyAgeOut(status)}, nil
}

// newElection makes an election on a bucket already read; w is the shared
// watcher, or nil for one of its own.
func newElection(name, key string, kv jetstream.KeyValue, info bucketInfo, w *watcher, opts []Option) (*Election, error) {
	o := resolveOptions(opts, info.ttl)
	t := newTiming(info.ttl, o.interval)
	t.absenceProvesExpiry = info.absenceProvesExpiry
	if err := checkOptions(&o, t); err != nil {
		return nil, err
	}

	clk := o.clock
	if w != nil {
		clk = w.clock // a Bucket's elections read its watcher's clock
	}
	return &Election{
		name:      name,
		clock:     clk,
		key:       key,
		kv:        kv,
		opts:      o,
		timing:    t,
		watcher:   w,
		log:       o.logger.With("bucket", kv.Bucket(), "key", key, "name", name),
		done:      make(chan struct{}),
		metadata:  o.metadata,
		republish: make(chan struct{}, 1),
		presence:  newPresence(),
	}, nil
}

// keysOnlyAgeOut reports whether the only way a key can vanish without a
// trace in the bucket is to age out a TTL after its last write. Per-message
// TTLs (which LimitMarkerTTL enables) let a purge marker vanish early, and a
// stream that discards old messages at a size limit evicts keys. When the
// stream cannot be inspected, the answer is no.
func keysOnlyAgeOut(status jetstream.KeyValueStatus) bool {
	bs, ok := status.(*jetstream.KeyValueBucketStatus)
	if !ok || bs.StreamInfo() == nil {
		return false
	}
	cfg := bs.StreamInfo().Config
	evicts := cfg.Discard == jetstream.DiscardOld && (cfg.MaxMsgs > 0 || cfg.MaxBytes > 0)
	return !cfg.AllowMsgTTL && !evicts
}

// CheckKey returns the error NewElection would give for key
// (ErrInvalidArgument), naming what is allowed, or nil if key can be an election
// key.
func CheckKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: the key must not be empty; allowed: %s", ErrInvalidArgument, allowedChars)
	case !validName(key):
		return fmt.Errorf("%w: key %q: allowed: %s", ErrInvalidArgument, key, allowedChars)
	case strings.HasPrefix(key, reservedPrefix):
		return fmt.Errorf("%w: key %q: keys starting with %q are reserved for kvelect's own records (requests to leaders)", ErrInvalidArgument, key, reservedPrefix)
	}
	return nil
}

// Start campaigns until ctx is done or Stop is called, and returns nil then.
// A leader that stops releases the key so that another candidate can take
// over at once. Start returns ErrAlreadyStarted if the election is running
// and ErrStopped if it was stopped; an Election runs once.
//
// Candidate names must be unique per key. Start returns a *DuplicateError
// (ErrDuplicateName) when another live election, in any process, runs
// under its name for its key: without campaigning, within about a third of
// a TTL of its start, or later, after standing down, if the other took the
// name's record while this one could not write it. A record left by a
// crashed election of the name is not a live one: Start waits until it has
// aged out, at most a TTL and a third, before it campaigns. See
// WithoutPresence for elections whose names cannot be checked.
func (e *Election) Start(ctx context.Context) error {
	var refused error
	err := e.runCampaigner(ctx, func(ctx context.Context, c *campaigner) { refused = c.runUnique(ctx) })
	if err != nil {
		return err
	}
	return refused
}

// runCampaigner runs body with the election's campaigner and watcher, once
// per Election, as Start describes.
func (e *Election) runCampaigner(ctx context.Context, body func(context.Context, *campaigner)) error {
	e.mu.Lock()
	switch {
	case e.stopped:
		e.mu.Unlock()
		return ErrStopped
	case e.started:
		e.mu.Unlock()
		return ErrAlreadyStarted
	}
	e.started = true
	ctx, e.cancel = context.WithCancel(ctx)
	e.state = CandidateState
	e.mu.Unlock()

	defer close(e.done)
	defer e.cancel()

	callbacks := newCallbackQueue()
	defer callbacks.closeAndWait()
	w, stopWatcher := e.watcher, func() {}
	if w == nil { // not made by a Bucket: watch the key alone, with its requests and candidates
		w = newWatcher(e.kv, []string{e.key, requestKey(e.key), candidateKeys(e.key)}, e.timing.ttl, e.clock, e.log)
		// The watcher outlives the campaign (stopWatcher, below): a leader
		// stopped right after a renewal whose answer was lost releases over
		// that renewal once the watcher shows it (adoptLostRenewal).
		watchCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		watchDone := make(chan struct{})
		go func() { defer close(watchDone); w.run(watchCtx) }()
		stopWatcher = func() { cancel(); <-watchDone }
	}
	c := newCampaigner(e, callbacks, w)
	healthCtx, endHealth := context.WithCancel(ctx)
	healthDone := make(chan struct{})
	if e.opts.health != nil {
		c.health = newHealthGate(*e.opts.health, e.clock)
		go func() { defer close(healthDone); c.health.run(healthCtx, e.republish) }()
	} else {
		close(healthDone)
	}
	defer func() { endHealth(); <-healthDone }()
	presenceCtx, endPresence := context.WithCancel(context.WithoutCancel(ctx))
	presenceDone := make(chan struct{})
	go func() {
		defer close(presenceDone)
		if !e.opts.noPresence {
			c.present(presenceCtx)
		}
	}()
	body(ctx, c)
	endPresence() // after the campaign: a candidate shows until it has released the key
	<-presenceDone
	stopWatcher()

	e.mu.Lock()
	e.state = UnknownState
	e.stopped = true
	e.mu.Unlock()
	if e.bucket != nil {
		e.bucket.forget(e)
	}
	return nil
}

// stoppedBecause is the cause of a stand-down because ctx, the campaign's,
// is done: ErrStopped, wrapping the cause Start's context was cancelled
// with when it is one of the program's own.
func stoppedBecause(ctx context.Context) error {
	cause := context.Cause(ctx)
	if cause == nil || errors.Is(cause, context.Canceled) || errors.Is(cause, context.DeadlineExceeded) {
		return ErrStopped
	}
	return fmt.Errorf("%w: %w", ErrStopped, cause)
}

// Stop ends the election: a leader stands down, releases the key and runs
// OnLost. A KV write in flight is let finish first (within the campaign
// interval, at most 5 s), so that the release replaces the revision actually
// written, and the candidate record's delete the record actually written.
// Stop waits until Start has returned and every callback has run, so it
// must not be called from a callback (cancel Start's context there
// instead). An election not made from a Bucket has deleted its watcher's
// consumer from the server by then. It is safe to call more than once, and
// before Start.
func (e *Election) Stop() {
	e.mu.Lock()
	e.stopped = true
	started, cancel := e.started, e.cancel
	e.mu.Unlock()
	if started {
		cancel()
		<-e.done
	}
	if e.bucket != nil {
		e.bucket.forget(e)
	}
}

// now reads the election's clock.
func (e *Election) now() time.Time { return e.clock.Now() }

// wait is the real time a timer waits until the election's clock reads at.
func (e *Election) wait(at time.Time) time.Duration { return untilOn(e.clock, at) }

// sleep waits for d on the election's clock, or until ctx is done, and
// reports whether d passed.
func (e *Election) sleep(ctx context.Context, d time.Duration) bool {
	return sleep(ctx, e.clock.Real(d))
}

// Key returns the election key.
func (e *Election) Key() string { return e.key }

// Name returns the candidate's name.
func (e *Election) Name() string { return e.name }

// IsLeader reports whether this node leads: it announced leadership and its
// validity deadline has not passed. It turns false the moment that deadline
// passes, even if the process was paused through it, and the moment the
// election's clock reports that the machine slept since the write the
// deadline counts from was sent (SuspendReporter: on Linux, a suspend).
func (e *Election) IsLeader() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.leadingLocked()
}

// leadingLocked reports whether this node leads now: it announced, its
// validity deadline has not passed, and the machine did not sleep since the
// write the deadline counts from was sent (sleptSince); e.mu must be held.
func (e *Election) leadingLocked() bool {
	return e.state == LeaderState && e.clock.Now().Before(e.validUntil) && !sleptSince(e.clock, e.validSlept)
}

// State returns where the election stands on this node.
func (e *Election) State() State {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.state == LeaderState && !e.leadingLocked() {
		return CandidateState
	}
	return e.state
}

// leadershipKey is the context key under which a leadership context carries
// its leadership: the fencing token and the election that holds it.
type leadershipKey struct{}

type leadershipRef struct {
	token uint64
	e     *Election
}

// TokenFromContext returns the fencing token of the leadership whose context
// (the one OnWon received, or one derived from it) is ctx. Unlike Token, it
// stays tied to that leadership even when read late.
func TokenFromContext(ctx context.Context) (uint64, bool) {
	ref, ok := ctx.Value(leadershipKey{}).(leadershipRef)
	return ref.token, ok
}

// WorkDeadline returns the moment by which everything the leadership whose
// context is ctx started must have stopped, unless the leader renews first:
// WorkMargin after its validity deadline (when ctx is cancelled), and still
// before the earliest moment its key can age out and another candidate lead
// under the clock assumption (see the package documentation). It moves
// later with each renewal. It is a reading of the election's clock: the
// machine's monotonic clock (time.Now), or the Clock given to WithClock,
// against which a caller's time.Until or timer is then off. ok is false if
// ctx is not a leadership context or that leadership has ended, including
// once the machine has been suspended since the write the deadline counts
// from (a monotonic clock does not count the sleep, so the deadline proves
// nothing; the leadership ends with ErrSuspended): the last deadline read
// then holds only if no suspend ended it, which context.Cause(ctx) tells.
//
// A supervisor of processes outside this one gives them this deadline, so
// that they die in time even if this process is paused or killed (election
// run and election agent do).
func WorkDeadline(ctx context.Context) (deadline time.Time, ok bool) {
	ref, ok := ctx.Value(leadershipKey{}).(leadershipRef)
	if !ok {
		return time.Time{}, false
	}
	e := ref.e
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.leadingLocked() || e.token != ref.token {
		return time.Time{}, false
	}
	return e.validUntil.Add(e.timing.workDeadline - e.timing.validity), true
}

// Token returns the fencing token of this node's leadership: the KV revision
// of the claim that won it. Tokens of successive leaders only grow, so a
// resource that remembers the highest token it has seen can refuse a stale
// leader, as long as the bucket is not deleted and created again (revisions
// then start over). Token returns 0 when this node does not lead.
func (e *Election) Token() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.leadingLocked() {
		return 0
	}
	return e.token
}
