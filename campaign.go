package election

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// campaigner is the goroutine behind Start: it campaigns while a candidate and
// renews while it holds the key. It publishes what others may read (state,
// validity deadline, token) through the Election's fields under its mutex.
type campaigner struct {
	*Election
	callbacks *callbackQueue
	watcher   *watcher              // the watcher this election shares
	sub       *subscription         // wakes the campaigner when the key's view changes
	requests  *subscription         // wakes it when a request to the leader is written
	sitOutRev uint64                // the revision of this node's own resignation: it does not claim over it for half a TTL
	since     time.Time             // when this node began to campaign for its next tenure
	work      func(context.Context) // Once's work, run after OnWon when this node leads
	workDone  atomic.Bool           // Once's run leaves a mark on the key (doOnce): the release marks the key done
	marked    bool                  // Once's done mark was confirmed written (markDone)
	pref      preference            // with WithPreferHigher: the higher candidates seen while leading
	listed    time.Time             // the end of the first campaign's listing window (priority.go); zero: none
	rtt       roundTrips            // recent round trips to the bucket (roundtrip.go)

	// kv is the election's bucket with every acknowledged write noted for
	// the clock checks (clockedKV): it shadows Election.kv, so that every
	// write of the campaigner's, in any file, is measured.
	kv        jetstream.KeyValue
	clocks    *clockWatch   // what the clock checks measured (clockcheck.go)
	clockRate atomic.Uint64 // the latest measured ClockCheck.Rate (math.Float64bits) for the candidate record; 0: none yet
	clockWake chan struct{} // buffered 1: the lease watch saw IsLeader turn false
}

// newCampaigner makes the campaigner of e, which runs callbacks on
// callbacks and watches its key through w.
func newCampaigner(e *Election, callbacks *callbackQueue, w *watcher) *campaigner {
	clocks := &clockWatch{}
	return &campaigner{
		Election:  e,
		callbacks: callbacks,
		watcher:   w,
		kv:        &clockedKV{KeyValue: e.kv, clock: e.clock, watch: clocks},
		clocks:    clocks,
		clockWake: make(chan struct{}, 1),
	}
}

// tenure is this node's hold on the key, from the Create that won it to
// stand-down.
type tenure struct {
	token      uint64          // revision of the winning Create: the fencing token
	revision   uint64          // latest revision this node wrote
	unsure     bool            // a renewal over revision was sent and its answer lost: the server may have applied it
	lastSent   time.Time       // when the latest acknowledged write was sent
	slept      time.Duration   // what the clock reported as slept right before it was sent (sleptSince)
	announceAt time.Time       // when leadership may be announced
	confirm    bool            // announce only after a renewal sent at or after announceAt was acknowledged
	lead       *leadership     // nil until leadership is announced, and again after stand-down
	announced  bool            // leadership was announced in this tenure
	after      string          // how the key became free before the claim, for the history
	returned   <-chan struct{} // closed once OnWon (and Once's work) of this tenure returned; nil if never announced
}

// leadership is an announced tenure: the context handed to OnWon, and the
// timer that cancels it at the validity deadline even if the campaigner is
// blocked in a KV call.
type leadership struct {
	ctx    context.Context
	cancel context.CancelFunc
	expiry *time.Timer
	watch  *leaseWatch // cancels ctx once IsLeader turns false, as after a suspend; nil if the clock cannot tell
	since  time.Time   // when leadership was announced
}

// run is Start's campaign: it campaigns and holds the key, tenure after
// tenure, until ctx is done.
func (c *campaigner) run(ctx context.Context) {
	defer c.begin(ctx)()
	if c.opts.priority == 0 { // a standby: listed, never claiming
		<-ctx.Done()
		return
	}
	if d := c.splay(ctx); d > 0 && !c.sleep(ctx, d) {
		return
	}
	if !c.awaitListing(ctx) {
		return
	}
	for {
		t, _ := c.campaign(ctx, endNever)
		if t == nil {
			return
		}
		c.hold(ctx, t)
		if ctx.Err() != nil || !c.awaitReturn(ctx, t) {
			return
		}
	}
}

