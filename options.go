package election

import (
	"context"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
)

// Option configures an Election; pass options to NewElection.
type Option func(o *options)

type options struct {
	onWon         func(ctx context.Context)
	onLost        func(cause error)
	onCampaign    func(s State)
	backoff       Backoff
	noSplay       bool
	logger        *slog.Logger
	interval      time.Duration
	unsafeShorter bool
	noPresence    bool
	priority      int
	prioritySet   bool
	preferHigher  bool
	readyFor      time.Duration
	hooks         []func(Event)
	metadata      map[string]string
	conn          *nats.Conn    // named in the candidate record (WithConnection); nil: none
	clock         Clock         // machineClock unless WithClock sets another (clock.go)
	health        *healthConfig // WithHealthCheck (healthgate.go); nil: none
}

// WonCallback is the constraint on the callback OnWon accepts: a func(),
// or a func(ctx) whose context is cancelled the moment leadership ends. As
// a constraint it names no type of its own: pass either function to OnWon.
type WonCallback interface {
	func() | func(ctx context.Context)
}

// OnWon sets a callback run when this node becomes leader: a func(), or a
// func(ctx context.Context). Its context is
// cancelled when leadership ends, for any reason, which context.Cause gives
// (an error matching what OnLost is given, such as ErrSuspended, or
// ErrStopped), and carries the fencing
// token (TokenFromContext); the callback may block until then and do the
// leader's work itself. The node lets a successor lead at once (its release,
// handoff or vouch) only after OnWon has returned; if OnWon is still running a
// TTL after the node's last write, the key has aged out and the successor
// claims it then.
//
// OnWon and OnLost run one at a time, in order, on a goroutine of the
// election's own, never while it holds a lock: they may call IsLeader, State
// or Token. OnLost runs only after OnWon has returned.
func OnWon[F WonCallback](cb F) Option {
	return func(o *options) {
		switch f := any(cb).(type) {
		case func():
			o.onWon = func(context.Context) { f() }
		case func(context.Context):
			o.onWon = f
		}
	}
}

// LostCallback is the constraint on the callback OnLost accepts: a
// func(), or a func(cause) given the reason leadership ended, an error
// matching ErrRevisionGone, ErrRenewDeadline, ErrStopped, ErrHandedOver,
// ErrSuspended, ErrClockRate or ErrHealthCheck. As a constraint it names no
// type of its own: pass either function to OnLost.
type LostCallback interface {
	func() | func(cause error)
}

// OnLost sets a callback run when this node stops leading, whatever the
// reason, including Stop: a func(), or a func(cause error) given an error
// matching ErrRevisionGone, ErrRenewDeadline, ErrStopped, ErrHandedOver,
// ErrSuspended, ErrClockRate or ErrHealthCheck. It runs only if OnWon ran
// before it, and after IsLeader has turned false.
func OnLost[F LostCallback](cb F) Option {
	return func(o *options) {
		switch f := any(cb).(type) {
		case func():
			o.onLost = func(error) { f() }
		case func(error):
			o.onLost = f
		}
	}
}

// OnCampaign sets a callback run before every campaign of a candidate and
// every renewal of a leader, with the node's state. It runs on the campaign
// goroutine, possibly while OnWon runs, and must return quickly.
func OnCampaign(cb func(s State)) Option {
	return func(o *options) { o.onCampaign = cb }
}

// WithBackoff makes candidates wait bo.Duration(n) after their n-th
// consecutive lost claim before claiming again without news from their
// watcher, instead of doubling from 50 ms up to the campaign interval. A
// candidate still claims at once when its watcher shows the key free.
func WithBackoff(bo Backoff) Option {
	return func(o *options) { o.backoff = bo }
}

// WithoutSplay disables the random delay, up to 5 s or one campaign
// interval, before the first campaign of a candidate that finds the key
// free and other candidates listed for it: the splay spreads out the first
// claims of replicas that start together. It ends early once another
// candidate writes the key, so that the first winner's release reaches the
// others at once. A lone candidate, or one that finds the key held,
// campaigns at once either way.
func WithoutSplay() Option {
	return func(o *options) { o.noSplay = true }
}

// WithoutPresence keeps the election's candidacy out of the bucket: it
// writes no candidate record, so Bucket.Candidates and election status do not
// list it and a transfer to it is refused with ErrNotCandidate. A record
// costs one write per candidate every third of a TTL; this is for processes
// with thousands of elections, where those writes add up.
//
// The record is also what tells two live elections of one name apart, so
// such an election's name is not checked: Start never returns
// ErrDuplicateName for it, nor for another election of its name because of
// it. Give it a name no other candidate of the key uses.
func WithoutPresence() Option {
	return func(o *options) { o.noPresence = true }
}

// WithLogger sets the logger; the default discards. Records carry the
// attributes bucket, key and name, and revision where one applies.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) { o.logger = l }
}

// WithCampaignInterval sets how often a leader renews. The default is 75% of
// the bucket TTL. It must be at least MinCampaignInterval and leave
// MinIntervalGap before the earliest moment a leader's write can age out
// under the clock assumption: at most 1.51 s at a 2 s TTL, 9.13 s at 10 s.
func WithCampaignInterval(d time.Duration) Option {
	return func(o *options) { o.interval = d }
}

// WithUnsafeShortTTL lowers the hard limits to nats-server's own floors
// (a TTL of 100 ms, an interval and gap of 10 ms), for tests and fault
// injection that need short TTLs. IsLeader still never overlaps under the
// clock assumption, whose server offset shrinks to a twentieth of the TTL
// below 2 s, but the margins that absorb scheduling delay shrink with the
// gap, and a leader on a loaded machine or a slow link loses leadership
// often. Do not use it in production.
func WithUnsafeShortTTL() Option {
	return func(o *options) { o.unsafeShorter = true }
}
