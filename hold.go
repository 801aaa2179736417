package election

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// The hold phase of a campaign (campaign.go): a tenure from the claim that
// won it, renewing the key each interval, announcing leadership once the
// announce delay has passed, and keeping the validity deadline.

// hold keeps the key for one tenure: it renews every interval, announces
// leadership once the announce delay has passed, and stands down when a
// renewal is refused, when the watcher shows another client's write, when
// the validity deadline passes, when the clocks cannot vouch for the lease
// (clocksFail: before every decision that trusts it), or when ctx is done.
func (c *campaigner) hold(ctx context.Context, t *tenure) {
	renewAt := t.lastSent.Add(c.e.timing.interval)
	c.pref.seen = nil // readiness counts from this tenure
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		if c.clocksFail(t) {
			return
		}
		next := renewAt
		if t.lead == nil && t.announceAt.Before(next) {
			next = t.announceAt
		}
		timer.Reset(c.e.wait(next))
		select {
		case <-ctx.Done():
		case <-c.clockWake:
			continue
		case <-c.sub.changed:
			if c.clocksFail(t) {
				return
			}
			switch e := c.watcher.view(c.e.key).latest; {
			case c.lostRenewal(t, e):
				c.adopt(t, e)
				renewAt = c.e.now()
			case e != nil && e.Revision() > t.revision:
				c.standDownAndVouch(t, e.Revision(), fmt.Errorf("%w: revision %d was written by another client", ErrRevisionGone, e.Revision()))
				return
			case e != nil && e.Revision() == t.revision && (e.Operation() != jetstream.KeyValuePut || string(e.Value()) != c.e.name):
				// The store lost this node's write and gave its revision to
				// another. Write nothing: a renewal or a release checked
				// against that revision would land over the other write.
				c.standDown(t, fmt.Errorf("%w: revision %d holds another client's write: the store lost this node's", ErrRevisionGone, t.revision))
				return
			}
			continue
		case <-c.requests.changed:
			if c.clocksFail(t) || c.handOver(t) {
				return
			}
			continue
		case <-c.healthWake():
			if c.clocksFail(t) || c.standDownUnhealthy(t) {
				return
			}
			continue
		case <-timer.C:
		}
		if ctx.Err() != nil { // checked again: select picks at random when both are ready
			c.standDown(t, stoppedBecause(ctx))
			c.release(t)
			return
		}
		if c.clocksFail(t) {
			return
		}

		now := c.e.now()
		if t.lead == nil && !now.Before(t.announceAt) && c.valid(t) {
			if t.confirm && t.lastSent.Before(t.announceAt) {
				renewAt = now // confirm the claim with a renewal before announcing
			} else {
				c.announce(ctx, t)
				if c.handOver(t) { // a request that came while the winner waited to announce
					return
				}
			}
		}
		if now.Before(renewAt) {
			continue
		}

		c.notifyCampaign()
		deadline := c.deadline(t)
		slept := suspended(c.e.clock)
		sent := c.e.now()
		opCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.e.wait(earliest(deadline, sent.Add(c.e.timing.opTimeout))))
		rev, err := c.kv.Update(opCtx, c.e.key, []byte(c.e.name), t.revision)
		cancel()
		c.roundTrip(sent, err)
		c.emit(Event{Kind: EventRenewed, Duration: c.e.now().Sub(sent), Err: err})
		switch {
		case err == nil:
			t.revision, t.unsure = rev, false
			c.watcher.wrote(rev)
			if c.clocksFail(t) {
				return
			}
			if !c.extend(t, sent, slept) {
				c.standDown(t, lapsed(c.e.clock, t.slept, errors.New("the renewal was acknowledged after it")))
				c.release(t)
				return
			}
			renewAt = sent.Add(c.e.timing.interval)
			if c.handOverByPreference(t) {
				return
			}
		case isCASConflict(err):
			e := c.watcher.view(c.e.key).latest
			switch {
			case c.lostRenewal(t, e):
				c.adopt(t, e)
				renewAt = c.e.now()
				continue
			case t.unsure && (e == nil || e.Revision() <= t.revision):
				// What is over t.revision may be this node's lost renewal,
				// which the watcher has not delivered yet: wait for it.
				renewAt = earliest(c.e.now().Add(c.e.timing.renewRetry), deadline)
				continue
			}
			cause := fmt.Errorf("%w: %w", ErrRevisionGone, err)
			if e != nil && e.Revision() > t.revision {
				c.standDownAndVouch(t, e.Revision(), cause)
			} else {
				c.standDown(t, cause)
				if c.workDone.Load() {
					c.release(t) // the done mark, over whatever the watcher shows next
				}
			}
			return
		case !c.e.now().Before(deadline):
			c.standDown(t, lapsed(c.e.clock, t.slept, err))
			c.release(t)
			return
		default:
			t.unsure = true
			c.e.log.Warn("renewal failed; retrying until the validity deadline",
				append(errAttrs(err), "revision", t.revision, "deadline_in", deadline.Sub(c.e.now()))...)
			renewAt = earliest(c.e.now().Add(c.e.timing.renewRetry), deadline)
		}
	}
}

