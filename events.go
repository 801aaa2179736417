package election

import (
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// EventKind is what happened to an election.
type EventKind int

// The kinds of Event: the first five in the order an election goes through
// them, then what the clock checks (clockcheck.go) and the health check
// (healthgate.go) find, at any time.
const (
	// EventCampaigning: the election started to campaign. Duration is the
	// campaign interval at which it renews once it leads.
	EventCampaigning EventKind = iota + 1
	// EventWon: this node announced leadership. Token is its fencing token,
	// After says how the key became free, and Duration is how long it
	// campaigned: since it started, or since its previous leadership ended.
	EventWon
	// EventRenewed: a renewal returned. Duration is its round trip; Err is
	// nil if it was acknowledged.
	EventRenewed
	// EventLost: leadership ended. Token is the leadership's, Err the cause
	// (matching ErrRevisionGone, ErrRenewDeadline, ErrStopped,
	// ErrHandedOver, ErrSuspended, ErrClockRate or ErrHealthCheck), and
	// Duration how long it led.
	EventLost
	// EventStopped: the election stopped campaigning. Duration is its KV
	// call timeout, the longest an event hook should take to finish what
	// it holds for the election.
	EventStopped
	// EventClockRate: the election measured its clock's rate against the
	// stream leader's anew, after a write of its own (a renewal, a claim,
	// a candidate record) once its measurement spans 5 TTLs. Clock holds
	// Rate, RateLow, RateHigh and Span. Err is nil while the rate is within
	// half of ClockRate; otherwise it matches ErrClockRate and names the
	// rate: a warning, and past ClockRate the node refuses to lead.
	EventClockRate
	// EventClockJump: the stream leader's stamps on two consecutive writes
	// of this node moved by more than the clock rate and the writes' round
	// trips explain, as when the stream leader changed to a server whose
	// clock is off the old one's. Clock holds Jump and JumpError. Err
	// matches ErrClockOffset when the jump surely exceeds the offset the
	// election's deadlines allow for; it is nil otherwise.
	EventClockJump
	// EventHealth: the health check (WithHealthCheck) changed its verdict.
	// Err matches ErrHealthCheck and wraps the check's error when it began
	// to fail (the candidate stops claiming; a leader stands down once it
	// failed as often in a row as allowed, with EventLost); it is nil when
	// the check passes again. Duration is how long the check took.
	EventHealth
)

// String returns "campaigning", "won", "renewed", "lost", "stopped",
// "clock rate", "clock jump" or "health".
func (k EventKind) String() string {
	switch k {
	case EventCampaigning:
		return "campaigning"
	case EventWon:
		return "won"
	case EventRenewed:
		return "renewed"
	case EventLost:
		return "lost"
	case EventStopped:
		return "stopped"
	case EventClockRate:
		return "clock rate"
	case EventClockJump:
		return "clock jump"
	case EventHealth:
		return "health"
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// Event is something that happened to an election on this node, for what
// only watches it: metrics (package promelection), a leadership history
// (package history), logs of your own. Which fields are set depends on
// Kind.
type Event struct {
	Kind     EventKind
	Key      string
	Name     string // the candidate
	Token    uint64
	Duration time.Duration
	Err      error
	// After says, for EventWon, how the key became free: "no key" (never
	// held, or aged out), "released by NAME", "handed over to NAME",
	// "drained by NAME" (its key removed, NAME stood down and its work's
	// deadline passed before it released the key), "taken over from NAME",
	// "deleted", or "purged" (or an expiry marker).
	After string
	// Clock is what the clock checks measured, for EventClockRate and
	// EventClockJump.
	Clock ClockCheck
}

// WithEventHook makes the election call hook with each of its events. Give
// it as often as there are hooks: each receives every event. Hooks run on
// the election's campaign goroutine, in order, and must return quickly
// (EventStopped excepted, which may take up to its Duration); one hook may
// serve many elections at once.
func WithEventHook(hook func(Event)) Option {
	return func(o *options) { o.hooks = append(o.hooks, hook) }
}

// emit sends ev, stamped with the election's key and name, to every hook.
func (c *campaigner) emit(ev Event) {
	ev.Key, ev.Name = c.e.key, c.e.name
	for _, hook := range c.e.opts.hooks {
		hook(ev)
	}
}

// freedBy says how a key became free, from the entry a claim was made over
// (nil: none).
func freedBy(over jetstream.KeyValueEntry) string {
	switch {
	case over == nil:
		return "no key"
	case over.Operation() == jetstream.KeyValueDelete:
		return "deleted"
	case over.Operation() == jetstream.KeyValuePurge:
		return "purged"
	}
	value := string(over.Value())
	if name, ok := releasedBy(value); ok {
		return "released by " + name
	}
	if to, ok := handoffTarget(value); ok {
		return "handed over to " + to
	}
	if isDraining(over.Value()) {
		return drainedBy(over)
	}
	return "taken over from " + value
}
