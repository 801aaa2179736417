package election

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// The claim phase of a campaign (campaign.go): waiting for the key to be
// free, and claiming it by compare-and-set.

// splay waits out the random delay before a candidate's first campaign,
// and reports false if ctx was done first. The delay, up to maxSplay, is
// drawn only when the key is free and other candidates are listed for it,
// so that a crowd started together spreads its first claims while a lone
// candidate of a free key, or one joining a key that is held (and may be
// handed to it), campaigns at once. Where priorities are in play, they
// order the first claims instead (awaitListing).
//
// The delay ends early once another candidate writes the key: the crowd's
// first claim is then made, and this node campaigns as any candidate does,
// claiming as soon as the holder releases the key rather than once its own
// delay has passed. Any put over the revision the delay was drawn on counts
// (a claim and its release can reach the watcher together); a delete, a
// purge or an expiry marker, which no candidate writes, does not, so that
// a crowd still spreads its claims over a key freed under it.
func (c *campaigner) splay(ctx context.Context) bool {
	if c.e.opts.noSplay || c.e.timing.maxSplay <= 0 {
		return true
	}
	select {
	case <-c.watcher.readyCh:
	case <-ctx.Done():
		return false
	}
	drawnOn := c.watcher.view(c.e.key)
	if !drawnOn.free() || c.prioritiesInPlay() || !c.othersListed() {
		return true
	}
	d := rand.N(c.e.timing.maxSplay)
	c.e.log.Debug("waiting out a start delay before the first claim, until another candidate writes the key", "delay", d)
	timer := time.NewTimer(c.e.clock.Real(d))
	defer timer.Stop()
	for {
		v := c.watcher.view(c.e.key)
		if v.held() || (v.latest != nil && v.expected() != drawnOn.expected() && v.latest.Operation() == jetstream.KeyValuePut) {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-timer.C:
			return true
		case <-c.sub.changed:
		}
	}
}

// othersListed reports whether a candidate other than this node is listed
// for the key.
func (c *campaigner) othersListed() bool {
	for _, other := range c.watcher.candidates(c.e.key, c.e.timing.ttl) {
		if other.Name != c.e.name {
			return true
		}
	}
	return false
}

// campaignEnd is when a campaign gives up without a win: Start's never
// does; Once's does once its wait has passed, or at once when the key
// shows the work done or a holder of this node's own name.
type campaignEnd struct {
	until time.Time                    // give up once the next claim could come only after it; zero: never
	stop  func(v *keyView) OnceOutcome // an outcome ends the campaign at once; nil: never
}

// endNever is Start's campaignEnd.
var endNever = campaignEnd{}

// campaign waits for the key to be free and claims it, until a claim wins,
// end says to give up, or ctx is done; it returns the tenure won, or why it
// gave up (0 when ctx is done). The watcher says when the key is free; a
// fallback timer covers what it cannot say (a key that aged out without an
// expiry marker) or does not say in time (a watcher stalled by a dead
// server): when a holder has not renewed within a TTL, the candidate claims
// over no entry, which succeeds only once the key is gone. While the holder
// renews, waiting candidates write nothing.
func (c *campaigner) campaign(ctx context.Context, end campaignEnd) (*tenure, OnceOutcome) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	lost := 0
	tried, triedAny := uint64(0), false // the revision a lost claim expected: wait for the key to change
	for {
		view := c.watcher.view(c.e.key)
		if end.stop != nil && view.ready {
			if outcome := end.stop(&view); outcome != 0 {
				return nil, outcome
			}
		}
		refusal := c.checkClocks() // a clock past ClockRate: claim nothing
		if refusal == nil {
			refusal = c.healthRefusal() // a failing health check: claim nothing
		}
		if refusal == nil && c.canClaim(&view, tried, triedAny) {
			if t := c.claim(ctx, view.latest, c.proven(view.classify())); t != nil {
				return t, 0
			}
			if ctx.Err() != nil {
				return nil, 0
			}
			lost++
			tried, triedAny = view.expected(), true
		}

		at := c.fallbackAt(&view, lost)
		if refusal != nil {
			at = later(at, c.e.now().Add(c.e.timing.interval)) // measure again meanwhile (candidate records)
		}
		wake := at
		if until, ok := c.patience(&view, end.until); ok {
			if now := c.e.now(); !now.Before(until) && at.After(now) {
				if lost > 0 {
					return nil, OnceConflict
				}
				return nil, OnceOtherLeader
			}
			wake = earliest(at, until)
		}
		timer.Reset(c.e.wait(wake))
		select {
		case <-ctx.Done():
			return nil, 0
		case <-c.sub.changed:
		case <-c.healthWake():
		case <-timer.C:
			if c.e.now().Before(at) {
				continue // woken to give up
			}
			if v := c.watcher.view(c.e.key); c.canClaim(&v, tried, triedAny) {
				continue // a handoff to another candidate or a resignation no longer keeps this node away
			}
			if c.checkClocks() != nil || c.healthRefusal() != nil {
				continue
			}
			// No news for a while: the latest entry may have aged out, which
			// leaves no news. Claim over no entry; that fails while any
			// entry is there.
			if t := c.claim(ctx, nil, c.proven(predecessorNone)); t != nil {
				return t, 0
			}
			if ctx.Err() != nil {
				return nil, 0
			}
			lost++
		}
	}
}

