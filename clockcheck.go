package election

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// The clocks checked while an election runs. timing.go states what the
// election assumes of its clocks; a departure from it that the election
// can see is acted on here:
//
//   - Suspend: the machine slept and the election's clock stood still (its
//     clock is a SuspendReporter: Linux's machine clock is). A deadline
//     counted over the sleep proves nothing, so a tenure whose latest
//     acknowledged write was sent before the machine slept cannot be
//     vouched for: the node stands down at once (ErrSuspended), renews and
//     vouches nothing over it, and IsLeader turns false the moment the
//     clock reports the sleep (sleptSince, clock.go, is the rule).

// ErrSuspended means the leader stood down because the machine slept since
// it sent its latest acknowledged write: its clock stood still meanwhile,
// so its validity deadline proves nothing. How long it slept is in the
// message. It is a cause of lost leadership, passed to OnLost and in
// EventLost.
var ErrSuspended = errors.New("election: the machine was suspended")

// slept reports whether the machine slept since the tenure's latest
// acknowledged write was sent (see sleptSince).
func (c *campaigner) slept(t *tenure) bool {
	return sleptSince(c.clock, t.slept)
}

// clocksFail ends the tenure t, and reports true, when the clocks can no
// longer vouch for it: the machine slept since its latest acknowledged
// write was sent. The release that follows is safe: a compare-and-set over
// this node's own latest revision, which succeeds only if no other write
// came since, after its work returned.
func (c *campaigner) clocksFail(t *tenure) bool {
	if !c.slept(t) {
		return false
	}
	cause := fmt.Errorf("%w for %v since the leader sent its latest acknowledged write",
		ErrSuspended, (suspended(c.clock) - t.slept).Round(time.Millisecond))
	c.log.Warn("the clocks cannot vouch for the lease; standing down", "error", cause, "revision", t.revision)
	c.standDown(t, cause)
	c.release(t)
	return true
}

// leasePoll is how often the lease watch reads IsLeader.
const leasePoll = 100 * time.Millisecond

// leaseWatch cancels a leadership's context as soon as IsLeader turns false
// before the deadline's own timer fires: after a suspend, which timers do
// not see (they run on the monotonic clock, which stood still), IsLeader
// turns false at once, and the context follows within one poll
// (leasePoll). It then wakes the campaign goroutine, which stands down
// (clocksFail) even between its own timers.
type leaseWatch struct {
	mu      sync.Mutex
	timer   *time.Timer
	stopped bool
}

// watchLease starts the lease watch of a leadership whose context cancel
// cancels, if the election's clock can report a suspend; nil otherwise.
func (c *campaigner) watchLease(cancel context.CancelFunc) *leaseWatch {
	if _, ok := c.clock.(SuspendReporter); !ok {
		return nil
	}
	every := c.clock.Real(leasePoll)
	w := &leaseWatch{}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.timer = time.AfterFunc(every, func() {
		if !c.IsLeader() {
			cancel()
			select {
			case c.clockWake <- struct{}{}:
			default:
			}
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		if !w.stopped {
			w.timer.Reset(every)
		}
	})
	return w
}

// stop ends the watch; a nil watch is none.
func (w *leaseWatch) stop() {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	w.timer.Stop()
}
