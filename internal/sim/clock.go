package sim

import (
	"math"
	"sync"
	"time"
)

// Clock is a candidate's monotonic clock in the simulation, built on the
// bubble's fake time: it runs at rate times that time, and stands still
// while the candidate's machine is suspended. It implements election.Clock.
type Clock struct {
	mu     sync.Mutex
	rate   float64
	anchor time.Time // bubble time of the last change
	at     time.Time // the clock's reading then
	frozen bool
	slept  time.Duration // suspensions the clock did not count, on its own scale
}

// NewClock returns a clock that runs at rate times the bubble's time,
// reading the bubble's time now.
func NewClock(rate float64) *Clock {
	now := time.Now()
	return &Clock{rate: rate, anchor: now, at: now}
}

// Now reads the clock.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.readLocked(time.Now())
}

func (c *Clock) readLocked(now time.Time) time.Time {
	if c.frozen {
		return c.at
	}
	return c.at.Add(time.Duration(float64(now.Sub(c.anchor)) * c.rate))
}

// Real is how long a timer waits in bubble time for d of this clock,
// rounded up by a nanosecond: a timer that fired a nanosecond short would
// find the clock short of where it was set for and be set again for 0 ns,
// which fires without fake time moving, and the bubble would spin.
func (c *Clock) Real(d time.Duration) time.Duration {
	if d <= 0 {
		return d
	}
	return time.Duration(math.Ceil(float64(d)/c.rate)) + 1
}

// Suspend stops the clock, as a suspended machine's monotonic clock stops.
func (c *Clock) Suspend() {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	c.at, c.anchor, c.frozen = c.readLocked(now), now, true
}

// Resume starts the clock again: from where it stopped (as CLOCK_MONOTONIC
// does on Linux), or, with leap, ahead by the time it stood still (as a
// clock that counts suspend does).
func (c *Clock) Resume(leap bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	d := time.Duration(float64(now.Sub(c.anchor)) * c.rate)
	if leap {
		c.at = c.at.Add(d)
	} else {
		c.slept += d
	}
	c.anchor, c.frozen = now, false
}

// Suspended is how long the clock stood still through suspensions it did
// not leap over, as Linux's CLOCK_BOOTTIME less CLOCK_MONOTONIC tells: it
// implements election.SuspendReporter, so that the candidate sees it on
// resuming (a suspended machine runs nothing meanwhile).
func (c *Clock) Suspended() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.slept
}
