package election

import "time"

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

// WithClock makes an election read c instead of the machine's monotonic
// clock, for every reading of the time, timer and sleep of its campaign and
// watcher. It is for tests of code that runs elections under skewed or
// simulated clocks (as client-go's leader election takes a Clock): a
// candidate whose clock runs fast or slow against the servers', jumps, or
// stands still while its machine is suspended. Production code leaves it
// unset; the safety of an election rests on the clock assumption (see the
// package documentation), which a clock given here may break on purpose.
// Elections made from a Bucket share its watcher, and so its clock: give
// WithClock to OpenBucket, not to Bucket.NewElection.
func WithClock(c Clock) Option {
	return func(o *options) { o.clock = c }
}

// untilOn is the real time until clk reads at.
func untilOn(clk Clock, at time.Time) time.Duration {
	return clk.Real(at.Sub(clk.Now()))
}
