package cli

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/internal/guard"
	"github.com/sirupsen/logrus"
)

// The supervision of a command run under the guard for one leadership:
// election run's COMMAND for the key's leadership, election agent's daemon
// for the node's hold on it. The guard kills the command's whole tree at
// the leadership's work deadline, if this process does not stop it first.

// startGuarded starts argv under the guard for the leadership leading, with
// env and KVELECT_TOKEN, token, in its environment. It fails with
// guard.ErrLeadershipEnded when the leadership is over already: this
// process was paused between the win and here.
func startGuarded(leading context.Context, argv, env []string, token uint64) (*guard.Child, error) {
	return guard.Start(leading, argv, append(env[:len(env):len(env)], fmt.Sprintf("KVELECT_TOKEN=%d", token)))
}

// guarded is a command run under the guard, as superviseCommand stops it.
type guarded struct {
	child *guard.Child
	grace time.Duration // between the signal that stops it and SIGKILL
	what  string        // "command" or "daemon", for the log
	who   string        // "this process" or "this agent", for the log
	log   *logrus.Entry
}

// supervise waits until the command exits, leading is done, or shutdown
// is closed (nil: never). Unless the command has exited by itself (not
// expired at the work deadline nor killed) by then, it stops it: with
// SIGTERM when leading is done, with the signal sig returns on shutdown;
// SIGKILL follows after the grace. A leadership that ended because the
// machine was suspended (its cause is election.ErrSuspended) has the
// command's tree killed at once: its work deadline has passed in real
// time, while the guard's deadline and the grace, on the monotonic clock,
// did not count the sleep. stopping is called just before, with
// whether a shutdown asks it, for the caller's log and for what the caller
// stops with the command. It returns whether the
// command exited by itself, and whether supervise stopped it.
func (g guarded) supervise(leading context.Context, shutdown <-chan struct{}, sig func() syscall.Signal, stopping func(shutdown bool)) (byItself, stopped bool) {
	c := g.child
	slept := election.Suspended(leading) // a sleep since ends the leadership, or the command's stop
	exitedByItself := func() bool { return c.Exited() && !c.Expired() && !c.Killed() }
	select {
	case <-c.Done():
		byItself = !c.Expired() && !c.Killed()
	case <-leading.Done():
		if byItself = exitedByItself(); !byItself {
			stopping(false)
			if errors.Is(context.Cause(leading), election.ErrSuspended) {
				// The machine slept: the work deadline has passed in real
				// time, though not on the monotonic clock the guard and
				// the grace count on, which stood still meanwhile.
				g.log.Warnf("the machine was suspended: killing the %s and everything it started at once, without SIGTERM", g.what)
				c.Kill()
				<-c.Done()
			} else {
				g.stop(leading, slept, syscall.SIGTERM)
			}
			stopped = true
		}
	case <-shutdown:
		if byItself = exitedByItself(); !byItself {
			stopping(true)
			g.stop(leading, slept, sig())
			stopped = true
		}
	}
	if c.Forced() {
		g.log.WithField("guard_pid", c.GuardPID()).Warnf("the %s's guard did not answer (was it stopped?): %s killed the %s and everything it started, then the guard", g.what, g.who, g.what)
	}
	return byItself, stopped
}

// drainPoll is how often stop reads whether the machine slept while the
// command stops: within it of a resume, the command is killed.
const drainPoll = 10 * time.Millisecond

// stop stops the command with sig, SIGKILL after the grace or at the work
// deadline (Child.Stop), and kills its tree at once if the machine slept
// since election.Suspended read base, when the leadership began: the grace
// and the guard's deadline are on the monotonic clock, which does not
// count the sleep, while in real time the leadership's work deadline
// passes and a successor may start.
func (g guarded) stop(leading context.Context, base time.Duration, sig syscall.Signal) {
	c := g.child
	stopped := make(chan struct{})
	var watch sync.WaitGroup
	watch.Go(func() {
		tick := time.NewTicker(drainPoll)
		defer tick.Stop()
		for {
			select {
			case <-stopped:
				return
			case <-tick.C:
				if election.SleptSince(leading, base) {
					g.log.Warnf("the machine was suspended while the %s stopped: killing it and everything it started at once", g.what)
					c.Kill()
					return
				}
			}
		}
	})
	c.Stop(sig, g.grace)
	close(stopped)
	watch.Wait()
}