// lostRenewal reports whether e, the key's latest entry, is this node's
// renewal whose answer was lost: a renewal over t.revision went unanswered
// (t.unsure), e is a write of this node's name above t.revision, and this
// announced tenure is still within its validity deadline.
//
// Why e is this node's own: a candidate writes its name only when it claims
// (over a release, a removal or no entry) or renews (over its own latest
// revision). t.revision holds this node's name, so no claim goes over it,
// and it cannot age out before the deadline; so a write of this name
// directly over t.revision is this node's renewal, the one of its
// unanswered tries that applied (each compare-and-sets t.revision, so at
// most one does). The watcher cannot prove that nothing came between: a
// removal and a claim by another candidate of the same name could reach it
// together. Adopting is safe even then, for adopt keeps the validity
// deadline (only an acknowledged renewal moves it): such a claim was made
// over a removal written after t.revision, so its writer announces only a
// TTL after it, past this node's deadline, and only after a renewal of its
// own over its claim is acknowledged; this node's next renewal over e, if
// acknowledged first, makes that one fail. Only an announced tenure adopts,
// so such a claimant (not announced) never adopts this node's writes in
// turn.
func (c *campaigner) lostRenewal(t *tenure, e jetstream.KeyValueEntry) bool {
	return t.unsure && t.announced && e != nil && e.Revision() > t.revision &&
		e.Operation() == jetstream.KeyValuePut && string(e.Value()) == c.e.name &&
		c.valid(t)
}

// adopt takes e, this node's renewal whose answer was lost (lostRenewal),
// as the tenure's latest revision, without moving the validity deadline.
func (c *campaigner) adopt(t *tenure, e jetstream.KeyValueEntry) {
	c.e.log.Info("the watcher shows this node's renewal whose answer was lost; holding the key from it", "revision", t.revision, "renewed", e.Revision())
	t.revision, t.unsure = e.Revision(), false
}

// deadline is the moment the tenure's validity ends unless renewed.
func (c *campaigner) deadline(t *tenure) time.Time {
	return t.lastSent.Add(c.e.timing.validity)
}

// valid reports whether the tenure's validity holds now: its deadline has
// not passed, and the machine did not sleep since its latest acknowledged
// write was sent (over a sleep, the deadline proves nothing). Every
// decision that trusts the lease asks it: announcing, extending it,
// adopting a lost renewal, vouching.
func (c *campaigner) valid(t *tenure) bool {
	return c.e.now().Before(c.deadline(t)) && !c.slept(t)
}

// announce makes this node the leader and runs OnWon.
func (c *campaigner) announce(ctx context.Context, t *tenure) {
	validUntil := c.deadline(t)
	// The leadership context ends with the campaign's (Stop, Start's
	// context) at once, as a child would, but with a cause that says why:
	// context.Cause gives ErrStopped, or the stand-down's cause.
	leadCtx, cancel := context.WithCancelCause(context.WithValue(context.WithoutCancel(ctx), leadershipKey{}, leadershipRef{token: t.token, e: c.e}))
	unlink := context.AfterFunc(ctx, func() { cancel(stoppedBecause(ctx)) })
	expired := func() {
		if cause := c.leaseEnded(); cause != nil {
			cancel(cause)
		}
	}
	t.lead = &leadership{ctx: leadCtx, cancel: cancel, unlink: unlink, expiry: time.AfterFunc(c.e.wait(validUntil), expired), since: c.e.now()}

	c.e.mu.Lock()
	c.e.state = LeaderState
	c.e.validUntil, c.e.validSlept = validUntil, t.slept
	c.e.token = t.token
	c.e.mu.Unlock()
	t.lead.watch = c.watchLease(cancel)

	c.e.log.Info("leading", "revision", t.token)
	c.emit(Event{Kind: EventWon, Token: t.token, After: t.after, Duration: t.lead.since.Sub(c.since)})
	t.announced = true
	if c.e.opts.onWon != nil {
		c.callbacks.push(func() { c.e.opts.onWon(leadCtx) })
	}
	if c.work != nil {
		c.callbacks.push(func() { c.work(leadCtx) })
	}
	returned := make(chan struct{})
	t.returned = returned
	c.callbacks.push(func() { close(returned) })
}

// extend moves the validity deadline after a renewal sent at sent, when
// the clock reported slept as slept, was acknowledged. It reports false if
// the old validity ended first (valid).
func (c *campaigner) extend(t *tenure, sent time.Time, slept time.Duration) bool {
	if t.lead != nil && !t.lead.expiry.Stop() {
		return false // the expiry timer fired: the leadership context is cancelled
	}
	validUntil := sent.Add(c.e.timing.validity)
	c.e.mu.Lock()
	ok := c.valid(t)
	if ok && t.lead != nil {
		c.e.validUntil, c.e.validSlept = validUntil, slept
	}
	c.e.mu.Unlock()
	if !ok {
		return false
	}
	t.lastSent, t.slept = sent, slept
	if t.lead != nil {
		t.lead.expiry.Reset(c.e.wait(validUntil))
	}
	return true
}
