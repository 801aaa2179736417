package election

import (
	"sync"
	"time"
)

// clock is an election's view of time: every reading of the time, timer and
// sleep of its campaign and of its watcher goes through one, so that tests
// can run a candidate whose clock runs fast or slow against the servers',
// jumps, or stands still, and check its decisions (claimableAt, fallbackAt,
// patience, validity) without a server. Elections use machineClock; the
// others are for tests.
type clock interface {
	// now reads the clock.
	now() time.Time
	// real converts a span of this clock into the real time a timer must
	// wait for it to pass.
	real(d time.Duration) time.Duration
}

// machineClock is the machine's monotonic clock, as package time reads it.
type machineClock struct{}

func (machineClock) now() time.Time                     { return time.Now() }
func (machineClock) real(d time.Duration) time.Duration { return d }

// skewedClock runs at rate times real time from the moment it was made,
// plus whatever jump added (a negative jump: a clock that stood still, as
// a suspended machine's does).
type skewedClock struct {
	origin time.Time
	rate   float64
	mu     sync.Mutex
	offset time.Duration
}

func newSkewedClock(rate float64) *skewedClock {
	return &skewedClock{origin: time.Now(), rate: rate}
}

func (c *skewedClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.origin.Add(time.Duration(float64(time.Since(c.origin))*c.rate) + c.offset)
}

func (c *skewedClock) real(d time.Duration) time.Duration {
	return time.Duration(float64(d) / c.rate)
}

// jump moves the clock by d.
func (c *skewedClock) jump(d time.Duration) {
	c.mu.Lock()
	c.offset += d
	c.mu.Unlock()
}

// withClock makes an election read clk instead of the machine's clock.
func withClock(clk clock) Option {
	return func(o *options) { o.clock = clk }
}

// untilOn is the real time until clk reads at.
func untilOn(clk clock, at time.Time) time.Duration {
	return clk.real(at.Sub(clk.now()))
}
