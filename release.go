package election

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// The release phase of a campaign (campaign.go): standing down, and giving
// up the key so that a successor leads at once: a release, a vouch over
// another client's removal, or a handoff when a request (Bucket.Resign,
// Bucket.Transfer) or a preference asks for one.

// awaitWork waits until the leadership's OnWon (and Once's work) returned,
// or until the moment until, and reports whether they returned. A release,
// a handoff or a vouch lets the next winner lead at once, so it is written
// only once this node's work has stopped: leaders that do their work in
// OnWon never overlap on a handover.
func (c *campaigner) awaitWork(t *tenure, until time.Time) bool {
	began := c.e.now()
	if c.workReturned(t, until) {
		return true
	}
	if late := began.Sub(until); late >= 0 {
		c.e.log.Warn("this process was paused or starved of CPU past the last moment the key could be released for the last leadership; the key is left to expire",
			"revision", t.revision, "late_by", late.Round(time.Millisecond))
		return false
	}
	c.e.log.Warn("the work of the last leadership had not stopped by the last moment the key could be released for it; the key is left to expire",
		"revision", t.revision, "waited", c.e.now().Sub(began).Round(time.Millisecond))
	return false
}

// workReturned waits as awaitWork does, quietly.
func (c *campaigner) workReturned(t *tenure, until time.Time) bool {
	if t.returned == nil {
		return true
	}
	timer := time.NewTimer(c.e.wait(until))
	defer timer.Stop()
	for {
		select {
		case <-t.returned:
			return true
		case <-timer.C:
			return false
		case <-c.healthWake():
			c.noteHealth() // published while waiting, as while campaigning
		}
	}
}

// standDown ends the tenure: IsLeader turns false, then the leadership
// context is cancelled and OnLost is queued. A tenure that was never
// announced ends quietly.
func (c *campaigner) standDown(t *tenure, cause error) {
	if t.lead == nil {
		c.e.log.Info("gave up the key before announcing", "revision", t.revision, "cause", cause)
		return
	}
	c.e.mu.Lock()
	c.e.state = CandidateState
	c.e.validUntil, c.e.validSlept = time.Time{}, 0
	c.e.token = 0
	c.e.mu.Unlock()

	t.lead.expiry.Stop()
	t.lead.watch.stop()
	t.lead.unlink()
	t.lead.cancel(cause)
	c.since = c.e.now()
	c.emit(Event{Kind: EventLost, Token: t.token, Err: cause, Duration: c.since.Sub(t.lead.since)})
	t.lead = nil
	c.e.log.Info("stood down", "revision", t.revision, "cause", cause)
	if c.e.opts.onLost != nil {
		c.callbacks.push(func() { c.e.opts.onLost(cause) })
	}
}

// standDownAndVouch ends the tenure because another client wrote revision
// removal over the key (a delete, a purge or an overwrite). A node that was
// the announced leader and still within its validity deadline when it saw
// the write then vouches for having stood down: once its work has returned,
// it writes a release by compare-and-set over the removal, over which the
// next winner announces at once instead of an announce delay later, and
// sits it out for half a TTL as after a resignation. See vouch for why only
// such a node may vouch. Work still running a moment after the stand-down
// (drainGrace) is answered at once with a draining mark over the removal
// (drain.go), and the release follows over the mark when the work returns,
// by its work deadline. When Once's work ran, the done mark takes the
// release's place.
func (c *campaigner) standDownAndVouch(t *tenure, removal uint64, cause error) {
	mayVouch := c.mayVouch(t)
	c.standDown(t, cause)
	if !mayVouch {
		return
	}
	over := removal
	if !c.workReturned(t, c.e.now().Add(c.e.timing.drainGrace)) {
		if over = c.markDraining(t, removal); over == 0 {
			return // a claim came first: its winner waits out the announce delay
		}
		c.sitOutRev = over
		if !c.awaitWork(t, t.lastSent.Add(c.e.timing.workDeadline)) {
			return // candidates claim over the mark once its time has passed
		}
	}
	if c.workDone.Load() {
		c.markDone(t, over) // Once's work ran: its done mark, not a release
		return
	}
	if rev := c.vouch(over); rev != 0 {
		c.sitOutRev = rev
	}
}

// mayVouch reports whether this node may vouch for having stood down from
// the tenure t, on seeing another client's write over it now: it is the
// announced leader and its validity holds (see vouch).
func (c *campaigner) mayVouch(t *tenure) bool {
	return t.lead != nil && c.valid(t)
}