// awaitReturn waits, before this node campaigns again, until the OnWon of
// the tenure t has returned, and reports false if ctx was done first. A
// node whose last leadership's work has not stopped could not start its
// next anyway (callbacks run in order), so it leaves the key to the others.
func (c *campaigner) awaitReturn(ctx context.Context, t *tenure) bool {
	if t.returned == nil {
		return true
	}
	select {
	case <-t.returned:
		return true
	default:
	}
	c.log.Warn("OnWon of the last leadership has not returned; not campaigning until it does", "revision", t.token)
	select {
	case <-t.returned:
		c.log.Info("OnWon of the last leadership returned; campaigning again", "revision", t.token)
		return true
	case <-ctx.Done():
		return false
	}
}

// splay is the random delay before a candidate's first campaign: up to
// maxSplay, and only when the key is free and other candidates are listed
// for it, so that a crowd started together spreads its first claims while
// a lone candidate of a free key, or one joining a key that is held (and
// may be handed to it), campaigns at once. Where priorities are in play,
// they order the first claims instead (awaitListing).
func (c *campaigner) splay(ctx context.Context) time.Duration {
	if c.opts.noSplay || c.timing.maxSplay <= 0 {
		return 0
	}
	select {
	case <-c.watcher.readyCh:
	case <-ctx.Done():
		return 0
	}
	if v := c.watcher.view(c.key); !v.free() || c.prioritiesInPlay() {
		return 0
	}
	for _, other := range c.watcher.candidates(c.key, c.timing.ttl) {
		if other.Name != c.name {
			return rand.N(c.timing.maxSplay)
		}
	}
	return 0
}

