package election

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// OnceOutcome says what an Election.Once attempt found.
type OnceOutcome int

const (
	// OnceRan means this candidate won the key, led, and ran the work.
	OnceRan OnceOutcome = iota + 1
	// OnceOtherLeader means another candidate holds the key: it leads, or it
	// won the key and waits to announce.
	OnceOtherLeader
	// OnceDone means a candidate ran the work less than a TTL ago: the key is
	// still marked done.
	OnceDone
	// OnceConflict means the key was free, but another candidate's claim won
	// the race for it, or this candidate won the key but lost it before it
	// could lead.
	OnceConflict
	// OnceAlreadyLeader means a candidate of this name holds the key already
	// (another process, or an Election started with the same name).
	OnceAlreadyLeader
)

// String returns "ran", "other leader", "done", "conflict" or "already
// leader".
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
// the fencing token), renewing the key meanwhile; when work returns while
// this node still leads, it marks the key done ("done:" and its name) for
// one TTL and returns OnceRan with work's error. Any candidate's Once in that
// TTL returns OnceDone without running, and a Start-ed candidate of the key
// claims it only once the mark has aged out. A panic in work is returned as
// an error. If leadership ends, or ctx is done, before work returns, Once
// waits for work to return, releases the key unmarked (another host may run
// the work) and returns OnceRan with an error matching ErrWorkInterrupted.
//
// Otherwise it returns without running work: OnceOtherLeader, OnceDone,
// OnceConflict or OnceAlreadyLeader. A key free only after a removal (a
// delete or purge) is claimed after the vouch window (see the package
// documentation; at most a quarter of the TTL), even with a wait of 0 or
// one that ends sooner, and the winner may have to wait out a TTL before it
// leads.
//
// Once campaigns as Start does: it lets higher priorities among the live
// candidates claim a free key first, within its wait, and claims over a
// holder silent for a TTL until the key has aged out, even past its wait.
// OnWon and OnLost run as with Start, OnWon before work. Like Start, Once
// runs once per Election; it returns ErrAlreadyStarted or ErrStopped as
// Start does, and Stop interrupts it.
func (e *Election) Once(ctx context.Context, wait time.Duration, work func(ctx context.Context) error) (OnceOutcome, error) {
	switch {
	case wait < 0:
		return 0, fmt.Errorf("%w: wait %v: want 0 (only if the key is free now) or more", ErrInvalidArgument, wait)
	case work == nil:
		return 0, fmt.Errorf("%w: the work is nil; pass the function to run once", ErrInvalidArgument)
	case e.opts.priority == 0:
		return 0, fmt.Errorf("%w: priority 0: a candidate of priority 0 never leads, so it cannot run work once", ErrInvalidArgument)
	}
	var outcome OnceOutcome
	var workErr error
	err := e.runCampaigner(ctx, func(ctx context.Context, c *campaigner) {
		outcome, workErr = c.once(ctx, wait, work)
	})
	if err != nil {
		return 0, err
	}
	return outcome, workErr
}

// once is Once's campaign: it claims the key if it is free, or becomes free
// before wait has passed, and runs work if the claim leads.
func (c *campaigner) once(ctx context.Context, wait time.Duration, work func(context.Context) error) (OnceOutcome, error) {
	defer c.begin(ctx)()
	t, outcome := c.campaign(ctx, campaignEnd{until: time.Now().Add(wait), stop: c.onceStop})
	switch {
	case t != nil:
		return c.runOnce(ctx, t, work)
	case outcome == 0:
		return 0, ctx.Err()
	}
	return outcome, nil
}

// onceStop ends Once's campaign at once when the key is held under this
// node's own name or marked done.
func (c *campaigner) onceStop(v *keyView) OnceOutcome {
	if !v.held() {
		return 0
	}
	switch holder := v.latest.Value(); {
	case string(holder) == c.name:
		return OnceAlreadyLeader
	case isDone(holder):
		return OnceDone
	}
	return 0
}

// runOnce holds the tenure t while work runs once this node leads, then
// releases the key: marked done if work returned while this node led.
func (c *campaigner) runOnce(ctx context.Context, t *tenure, work func(context.Context) error) (OnceOutcome, error) {
	holdCtx, finish := context.WithCancel(ctx)
	defer finish()
	result := make(chan error, 1)
	c.work = func(leading context.Context) {
		err := runWork(leading, work)
		if leading.Err() == nil {
			c.workDone.Store(true)
		}
		result <- err
		finish()
	}
	c.hold(holdCtx, t)
	if !t.announced {
		return OnceConflict, nil
	}
	err := <-result
	if !c.workDone.Load() {
		err = errors.Join(ErrWorkInterrupted, err)
	}
	return OnceRan, err
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