// patience returns when a campaign that gives up at until (zero: never)
// stops waiting for the key as seen in v, if it does: past until through
// the vouch window after a removal, and not at all while the watcher has not
// read the key yet or while a holder silent for a TTL is about to age out
// (claims then win within the server's expiry lag).
func (c *campaigner) patience(v *keyView, until time.Time) (time.Time, bool) {
	switch {
	case until.IsZero() || !v.ready:
		return time.Time{}, false
	case v.held() && !v.seenAt.Add(c.e.timing.ttl).After(c.e.now()):
		return time.Time{}, false
	case v.free() && v.latest != nil && v.classify() == predecessorEarly:
		return later(until, v.seenAt.Add(c.vouchWait())), true
	}
	return until, true
}

// fallbackAt is when a candidate claims without word from the watcher: a TTL
// after the holder's latest write arrived (at once if that has passed), and
// after a lost claim once the retry wait has passed.
func (c *campaigner) fallbackAt(view *keyView, lost int) time.Time {
	now := c.e.now()
	switch {
	case !view.ready:
		return now.Add(c.e.timing.interval)
	case view.held() && view.seenAt.Add(c.e.timing.ttl+c.priorityDelay()).After(now):
		return view.seenAt.Add(c.e.timing.ttl + c.priorityDelay()) // higher priorities claim first
	}
	if view.free() {
		if at := c.claimableAt(view); at.After(now) {
			return at // a handoff or resignation keeps this node away until then
		}
	}
	if lost == 0 {
		return now
	}
	return now.Add(c.retryWait(lost))
}

// canClaim reports whether this node should claim over the key's latest
// entry now: the key is free, nothing keeps this node away, and no claim of
// its own already lost over that entry (tried, if triedAny).
func (c *campaigner) canClaim(v *keyView, tried uint64, triedAny bool) bool {
	return v.free() && !c.claimableAt(v).After(c.e.now()) && (!triedAny || v.expected() != tried)
}

