package election

import (
	"context"
	"fmt"
	"slices"
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
//
// Of candidates started together (within the campaign interval, at most
// 5 s), the highest leads: where priorities are in play, a candidate waits
// a listing window of priorityWait before its first claim, and the highest
// asks a lower one that claimed first for the key, which hands it over as
// after Bucket.Transfer. A candidate that starts later does not pre-empt a
// lower leader; see WithPreferHigher.
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

// checkPriority validates the priority options (resolved: resolveOptions).
func (o *options) checkPriority() error {
	switch {
	case o.priority < 0:
		return fmt.Errorf("%w: priority %d: want 0 (never leads) or more", ErrInvalidArgument, o.priority)
	case o.readyFor < 0:
		return fmt.Errorf("%w: readiness time %v: want 0 (two TTLs) or more", ErrInvalidArgument, o.readyFor)
	case o.noPresence && (o.prioritySet || o.preferHigher):
		return fmt.Errorf("%w: priorities travel in the candidate record, which WithoutPresence turns off", ErrInvalidArgument)
	}
	return nil
}

// maxPriorityWait caps the wait per higher priority before a claim.
const maxPriorityWait = time.Second

// priorityDelay is how long this node lets higher priorities claim first:
// priorityWait for each distinct priority above its own among the key's
// live candidates, but for the one whose release is the key's latest entry
// (it stopped or resigned, and its record may outlive its release by a
// moment) and those whose health check fails (they do not claim).
func (c *campaigner) priorityDelay() time.Duration {
	released := ""
	if e := c.watcher.view(c.e.key).latest; e != nil && e.Operation() == jetstream.KeyValuePut {
		released, _ = releasedBy(string(e.Value()))
	}
	var higher []int
	for _, other := range c.watcher.candidates(c.e.key, c.e.timing.ttl) {
		if other.Name != c.e.name && other.Name != released && other.Unhealthy == "" && other.Priority > c.e.opts.priority && !slices.Contains(higher, other.Priority) {
			higher = append(higher, other.Priority)
		}
	}
	return time.Duration(len(higher)) * c.e.timing.priorityWait
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
	live := c.watcher.candidates(c.e.key, c.e.timing.ttl)
	seen := make(map[candidateID]time.Time, len(live))
	var best Candidate
	var bestFirst time.Time
	found := false
	for _, other := range live {
		if other.Name == c.e.name || other.Priority <= c.e.opts.priority || other.Unhealthy != "" {
			continue // a failing health check counts as not listed: readiness counts from its passing again
		}
		id := candidateID{other.Name, other.Since.UnixNano()}
		first, ok := c.pref.seen[id]
		if !ok {
			first = now
		}
		seen[id] = first
		ready := now.Sub(first) >= c.e.opts.readyFor
		if ready && (!found || other.Priority > best.Priority || other.Priority == best.Priority && first.Before(bestFirst)) {
			best, bestFirst, found = other, first, true
		}
	}
	c.pref.seen = seen
	if found && !c.pref.lastMove.IsZero() && now.Sub(c.pref.lastMove) < 5*c.e.opts.readyFor {
		return Candidate{}, false
	}
	return best, found
}

// awaitOwnRecord waits until the watcher has delivered this node's own
// candidate record, at most a KV call's timeout: every record written
// before it is then known too, so that a candidate that starts after a
// higher one sees it before it claims.
func (c *campaigner) awaitOwnRecord(ctx context.Context) {
	own := c.watcher.subscribe(candidateKey(c.e.key, c.e.name))
	defer c.watcher.unsubscribe(own)
	timeout := time.NewTimer(c.e.clock.Real(c.e.timing.opTimeout))
	defer timeout.Stop()
	for {
		if slices.ContainsFunc(c.watcher.candidates(c.e.key, c.e.timing.ttl), func(other Candidate) bool { return other.Name == c.e.name }) {
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

// Candidates started together, as a deploy starts its replicas, each write
// their record and see the others' only a round trip or more later, and a
// candidate of the default priority that sees no record but its own leads a
// free key at once. Two rules put the highest of them in the lead without
// slowing that lone candidate down:
//
//   - A candidate that knows priorities are in play (prioritiesInPlay) lets
//     a listing window (priorityWait) pass after its own record is back
//     before its first claim, so that the records of candidates started
//     with it arrive; priorityDelay then counts from the window's end, so
//     a lower one still lets a higher one claim first.
//   - At the end of that window, the highest live candidate finds the key
//     held by a lower one that began campaigning within the start window
//     (maxSplay) of it and claimed the key at once: it asks the leader, as
//     Bucket.Transfer does, to hand the key to it. A candidate that joins later leaves a lower leader in
//     place (unless that leader prefers higher priorities).

// prioritiesInPlay reports whether this node's first claim should wait for
// the records of candidates started with it: its own priority is not the
// default, or a live candidate of the key has one that is not. A candidate
// of the default priority that sees no other priority claims at once.
func (c *campaigner) prioritiesInPlay() bool {
	if c.e.opts.noPresence {
		return false // nobody sees this node's record, so nobody defers to it
	}
	if c.e.opts.priority != DefaultPriority {
		return true
	}
	for _, other := range c.watcher.candidates(c.e.key, c.e.timing.ttl) {
		if other.Priority != DefaultPriority {
			return true
		}
	}
	return false
}

// awaitListing waits out this node's listing window before its first
// claim, where priorities are in play, and then asks a lower leader started
// with it for the key (requestIfStartedTogether). It reports false if ctx
// was done first.
func (c *campaigner) awaitListing(ctx context.Context) bool {
	if !c.prioritiesInPlay() {
		return true
	}
	c.listed = c.e.now().Add(c.e.timing.priorityWait)
	if !c.e.sleep(ctx, c.e.timing.priorityWait) {
		return false
	}
	c.requestIfStartedTogether(ctx)
	return true
}

// requestIfStartedTogether asks the leader to hand the key to this node
// when a candidate of lower priority holds it that began campaigning
// within the start window of this node and claimed the key as soon as it
// began, and no live candidate has a priority above this node's (that one
// asks instead). The leader serves
// the request as a transfer: it stands down, and once its OnWon returned
// writes a handoff naming this node, which claims it and leads at once.
// The start times are the candidates' own (their records' Since), and the
// claim's the server's, so clocks that disagree by more than these windows
// move the key needlessly or leave a lower leader in place; safety does not
// depend on them.
func (c *campaigner) requestIfStartedTogether(ctx context.Context) {
	v := c.watcher.view(c.e.key)
	if !v.held() || c.healthRefusal() != nil {
		return
	}
	holder := string(v.latest.Value())
	var leader *Candidate
	for _, other := range c.watcher.candidates(c.e.key, c.e.timing.ttl) {
		switch {
		case other.Name == holder:
			leader = &other
		case other.Name != c.e.name && other.Priority > c.e.opts.priority && other.Unhealthy == "":
			return
		}
	}
	// The holder's latest write is its claim if it came within half a
	// listing window of the holder's start (a renewal comes an interval
	// after the claim): it saw nobody and claimed at once. A holder that
	// waited for the key (behind another holder, or for a higher priority
	// that did not claim) keeps it.
	if leader == nil || leader.Priority >= c.e.opts.priority ||
		v.latest.Created().Sub(leader.Since) > c.e.timing.priorityWait/2 || c.since.Sub(leader.Since).Abs() > c.e.timing.maxSplay {
		return
	}
	opCtx, cancel := context.WithTimeout(ctx, c.e.timing.opTimeout)
	defer cancel()
	sent := c.e.now()
	_, err := c.kv.Put(opCtx, requestKey(c.e.key), []byte(requestValue(c.e.name)))
	c.roundTrip(sent, err)
	if err != nil {
		c.e.log.Warn("could not ask the leader, started with this node at a lower priority, for the key", append(errAttrs(err), "leader", holder)...)
		return
	}
	c.e.log.Info("asked the leader, started with this node at a lower priority, to hand the key over", "leader", holder, "priority", leader.Priority)
}
