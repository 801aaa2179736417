// Package healthloop runs an app's health check every interval: the one
// rule for when a check fails, for the election's health gate
// (election.WithHealthCheck) and the fleet's health-checked daemons
// (fleet.Daemon.Health).
package healthloop

import (
	"context"
	"fmt"
	"time"
)

// Clock reads the time and says how long, in real time, until a moment
// of its own: the election's clock seam. Nil is the machine's clock.
type Clock interface {
	Now() time.Time
	Until(t time.Time) time.Duration
}

type machine struct{}

func (machine) Now() time.Time                  { return time.Now() }
func (machine) Until(t time.Time) time.Duration { return time.Until(t) }

// Run calls check every interval until ctx is done, each call an interval
// after the one before began, and gives note each verdict (nil: passed)
// with how long the call took:
//
//   - A call's context ends after interval; a call that returns nil after
//     that failed too.
//   - A call still running when its interval has passed failed at that
//     moment, and fails again at each interval after, until it returns: a
//     check that ignores its context (a wedged driver call) fails as one
//     that hangs until its time is up does. Its late result is that same
//     failure, not another. No second call starts while one runs.
//   - Run returns when ctx is done, without waiting for a call that runs.
func Run(ctx context.Context, clock Clock, interval time.Duration, check func(context.Context) error, note func(err error, took time.Duration)) {
	if clock == nil {
		clock = machine{}
	}
	var running chan error // the result of the call that runs; nil: none
	var began, due time.Time
	overdue := false // the running call was counted failed when its interval passed
	for {
		if running == nil {
			began = clock.Now()
			due = began.Add(interval)
			running, overdue = make(chan error, 1), false
			go func(result chan<- error) { result <- call(ctx, interval, check) }(running)
		}
		timer := time.NewTimer(clock.Until(due))
		var err error
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case err = <-running:
			timer.Stop()
			running = nil
		case <-timer.C:
			err = fmt.Errorf("the check has not returned %v after it began, past its time of %v",
				clock.Now().Sub(began).Round(time.Millisecond), interval)
			due, overdue = due.Add(interval), true
		}
		if running != nil || !overdue {
			note(err, clock.Now().Sub(began))
		}
		if running != nil {
			continue
		}
		timer = time.NewTimer(clock.Until(due))
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
	}
}

// call runs check once, within interval.
func call(ctx context.Context, interval time.Duration, check func(context.Context) error) error {
	checkCtx, cancel := context.WithTimeout(ctx, interval)
	defer cancel()
	err := check(checkCtx)
	if err == nil && checkCtx.Err() != nil && ctx.Err() == nil {
		err = fmt.Errorf("the check returned nil after its time of %v had passed", interval)
	}
	return err
}
