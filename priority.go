package election

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Priorities decide who claims a free key first and, with WithPreferHigher,
// whom a leader hands the key to; they never decide who leads at an
// instant: every claim is still a compare-and-set, and every handover a
// release the leader writes after standing down. A candidate's priority
// travels in its candidate record (see presence.go), so priorities need
// the records.

// DefaultPriority is the priority of an election made without WithPriority.
const DefaultPriority = 1

// WithPriority sets the candidate's priority, 0 or more (default
// DefaultPriority). When the key is free, a candidate that sees live
// candidates of higher priority waits priorityWait (a tenth of the TTL, at
// most a second) per higher priority among them before it claims, so the
// highest claims first; a lower one still claims if no higher one did by
// then. Priority 0 never claims: a standby that campaigns only to be
// listed, and leads only if its priority is raised (by a restart).
func WithPriority(n int) Option {
	return func(o *options) { o.priority, o.prioritySet = n, true }
}

// WithPreferHigher makes a leader hand the key over, cooperatively, to a
// live candidate of higher priority: at a renewal, once it has seen that
// candidate listed for readyFor without a break (0: two TTLs), it stands
// down and writes a handoff naming it, which that candidate claims and
// announces at once, as after Bucket.Transfer. Among several, the highest
// priority, then the longest listed, wins. A node hands over by preference
// at most once per five times readyFor, so a preferred node that keeps
// restarting does not move the work each time.
func WithPreferHigher(readyFor time.Duration) Option {
	return func(o *options) { o.preferHigher, o.readyFor = true, readyFor }
}

// checkPriority validates the priority options and fills their defaults.
func (o *options) checkPriority(ttl time.Duration) error {
	switch {
	case o.priority < 0:
		return fmt.Errorf("%w: priority %d: want 0 (never leads) or more", ErrInvalidArgument, o.priority)
	case o.readyFor < 0:
		return fmt.Errorf("%w: readiness time %v: want 0 (two TTLs) or more", ErrInvalidArgument, o.readyFor)
	case o.noPresence && (o.prioritySet || o.preferHigher):
		return fmt.Errorf("%w: priorities travel in the candidate record, which WithoutPresence turns off", ErrInvalidArgument)
	}
	if !o.prioritySet {
		o.priority = DefaultPriority
	}
	if o.readyFor == 0 {
		o.readyFor = 2 * ttl
	}
	return nil
}

// maxPriorityWait caps the wait per higher priority before a claim.
const maxPriorityWait = time.Second

// priorityDelay is how long this node lets higher priorities claim first:
// priorityWait for each distinct priority above its own among the key's
// live candidates, but for the one whose release is the key's latest entry:
// it stopped or resigned, and its record may outlive its release by a
// moment.
func (c *campaigner) priorityDelay() time.Duration {
	released := ""
	if e := c.hub.view(c.key).latest; e != nil && e.Operation() == jetstream.KeyValuePut {
		released, _ = strings.CutPrefix(string(e.Value()), releasePrefix)
	}
	var higher []int
	for _, other := range c.hub.candidates(c.key, c.timing.ttl) {
		if other.Name != c.name && other.Name != released && other.Priority > c.opts.priority && !slices.Contains(higher, other.Priority) {
			higher = append(higher, other.Priority)
		}
	}
	return time.Duration(len(higher)) * c.timing.priorityWait
}

// preference tracks, for a leader that prefers higher priorities, since
// when it has seen each higher candidate listed without a break, and when
// it last handed over by preference.
type preference struct {
	seen     map[candidateID]time.Time // first seen in this tenure
	lastMove time.Time
}

// candidateID tells candidates apart, and a restarted candidate from its
// earlier run.
type candidateID struct {
	name  string
	since int64
}

// preferred returns the candidate this leader should hand the key to now,
// if any: the highest priority above its own (then the longest listed)
// that it has seen listed for readyFor, once a flap window has passed since
// its last handover by preference.
func (c *campaigner) preferred(now time.Time) (Candidate, bool) {
	live := c.hub.candidates(c.key, c.timing.ttl)
	seen := make(map[candidateID]time.Time, len(live))
	var best Candidate
	var bestFirst time.Time
	found := false
	for _, other := range live {
		if other.Name == c.name || other.Priority <= c.opts.priority {
			continue
		}
		id := candidateID{other.Name, other.Since.UnixNano()}
		first, ok := c.pref.seen[id]
		if !ok {
			first = now
		}
		seen[id] = first
		ready := now.Sub(first) >= c.opts.readyFor
		if ready && (!found || other.Priority > best.Priority || other.Priority == best.Priority && first.Before(bestFirst)) {
			best, bestFirst, found = other, first, true
		}
	}
	c.pref.seen = seen
	if found && !c.pref.lastMove.IsZero() && now.Sub(c.pref.lastMove) < 5*c.opts.readyFor {
		return Candidate{}, false
	}
	return best, found
}

// awaitOwnRecord waits until the watcher has delivered this node's own
// candidate record, at most a KV call's timeout: every record written
// before it is then known too, so that a candidate that starts after a
// higher one sees it before it claims.
func (c *campaigner) awaitOwnRecord(ctx context.Context) {
	own := c.hub.subscribe(candidateKey(c.key, c.name))
	defer c.hub.unsubscribe(own)
	timeout := time.NewTimer(c.timing.opTimeout)
	defer timeout.Stop()
	for {
		if slices.ContainsFunc(c.hub.candidates(c.key, c.timing.ttl), func(other Candidate) bool { return other.Name == c.name }) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-timeout.C:
			return
		case <-own.changed:
		}
	}
}
