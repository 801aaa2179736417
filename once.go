package election

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// OnceOutcome says what an Election.Once attempt found.
type OnceOutcome int

const (
	// OnceRan means this candidate won the key, led, and ran the work.
	OnceRan OnceOutcome = iota + 1
	// OnceOtherLeader means another candidate holds the key: it leads, or it
	// won the key and waits to announce.
	OnceOtherLeader
	// OnceDone means a done mark of an earlier run stands, so Once did not
	// run the work: the key's own mark (a TTL from a run), or, with
	// RecordRuns, one that a run left in the run log (DoneFor from its
	// outcome, whatever the TTL; with NoRetry, from its start).
	OnceDone
	// OnceConflict means the key was free, but another candidate's claim won
	// the race for it, or this candidate won the key but lost it before it
	// could lead.
	OnceConflict
	// OnceAlreadyLeader means a candidate of this name holds the key already
	// (another process, or an Election started with the same name).
	OnceAlreadyLeader
	// OnceUnhealthy means this candidate's health check (WithHealthCheck)
	// failed, so it claimed nothing, and no other candidate holds the key:
	// Once's error wraps ErrHealthCheck and the check's error.
	OnceUnhealthy
)

// String returns "ran", "other leader", "done", "conflict", "already
// leader" or "unhealthy".
func (o OnceOutcome) String() string {
	switch o {
	case OnceRan:
		return "ran"
	case OnceOtherLeader:
		return "other leader"
	case OnceDone:
		return "done"
	case OnceConflict:
		return "conflict"
	case OnceAlreadyLeader:
		return "already leader"
	case OnceUnhealthy:
		return "unhealthy"
	default:
		return fmt.Sprintf("OnceOutcome(%d)", int(o))
	}
}

// Once makes one attempt to lead the key, and runs work if it leads: the way
// to run a job fired on many hosts (cron, say) on exactly one of them.
//
// If the key is free, or becomes free within wait (0: only if free now), the
// candidate claims it. If it wins and leads, Once runs work with the
// leadership context (cancelled if leadership ends; TokenFromContext gives
// the fencing token), renewing the key meanwhile. When work returns nil
// while this node still leads, it marks the key done ("done:" and its name)
// for one TTL and returns OnceRan: any candidate's Once in that TTL returns
// OnceDone without running, and a Start-ed candidate of the key claims it
// only once the mark has aged out. A run that failed or was interrupted is
// retried, not buried: when work returns an error, Once releases the key
// unmarked, at once, and returns OnceRan with work's error, so that another
// Once (one waiting, or the next to fire) runs the work; NoRetry marks the
// key done whatever happened instead. A panic in work is returned as an
// error.
//
// With RecordRuns, Once records the run in a RunLog (the bucket's history,
// say). It checks there that no done mark stands before it claims the key,
// and returns OnceDone without claiming it if one does (so a skipped host
// leaves no win or stand-down in the history); and again once it leads,
// before work starts, returning OnceDone if a mark stands by then (its
// stand-down's cause names the mark). After work, it records the outcome,
// with a done mark lasting DoneFor (as long as the schedule needs,
// whatever the bucket's TTL) when the run succeeded.
//
// The key's mark is written by compare-and-set over this node's latest
// write, including a renewal the server applied but whose answer was lost
// (the watcher shows it), or over a delete or purge another client made
// while this node led; it must be confirmed before the leadership's
// validity deadline. If the mark the run should leave is not confirmed
// (its writes failed or went unanswered, or another client wrote over the
// key, or with DoneFor the log's record could not be written), Once returns
// OnceRan with an error matching ErrDoneUnconfirmed, joined with work's:
// the work ran, but another host may run it again. If leadership ends, or
// ctx is done, before work returns, Once waits for work to return, releases
// the key unmarked (another host may run the work) and returns OnceRan with
// an error matching ErrWorkInterrupted.
//
// Otherwise it returns without running work: OnceOtherLeader, OnceDone,
// OnceConflict (also when leadership ended before the work could start),
// OnceAlreadyLeader, or OnceUnhealthy with an error matching ErrHealthCheck
// (WithHealthCheck: its check kept it from a free key), or an error
// matching ErrRunLog when the run log could not be checked. A key free only
// after a removal (a delete or purge) is claimed after the vouch window (see the package documentation; at most a
// quarter of the TTL), even with a wait of 0 or one that ends sooner, and
// the winner may have to wait out a TTL before it leads.
//
// Once campaigns as Start does: it lets higher priorities among the live
// candidates claim a free key first, within its wait, and claims over a
// holder silent for a TTL until the key has aged out, even past its wait.
// OnWon and OnLost run as with Start, OnWon before work. Like Start, Once
// runs once per Election; it returns ErrAlreadyStarted or ErrStopped as
// Start does, and Stop interrupts it.
func (e *Election) Once(ctx context.Context, wait time.Duration, work func(ctx context.Context) error, opts ...OnceOption) (OnceOutcome, error) {
	var o onceOptions
	for _, opt := range opts {
		opt(&o)
	}
	switch {
	case wait < 0:
		return 0, fmt.Errorf("%w: wait %v: want 0 (only if the key is free now) or more", ErrInvalidArgument, wait)
	case work == nil:
		return 0, fmt.Errorf("%w: the work is nil; pass the function to run once", ErrInvalidArgument)
	case e.opts.priority == 0:
		return 0, fmt.Errorf("%w: priority 0: a candidate of priority 0 never leads, so it cannot run work once", ErrInvalidArgument)
	}
	if err := o.check(); err != nil {
		return 0, err
	}
	var outcome OnceOutcome
	var workErr error
	err := e.runCampaigner(ctx, func(ctx context.Context, c *campaigner) {
		outcome, workErr = c.once(ctx, wait, work, &o)
	})
	if err != nil {
		return 0, err
	}
	return outcome, workErr
}

