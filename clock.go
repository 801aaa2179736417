package election

import (
	"sync"
	"time"
)

// Clock is an election's view of time: every reading of the time, timer and
// sleep of its campaign and of its watcher goes through one. Elections read
// the machine's monotonic clock unless WithClock gives them another.
type Clock interface {
	// Now reads the clock.
	Now() time.Time
	// Real converts a span of this clock into the real time a timer must
	// wait for it to pass: d itself for a clock that runs at the real rate,
	// d/rate for one that runs at rate times it.
	Real(d time.Duration) time.Duration
}

// machineClock is the machine's monotonic clock, as package time reads it.
type machineClock struct{}

func (machineClock) Now() time.Time                     { return time.Now() }
func (machineClock) Real(d time.Duration) time.Duration { return d }

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

func (c *skewedClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.origin.Add(time.Duration(float64(time.Since(c.origin))*c.rate) + c.offset)
}

func (c *skewedClock) Real(d time.Duration) time.Duration {
	return time.Duration(float64(d) / c.rate)
}

// jump moves the clock by d.
func (c *skewedClock) jump(d time.Duration) {
	c.mu.Lock()
	c.offset += d
	c.mu.Unlock()
}

// WithClock makes an election read c instead of the machine's monotonic
// clock, for every reading of the time, timer and sleep of its campaign and
// watcher. It is for tests of code that runs elections under skewed or
// simulated clocks (as client-go's leader election takes a Clock): a
// candidate whose clock runs fast or slow against the servers', jumps, or
// stands still while its machine is suspended. Production code leaves it
// unset; the safety of an election rests on the clock assumption (see the
// package documentation), which a clock given here may break on purpose.
func WithClock(c Clock) Option {
	return func(o *options) { o.clock = c }
}

// untilOn is the real time until clk reads at.
func untilOn(clk Clock, at time.Time) time.Duration {
	return clk.Real(at.Sub(clk.Now()))
}
