package testenv

import (
	"sync/atomic"
	"time"
)

// SuspendClock is the machine's clock as an election reads it (Now, Real),
// which also reports, as an election.SuspendReporter, the suspends a test
// makes with Sleep: time that passed without Now counting it, as Linux's
// monotonic clock does not count a real suspend. Give it to
// election.WithClock (or OpenBucket's) to test what follows a suspend
// without suspending the machine.
type SuspendClock struct{ slept atomic.Int64 }

// Now reads the machine's clock.
func (*SuspendClock) Now() time.Time { return time.Now() }

// Real is d: the clock runs at the real rate.
func (*SuspendClock) Real(d time.Duration) time.Duration { return d }

// Suspended returns the total of the Sleeps so far.
func (c *SuspendClock) Suspended() time.Duration { return time.Duration(c.slept.Load()) }

// Sleep reports that the machine slept for d, at once: Now goes on as if
// it had not.
func (c *SuspendClock) Sleep(d time.Duration) { c.slept.Add(int64(d)) }