// once is Once's campaign: it claims the key if it is free, or becomes free
// before wait has passed, and runs work if the claim leads.
func (c *campaigner) once(ctx context.Context, wait time.Duration, work func(context.Context) error, o *onceOptions) (OnceOutcome, error) {
	if o.log != nil {
		if mark := c.standingMark(ctx, o.log); mark != nil {
			c.e.log.Info("the run log shows a done mark that still stands; not claiming the key",
				"ran_by", mark.Name, "stored", mark.Stored, "done_for", mark.DoneFor)
			return OnceDone, nil
		}
	}
	defer c.begin(ctx)()
	if !c.awaitFirstCheck(ctx) {
		return 0, ctx.Err()
	}
	t, outcome := c.campaign(ctx, campaignEnd{until: c.e.now().Add(wait), stop: c.onceStop})
	switch {
	case t != nil:
		return c.runOnce(ctx, t, work, o)
	case outcome == 0:
		return 0, ctx.Err()
	case outcome == OnceOtherLeader || outcome == OnceConflict:
		if v := c.watcher.view(c.e.key); !v.held() {
			if err := c.healthRefusal(); err != nil {
				return OnceUnhealthy, err // nobody else holds the key: the check kept this node from claiming it
			}
		}
	}
	return outcome, nil
}

// onceStop ends Once's campaign at once when the key is held under this
// node's own name or marked done. A mark seen a TTL ago or more may have
// aged out, of which the server sends no word: a watcher that outlives one
// Once (a Bucket's) would show it for ever. The campaign then goes on and
// claims over no entry, which wins only once the mark is gone.
func (c *campaigner) onceStop(v *keyView) OnceOutcome {
	if !v.held() {
		return 0
	}
	switch holder := v.latest.Value(); {
	case string(holder) == c.e.name:
		return OnceAlreadyLeader
	case isDone(holder) && c.e.now().Before(v.seenAt.Add(c.e.timing.ttl)):
		return OnceDone
	}
	return 0
}

// onceRun is what the work of one Once tenure came to.
type onceRun struct {
	outcome OnceOutcome // OnceRan; OnceDone (a mark stands in the run log) or OnceConflict (the leadership ended first) without running; 0 with err: the run log failed
	err     error       // work's error, or why the run log could not be checked
	led     bool        // the work returned while this node led
	marks   bool        // the run should leave a done mark
	logged  bool        // its outcome is in the run log, with the mark it leaves
	skipped error       // with OnceDone: the mark in the run log that kept the work from running
}

// runOnce holds the tenure t while work runs once this node leads, then
// releases the key: marked done if the run leaves a mark on it.
func (c *campaigner) runOnce(ctx context.Context, t *tenure, work func(context.Context) error, o *onceOptions) (OnceOutcome, error) {
	holdCtx, finish := context.WithCancelCause(ctx)
	defer finish(nil)
	result := make(chan onceRun, 1)
	c.work = func(leading context.Context) {
		r := c.doOnce(leading, t.token, work, o)
		result <- r
		finish(r.skipped) // the stand-down's cause: nil, or the mark that kept the work from running
	}
	c.hold(holdCtx, t)
	if !t.announced {
		return OnceConflict, nil
	}
	r := <-result
	switch r.outcome {
	case OnceDone, OnceConflict:
		return r.outcome, nil
	case 0:
		return 0, r.err
	}
	err := r.err
	switch {
	case !r.led:
		err = errors.Join(ErrWorkInterrupted, err)
		if r.marks && !r.logged {
			err = errors.Join(err, ErrDoneUnconfirmed)
		}
	case r.marks && o.doneFor > 0 && !r.logged, r.marks && o.doneFor == 0 && !c.marked:
		err = errors.Join(ErrDoneUnconfirmed, err)
	}
	return OnceRan, err
}