// claimableAt is when this node may claim over the key's latest entry: a
// handoff to another candidate, or this node's own resignation or vouch,
// keeps it away for half a TTL after it was seen, while the entry is still
// there to claim over (it ages out a TTL after it was written). A removal
// keeps every candidate away for the vouch wait, so that a claim does not
// pre-empt the old leader's vouch (see campaigner.vouch), which lets the
// winner announce at once instead of a TTL later; a draining mark keeps them
// away until the old leader's work has stopped (drainedAt), unless its
// release comes first.
//
// A handoff to this node is claimable at once. Otherwise, higher priorities
// among the live candidates keep it away for priorityDelay after the key
// was seen free (or, with no entry at all, after this node began to
// campaign), and after its listing window, if any.
func (c *campaigner) claimableAt(v *keyView) time.Time {
	to, handoff := v.handoffTo()
	var at time.Time
	switch {
	case handoff && to == c.e.name:
		return at
	case handoff || (v.latest != nil && v.latest.Revision() == c.sitOutRev):
		at = v.seenAt.Add(c.e.timing.sitOut)
	case v.latest != nil && v.classify() == predecessorEarly:
		at = v.seenAt.Add(c.vouchWait())
	}
	if v.latest != nil && v.classify() == predecessorDrained {
		at = later(at, c.drainedAt(v)) // the work named by the mark has stopped by then
	}
	if delay := c.priorityDelay(); delay > 0 {
		freeSince := c.since
		if v.latest != nil {
			freeSince = v.seenAt
		}
		at = later(at, later(freeSince, c.listed).Add(delay))
	}
	return at
}

// retryWait is the wait after the lost-th consecutive lost claim: the
// backoff's, or else firstRetry for the first steadyRetries, then doubling
// up to the campaign interval. Claims are lost in a row when the holder has
// been silent for a TTL but its key is still there: the server removes an
// aged-out key up to its expiry lag late (about 250 ms on file storage), and
// a steady retry finds it gone within firstRetry of that.
func (c *campaigner) retryWait(lost int) time.Duration {
	if c.e.opts.backoff != nil {
		return max(c.e.opts.backoff.Duration(lost-1), minCampaignWait)
	}
	if lost <= steadyRetries {
		return firstRetry
	}
	return min(firstRetry<<min(lost-steadyRetries, 16), c.e.timing.interval)
}

const (
	// firstRetry is the default wait after a lost claim.
	firstRetry = 50 * time.Millisecond
	// steadyRetries is how many lost claims in a row are retried after
	// firstRetry, covering 400 ms of expiry lag, before the wait doubles.
	steadyRetries = 8
)

// proven degrades "no entry" to a removal on buckets where a key can vanish
// other than by ageing out.
func (c *campaigner) proven(p predecessor) predecessor {
	if p == predecessorNone && !c.e.timing.absenceProvesExpiry {
		return predecessorEarly
	}
	return p
}

// claim writes this node's name over the key if its last entry is still
// over (nil: no entry at all). A winner announces at once when pred proves
// the previous holder has stood down, else one TTL after the claim was
// acknowledged.
func (c *campaigner) claim(ctx context.Context, over jetstream.KeyValueEntry, pred predecessor) *tenure {
	expected := uint64(0)
	if over != nil {
		expected = over.Revision()
	}
	c.notifyCampaign()
	seen := c.watcher.highest()
	slept := suspended(c.e.clock)
	sent := c.e.now()
	// Stop does not cancel a write in flight: the server may apply it, and
	// only a finished write tells which revision to release.
	opCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.e.timing.opTimeout)
	rev, err := c.kv.Update(opCtx, c.e.key, []byte(c.e.name), expected)
	cancel()
	c.roundTrip(sent, err)
	if err != nil {
		if isCASConflict(err) {
			c.e.log.Debug("campaign lost: another candidate holds the key", "error", err)
		} else {
			c.e.log.Warn("campaign failed", errAttrs(err)...)
		}
		return nil
	}
	c.watcher.wrote(rev)
	if rev <= seen && pred != predecessorEarly {
		// The store gave out a revision it had given before: it lost
		// acknowledged writes, so what the claim was made over proves
		// nothing of the holder it replaced, which may hold that revision.
		c.e.log.Warn("the store gave out a revision again: it lost acknowledged writes; announcing only after the announce delay",
			"revision", rev, "seen", seen)
		pred = predecessorEarly
	}
	delay := time.Duration(0)
	if pred == predecessorEarly {
		delay = c.e.timing.announceDelay
	}
	c.e.log.Info("won the key", "revision", rev, "after", pred.String(), "announce_delay", delay)
	return &tenure{token: rev, revision: rev, lastSent: sent, slept: slept, announceAt: c.e.now().Add(delay), confirm: delay > 0, after: freedBy(over)}
}