// begin starts campaigning: it counts the campaign in the metrics and the
// watcher, subscribes to the key and to requests to its leader, and waits for
// this node's candidate record. It returns the function that undoes it.
func (c *campaigner) begin(ctx context.Context) (end func()) {
	c.since = c.now()
	c.emit(Event{Kind: EventCampaigning, Duration: c.timing.interval})
	c.sub = c.watcher.subscribe(c.key)
	c.watcher.noteInterval(c.timing.interval, 1)
	c.requests = c.watcher.subscribe(requestKey(c.key))
	if !c.opts.noPresence {
		c.awaitOwnRecord(ctx)
	}
	return func() {
		c.watcher.unsubscribe(c.requests)
		c.watcher.noteInterval(c.timing.interval, -1)
		c.watcher.unsubscribe(c.sub)
		c.emit(Event{Kind: EventStopped, Duration: c.timing.opTimeout})
	}
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
		view := c.watcher.view(c.key)
		if end.stop != nil && view.ready {
			if outcome := end.stop(&view); outcome != 0 {
				return nil, outcome
			}
		}
		refusal := c.checkClocks() // a clock past ClockRate: claim nothing
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
			at = later(at, c.now().Add(c.timing.interval)) // measure again meanwhile (candidate records)
		}
		wake := at
		if until, ok := c.patience(&view, end.until); ok {
			if now := c.now(); !now.Before(until) && at.After(now) {
				if lost > 0 {
					return nil, OnceConflict
				}
				return nil, OnceOtherLeader
			}
			wake = earliest(at, until)
		}
		timer.Reset(c.wait(wake))
		select {
		case <-ctx.Done():
			return nil, 0
		case <-c.sub.changed:
		case <-timer.C:
			if c.now().Before(at) {
				continue // woken to give up
			}
			if v := c.watcher.view(c.key); c.canClaim(&v, tried, triedAny) {
				continue // a handoff to another candidate or a resignation no longer keeps this node away
			}
			if c.checkClocks() != nil {
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
	case v.held() && !v.seenAt.Add(c.timing.ttl).After(c.now()):
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
	now := c.now()
	switch {
	case !view.ready:
		return now.Add(c.timing.interval)
	case view.held() && view.seenAt.Add(c.timing.ttl+c.priorityDelay()).After(now):
		return view.seenAt.Add(c.timing.ttl + c.priorityDelay()) // higher priorities claim first
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
	return v.free() && !c.claimableAt(v).After(c.now()) && (!triedAny || v.expected() != tried)
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
	case handoff && to == c.name:
		return at
	case handoff || (v.latest != nil && v.latest.Revision() == c.sitOutRev):
		at = v.seenAt.Add(c.timing.sitOut)
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
	if c.opts.backoff != nil {
		return max(c.opts.backoff.Duration(lost-1), minCampaignWait)
	}
	if lost <= steadyRetries {
		return firstRetry
	}
	return min(firstRetry<<min(lost-steadyRetries, 16), c.timing.interval)
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
	if p == predecessorNone && !c.timing.absenceProvesExpiry {
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
	slept := suspended(c.clock)
	sent := c.now()
	// Stop does not cancel a write in flight: the server may apply it, and
	// only a finished write tells which revision to release.
	opCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.timing.opTimeout)
	rev, err := c.kv.Update(opCtx, c.key, []byte(c.name), expected)
	cancel()
	c.roundTrip(sent, err)
	if err != nil {
		if isCASConflict(err) {
			c.log.Debug("campaign lost: another candidate holds the key", "error", err)
		} else {
			c.log.Warn("campaign failed", errAttrs(err)...)
		}
		return nil
	}
	c.watcher.wrote(rev)
	if rev <= seen && pred != predecessorEarly {
		// The store gave out a revision it had given before: it lost
		// acknowledged writes, so what the claim was made over proves
		// nothing of the holder it replaced, which may hold that revision.
		c.log.Warn("the store gave out a revision again: it lost acknowledged writes; announcing only after the announce delay",
			"revision", rev, "seen", seen)
		pred = predecessorEarly
	}
	delay := time.Duration(0)
	if pred == predecessorEarly {
		delay = c.timing.announceDelay
	}
	c.log.Info("won the key", "revision", rev, "after", pred.String(), "announce_delay", delay)
	return &tenure{token: rev, revision: rev, lastSent: sent, slept: slept, announceAt: c.now().Add(delay), confirm: delay > 0, after: freedBy(over)}
}

// hold keeps the key for one tenure: it renews every interval, announces
// leadership once the announce delay has passed, and stands down when a
// renewal is refused, when the watcher shows another client's write, when
// the validity deadline passes, when the clocks cannot vouch for the lease
// (clocksFail: before every decision that trusts it), or when ctx is done.
func (c *campaigner) hold(ctx context.Context, t *tenure) {
	renewAt := t.lastSent.Add(c.timing.interval)
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
		timer.Reset(c.wait(next))
		select {
		case <-ctx.Done():
		case <-c.clockWake:
			continue
		case <-c.sub.changed:
			if c.clocksFail(t) {
				return
			}
			switch e := c.watcher.view(c.key).latest; {
			case c.lostRenewal(t, e):
				c.adopt(t, e)
				renewAt = c.now()
			case e != nil && e.Revision() > t.revision:
				c.standDownAndVouch(t, e.Revision(), fmt.Errorf("%w: revision %d was written by another client", ErrRevisionGone, e.Revision()))
				return
			case e != nil && e.Revision() == t.revision && (e.Operation() != jetstream.KeyValuePut || string(e.Value()) != c.name):
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
		case <-timer.C:
		}
		if ctx.Err() != nil { // checked again: select picks at random when both are ready
			c.standDown(t, ErrStopped)
			c.release(t)
			return
		}
		if c.clocksFail(t) {
			return
		}

		now := c.now()
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
		slept := suspended(c.clock)
		sent := c.now()
		opCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.wait(earliest(deadline, sent.Add(c.timing.opTimeout))))
		rev, err := c.kv.Update(opCtx, c.key, []byte(c.name), t.revision)
		cancel()
		c.roundTrip(sent, err)
		c.emit(Event{Kind: EventRenewed, Duration: c.now().Sub(sent), Err: err})
		switch {
		case err == nil:
			t.revision, t.unsure = rev, false
			c.watcher.wrote(rev)
			if c.clocksFail(t) {
				return
			}
			if !c.extend(t, sent, slept) {
				c.standDown(t, fmt.Errorf("%w: the renewal was acknowledged after it", ErrRenewDeadline))
				c.release(t)
				return
			}
			renewAt = sent.Add(c.timing.interval)
			if c.handOverByPreference(t) {
				return
			}
		case isCASConflict(err):
			e := c.watcher.view(c.key).latest
			switch {
			case c.lostRenewal(t, e):
				c.adopt(t, e)
				renewAt = c.now()
				continue
			case t.unsure && (e == nil || e.Revision() <= t.revision):
				// What is over t.revision may be this node's lost renewal,
				// which the watcher has not delivered yet: wait for it.
				renewAt = earliest(c.now().Add(c.timing.renewRetry), deadline)
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
		case !c.now().Before(deadline):
			c.standDown(t, fmt.Errorf("%w: %w", ErrRenewDeadline, err))
			c.release(t)
			return
		default:
			t.unsure = true
			c.log.Warn("renewal failed; retrying until the validity deadline",
				append(errAttrs(err), "revision", t.revision, "deadline_in", deadline.Sub(c.now()))...)
			renewAt = earliest(c.now().Add(c.timing.renewRetry), deadline)
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
		e.Operation() == jetstream.KeyValuePut && string(e.Value()) == c.name &&
		c.valid(t)
}

// adopt takes e, this node's renewal whose answer was lost (lostRenewal),
// as the tenure's latest revision, without moving the validity deadline.
func (c *campaigner) adopt(t *tenure, e jetstream.KeyValueEntry) {
	c.log.Info("the watcher shows this node's renewal whose answer was lost; holding the key from it", "revision", t.revision, "renewed", e.Revision())
	t.revision, t.unsure = e.Revision(), false
}

// deadline is the moment the tenure's validity ends unless renewed.
func (c *campaigner) deadline(t *tenure) time.Time {
	return t.lastSent.Add(c.timing.validity)
}

// valid reports whether the tenure's validity holds now: its deadline has
// not passed, and the machine did not sleep since its latest acknowledged
// write was sent (over a sleep, the deadline proves nothing). Every
// decision that trusts the lease asks it: announcing, extending it,
// adopting a lost renewal, vouching.
func (c *campaigner) valid(t *tenure) bool {
	return c.now().Before(c.deadline(t)) && !c.slept(t)
}

// announce makes this node the leader and runs OnWon.
func (c *campaigner) announce(ctx context.Context, t *tenure) {
	validUntil := c.deadline(t)
	leadCtx, cancel := context.WithCancel(context.WithValue(ctx, leadershipKey{}, leadershipRef{token: t.token, e: c.Election}))
	t.lead = &leadership{ctx: leadCtx, cancel: cancel, expiry: time.AfterFunc(c.wait(validUntil), cancel), since: c.now()}

	c.mu.Lock()
	c.state = LeaderState
	c.validUntil, c.validSlept = validUntil, t.slept
	c.token = t.token
	c.mu.Unlock()
	t.lead.watch = c.watchLease(cancel)

	c.log.Info("leading", "revision", t.token)
	c.emit(Event{Kind: EventWon, Token: t.token, After: t.after, Duration: t.lead.since.Sub(c.since)})
	t.announced = true
	if c.opts.onWon != nil {
		c.callbacks.push(func() { c.opts.onWon(leadCtx) })
	}
	if c.work != nil {
		c.callbacks.push(func() { c.work(leadCtx) })
	}
	returned := make(chan struct{})
	t.returned = returned
	c.callbacks.push(func() { close(returned) })
}

// awaitWork waits until the leadership's OnWon (and Once's work) returned,
// or until the moment until, and reports whether they returned. A release,
// a handoff or a vouch lets the next winner lead at once, so it is written
// only once this node's work has stopped: leaders that do their work in
// OnWon never overlap on a handover.
func (c *campaigner) awaitWork(t *tenure, until time.Time) bool {
	began := c.now()
	if c.workReturned(t, until) {
		return true
	}
	c.log.Warn("the leadership's work (OnWon) had not stopped by the last moment the key could be released for it; the key is left to expire",
		"revision", t.revision, "waited", c.now().Sub(began).Round(time.Millisecond), "deadline_passed", c.now().Sub(until).Round(time.Millisecond))
	return false
}

// workReturned waits as awaitWork does, quietly.
func (c *campaigner) workReturned(t *tenure, until time.Time) bool {
	if t.returned == nil {
		return true
	}
	timer := time.NewTimer(c.wait(until))
	defer timer.Stop()
	select {
	case <-t.returned:
		return true
	case <-timer.C:
		return false
	}
}

// extend moves the validity deadline after a renewal sent at sent, when
// the clock reported slept as slept, was acknowledged. It reports false if
// the old validity ended first (valid).
func (c *campaigner) extend(t *tenure, sent time.Time, slept time.Duration) bool {
	if t.lead != nil && !t.lead.expiry.Stop() {
		return false // the expiry timer fired: the leadership context is cancelled
	}
	validUntil := sent.Add(c.timing.validity)
	c.mu.Lock()
	ok := c.valid(t)
	if ok && t.lead != nil {
		c.validUntil, c.validSlept = validUntil, slept
	}
	c.mu.Unlock()
	if !ok {
		return false
	}
	t.lastSent, t.slept = sent, slept
	if t.lead != nil {
		t.lead.expiry.Reset(c.wait(validUntil))
	}
	return true
}

// standDown ends the tenure: IsLeader turns false, then the leadership
// context is cancelled and OnLost is queued. A tenure that was never
// announced ends quietly.
func (c *campaigner) standDown(t *tenure, cause error) {
	if t.lead == nil {
		c.log.Info("gave up the key before announcing", "revision", t.revision, "cause", cause)
		return
	}
	c.mu.Lock()
	c.state = CandidateState
	c.validUntil, c.validSlept = time.Time{}, 0
	c.token = 0
	c.mu.Unlock()

	t.lead.expiry.Stop()
	t.lead.watch.stop()
	t.lead.cancel()
	c.since = c.now()
	c.emit(Event{Kind: EventLost, Token: t.token, Err: cause, Duration: c.since.Sub(t.lead.since)})
	t.lead = nil
	c.log.Info("stood down", "revision", t.revision, "cause", cause)
	if c.opts.onLost != nil {
		c.callbacks.push(func() { c.opts.onLost(cause) })
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
	if !c.workReturned(t, c.now().Add(c.timing.drainGrace)) {
		if over = c.markDraining(t, removal); over == 0 {
			return // a claim came first: its winner waits out the announce delay
		}
		c.sitOutRev = over
		if !c.awaitWork(t, t.lastSent.Add(c.timing.workDeadline)) {
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
	ctx, cancel := context.WithTimeout(context.Background(), c.timing.opTimeout)
	defer cancel()
	value := releaseValue(c.name)
	sent := c.now()
	rev, err := c.kv.Update(ctx, c.key, []byte(value), over)
	c.roundTrip(sent, err)
	if err != nil {
		c.log.Debug("could not vouch for having stood down; the next leader waits", "over", over, "error", err)
		return 0
	}
	c.watcher.wrote(rev)
	c.log.Info("vouched for having stood down", "over", over, "revision", rev)
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
		c.releaseAs(t, releaseValue(c.name))
	} else if c.awaitWork(t, t.lastSent.Add(c.timing.ttl)) {
		c.markDone(t, t.revision)
	}
}

// releaseAs releases the key as release does, with value (a release or a
// handoff) once the announce time has passed. It returns the revision
// written, 0 if none.
func (c *campaigner) releaseAs(t *tenure, value string) uint64 {
	if !c.awaitWork(t, t.lastSent.Add(c.timing.ttl)) {
		return 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timing.opTimeout)
	defer cancel()
	var err error
	rev := uint64(0)
	if c.now().Before(t.announceAt) {
		err = c.kv.Delete(ctx, c.key, jetstream.LastRevision(t.revision))
	} else {
		rev, err = c.kv.Update(ctx, c.key, []byte(value), t.revision)
	}
	if err != nil {
		c.log.Warn("could not release the key; it will expire", "revision", t.revision, "error", err)
		return 0
	}
	c.log.Info("released the key", "revision", t.revision, "value", value)
	return rev
}

// handOver serves a request to the leader written after this tenure's claim:
// it stands down and writes a release (resignation: this node then sits out
// half a TTL) or a handoff naming the candidate to take over. It reports whether
// the tenure ended. A transfer to this node itself asks for nothing.
func (c *campaigner) handOver(t *tenure) bool {
	r := c.watcher.view(requestKey(c.key)).latest
	if t.lead == nil || r == nil || r.Operation() != jetstream.KeyValuePut || r.Revision() <= t.token {
		return false
	}
	to, ok := parseRequest(r.Value())
	if !ok {
		c.log.Warn("ignored a request it cannot read", "request", string(r.Value()), "revision", r.Revision())
		return false
	}
	if to == c.name {
		return false
	}
	c.standDown(t, fmt.Errorf("%w: %q at revision %d", ErrHandedOver, r.Value(), r.Revision()))
	value := releaseValue(c.name)
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
	if !c.opts.preferHigher || t.lead == nil {
		return false
	}
	now := c.now()
	to, ok := c.preferred(now)
	if !ok {
		return false
	}
	c.pref.lastMove = now
	c.standDown(t, fmt.Errorf("%w: preferring %q of priority %d over this node's %d", ErrHandedOver, to.Name, to.Priority, c.opts.priority))
	c.sitOutRev = c.releaseAs(t, handoffValue(to.Name))
	return true
}

func (c *campaigner) notifyCampaign() {
	if c.opts.onCampaign != nil {
		c.opts.onCampaign(c.State())
	}
}

// sleep waits for d or until ctx is done, and reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