// doOnce is the work of a Once tenure, run as OnWon is, with the
// leadership context: it checks the run log (if any), runs work, records
// its outcome there, and says whether the key is to be marked done
// (c.workDone) before the tenure's release.
func (c *campaigner) doOnce(leading context.Context, token uint64, work func(context.Context) error, o *onceOptions) onceRun {
	var started uint64
	if o.log != nil {
		var mark *Run
		var err error
		if started, mark, err = c.checkRuns(leading, token, o); err != nil {
			if leading.Err() != nil {
				return onceRun{outcome: OnceConflict}
			}
			return onceRun{err: err}
		}
		if mark != nil {
			return onceRun{outcome: OnceDone, skipped: fmt.Errorf("the work did not run: the run log shows a done mark of %s's run that stands until %s",
				mark.Name, mark.MarkUntil().UTC().Format(time.RFC3339))}
		}
	}
	// The leadership context ends at the next poll of the lease after a
	// suspend (clockcheck.go), IsLeader at once: a run counts as led only
	// if both say this node leads when the work returns.
	if leading.Err() != nil || !c.e.IsLeader() {
		return onceRun{outcome: OnceConflict}
	}
	begun := c.e.now()
	err := runWork(leading, work)
	ended := c.e.now()
	r := onceRun{outcome: OnceRan, err: err, led: leading.Err() == nil && c.e.IsLeader()}
	r.marks = (err == nil && r.led) || o.noRetry
	if o.log != nil {
		run := Run{Name: c.e.name, Token: token, Ended: true, Duration: ended.Sub(begun), Status: exitStatus(err), Interrupted: !r.led}
		if err != nil {
			run.Error = err.Error()
		}
		if r.marks {
			run.DoneFor = o.doneFor
		}
		r.logged = c.recordOutcome(o.log, started, run, ended)
	}
	if r.marks && r.led && o.marksKey(r.logged && o.doneFor > 0, c.e.timing.ttl) {
		c.workDone.Store(true)
	}
	return r
}

// markDone writes the done mark once Once's work returned while this node
// led, by compare-and-set over revision over: this node's latest revision,
// or another client's write over it that the node saw while it led and
// within its validity (where a vouch would go). It tries until the
// tenure's validity deadline and sets c.marked once the mark is confirmed:
// acknowledged, or, after a try whose answer was lost, shown by the watcher
// over the revision it was written over. When the compare-and-set fails, it
// waits for the watcher to show what is there: this node's renewal whose
// answer was lost (see lostRenewal), or a removal, and writes the mark over
// it; over anything else it gives up.
//
// A done mark is never a release: no candidate claims over it until it ages
// out a TTL after it was written, after this node stood down. So writing it
// over any revision this node saw is safe; the compare-and-set only keeps it
// from landing over a claim this node has not seen.
func (c *campaigner) markDone(t *tenure, over uint64) {
	deadline := c.deadline(t)
	value := doneValue(c.e.name)
	unsure := false // a try went unanswered: the server may have applied it
	for {
		sent := c.e.now()
		if !sent.Before(deadline) {
			c.e.log.Warn("the done mark is not confirmed and the validity deadline has passed; another host may run the work again", "over", over)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), c.e.wait(earliest(deadline, sent.Add(c.e.timing.opTimeout))))
		rev, err := c.kv.Update(ctx, c.e.key, []byte(value), over)
		cancel()
		c.roundTrip(sent, err)
		switch {
		case err == nil:
			c.watcher.wrote(rev)
			c.marked = true
			c.e.log.Info("marked the key done", "over", over, "revision", rev)
			return
		case !isCASConflict(err):
			unsure = true
			c.e.log.Warn("could not write the done mark; retrying until the validity deadline", append(errAttrs(err), "over", over)...)
			c.e.sleep(context.Background(), earliest(c.e.now().Add(c.e.timing.renewRetry), deadline).Sub(c.e.now()))
			continue
		}
		e := c.awaitAbove(over, deadline)
		switch {
		case e == nil:
			c.e.log.Warn("the done mark is not confirmed and the validity deadline has passed; another host may run the work again", "over", over)
			return
		case unsure && e.Operation() == jetstream.KeyValuePut && string(e.Value()) == value:
			// This node's own mark, whose answer was lost: nobody else
			// writes this node's done mark over a revision it saw.
			c.marked = true
			c.e.log.Info("the watcher shows the done mark whose answer was lost", "over", over, "revision", e.Revision())
			return
		case over == t.revision && c.lostRenewal(t, e):
			c.adopt(t, e)
		case e.Operation() != jetstream.KeyValuePut:
			c.e.log.Info("another client removed the key before the done mark; marking it over the removal", "over", over, "removal", e.Revision())
		default:
			c.e.log.Warn("another client wrote over the key before the done mark; another host may run the work again", "over", over, "revision", e.Revision(), "value", string(e.Value()))
			return
		}
		over, unsure = e.Revision(), false
	}
}

// awaitAbove waits until the watcher shows an entry of the key above
// revision rev and returns it, or nil if the moment until passes first.
func (c *campaigner) awaitAbove(rev uint64, until time.Time) jetstream.KeyValueEntry {
	timer := time.NewTimer(c.e.wait(until))
	defer timer.Stop()
	for {
		if e := c.watcher.view(c.e.key).latest; e != nil && e.Revision() > rev {
			return e
		}
		select {
		case <-c.sub.changed:
		case <-timer.C:
			return nil
		}
	}
}

// runWork runs work, returning a panic as an error.
func runWork(ctx context.Context, work func(context.Context) error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("election: the work panicked: %v", r)
		}
	}()
	return work(ctx)
}