// vouch writes this node's release over revision over: another client's
// removal over its tenure, or this node's draining mark over such a
// removal. It returns the revision written, 0 if the key moved on first (a
// candidate already claimed: it then waits out the announce delay, or, over
// a draining mark, claimed only once the mark's time had passed).
//
// Why a winner over the vouch may announce at once: the voucher was the
// announced leader, within its validity, when it saw the removal, so by
// induction no other node was leader then; it stood down and its work
// returned before writing; and the compare-and-set puts the vouch directly
// after every write it saw (the removal, and its own draining mark), so any
// claim made before it, still waiting out its announce delay, is
// superseded: such a claimant announces only after a renewal sent at or
// after its announce time is acknowledged (tenure.confirm), and that
// renewal now fails. A node past its validity deadline must not vouch: a
// successor that took over by expiry may be leading.
func (c *campaigner) vouch(over uint64) uint64 {
	ctx, cancel := context.WithTimeout(context.Background(), c.e.timing.opTimeout)
	defer cancel()
	value := releaseValue(c.e.name)
	sent := c.e.now()
	rev, err := c.kv.Update(ctx, c.e.key, []byte(value), over)
	c.roundTrip(sent, err)
	if err != nil {
		c.e.log.Debug("could not vouch for having stood down; the next leader waits", "over", over, "error", err)
		return 0
	}
	c.watcher.wrote(rev)
	c.e.log.Info("vouched for having stood down", "over", over, "revision", rev)
	return rev
}

// release frees the key if it still holds this node's latest revision, so
// that a candidate can take over without waiting for it to expire. Once this
// tenure's announce time has passed, every earlier holder has stood down and
// so has this node: it writes "released:" and its name, over which the next
// winner announces at once. Before then (stopped while waiting out a removal)
// an earlier holder may still believe it leads, so it deletes the key
// instead, which makes the next winner wait a TTL. When Once's work ran, it
// writes the done mark instead (markDone).
func (c *campaigner) release(t *tenure) {
	if !c.workDone.Load() {
		c.releaseAs(t, releaseValue(c.e.name))
	} else if c.awaitWork(t, t.lastSent.Add(c.e.timing.ttl)) {
		c.markDone(t, t.revision)
	}
}

// releaseAs releases the key as release does, with value (a release or a
// handoff) once the announce time has passed. It returns the revision
// written, 0 if none.
func (c *campaigner) releaseAs(t *tenure, value string) uint64 {
	if !c.awaitWork(t, t.lastSent.Add(c.e.timing.ttl)) {
		return 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.e.timing.opTimeout)
	defer cancel()
	var err error
	rev := uint64(0)
	if c.e.now().Before(t.announceAt) {
		err = c.kv.Delete(ctx, c.e.key, jetstream.LastRevision(t.revision))
	} else {
		rev, err = c.kv.Update(ctx, c.e.key, []byte(value), t.revision)
		if isCASConflict(err) && c.adoptLostRenewal(t) {
			retry, cancel := context.WithTimeout(context.Background(), c.e.timing.opTimeout)
			defer cancel()
			rev, err = c.kv.Update(retry, c.e.key, []byte(value), t.revision)
		}
	}
	if err != nil {
		c.e.log.Warn("could not release the key; it will expire", "revision", t.revision, "error", err)
		return 0
	}
	c.e.log.Info("released the key", "revision", t.revision, "value", value)
	return rev
}

// adoptLostRenewal reports whether the key's latest entry, once the
// watcher shows what is above the tenure's revision (until its validity
// deadline), is this node's renewal whose answer was lost, and adopts it
// (lostRenewal, adopt): a release over it then lands, instead of failing
// over a revision that is no longer the latest and leaving the key to
// expire.
func (c *campaigner) adoptLostRenewal(t *tenure) bool {
	if !t.unsure {
		return false
	}
	e := c.awaitAbove(t.revision, c.deadline(t))
	if e == nil || !c.lostRenewal(t, e) {
		return false
	}
	c.adopt(t, e)
	return true
}

// handOver serves a request to the leader written after this tenure's claim:
// it stands down and writes a release (resignation: this node then sits out
// half a TTL) or a handoff naming the candidate to take over. It reports whether
// the tenure ended. A transfer to this node itself asks for nothing.
func (c *campaigner) handOver(t *tenure) bool {
	r := c.watcher.view(requestKey(c.e.key)).latest
	if t.lead == nil || r == nil || r.Operation() != jetstream.KeyValuePut || r.Revision() <= t.token {
		return false
	}
	to, ok := parseRequest(r.Value())
	if !ok {
		c.e.log.Warn("ignored a request it cannot read", "request", string(r.Value()), "revision", r.Revision())
		return false
	}
	if to == c.e.name {
		return false
	}
	c.standDown(t, fmt.Errorf("%w: %q at revision %d", ErrHandedOver, r.Value(), r.Revision()))
	value := releaseValue(c.e.name)
	if to != "" {
		value = handoffValue(to)
	}
	c.sitOutRev = c.releaseAs(t, value)
	return true
}

// handOverByPreference hands the key to a higher candidate, as handOver
// does for a transfer, when WithPreferHigher asks for it and preferred
// names one. It reports whether the tenure ended.
func (c *campaigner) handOverByPreference(t *tenure) bool {
	if !c.e.opts.preferHigher || t.lead == nil {
		return false
	}
	now := c.e.now()
	to, ok := c.preferred(now)
	if !ok {
		return false
	}
	c.pref.lastMove = now
	c.standDown(t, fmt.Errorf("%w: preferring %q of priority %d over this node's %d", ErrHandedOver, to.Name, to.Priority, c.e.opts.priority))
	c.sitOutRev = c.releaseAs(t, handoffValue(to.Name))
	return true
}
